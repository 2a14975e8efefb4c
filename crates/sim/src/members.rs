//! Simulated members: byte arrays held by the simulator (sparse pages for
//! members of TiBs, [`crate::sparse`]), a service
//! time model, and faults (death, one failed I/O, one corrupted read, and
//! the loss of unflushed writes at a crash).
//!
//! The simulator does not use `platter-io`: the engine in `platter-core` is
//! the only code shared with the real executor.

use crate::rng::Rng;
use crate::sparse::Pages;
use bytes::Bytes;
use platter_core::intent::INTENT_OFFSET_BYTES;
use platter_core::volume::{IoResult, MemberOp};

/// How members serve I/O in virtual time: an event-driven model that may
/// queue, reorder and cache (the disk models of [`crate::disk`]), or serve
/// each I/O in a time of its own, at most a queue depth at once per member
/// ([`SimpleService`]).
///
/// The event loop submits each member I/O with a token, asks when the
/// model next completes something, and at that time collects the tokens
/// completed. Models are pure: no wall clock, randomness only from `rng`.
pub trait ServiceModel {
    /// `op` is issued to `member` at `now_ns`.
    fn submit(&mut self, now_ns: u64, member: u32, token: u64, op: &MemberOp, rng: &mut Rng);
    /// The earliest time at which a submitted I/O completes (after the
    /// last `advance`), if any is outstanding.
    fn next_event_ns(&self) -> Option<u64>;
    /// The tokens of the I/O completed at or before `now_ns`, in order of
    /// completion.
    fn advance(&mut self, now_ns: u64, rng: &mut Rng) -> Vec<u64>;
    /// A power failure: everything outstanding is forgotten.
    fn power_fail(&mut self, now_ns: u64);
}

/// Each I/O's time on its member: `base + per byte + jitter`; a flush
/// costs `flush_ns` plus jitter. [`SimpleService`] serves I/Os with these
/// times, each on its own or at most a queue depth at once per member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimpleLatency {
    pub base_ns: u64,
    /// Transfer cost per KiB (1_000 ns/KiB is about 1 GB/s).
    pub ns_per_kib: u64,
    pub jitter: Jitter,
    pub flush_ns: u64,
}

/// Extra time per I/O, drawn per I/O from the latency stream: what
/// `serve --inject mN=latency-jitter=T` (uniform) and `=exp:T`
/// (exponential) add on a served member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// Uniformly from 0 to `max_ns` (nothing drawn when 0).
    Uniform { max_ns: u64 },
    /// Exponentially distributed with mean `mean_ns`, cut at
    /// [`JITTER_EXP_CAP`] means, as the served side cuts it.
    Exponential { mean_ns: u64 },
}

/// The longest exponential jitter, in means (`platter_io`'s
/// `JITTER_EXP_CAP`).
pub const JITTER_EXP_CAP: u64 = 20;

impl Jitter {
    pub const NONE: Jitter = Jitter::Uniform { max_ns: 0 };

    /// One I/O's extra time.
    pub fn draw_ns(self, rng: &mut Rng) -> u64 {
        match self {
            Jitter::Uniform { max_ns: 0 } | Jitter::Exponential { mean_ns: 0 } => 0,
            Jitter::Uniform { max_ns } => rng.below(max_ns + 1),
            Jitter::Exponential { mean_ns } => {
                // 53 random bits: u in [0, 1), so 1 - u is never 0.
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let e = -(1.0 - u).ln() * mean_ns as f64;
                (e as u64).min(mean_ns.saturating_mul(JITTER_EXP_CAP))
            }
        }
    }

