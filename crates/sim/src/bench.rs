//! Performance runs: a [`Generator`]'s requests through the engine to a
//! [`ServiceModel`], in virtual time, keeping no data.
//!
//! This is the event loop of [`crate::run`] without what makes that one a
//! correctness test: no oracle, no member bytes, no faults or crashes.
//! Members read zeros (slices of one static buffer, never copied) and
//! forget what is written, so a volume may be as large as the modelled
//! disks (gigabytes) and a run costs only the engine's and the service
//! model's work per I/O. The engine is the same [`Volume`], so every member
//! I/O it issues (read-modify-write, reconstruct-write, split reads,
//! read balancing) is what the real executor would issue.
//!
//! A run is a pure function of its inputs and seed: the same [`BenchReport`]
//! (including [`BenchReport::trace_hash`]) whatever thread it runs on.

use crate::clock::Clock;
use crate::events::EventQueue;
use crate::link::{Channels, Direction, Link};
use crate::members::ServiceModel;
use crate::rng::{mix64, Rng, Stream};
use crate::trace::TraceHash;
use crate::workload::{Generator, Next, Op, OpKind};
use bytes::Bytes;
use platter_core::balance::ReadPolicy;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{
    CacheLimits, Completion, Event, Health, IdMap, IoId, Limits, MemberOp, Request, RequestId,
    Volume,
};

/// The largest member read served from the shared zero buffer; longer
/// ones allocate.
const ZEROS_BYTES: usize = 32 << 20;
static ZEROS: [u8; ZEROS_BYTES] = [0; ZEROS_BYTES];

fn zeros(len: u64) -> Bytes {
    let len = len as usize;
    if len <= ZEROS_BYTES {
        Bytes::from_static(&ZEROS[..len])
    } else {
        Bytes::from(vec![0u8; len])
    }
}

/// What a performance run measured (virtual time).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BenchReport {
    pub requests: u64,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    /// Requests that completed with an error (none, on healthy members).
    pub errors: u64,
    pub member_ios: u64,
    /// Virtual time from the first arrival to the last client request's
    /// completion.
    pub elapsed_ns: u64,
    pub mean_latency_ns: u64,
    pub p99_latency_ns: u64,
    pub max_latency_ns: u64,
    /// Every member I/O issue and every completion, folded.
    pub trace_hash: u64,
}

impl BenchReport {
    /// Client bytes per second of virtual time, in MB/s (10^6).
    pub fn mb_per_s(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        (self.bytes_read + self.bytes_written) as f64 * 1e3 / self.elapsed_ns as f64
    }

    /// Client requests per second of virtual time.
    pub fn iops(&self) -> f64 {
        if self.elapsed_ns == 0 {
            return 0.0;
        }
        self.requests as f64 * 1e9 / self.elapsed_ns as f64
    }
}

enum Ev {
    /// Process `p` submits `op`.
    Arrival(u32, Op),
    /// A write's payload has crossed the link: the engine gets it. The
    /// time is the client's submission.
    Submit(u32, Op, u64),
    /// A read's reply has crossed the link: the client has it.
    Reply(Pending, bool),
    Wake,
    /// The stripe cache's clock ([`Request::CacheTick`]).
    Destage,
}

struct IoSlot {
    io: IoId,
    read_len: Option<u64>,
}

struct Pending {
    process: u32,
    /// When the client submitted it (before the link, if any).
    submitted_ns: u64,
    kind: OpKind,
    len_bytes: u64,
    id: RequestId,
}

/// One performance run.
pub struct Bench {
    volume: Volume,
    service: Box<dyn ServiceModel>,
    gen: Box<dyn Generator>,
    clock: Clock,
    queue: EventQueue<Ev>,
    latency_rng: Rng,
    /// Member I/O at the service model, by token (a slab).
    ios: Vec<Option<IoSlot>>,
    free: Vec<u64>,
    pending: IdMap<RequestId, Pending>,
    /// Processes that said [`Next::Wait`].
    waiting: Vec<u32>,
    /// The earliest `Wake` queued (`u64::MAX`: none that matters).
    armed_ns: u64,
    latencies: Vec<u64>,
    open_loop: bool,
    trace: TraceHash,
    report: BenchReport,
    started: bool,
    /// Virtual time between destage ticks (0: no stripe cache).
    destage_interval_ns: u64,
    /// The volume's own requests (destage ticks) not yet completed.
    upkeep: IdMap<RequestId, ()>,
    last_done_ns: u64,
    /// The first client request's arrival.
    first_ns: Option<u64>,
    link: Link,
    channels: Channels,
}