    /// `T` (uniform, 0 to T) or `exp:T` (exponential, mean T), as
    /// `serve --inject mN=latency-jitter=` takes it; `0` for none.
    pub fn parse(text: &str) -> Result<Jitter, String> {
        let (kind, time) = text.split_once(':').unwrap_or(("uniform", text));
        let ns = parse_time_ns(time).map_err(|e| format!("jitter {text:?}: {e}"))?;
        match kind {
            "uniform" => Ok(Jitter::Uniform { max_ns: ns }),
            "exp" => Ok(Jitter::Exponential { mean_ns: ns }),
            _ => Err(format!(
                "jitter {text:?}: unknown distribution {kind:?}; use T, uniform:T or exp:T"
            )),
        }
    }

    /// The mean extra time.
    pub fn mean_ns(self) -> u64 {
        match self {
            Jitter::Uniform { max_ns } => max_ns / 2,
            Jitter::Exponential { mean_ns } => mean_ns,
        }
    }
}

/// A time with its unit, `ns`, `us`, `ms` or `s` (`2ms`, `450us`; a bare
/// `0` is 0), in nanoseconds.
pub fn parse_time_ns(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text == "0" {
        return Ok(0);
    }
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &text[digits.len()..];
    let scale: u64 = match unit {
        "ns" => 1,
        "us" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "" => return Err(format!("`{text}` needs a unit: ns, us, ms or s")),
        _ => {
            return Err(format!(
                "`{text}`: unknown unit `{unit}`; use ns, us, ms or s"
            ))
        }
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(|| format!("`{text}` is not a whole number of {unit} that fits"))
}

impl Default for SimpleLatency {
    fn default() -> Self {
        SimpleLatency {
            base_ns: 100_000,
            ns_per_kib: 5_000,
            jitter: Jitter::Uniform { max_ns: 100_000 },
            flush_ns: 500_000,
        }
    }
}

impl SimpleLatency {
    /// A member as `serve --inject mN=latency=L` makes one: every I/O,
    /// flushes included, takes `latency_ns` plus its jitter, and
    /// `ns_per_kib` per KiB moved (a tmpfs file's copy; 0 to ignore it).
    pub fn constant(latency_ns: u64, jitter: Jitter, ns_per_kib: u64) -> SimpleLatency {
        SimpleLatency {
            base_ns: latency_ns,
            ns_per_kib,
            jitter,
            flush_ns: latency_ns,
        }
    }

    /// How long `op` takes once its member starts it.
    pub fn service_ns(&self, op: &MemberOp, rng: &mut Rng) -> u64 {
        let bytes = match op {
            MemberOp::Read { len_bytes, .. } => *len_bytes,
            MemberOp::Write { data, .. } => data.len() as u64,
            // A trim is a metadata update on the member.
            MemberOp::Trim { .. } | MemberOp::Flush => 0,
        };
        let fixed = if matches!(op, MemberOp::Flush) {
            self.flush_ns
        } else {
            self.base_ns + bytes * self.ns_per_kib / 1024
        };
        // At least 1 ns: an I/O never completes in the instant it is issued.
        (fixed + self.jitter.draw_ns(rng)).max(1)
    }

    /// The virtual time at which `op`, issued at `now_ns` to a member with
    /// nothing ahead of it, completes.
    pub fn complete_at_ns(&self, now_ns: u64, op: &MemberOp, rng: &mut Rng) -> u64 {
        now_ns + self.service_ns(op, rng)
    }
}

/// [`SimpleLatency`] behind the event-driven interface. Each member serves
/// at most `queue_depth` I/Os at once (`None`: any number), the rest wait
/// in its FIFO, as a served member's queue does
/// (`serve --member-queue-depth`); members serve in parallel. An I/O's
/// time is drawn when its member starts it (with no depth limit, when it
/// is submitted).
#[derive(Clone, Debug)]
pub struct SimpleService {
    pub latency: SimpleLatency,
    queue_depth: Option<u32>,
    /// (completion time, start order) -> (token, member).
    pending: std::collections::BTreeMap<(u64, u64), (u64, u32)>,
    seq: u64,
    /// Per member: I/Os started and not completed.
    busy: Vec<u32>,
    /// Per member: I/Os waiting for a free place, oldest first.
    waiting: Vec<std::collections::VecDeque<(u64, MemberOp)>>,
    /// Per member: time added to each of its I/Os (none past the end), as
    /// `serve --inject mN=latency=T` slows one member and not the others.
    extra_ns: Vec<u64>,
}

impl SimpleService {
    /// Every I/O served on its own, none waiting for another.
    pub fn new(latency: SimpleLatency) -> SimpleService {
        SimpleService {
            latency,
            queue_depth: None,
            pending: Default::default(),
            seq: 0,
            busy: Vec::new(),
            waiting: Vec::new(),
            extra_ns: Vec::new(),
        }
    }

    /// Member `m`'s I/Os take `extra_ns[m]` longer each (members past the
    /// end of the list none): members skewed against each other.
    pub fn with_member_extra_ns(mut self, extra_ns: Vec<u64>) -> SimpleService {
        self.extra_ns = extra_ns;
        self
    }

    /// At most `queue_depth` (at least 1) I/Os in service on each member.
    pub fn with_queue_depth(latency: SimpleLatency, queue_depth: u32) -> SimpleService {
        assert!(queue_depth > 0, "a queue depth of at least 1");
        SimpleService {
            queue_depth: Some(queue_depth),
            ..SimpleService::new(latency)
        }
    }

    /// I/Os waiting (not started) on `member`.
    pub fn waiting(&self, member: u32) -> usize {
        self.waiting.get(member as usize).map_or(0, |w| w.len())
    }

    fn start(&mut self, now_ns: u64, member: u32, token: u64, op: &MemberOp, rng: &mut Rng) {
        let extra = self.extra_ns.get(member as usize).copied().unwrap_or(0);
        let at = now_ns + self.latency.service_ns(op, rng) + extra;
        self.pending.insert((at, self.seq), (token, member));
        self.seq += 1;
        if self.queue_depth.is_some() {
            self.busy[member as usize] += 1;
        }
    }
}

impl ServiceModel for SimpleService {
    fn submit(&mut self, now_ns: u64, member: u32, token: u64, op: &MemberOp, rng: &mut Rng) {
        let Some(depth) = self.queue_depth else {
            return self.start(now_ns, member, token, op, rng);
        };
        let m = member as usize;
        if self.busy.len() <= m {
            self.busy.resize(m + 1, 0);
            self.waiting.resize_with(m + 1, Default::default);
        }
        if self.busy[m] < depth {
            self.start(now_ns, member, token, op, rng);
        } else {
            self.waiting[m].push_back((token, op.clone()));
        }
    }

    fn next_event_ns(&self) -> Option<u64> {
        self.pending.keys().next().map(|k| k.0)
    }

    fn advance(&mut self, now_ns: u64, rng: &mut Rng) -> Vec<u64> {
        let mut out = Vec::new();
        while let Some(entry) = self.pending.first_entry() {
            let at = entry.key().0;
            if at > now_ns {
                break;
            }
            let (token, member) = entry.remove();
            out.push(token);
            if self.queue_depth.is_some() {
                let m = member as usize;
                self.busy[m] -= 1;
                // The next in line starts as this one ends (it may end by
                // `now_ns` too: the loop takes it).
                if let Some((t, op)) = self.waiting[m].pop_front() {
                    self.start(at, member, t, &op, rng);
                }
            }
        }
        out
    }

    fn power_fail(&mut self, _now_ns: u64) {
        self.pending.clear();
        self.busy.iter_mut().for_each(|b| *b = 0);
        self.waiting.iter_mut().for_each(|w| w.clear());
    }
}

/// A write that reached the member's cache but is not yet known durable.
#[derive(Clone, Debug)]
struct UndoEntry {
    seq: u64,
    offset_bytes: usize,
    old: Vec<u8>,
    new: Vec<u8>,
}

/// What a crash does to writes a member completed but did not flush.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashUndo {
    /// Every unflushed write is lost.
    All,
    /// Each unflushed write independently reached the media with this
    /// probability (percent); later writes win where they overlap.
    Subset { persist_percent: u32 },
}