impl Bench {
    /// `geometry` with every member online, reads balanced by `policy`.
    pub fn new(
        geometry: GeometrySpec,
        policy: ReadPolicy,
        service: Box<dyn ServiceModel>,
        gen: Box<dyn Generator>,
        seed: u64,
    ) -> Result<Bench, String> {
        let g = Geometry::new(geometry).map_err(|e| e.to_string())?;
        let n = g.members() as usize;
        let mut volume = Volume::new(
            g,
            vec![Health::Online; n],
            Limits {
                max_requests: usize::MAX,
            },
        );
        volume.set_read_policy(policy)?;
        let open_loop = gen.open_loop();
        Ok(Bench {
            volume,
            service,
            gen,
            clock: Clock::new(),
            queue: EventQueue::new(1 << 24),
            latency_rng: Rng::stream(seed, Stream::Latency),
            ios: Vec::new(),
            free: Vec::new(),
            pending: IdMap::default(),
            waiting: Vec::new(),
            armed_ns: u64::MAX,
            latencies: Vec::new(),
            open_loop,
            trace: TraceHash::new(mix64(seed)),
            report: BenchReport::default(),
            started: false,
            destage_interval_ns: 0,
            upkeep: IdMap::default(),
            last_done_ns: 0,
            first_ns: None,
            link: Link::default(),
            channels: Channels::default(),
        })
    }

    /// Requests cross `link` to reach the engine (writes, flushes) and to
    /// return to the client (reads' replies); their latency includes it.
    pub fn with_link(mut self, link: Link) -> Bench {
        assert!(!self.started);
        self.link = link;
        self
    }

    /// Gathers partial-stripe writes in a stripe cache (RAID-5 and RAID-6;
    /// nothing for other levels), as `platter serve` does by default, with
    /// a destage tick every `destage_interval_ns` (the server's is 20 ms).
    pub fn with_stripe_cache(mut self, limits: CacheLimits, destage_interval_ns: u64) -> Bench {
        assert!(!self.started && destage_interval_ns > 0);
        self.volume.enable_stripe_cache(limits);
        if self.volume.cache_status().is_some() {
            self.destage_interval_ns = destage_interval_ns;
        }
        self
    }

    pub fn volume_bytes(&self) -> u64 {
        self.volume.size_bytes()
    }

    /// Runs every process to its end.
    pub fn run(mut self) -> BenchReport {
        self.start();
        while self.step() {}
        self.finish_run()
    }

    /// Every process asks its first request; the stripe cache's clock
    /// starts.
    pub(crate) fn start(&mut self) {
        assert!(!self.started);
        self.started = true;
        let procs = self.gen.processes();
        for p in 0..procs {
            self.ask(p);
        }
        if self.destage_interval_ns > 0 {
            self.queue.push(self.destage_interval_ns, Ev::Destage);
        }
    }

    /// When the next event of this run is due, if it has one.
    pub(crate) fn next_ns(&self) -> Option<u64> {
        self.queue.peek_time_ns()
    }

    /// Takes the next event; false when there is none.
    pub(crate) fn step(&mut self) -> bool {
        let Some((at_ns, ev)) = self.queue.pop() else {
            return false;
        };
        self.clock.advance_to(at_ns);
        match ev {
            Ev::Arrival(p, op) => {
                self.first_ns.get_or_insert(at_ns);
                if self.link.is_some() && Link::direction(op.kind) == Direction::ToServer {
                    let hold = self.link.hold_ns(op.kind, op.len_bytes);
                    let end = self.channels.reserve(at_ns, Direction::ToServer, hold);
                    self.queue.push(end, Ev::Submit(p, op, at_ns));
                } else {
                    self.submit(p, op, at_ns);
                }
                if self.open_loop {
                    self.ask(p);
                }
            }
            Ev::Submit(p, op, arrived_ns) => self.submit(p, op, arrived_ns),
            Ev::Reply(p, failed) => self.finish(p, failed),
            Ev::Wake => {
                if at_ns == self.armed_ns {
                    self.armed_ns = u64::MAX;
                }
                self.wake();
            }
            Ev::Destage => {
                let id = self.volume.submit(Request::CacheTick { all: false });
                self.upkeep.insert(id, ());
                // Only while the clients have something left to do: the
                // cached ends of the run are not written out (the
                // served side's runs end the same way, without a flush).
                if !self.pending.is_empty() || !self.queue.is_empty() {
                    self.queue
                        .push(at_ns + self.destage_interval_ns, Ev::Destage);
                }
            }
        }
        self.pump();
        // Every step: the volume's invariants hold between calls.
        self.volume.check_invariants();
        true
    }