pub struct SimMember {
    index: u32,
    data: Pages<u8>,
    data_offset_bytes: u64,
    /// Every I/O that completes at or after this time fails.
    dead_from_ns: Option<u64>,
    /// The next I/O to complete fails (and only that one).
    fail_next: bool,
    /// The next read to complete returns one flipped bit (silent corruption).
    corrupt_next_read: bool,
    /// Writes and trims that complete before this time are acknowledged
    /// and not kept.
    drop_writes_until_ns: u64,
    /// Keep undo entries (only when the run can crash: they cost copies).
    track_undo: bool,
    undo: Vec<UndoEntry>,
    /// Writes completed so far; a flush covers those before its mark.
    write_seq: u64,
}

impl SimMember {
    pub fn new(index: u32, size_bytes: u64, data_offset_bytes: u64, track_undo: bool) -> SimMember {
        SimMember {
            index,
            data: Pages::new(size_bytes),
            data_offset_bytes,
            dead_from_ns: None,
            fail_next: false,
            corrupt_next_read: false,
            drop_writes_until_ns: 0,
            track_undo,
            undo: Vec::new(),
            write_seq: 0,
        }
    }

    /// A copy of `len_bytes` at `offset_bytes`, as the member holds them.
    pub fn read(&self, offset_bytes: u64, len_bytes: u64) -> Vec<u8> {
        self.data.get(offset_bytes..offset_bytes + len_bytes)
    }