    /// The report, once no event is left.
    pub(crate) fn finish_run(mut self) -> BenchReport {
        assert!(self.queue.is_empty(), "a run ends with no event left");
        assert!(
            self.pending.is_empty(),
            "stalled: {} requests outstanding and nothing left to happen",
            self.pending.len()
        );
        let r = &mut self.report;
        r.elapsed_ns = self.last_done_ns.saturating_sub(self.first_ns.unwrap_or(0));
        if !self.latencies.is_empty() {
            let n = self.latencies.len();
            r.mean_latency_ns =
                (self.latencies.iter().map(|&l| u128::from(l)).sum::<u128>() / n as u128) as u64;
            let k = (n * 99).div_ceil(100) - 1;
            let (_, p99, _) = self.latencies.select_nth_unstable(k);
            r.p99_latency_ns = *p99;
            r.max_latency_ns = *self.latencies.iter().max().expect("not empty");
        }
        r.trace_hash = self.trace.finish();
        self.report
    }

    /// Queues a wake for the service model's next completion, if it comes
    /// before the one queued: the model may be shared with other runs
    /// ([`crate::shared`]), whose I/Os move it.
    pub(crate) fn arm_wake(&mut self) {
        if let Some(t) = self.service.next_event_ns() {
            let t = t.max(self.clock.now_ns());
            if t < self.armed_ns {
                self.armed_ns = t;
                self.queue.push(t, Ev::Wake);
            }
        }
    }

    /// Asks process `p` for its next request.
    fn ask(&mut self, p: u32) {
        let now = self.clock.now_ns();
        match self.gen.next(p, now) {
            Next::Op(op) => {
                let at = if self.open_loop {
                    op.at_ns.max(now)
                } else {
                    now + op.think_ns
                };
                self.queue.push(at, Ev::Arrival(p, op));
            }
            Next::Wait => self.waiting.push(p),
            Next::Done => {}
        }
    }

    /// `op` of process `p`, submitted by the client at `submitted_ns`,
    /// reaches the engine now.
    fn submit(&mut self, p: u32, op: Op, submitted_ns: u64) {
        let req = match op.kind {
            OpKind::Read => Request::Read {
                offset_bytes: op.offset_bytes,
                len_bytes: op.len_bytes,
            },
            OpKind::Write => Request::Write {
                offset_bytes: op.offset_bytes,
                data: zeros(op.len_bytes),
                fua: false,
            },
            OpKind::Flush => Request::Flush,
        };
        let r = &mut self.report;
        match op.kind {
            OpKind::Read => {
                r.reads += 1;
                r.bytes_read += op.len_bytes;
            }
            OpKind::Write => {
                r.writes += 1;
                r.bytes_written += op.len_bytes;
            }
            OpKind::Flush => r.flushes += 1,
        }
        let id = self.volume.submit(req);
        self.pending.insert(
            id,
            Pending {
                process: p,
                submitted_ns,
                kind: op.kind,
                len_bytes: op.len_bytes,
                id,
            },
        );
    }

    fn pump(&mut self) {
        platter_core::drive::pump(self);
        self.arm_wake();
    }

    fn issue(&mut self, io: IoId, member: u32, op: &MemberOp) {
        let now = self.clock.now_ns();
        let (kind, off, len, read_len) = match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => (1, *offset_bytes, *len_bytes, Some(*len_bytes)),
            MemberOp::Write { offset_bytes, data } => (2, *offset_bytes, data.len() as u64, None),
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => (3, *offset_bytes, *len_bytes, None),
            MemberOp::Flush => (4, 0, 0, None),
        };
        self.trace
            .fold(&[2, now, u64::from(member), kind, off, len]);
        self.report.member_ios += 1;
        let slot = IoSlot { io, read_len };
        let token = match self.free.pop() {
            Some(t) => {
                self.ios[t as usize] = Some(slot);
                t
            }
            None => {
                self.ios.push(Some(slot));
                self.ios.len() as u64 - 1
            }
        };
        self.service
            .submit(now, member, token, op, &mut self.latency_rng);
    }

    fn wake(&mut self) {
        let now = self.clock.now_ns();
        for token in self.service.advance(now, &mut self.latency_rng) {
            let slot = self.ios[token as usize].take().expect("a known token");
            self.free.push(token);
            let result = Ok(slot.read_len.map(zeros));
            self.volume.io_done(slot.io, result);
        }
    }

    fn completion(&mut self, c: Completion) {
        let now = self.clock.now_ns();
        if self.upkeep.remove(&c.id).is_some() {
            return;
        }
        let p = self
            .pending
            .remove(&c.id)
            .expect("completion of a submitted request");
        let failed = c.result.is_err();
        if self.link.is_some() && Link::direction(p.kind) == Direction::ToClient {
            let hold = self.link.hold_ns(p.kind, p.len_bytes);
            let end = self.channels.reserve(now, Direction::ToClient, hold);
            self.queue.push(end, Ev::Reply(p, failed));
        } else {
            self.finish(p, failed);
        }
    }

    /// The client has its request's answer.
    fn finish(&mut self, p: Pending, failed: bool) {
        let now = self.clock.now_ns();
        self.last_done_ns = now;
        let lat = now - p.submitted_ns;
        self.trace.fold(&[4, now, p.id.0, u64::from(failed)]);
        self.report.requests += 1;
        if failed {
            self.report.errors += 1;
        }
        self.latencies.push(lat);
        if !self.open_loop {
            self.ask(p.process);
        }
        if !self.waiting.is_empty() {
            for w in std::mem::take(&mut self.waiting) {
                self.ask(w);
            }
        }
    }
}

impl platter_core::drive::Host for Bench {
    type Engine = Volume;
    fn engine(&mut self) -> &mut Volume {
        &mut self.volume
    }
    fn issue(&mut self, io: platter_core::volume::MemberIo) {
        Bench::issue(self, io.id, io.member, &io.op)
    }
    fn complete(&mut self, done: Completion) {
        self.completion(done)
    }
    fn event(&mut self, event: Event) {
        // Benchmarks never crash: labels are as good as written.
        if let Event::MemberFaulty { member, .. } = event {
            self.volume.failure_recorded(member);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::members::{SimpleLatency, SimpleService};
    use crate::workload::WorkloadSpec;
    use platter_core::{Level, ParityLayout};

    fn spec(level: Level, members: u32, il: u64) -> GeometrySpec {
        GeometrySpec {
            level,
            parity_layout: ParityLayout::LeftSymmetric,
            copies: 2,
            interleave_bytes: il,
            data_offset_bytes: 8192,
            member_data_bytes: vec![256 << 20; members as usize],
        }
    }

    fn run(level: Level, w: &str, seed: u64) -> BenchReport {
        let g = spec(level, 4, 64 << 10);
        let size = Geometry::new(g.clone()).unwrap().volume_size_bytes();
        let gen = WorkloadSpec::parse(w).unwrap().build(size, seed);
        Bench::new(
            g,
            ReadPolicy::Auto,
            Box::new(SimpleService::new(SimpleLatency::default())),
            gen,
            seed,
        )
        .unwrap()
        .run()
    }

    #[test]
    fn every_workload_runs_to_the_end_and_repeats() {
        for w in [
            "dd:total=4M,qd=2",
            "dd:rw=write,total=4M",
            "raidtest:n=500",
            "bonnie:size=2M,seeks=200",
            "news:readers=5,files=40",
            "untar:files=200,p=2",
        ] {
            for level in [Level::Stripe, Level::Raid5, Level::Raid10] {
                let a = run(level, w, 7);
                assert!(a.requests > 0 && a.errors == 0, "{w} {level}: {a:?}");
                assert_eq!(a, run(level, w, 7), "{w} {level}");
            }
        }
    }

    #[test]
    fn raid5_small_writes_cost_four_member_ios() {
        let r = run(Level::Raid5, "raidtest:n=400,read=0,min=4k,max=4k", 1);
        // Read old data and parity, write both (a 4 KiB write inside one
        // 64 KiB chunk; the few that cross a chunk boundary cost more).
        assert!(r.member_ios >= 4 * r.requests, "{r:?}");
        assert!(r.member_ios <= 4 * r.requests + r.requests / 10, "{r:?}");
        let s = run(Level::Stripe, "raidtest:n=400,read=0,min=4k,max=4k", 1);
        assert!(s.member_ios >= s.requests && s.member_ios <= s.requests + s.requests / 10);
    }
}