    /// Bytes the member holds in memory (all of them unless sparse).
    pub fn bytes_held(&self) -> u64 {
        self.data.held()
    }

    /// The ranges written since the last completed flush that changed
    /// what the member held, as (offset, length), oldest first (tracked
    /// only when the run can crash). A write of the bytes already there (a
    /// read error corrected from another copy rewrites what the copies
    /// hold) is left out: a crash cannot change anything by undoing it.
    pub fn unflushed_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.undo
            .iter()
            .filter(|e| e.old != e.new)
            .map(|e| (e.offset_bytes as u64, e.new.len() as u64))
    }

    pub fn die_at(&mut self, at_ns: u64) {
        self.dead_from_ns = Some(self.dead_from_ns.map_or(at_ns, |t| t.min(at_ns)));
    }

    /// The member answers again, holding what it held (a remote member
    /// whose host is back).
    pub fn revive(&mut self) {
        self.dead_from_ns = None;
        self.fail_next = false;
    }

    /// Whether the member keeps undo entries for crashes.
    pub fn tracks_undo(&self) -> bool {
        self.track_undo
    }

    pub fn is_dead(&self, now_ns: u64) -> bool {
        self.dead_from_ns.is_some_and(|t| t <= now_ns)
    }

    pub fn fail_next_io(&mut self) {
        self.fail_next = true;
    }

    /// A failure is waiting for the member's next I/O: it is dead, or its
    /// next I/O fails. The engine does not know yet.
    pub fn failure_pending(&self, now_ns: u64) -> bool {
        self.fail_next || self.is_dead(now_ns)
    }

    /// Writes (and trims) that complete from now until `until_ns` are
    /// acknowledged and dropped: the member keeps its old bytes.
    pub fn drop_writes_until(&mut self, until_ns: u64) {
        self.drop_writes_until_ns = self.drop_writes_until_ns.max(until_ns);
    }

    pub fn stop_dropping_writes(&mut self) {
        self.drop_writes_until_ns = 0;
    }

    /// Everything from `offset_bytes` to the end reads as zeros from now,
    /// behind the engine's back (a discard): not a write, so nothing for
    /// a crash to undo.
    pub fn discard_from(&mut self, offset_bytes: u64) {
        let end = self.data.len();
        self.data.fill(offset_bytes.min(end)..end, 0);
        // What a crash would put back, or replay, is gone too.
        let from = offset_bytes as usize;
        for e in &mut self.undo {
            let skip = from.saturating_sub(e.offset_bytes).min(e.old.len());
            e.old[skip..].fill(0);
            e.new[skip..].fill(0);
        }
    }

    pub fn corrupt_next_read(&mut self) {
        self.corrupt_next_read = true;
    }

    /// Silent corruption of what the member stores: the bytes at
    /// `offset_bytes` are XOR-ed with `mask`, as bit rot, a misdirected
    /// write or a lost write would leave them. Not a write: nothing is
    /// logged for a crash to undo, and no I/O reports it.
    pub fn corrupt_stored(&mut self, offset_bytes: u64, mask: &[u8]) {
        let r = self.range(offset_bytes, mask.len() as u64, "corruption");
        let mut v = self.data.get(r.start as u64..r.end as u64);
        for (b, m) in v.iter_mut().zip(mask) {
            *b ^= m;
        }
        self.data.set(r.start as u64, &v);
    }

    /// The host writes and flushes, outside the volume (applying the
    /// partial parity log after a crash): nothing for a crash to undo.
    pub fn write_flushed(&mut self, offset_bytes: u64, data: &[u8]) {
        assert!(
            self.undo.is_empty(),
            "a host write between a crash and the restart"
        );
        let r = self.range(offset_bytes, data.len() as u64, "host write");
        self.data.set(r.start as u64, data);
    }

    /// Taken when a flush is issued: the writes it makes durable.
    pub fn flush_mark(&self) -> u64 {
        self.write_seq
    }

    /// Unflushed writes held in the undo log.
    pub fn unflushed_writes(&self) -> usize {
        self.undo.len()
    }

    fn range(&self, offset_bytes: u64, len_bytes: u64, what: &str) -> std::ops::Range<usize> {
        let end = offset_bytes
            .checked_add(len_bytes)
            .expect("member range overflows");
        assert!(
            // The bitmap sits between the label and the data area.
            offset_bytes >= INTENT_OFFSET_BYTES.min(self.data_offset_bytes)
                && end <= self.data.len(),
            "{what} of {len_bytes} bytes at {offset_bytes} outside member {} (data {}..{})",
            self.index,
            self.data_offset_bytes,
            self.data.len()
        );
        offset_bytes as usize..end as usize
    }

    fn store(&mut self, offset_bytes: u64, new: &[u8]) {
        let r = self.range(offset_bytes, new.len() as u64, "write");
        if self.track_undo {
            self.undo.push(UndoEntry {
                seq: self.write_seq,
                offset_bytes: r.start,
                old: self.data.get(r.start as u64..r.end as u64),
                new: new.to_vec(),
            });
        }
        self.write_seq += 1;
        self.data.set(r.start as u64, new);
    }

    /// Performs `op` as it completes at `now_ns`. `flush_mark` is the
    /// member's [`SimMember::flush_mark`] when a flush was issued.
    pub fn perform(
        &mut self,
        now_ns: u64,
        op: &MemberOp,
        flush_mark: u64,
        rng: &mut Rng,
    ) -> IoResult {
        if self.is_dead(now_ns) {
            return Err(format!("simulated member {} is dead", self.index).into());
        }
        if self.fail_next {
            self.fail_next = false;
            return Err(format!("simulated member {}: injected I/O error", self.index).into());
        }
        match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => {
                let r = self.range(*offset_bytes, *len_bytes, "read");
                let r = r.start as u64..r.end as u64;
                if self.corrupt_next_read && !r.is_empty() {
                    self.corrupt_next_read = false;
                    let mut v = self.data.get(r);
                    let i = rng.below(v.len() as u64) as usize;
                    v[i] ^= 1 << rng.below(8);
                    return Ok(Some(Bytes::from(v)));
                }
                Ok(Some(match self.data.slice(r.clone()) {
                    Some(s) => Bytes::copy_from_slice(s),
                    None => Bytes::from(self.data.get(r)),
                }))
            }
            MemberOp::Write { .. } | MemberOp::Trim { .. }
                if now_ns < self.drop_writes_until_ns =>
            {
                Ok(None)
            }
            MemberOp::Write { offset_bytes, data } => {
                self.store(*offset_bytes, &data.to_bytes());
                Ok(None)
            }
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => {
                if self.track_undo {
                    self.store(*offset_bytes, &vec![0; *len_bytes as usize]);
                } else {
                    let r = self.range(*offset_bytes, *len_bytes, "trim");
                    self.write_seq += 1;
                    self.data.fill(r.start as u64..r.end as u64, 0);
                }
                Ok(None)
            }
            MemberOp::Flush => {
                self.undo.retain(|e| e.seq >= flush_mark);
                Ok(None)
            }
        }
    }

    /// A power failure: writes not covered by a completed flush are lost
    /// (all of them, or a seeded subset). Returns how many were lost.
    pub fn crash(&mut self, undo: CrashUndo, rng: &mut Rng) -> u64 {
        let entries = std::mem::take(&mut self.undo);
        // Back to the last durable image, newest first...
        for e in entries.iter().rev() {
            self.data.set(e.offset_bytes as u64, &e.old);
        }
        // ...then forward again with the writes that reached the media.
        let mut lost = 0;
        for e in &entries {
            let persisted = match undo {
                CrashUndo::All => false,
                CrashUndo::Subset { persist_percent } => rng.chance(persist_percent),
            };
            if persisted {
                self.data.set(e.offset_bytes as u64, &e.new);
            } else {
                lost += 1;
            }
        }
        self.fail_next = false;
        self.corrupt_next_read = false;
        lost
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(m: &mut SimMember, at: u64, b: &[u8]) {
        let op = MemberOp::Write {
            offset_bytes: at,
            data: Bytes::copy_from_slice(b).into(),
        };
        m.perform(0, &op, 0, &mut Rng::new(0)).unwrap();
    }

    #[test]
    fn a_crash_keeps_flushed_writes_and_loses_the_rest() {
        let mut m = SimMember::new(0, 64, 16, true);
        write(&mut m, 16, &[1; 8]);
        let mark = m.flush_mark();
        write(&mut m, 20, &[2; 8]);
        m.perform(0, &MemberOp::Flush, mark, &mut Rng::new(0))
            .unwrap();
        assert_eq!(m.unflushed_writes(), 1);
        assert_eq!(m.crash(CrashUndo::All, &mut Rng::new(0)), 1);
        assert_eq!(m.read(16, 12), [1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]);
    }

    fn read(len_bytes: u64) -> MemberOp {
        MemberOp::Read {
            offset_bytes: 0,
            len_bytes,
        }
    }

    /// Every completion of `s` until it has none left: (time, token).
    fn drain(s: &mut SimpleService, rng: &mut Rng) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        while let Some(t) = s.next_event_ns() {
            out.extend(s.advance(t, rng).into_iter().map(|k| (t, k)));
        }
        out
    }

    #[test]
    fn a_member_serves_its_queue_depth_at_once_and_members_in_parallel() {
        let lat = SimpleLatency::constant(1_000, Jitter::NONE, 0);
        let mut s = SimpleService::with_queue_depth(lat.clone(), 2);
        let mut rng = Rng::new(1);
        for token in 0..5 {
            s.submit(0, 0, token, &read(4096), &mut rng);
        }
        s.submit(0, 1, 9, &read(4096), &mut rng);
        assert_eq!(s.waiting(0), 3);
        assert_eq!(s.waiting(1), 0);
        assert_eq!(
            drain(&mut s, &mut rng),
            vec![
                (1_000, 0),
                (1_000, 1),
                (1_000, 9),
                (2_000, 2),
                (2_000, 3),
                (3_000, 4)
            ]
        );
        // Without a depth nothing waits.
        let mut s = SimpleService::new(lat);
        for token in 0..5 {
            s.submit(0, 0, token, &read(4096), &mut rng);
        }
        assert!(drain(&mut s, &mut rng).iter().all(|&(t, _)| t == 1_000));
    }

    #[test]
    fn a_late_advance_starts_the_waiting_io_when_the_one_ahead_ended() {
        let lat = SimpleLatency::constant(1_000, Jitter::NONE, 0);
        let mut s = SimpleService::with_queue_depth(lat, 1);
        let mut rng = Rng::new(1);
        s.submit(0, 0, 1, &read(512), &mut rng);
        s.submit(0, 0, 2, &read(512), &mut rng);
        s.submit(0, 0, 3, &MemberOp::Flush, &mut rng);
        // Looked at only at 2_500: the second started at 1_000, ended at
        // 2_000; the flush (the same latency) ends at 3_000.
        assert_eq!(s.advance(2_500, &mut rng), vec![1, 2]);
        assert_eq!(s.next_event_ns(), Some(3_000));
        s.power_fail(2_600);
        assert_eq!(s.next_event_ns(), None);
        assert_eq!(s.waiting(0), 0);
    }

    #[test]
    fn jitter_draws_stay_in_their_bounds_with_their_means() {
        let mut rng = Rng::new(7);
        let n = 20_000u64;
        let u = Jitter::parse("1ms").unwrap();
        assert_eq!(u, Jitter::Uniform { max_ns: 1_000_000 });
        let draws: Vec<u64> = (0..n).map(|_| u.draw_ns(&mut rng)).collect();
        assert!(draws.iter().all(|&d| d <= 1_000_000));
        let mean = draws.iter().sum::<u64>() / n;
        assert!((480_000..520_000).contains(&mean), "{mean}");
        let e = Jitter::parse("exp:500us").unwrap();
        assert_eq!(e, Jitter::Exponential { mean_ns: 500_000 });
        let draws: Vec<u64> = (0..n).map(|_| e.draw_ns(&mut rng)).collect();
        assert!(draws.iter().all(|&d| d <= 500_000 * JITTER_EXP_CAP));
        let mean = draws.iter().sum::<u64>() / n;
        assert!((480_000..520_000).contains(&mean), "{mean}");
        // About e^-1 of an exponential's draws exceed its mean.
        let above = draws.iter().filter(|&&d| d > 500_000).count() as u64;
        assert!((n * 34 / 100..n * 40 / 100).contains(&above), "{above}");
        assert_eq!(Jitter::NONE.draw_ns(&mut rng), 0);
        assert!(Jitter::parse("gauss:1ms").is_err());
        assert!(Jitter::parse("5").is_err());
    }

    #[test]
    fn times_take_units() {
        assert_eq!(parse_time_ns("2ms"), Ok(2_000_000));
        assert_eq!(parse_time_ns("450us"), Ok(450_000));
        assert_eq!(parse_time_ns("17ns"), Ok(17));
        assert_eq!(parse_time_ns("1s"), Ok(1_000_000_000));
        assert_eq!(parse_time_ns("0"), Ok(0));
        assert!(parse_time_ns("2").is_err());
        assert!(parse_time_ns("2h").is_err());
        assert!(parse_time_ns("99999999999999s").is_err());
    }

    #[test]
    fn a_dead_member_fails_from_its_time_of_death() {
        let mut m = SimMember::new(3, 64, 0, false);
        m.die_at(100);
        let op = MemberOp::Flush;
        assert!(m.perform(99, &op, 0, &mut Rng::new(0)).is_ok());
        assert!(m.perform(100, &op, 0, &mut Rng::new(0)).is_err());
    }
}
