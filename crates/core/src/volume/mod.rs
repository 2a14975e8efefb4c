//! The volume state machine.
//!
//! A [`Volume`] takes client [`Request`]s, emits [`MemberIo`]s for the
//! executor to perform, and turns their results into [`Completion`]s. It never
//! blocks, reads a clock or touches a device: the real executor and the
//! simulator drive the same code.
//!
//! Each request runs in up to three phases: reads (old data and parity, or the
//! data itself), writes (data, parity, trims), and a flush (FUA and FLUSH).
//! Requests take stripe range locks (reads shared, the rest exclusive), so a
//! stripe's parity and a chunk's copies only ever change under one writer.
//! A member that fails an I/O is marked faulty and never used again; a read
//! phase that lost a member is planned again around it (at most once per
//! member), and a write phase reports success only if every byte it wrote is
//! still readable from the members that remain. The exception is a client
//! read on a level with copies: the bytes come from another copy and are
//! written back over the failed range (see `repair.rs`).

mod account;
mod cache;
mod checksums;
mod intent;
mod invariants;
mod lock;
mod nospace;
mod plan;
mod ppl;
mod read;
mod read_placement;
mod rebuild;
mod repair;
mod request;
mod scrub;
mod stripe_cache;
mod write;

pub use crate::member_io::{
    FailurePolicy, IdMap, IoError, IoErrorKind, IoId, IoResult, MemberIo, MemberOp, Payload,
    Unverified,
};
pub use account::{plex_count, transfer_shape};
pub use cache::{CacheLimits, CacheStatus};
pub use intent::IntentStatus;
pub use invariants::SELF_CHECK_EVERY_IOS;
pub use ppl::LogStats;
pub use rebuild::RebuildProgress;
pub use repair::MAX_CORRECTED_READ_ERRORS;
pub use request::{
    Completion, ErrorKind, Event, Maintenance, ReadData, Reply, Request, RequestId, VolumeError,
    READ_SEGMENTS_MAX,
};
pub use scrub::CheckReport;

use crate::buf::AlignedBuf;
use crate::geometry::Geometry;
use crate::level::Level;
use bytes::Bytes;
use lock::{RangeLocks, Span};
use plan::{Dest, Dests, ReadPieces, Target, WritePieces};
use smallvec::SmallVec;
use std::collections::VecDeque;

/// A member's condition as the volume sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    Online,
    /// Failed an I/O while in use.
    Faulty,
    /// Not present at assembly.
    Missing,
    /// A fresh device being filled: in use for the stripes below the
    /// rebuild cursor, lost above it (see [`Volume::rebuild_progress`]).
    Rebuilding,
}

#[derive(Clone, Debug)]
pub struct Limits {
    /// Client requests in the volume at once; more are refused with Busy.
    pub max_requests: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_requests: 1024 }
    }
}

/// Where a request is, with what that stage needs: a phase of member I/O
/// carries its count of I/Os outstanding and whether one failed; the other
/// stages have no I/O out (`check_invariants` holds them to it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// For its locks, its bitmap bits, (a sweep) its bitmap round, or
    /// (`ppl.rs`) space in the log.
    Waiting,
    Reading(Phase),
    Writing(Phase),
    Flushing(Phase),
    /// A client read rewrites (then re-reads) copies that failed to read.
    Repairing(Phase),
    /// A FLUSH waits for cached stripes to be written out (`cache.rs`).
    Destaging,
    /// A parity write logs before it writes (`ppl.rs`).
    Logging(Phase, ppl::LogStep),
}

/// One phase of a request's member I/O, issued at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Phase {
    /// Member I/Os of the phase still outstanding.
    pending: u32,
    /// An I/O of the phase failed (a read phase is planned again).
    failed: bool,
}

impl Phase {
    fn issued(ios: usize) -> Phase {
        Phase {
            pending: u32::try_from(ios).expect("a phase's I/Os fit a u32"),
            failed: false,
        }
    }
}

impl Stage {
    fn phase_mut(&mut self) -> Option<&mut Phase> {
        match self {
            Stage::Reading(p)
            | Stage::Writing(p)
            | Stage::Flushing(p)
            | Stage::Repairing(p)
            | Stage::Logging(p, _) => Some(p),
            Stage::Waiting | Stage::Destaging => None,
        }
    }

    /// Member I/Os outstanding: none outside a phase.
    fn pending(&self) -> u32 {
        match self {
            Stage::Reading(p)
            | Stage::Writing(p)
            | Stage::Flushing(p)
            | Stage::Repairing(p)
            | Stage::Logging(p, _) => p.pending,
            Stage::Waiting | Stage::Destaging => 0,
        }
    }
}

/// One parity stripe's work inside a request: its buffers cover the stripe's
/// "hull", the bytes `[lo, hi)` of each chunk that the request touches.
#[derive(Debug)]
struct StripeJob {
    stripe: u64,
    lo_bytes: u64,
    hi_bytes: u64,
    roles: crate::geometry::StripeRoles,
    /// Per member, `hi - lo` bytes (empty when unused), 64-byte aligned
    /// so that the parity kernels run on their vector paths.
    bufs: Vec<AlignedBuf>,
    /// Members whose bytes the job read (for a reconstruction): the ones
    /// to rebuild from, whatever happens to them after the read.
    present: Vec<bool>,
    /// Reads: `(data index, within, len, out offset)` to reconstruct.
    /// Writes: unused.
    wants: Vec<(u32, u64, u64, u64)>,
    /// Writes: `(data index, within, new bytes)`.
    new_data: Vec<(u32, u64, Bytes)>,
    strategy: write::Strategy,
    /// Scrubs: members whose reads failed their checksums (their bytes in
    /// `bufs` are not what they hold; `scrub.rs` rebuilds them).
    suspects: SmallVec<[u32; 2]>,
    /// A resync's read of a stripe it cannot make agree, only so that the
    /// checksums are set from the bytes (`scrub.rs`): never compared.
    refresh_only: bool,
}

impl StripeJob {
    /// A job over `[lo, hi)` of each chunk of `stripe`; `roles` only on
    /// parity levels (mirror and RAID-10 jobs copy chunks and have none).
    fn new(
        stripe: u64,
        lo_bytes: u64,
        hi_bytes: u64,
        roles: Option<crate::geometry::StripeRoles>,
        strategy: write::Strategy,
    ) -> StripeJob {
        StripeJob {
            stripe,
            lo_bytes,
            hi_bytes,
            roles: roles.unwrap_or(crate::geometry::StripeRoles {
                data: Vec::new(),
                p: u32::MAX,
                q: None,
                q_slot: Vec::new(),
            }),
            bufs: Vec::new(),
            present: Vec::new(),
            wants: Vec::new(),
            new_data: Vec::new(),
            strategy,
            suspects: SmallVec::new(),
            refresh_only: false,
        }
    }
}

/// Words of [`Op`]'s bitmap of members written: room for every member a
/// label can name.
const WRITTEN_WORDS: usize = 4;
const _: () = assert!(crate::label::MAX_MEMBERS as usize <= 64 * WRITTEN_WORDS);

struct Op {
    req: Request,
    stage: Stage,
    /// The volume's own request (a destage): it completes to no one.
    internal: bool,
    /// The member I/O of the current phase, as planning laid it out.
    plan: Plan,
    /// What went wrong so far, which decides how the request ends.
    trouble: Trouble,
    /// What the request holds from admission to its finish.
    holds: Holds,
    /// What a FUA write or a FLUSH must make durable.
    durable: Durable,
    /// For the statistics (see `account.rs`).
    tally: account::Tally,
}

/// A request's planned work. The planner owns it while it plans (`start`
/// lends it out of the op, which stays in the map, so that planning can
/// read and change the rest of the volume); the phases that follow
/// consume it in place.
#[derive(Default)]
struct Plan {
    /// Read data as it arrives: (offset in the request, bytes), sliced out
    /// of the member reads without copying.
    segments: SmallVec<[(u64, Bytes); 2]>,
    /// Parity stripes (or copy chunks) the request reads and rebuilds or
    /// writes whole; cleared before each planning.
    jobs: Vec<StripeJob>,
    /// Member writes known before the read phase (mirrors, stripes, trims).
    planned: WritePieces,
    /// A scrub's findings, returned when its repairs are written.
    report: Option<CheckReport>,
    /// What the request did with the stripe cache (decided at its first
    /// planning), and the entries it took over until it finishes.
    cache: Option<cache::CacheWork>,
    /// Its records in the partial parity log, when the volume keeps one.
    log: Option<ppl::OpLog>,
}

#[derive(Default)]
struct Trouble {
    /// Any write or flush I/O failed.
    write_failed: bool,
    /// A member had no room for one of its writes (`nospace.rs`).
    no_space: bool,
    /// Times the request was planned again after a failed read.
    replans: u32,
}

#[derive(Default)]
struct Holds {
    /// Write-intent regions held (first, last), from admission to finish.
    intent_regions: Option<(u64, u64)>,
    /// The stripe cache took every stripe of the write, so it let go of its
    /// lock when it started (`narrow_to_written`).
    lock_released: bool,
}

#[derive(Clone, Copy, Default)]
struct Durable {
    /// Members written, for FUA (a bit per member).
    written: [u64; WRITTEN_WORDS],
    /// A FLUSH: cache write-out failures when it started.
    cache_failures_seen: u64,
    /// A FLUSH: the log's tick when its member flushes were issued.
    log_tick: Option<u64>,
}

impl Durable {
    fn mark_written(&mut self, member: u32) {
        self.written[member as usize / 64] |= 1 << (member % 64);
    }

    fn was_written(&self, member: u32) -> bool {
        self.written[member as usize / 64] & (1 << (member % 64)) != 0
    }
}

impl Op {
    fn new(req: Request) -> Box<Op> {
        Box::new(Op {
            req,
            stage: Stage::Waiting,
            internal: false,
            plan: Plan::default(),
            trouble: Trouble::default(),
            holds: Holds::default(),
            durable: Durable::default(),
            tally: account::Tally::default(),
        })
    }

    /// Cache entries the request took over: settled when it finishes.
    fn cache_taken(&self) -> &[u64] {
        self.plan.cache.as_ref().map_or(&[], |w| &w.taken)
    }
}

struct Inflight {
    request: RequestId,
    member: u32,
    dests: Dests,
}

pub struct Volume {
    geometry: Geometry,
    health: Vec<Health>,
    limits: Limits,
    /// Every step works on a request in place: planning borrows only its
    /// [`Plan`] (it reads and changes the rest of the volume, such as the
    /// stripe cache and the balancer), later steps take out only the jobs
    /// or writes they consume. Boxed: an op is large and moves rarely.
    ops: IdMap<RequestId, Box<Op>>,
    inflight: IdMap<IoId, Inflight>,
    locks: RangeLocks,
    io_queue: VecDeque<MemberIo>,
    completions: VecDeque<Completion>,
    events: VecDeque<Event>,
    next_request: u64,
    next_io: u64,
    /// Chooses among mirror and RAID-10 copies for reads (`read_placement.rs`).
    balancer: crate::balance::Balancer,
    rebuild: Option<rebuild::RebuildState>,
    intent: Option<intent::IntentState>,
    read_repair: repair::ReadRepairs,
    stats: crate::stats::Stats,
    /// The stripe cache, when enabled (`stripe_cache.rs` holds it,
    /// `cache.rs` says when data goes in and out).
    cache: Option<stripe_cache::StripeCache>,
    /// Requests in `ops` that the volume submitted itself.
    internal_ops: usize,
    /// Members marked faulty whose failure the host has not yet made
    /// durable in the labels of the members still in use (see
    /// [`Volume::failure_recorded`]).
    unrecorded_failures: Vec<bool>,
    /// Completions held back until every failure is recorded, with the
    /// volume bytes each promises are durable (none for upkeep, which
    /// promises nothing to a client).
    held: VecDeque<(Completion, Option<(u64, u64)>)>,
    /// A write refused for space with no bitmap to mark it (`nospace.rs`).
    resync_all_owed: bool,
    /// Member I/O completions so far: every `SELF_CHECK_EVERY_IOS`th
    /// runs [`Volume::check_invariants`].
    ios_done: u64,
    /// Per-block checksums, when on (`checksums.rs`): every member I/O
    /// passes through it instead of `io_queue`.
    integrity: Option<crate::integrity::Integrity>,
    /// The partial parity log, when on (`ppl.rs`).
    log: Option<ppl::LogState>,
}

impl Volume {
    pub fn new(geometry: Geometry, health: Vec<Health>, limits: Limits) -> Volume {
        assert_eq!(health.len(), geometry.members() as usize);
        assert!(
            geometry.members() as usize <= 64 * WRITTEN_WORDS,
            "{} members: more than a request's bitmap of members written holds",
            geometry.members()
        );
        assert!(limits.max_requests > 0);
        let read_repair = repair::ReadRepairs::new(geometry.members());
        let stats = crate::stats::Stats::new(plex_count(&geometry), geometry.members());
        let balancer = read_placement::new_balancer(&geometry);
        let n_members = geometry.members() as usize;
        Volume {
            geometry,
            health,
            limits,
            ops: IdMap::default(),
            inflight: IdMap::default(),
            locks: RangeLocks::default(),
            io_queue: VecDeque::new(),
            completions: VecDeque::new(),
            events: VecDeque::new(),
            next_request: 0,
            next_io: 0,
            balancer,
            rebuild: None,
            intent: None,
            read_repair,
            stats,
            cache: None,
            internal_ops: 0,
            unrecorded_failures: vec![false; n_members],
            held: VecDeque::new(),
            resync_all_owed: false,
            ios_done: 0,
            integrity: None,
            log: None,
        }
    }

    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    pub fn size_bytes(&self) -> u64 {
        self.geometry.volume_size_bytes()
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    pub fn health(&self) -> &[Health] {
        &self.health
    }

    /// Requests accepted and not yet completed.
    pub fn requests_in_flight(&self) -> usize {
        self.ops.len()
    }

    /// True when no request is in the volume and no member I/O is owed.
    /// Completions held for an unrecorded failure count as done: they
    /// wait for the host, not for members.
    pub fn is_idle(&self) -> bool {
        self.ops.is_empty()
            && self.inflight.is_empty()
            && self.io_queue.is_empty()
            && self.locks.is_idle()
            && self.integrity.as_ref().is_none_or(|i| i.is_idle())
    }

    /// The id the next [`Volume::submit`] gives.
    pub(super) fn next_request_id(&self) -> RequestId {
        RequestId(self.next_request)
    }

    /// Accepts a request; its completion arrives through [`Volume::next_completion`].
    pub fn submit(&mut self, req: Request) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let client_ops = self.ops.len() - self.internal_ops;
        if let Some(e) = req.refusal(self.size_bytes(), client_ops, self.limits.max_requests) {
            self.stats.volume.errors += 1;
            self.complete(id, Err(e));
            return id;
        }
        if let Request::Maintain {
            first_stripe,
            stripe_count,
            ..
        } = req
        {
            // Checks, repairs and rebuild steps see the cached data: it
            // goes out first (its destages queue for the locks first).
            self.destage_range(first_stripe, stripe_count);
        }
        self.enter(id, Op::new(req));
        id
    }

    /// A request the volume makes itself (a destage): it runs like a
    /// client's, takes no slot of `max_requests`, and completes to no one.
    fn submit_internal(&mut self, req: Request) {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        assert!(
            matches!(
                req,
                Request::Maintain {
                    action: Maintenance::Destage,
                    ..
                }
            ),
            "only a destage is the volume's own request"
        );
        let mut op = Op::new(req);
        op.internal = true;
        self.internal_ops += 1;
        self.enter(id, op);
    }

    /// Puts a request in the table and starts it once it holds its locks.
    fn enter(&mut self, id: RequestId, op: Box<Op>) {
        let span = self.span_of(&op.req);
        assert!(
            span.is_none_or(
                |s| s.first_stripe <= s.last_stripe && s.last_stripe < self.geometry.stripes()
            ),
            "{id:?} locks stripes outside the volume"
        );
        let before = self.ops.insert(id, op);
        assert!(before.is_none(), "{id:?} entered twice");
        match span {
            None => self.begin(id),
            Some(span) => {
                if self.locks.acquire(id, span) {
                    self.admit(id);
                }
            }
        }
    }

    /// The next member I/O to perform, if any.
    pub fn next_io(&mut self) -> Option<MemberIo> {
        match self.integrity.as_mut() {
            Some(i) => i.next_io(),
            None => self.io_queue.pop_front(),
        }
    }

    /// The next finished client request, if any.
    pub fn next_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// The next operator-visible event, if any.
    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Reports the result of a member I/O handed out by [`Volume::next_io`].
    pub fn io_done(&mut self, io: IoId, result: IoResult) {
        if let Some(i) = self.integrity.as_mut() {
            i.done(io, result);
            while let Some((io, result)) = self.checked_results() {
                self.member_io_done(io, result);
            }
        } else {
            self.member_io_done(io, result);
        }
        self.ios_done += 1;
        if self
            .ios_done
            .is_multiple_of(invariants::SELF_CHECK_EVERY_IOS)
        {
            self.check_invariants();
        }
    }

    fn member_io_done(&mut self, io: IoId, result: IoResult) {
        let ctx = self
            .inflight
            .remove(&io)
            .expect("completion for an I/O the volume did not issue");
        self.account_io_result(ctx.member, &result);
        self.balancer.completed(ctx.member);
        if ctx.request == intent::INTENT_OWNER {
            return self.intent_io_done(ctx.member, result.map(|_| ()).map_err(|e| e.message));
        }
        let op = self
            .ops
            .get_mut(&ctx.request)
            .expect("I/O of a live request");
        let phase = op.stage.phase_mut().expect("I/O of a request in a phase");
        assert!(phase.pending > 0);
        phase.pending -= 1;
        match result {
            result if matches!(op.stage, Stage::Repairing(_)) => {
                self.repair_io_done(ctx.request, ctx.member, &ctx.dests, result);
            }
            Err(e) if e.kind == IoErrorKind::Checksum && scrub::scrubbing(op) => {
                scrub::suspect(op, &ctx.dests, e.unverified.as_deref());
            }
            Err(e) if Self::is_refused_for_space(op, &e) => {
                op.stage.phase_mut().expect("in a phase").failed = true;
                op.trouble.write_failed = true;
                op.trouble.no_space = true;
                self.refused_for_space(ctx.request, ctx.member, e.message);
            }
            Err(IoError {
                message: reason,
                kind,
                ..
            }) => {
                op.stage.phase_mut().expect("in a phase").failed = true;
                if matches!(op.stage, Stage::Writing(_) | Stage::Flushing(_)) {
                    op.trouble.write_failed = true;
                }
                if matches!(op.stage, Stage::Reading(_))
                    && matches!(op.req, Request::Read { .. })
                    && kind.policy() == FailurePolicy::CorrectRead
                {
                    self.read_error(ctx.request, ctx.member, &ctx.dests, kind, reason);
                } else {
                    self.mark_faulty(ctx.member, reason);
                }
            }
            Ok(data) => {
                if !ctx.dests.is_empty() {
                    let data = data.expect("a read completes with data");
                    Self::route(op, &ctx.dests, data);
                }
            }
        }
        let op = &self.ops[&ctx.request];
        if op.stage.pending() == 0 {
            self.advance(ctx.request);
        }
    }

    /// Takes a member out of use (an I/O error, or the operator's word).
    ///
    /// The failure is *unrecorded* until the host says the labels of the
    /// members still in use carry it ([`Volume::failure_recorded`]); until
    /// then every write, trim and flush that completes is held back. A
    /// write acknowledged before that could be lost to a crash: the member
    /// it left behind would be assembled again as current and read as
    /// data. md blocks writes the same way until its superblock update
    /// lands (`MD_SB_CHANGE_PENDING`).
    pub fn mark_faulty(&mut self, member: u32, reason: String) {
        assert!(member < self.geometry.members(), "no member {member}");
        let h = &mut self.health[member as usize];
        if matches!(*h, Health::Online | Health::Rebuilding) {
            // A member being rebuilt serves the stripes below its cursor:
            // one that failed must not be read there again, and its rebuild
            // cannot go on.
            if *h == Health::Rebuilding {
                self.rebuild = None;
            }
            *h = Health::Faulty;
            self.integrity_note_use(member);
            self.unrecorded_failures[member as usize] = true;
            self.intent_member_left();
            self.events
                .push_back(Event::MemberFaulty { member, reason });
        }
        assert!(!matches!(
            self.health[member as usize],
            Health::Online | Health::Rebuilding
        ));
    }

    /// Members marked faulty whose failure is not yet recorded in the
    /// labels.
    pub fn unrecorded_failures(&self) -> impl Iterator<Item = u32> + '_ {
        self.unrecorded_failures
            .iter()
            .enumerate()
            .filter(|(_, &u)| u)
            .map(|(m, _)| m as u32)
    }

    /// The host has written `member`'s failure to the labels of every
    /// member in use and flushed them (or found it cannot, and failed
    /// those members too). Once no failure is unrecorded, the completions
    /// held back are released.
    pub fn failure_recorded(&mut self, member: u32) {
        assert!(member < self.geometry.members(), "no member {member}");
        self.unrecorded_failures[member as usize] = false;
        if !self.any_failure_unrecorded() {
            // Members may have failed while these waited: a write whose
            // bytes no longer sit on members in use is not acknowledged.
            while let Some((mut c, promised)) = self.held.pop_front() {
                if let Some((offset_bytes, len_bytes)) =
                    promised.filter(|&(o, l)| !self.intact(o, l))
                {
                    c.result = Err(VolumeError::new(
                        ErrorKind::Io,
                        format!(
                            "the members holding bytes {offset_bytes}..{} failed before the \
                             write could be acknowledged",
                            offset_bytes + len_bytes
                        ),
                    ));
                }
                self.completions.push_back(c);
            }
        }
        assert!(self.held.is_empty() || self.any_failure_unrecorded());
    }

    fn any_failure_unrecorded(&self) -> bool {
        self.unrecorded_failures.iter().any(|&u| u)
    }

    fn span_of(&self, req: &Request) -> Option<Span> {
        if let Request::Maintain {
            first_stripe,
            stripe_count,
            ..
        } = req
        {
            assert!(*stripe_count > 0, "upkeep of no stripes was admitted");
            return Some(Span {
                first_stripe: *first_stripe,
                last_stripe: first_stripe + stripe_count - 1,
                exclusive: true,
            });
        }
        let (offset_bytes, len_bytes) = req.range();
        if matches!(req, Request::Flush) || len_bytes == 0 {
            return None;
        }
        let stripe_bytes = self.geometry.stripe_data_bytes();
        Some(Span {
            first_stripe: offset_bytes / stripe_bytes,
            last_stripe: (offset_bytes + len_bytes - 1) / stripe_bytes,
            exclusive: !matches!(req, Request::Read { .. }),
        })
    }

    /// Whether `member` holds good data for `stripe`: online, or being
    /// rebuilt and already past that stripe. Everything that reads a
    /// member, or keeps its parity or copy current, asks this.
    fn usable(&self, member: u32, stripe: u64) -> bool {
        match self.health[member as usize] {
            Health::Online => true,
            Health::Rebuilding => self
                .rebuild
                .as_ref()
                .is_some_and(|r| r.serves(member, stripe)),
            Health::Faulty | Health::Missing => false,
        }
    }

    /// Members that hold no good data for `stripe`: the one count that
    /// decides whether a stripe can take a write (`plan_stripe_write`, and
    /// the stripe cache's `cache_absorb`). At most `redundancy()` and the
    /// stripe still holds everything written to it.
    fn stripe_lost_members(&self, stripe: u64) -> u32 {
        (0..self.geometry.members())
            .filter(|&m| !self.usable(m, stripe))
            .count() as u32
    }

    /// The end of the stripes in `[.., end_stripe)` that `member` holds
    /// good data for: all of them when online, up to its cursor when being
    /// rebuilt, none when lost.
    fn usable_until(&self, member: u32, end_stripe: u64) -> u64 {
        match self.health[member as usize] {
            Health::Online => end_stripe,
            Health::Rebuilding => self
                .rebuild
                .as_ref()
                .map_or(0, |r| r.serves_until(member, end_stripe)),
            Health::Faulty | Health::Missing => 0,
        }
    }

    /// Whether every member holds good data for every stripe: none
    /// faulty, missing or being rebuilt.
    fn all_in_use(&self) -> bool {
        self.health.iter().all(|h| *h == Health::Online)
    }

    /// Whether `member` receives writes and flushes at all: online, or
    /// being rebuilt (its stripes past the cursor are written too).
    fn in_use(&self, member: u32) -> bool {
        matches!(
            self.health[member as usize],
            Health::Online | Health::Rebuilding
        )
    }

    fn begin(&mut self, id: RequestId) {
        let op = self.ops.get_mut(&id).expect("starting a live request");
        match op.req {
            Request::Sweep { all } => return self.sweep(id, all),
            Request::CacheTick { all } => {
                self.destage_tick(all);
                return self.finish(id, Ok(Reply::Done));
            }
            _ => {}
        }
        // The planner reads the request (a clone shares its payload) and
        // owns the plan while it works; the op stays in the map.
        let req = op.req.clone();
        let mut plan = std::mem::take(&mut op.plan);
        // The next phase starts afresh (`issue_*`); the last one's jobs go.
        plan.jobs.clear();
        let planned = match &req {
            Request::Read { .. } => self.plan_read(id, &req, &mut plan),
            Request::Flush => Ok(ReadPieces::new()),
            Request::Maintain {
                action: Maintenance::Rebuild,
                ..
            } => self.plan_rebuild(id, &req, &mut plan),
            Request::Maintain {
                action: Maintenance::Destage,
                ..
            } => self.plan_write(&req, &mut plan),
            Request::Maintain { .. } => Ok(self.plan_scrub(&req, &mut plan)),
            _ => self.plan_write(&req, &mut plan),
        };
        self.ops.get_mut(&id).expect("planned a live request").plan = plan;
        if planned.is_ok() {
            self.narrow_to_written(id);
        }
        match planned {
            Err(e) => self.finish(id, Err(e)),
            Ok(_) if matches!(req, Request::Flush) => {
                if !self.flush_start(id) {
                    let members: Vec<u32> = (0..self.geometry.members())
                        .filter(|&m| self.in_use(m))
                        .collect();
                    self.issue_flushes(id, members);
                }
            }
            Ok(reads) => self.issue_reads(id, reads),
        }
        self.cache_spawn_pending();
    }

    /// A write lets go of the stripes at the ends of its lock that the
    /// stripe cache took whole (their bytes are cached; it writes nothing
    /// of them to the members). The next sequential write, which shares
    /// its first stripe with this one's last, then starts at once instead
    /// of waiting for all of this one. Overlapping requests still apply in
    /// order: this one's bytes went into the cache when it started.
    fn narrow_to_written(&mut self, id: RequestId) {
        let op = &self.ops[&id];
        if !matches!(op.req, Request::Write { .. }) || op.holds.lock_released {
            return;
        }
        let Some(work) = op.plan.cache.as_ref().filter(|w| !w.skip.is_empty()) else {
            return;
        };
        let Some(span) = self.span_of(&op.req) else {
            return;
        };
        let cached_only = |s: u64| {
            work.skip.binary_search(&s).is_ok() && !work.outgoing.iter().any(|o| o.stripe == s)
        };
        let (mut first, mut end) = (span.first_stripe, span.last_stripe + 1);
        while first < end && cached_only(first) {
            first += 1;
        }
        while end > first && cached_only(end - 1) {
            end -= 1;
        }
        assert!(span.first_stripe <= first && end <= span.last_stripe + 1);
        let granted = if first == end {
            self.ops
                .get_mut(&id)
                .expect("live request")
                .holds
                .lock_released = true;
            self.locks.release(id)
        } else {
            self.locks.narrow(id, first, end - 1)
        };
        for g in granted {
            self.admit(g);
        }
    }

    fn new_io(&mut self, request: RequestId, member: u32, op: MemberOp, dests: Dests) {
        assert!(
            member < self.geometry.members(),
            "I/O for no member {member}"
        );
        assert!(
            request == intent::INTENT_OWNER || self.ops[&request].stage.pending() > 0,
            "{request:?} issues I/O its phase does not count"
        );
        let id = IoId(self.next_io);
        self.next_io += 1;
        self.account_issue(member, &op);
        self.inflight.insert(
            id,
            Inflight {
                request,
                member,
                dests,
            },
        );
        self.balancer.issued(member, &op);
        self.send_io(MemberIo { id, member, op }, request);
    }

    fn issue_reads(&mut self, id: RequestId, reads: ReadPieces) {
        self.account_reads(id, &reads);
        if reads.is_empty() {
            // Writes that read nothing (stripes, mirrors, full stripes).
            let op = self.ops.get_mut(&id).expect("live request");
            op.stage = Stage::Reading(Phase::issued(0));
            return self.advance(id);
        }
        let merged = plan::merge_reads(reads);
        assert!(merged.iter().all(|(m, _, _)| *m < self.geometry.members()));
        let op = self.ops.get_mut(&id).expect("live request");
        op.stage = Stage::Reading(Phase::issued(merged.len()));
        if merged.is_empty() {
            return self.advance(id);
        }
        for (member, mop, dests) in merged {
            self.new_io(id, member, mop, dests);
        }
    }

    fn issue_writes(&mut self, id: RequestId, writes: WritePieces) {
        let merged = plan::merge_writes(writes);
        assert!(merged.iter().all(|(m, _)| *m < self.geometry.members()));
        let op = self.ops.get_mut(&id).expect("live request");
        op.stage = Stage::Writing(Phase::issued(merged.len()));
        for (member, _) in &merged {
            op.durable.mark_written(*member);
        }
        if merged.is_empty() {
            return self.advance(id);
        }
        for (member, mop) in merged {
            self.new_io(id, member, mop, Dests::new());
        }
    }

    fn issue_flushes(&mut self, id: RequestId, members: Vec<u32>) {
        let tick = self.log_tick();
        let op = self.ops.get_mut(&id).expect("live request");
        if matches!(op.req, Request::Flush) {
            // Every member in use: the log's completed writes go durable.
            op.durable.log_tick = tick;
        }
        op.stage = Stage::Flushing(Phase::issued(members.len()));
        if members.is_empty() {
            return self.advance(id);
        }
        for m in members {
            self.new_io(id, m, MemberOp::Flush, Dests::new());
        }
    }

    fn route(op: &mut Op, dests: &[Dest], data: Bytes) {
        let total: u64 = dests.iter().map(|d| d.len_bytes).sum();
        assert_eq!(
            data.len() as u64,
            total,
            "member read returned a wrong length"
        );
        for d in dests {
            let src = &data[d.io_at_bytes as usize..(d.io_at_bytes + d.len_bytes) as usize];
            match d.target {
                Target::Out { at_bytes } => {
                    let a = d.io_at_bytes as usize;
                    op.plan
                        .segments
                        .push((at_bytes, data.slice(a..a + d.len_bytes as usize)));
                }
                Target::Job {
                    job,
                    member,
                    at_bytes,
                } => {
                    let buf = &mut op.plan.jobs[job as usize].bufs[member as usize];
                    buf[at_bytes as usize..(at_bytes + d.len_bytes) as usize].copy_from_slice(src);
                }
            }
        }
    }

    /// Called when the current phase of `id` has no I/O outstanding.
    fn advance(&mut self, id: RequestId) {
        let orphan_step = !self.rebuild_owns(id);
        let op = self.ops.get_mut(&id).expect("live request");
        match op.stage {
            Stage::Waiting | Stage::Destaging => unreachable!("advance of a waiting request"),
            Stage::Reading(phase) => {
                if phase.failed {
                    // A member failed under us: plan again around it. Each
                    // failure takes one member out, or (a read error being
                    // corrected, at most `members` per request) that
                    // member's bytes of this request, so this is bounded.
                    op.trouble.replans += 1;
                    assert!(op.trouble.replans <= 2 * self.geometry.members() + 1);
                    op.plan.segments.clear();
                    return self.begin(id);
                }
                match op.req {
                    Request::Read { .. } => self.read_phase_done(id),
                    Request::Maintain {
                        action: Maintenance::Rebuild,
                        ..
                    } if orphan_step => self.rebuild_step_orphaned(id),
                    Request::Maintain {
                        action: Maintenance::Rebuild,
                        ..
                    } => {
                        let writes = self.compute_rebuild_writes(id);
                        self.issue_writes(id, writes);
                    }
                    Request::Maintain {
                        action: Maintenance::Check | Maintenance::Repair | Maintenance::Resync,
                        ..
                    } => {
                        let (report, writes) = self.compute_scrub(id);
                        self.ops.get_mut(&id).expect("live request").plan.report = Some(report);
                        self.log_scrub_writes(id, &writes);
                        self.log_then_write(id, writes);
                    }
                    _ => {
                        self.account_stripe_writes(id);
                        let writes = self.compute_writes(id);
                        self.log_then_write(id, writes);
                    }
                }
            }
            Stage::Writing(_) => {
                self.log_writes_done(id);
                let op = &self.ops[&id];
                let fua = matches!(
                    op.req,
                    Request::Write { fua: true, .. } | Request::WriteZeroes { fua: true, .. }
                );
                // A write that lost a member still succeeds when the
                // others hold its bytes, so FUA flushes the members it
                // wrote that are still in use, failed writes or not.
                // Skipping the flush after any failure once acknowledged
                // FUA writes that a crash then undid (seed 1142 of
                // crashes_keep_flushed_writes).
                if fua {
                    let written = op.durable;
                    let members: Vec<u32> = (0..self.geometry.members())
                        .filter(|&m| written.was_written(m))
                        .filter(|&m| self.in_use(m))
                        .collect();
                    return self.issue_flushes(id, members);
                }
                let result = self.write_result(id);
                self.finish(id, result);
            }
            Stage::Logging(_, step) => self.log_advance(id, step),
            Stage::Flushing(_) => {
                if let Some(t) = op.durable.log_tick {
                    self.log_durable(t);
                }
                let result = self.write_result(id);
                self.finish(id, result);
            }
            Stage::Repairing(_) => self.repair_phase_done(id),
        }
    }

    fn write_result(&self, id: RequestId) -> Result<Reply, VolumeError> {
        let op = &self.ops[&id];
        if matches!(op.req, Request::Flush) && self.cache_failed_since(op) {
            return Err(VolumeError::new(
                ErrorKind::Io,
                "cached writes could not be written to the members (too many members lost)",
            ));
        }
        if !op.trouble.write_failed {
            return Ok(match &op.plan.report {
                Some(r) => Reply::Checked(r.clone()),
                None => Reply::Done,
            });
        }
        if op.trouble.no_space {
            return Err(self.no_space_error(op));
        }
        let (offset_bytes, len_bytes) = match op.req {
            // A destage is a write of its stripe: it fails only if the
            // stripe lost more than its parity covers.
            Request::Maintain {
                first_stripe,
                action: Maintenance::Destage,
                ..
            } => {
                let sb = self.geometry.stripe_data_bytes();
                (
                    first_stripe * sb,
                    sb.min(self.size_bytes() - first_stripe * sb),
                )
            }
            Request::Maintain { action, .. } => {
                let what = match action {
                    Maintenance::Rebuild => "the member being rebuilt failed a write",
                    _ => "a repair write failed",
                };
                return Err(VolumeError::new(ErrorKind::Io, what));
            }
            _ => op.req.range(),
        };
        let intact = match op.req {
            Request::Flush => self.intact(0, self.size_bytes()),
            _ => self.intact(offset_bytes, len_bytes),
        };
        if intact {
            Ok(Reply::Done)
        } else {
            Err(VolumeError::new(
                ErrorKind::Io,
                format!(
                    "{} at offset {offset_bytes} ({len_bytes} bytes) failed on too many members",
                    op.req.name()
                ),
            ))
        }
    }

    /// Whether every byte of the range is still held by online members.
    fn intact(&self, offset_bytes: u64, len_bytes: u64) -> bool {
        let g = &self.geometry;
        assert!(offset_bytes + len_bytes <= self.size_bytes());
        match g.level() {
            Level::Raid5 | Level::Raid6 => {
                let lost = self.health.iter().filter(|h| **h != Health::Online).count();
                lost as u32 <= g.redundancy()
            }
            Level::Mirror => self.health.contains(&Health::Online),
            Level::Concat | Level::Stripe | Level::Raid10 => {
                if len_bytes == 0 {
                    return true;
                }
                // Placement repeats every stripe for striped levels, so a
                // range longer than a stripe needs only one stripe checked.
                let span = if g.level() == Level::Concat {
                    len_bytes
                } else {
                    len_bytes.min(g.stripe_data_bytes())
                };
                let il = g.interleave_bytes();
                let first = offset_bytes / il * il;
                let end = (offset_bytes + span).min(g.volume_size_bytes());
                g.extents(first, end - first).all(|e| {
                    g.data_locations(e.stripe, e.data_index)
                        .any(|l| self.usable(l.member, e.stripe))
                })
            }
        }
    }

    fn finish(&mut self, id: RequestId, result: Result<Reply, VolumeError>) {
        let op = self.ops.remove(&id).expect("finishing a live request");
        assert_eq!(op.stage.pending(), 0, "finished with I/O outstanding");
        self.account_finish(&op, &result);
        // Every way a read ends clears its read failures first (the last
        // phase, or `read_lost`): none may outlive it.
        assert!(
            !self.read_repair.tracks(id),
            "{id:?} finished with read failures recorded"
        );
        self.log_finished(id, op.plan.log.as_ref());
        if let Request::Maintain {
            first_stripe,
            stripe_count,
            action: Maintenance::Rebuild,
        } = op.req
        {
            self.rebuild_step_done(id, first_stripe, stripe_count, result.is_ok());
        }
        if let Some((first, last)) = op.holds.intent_regions {
            self.intent_release(first, last);
        }
        if !op.cache_taken().is_empty() {
            // Cached data this request took is on the members now, or
            // (the write failed) lost: a FLUSH waiting for it must say so.
            self.cache_settle(&op, result.is_err());
        }
        if self.span_of(&op.req).is_some() && !op.holds.lock_released {
            for granted in self.locks.release(id) {
                self.admit(granted);
            }
        }
        if op.internal {
            self.internal_ops -= 1;
        } else if result.is_ok()
            && !matches!(op.req, Request::Read { .. })
            && self.any_failure_unrecorded()
        {
            let range = match op.req {
                Request::Flush => Some((0, self.size_bytes())),
                Request::Maintain { .. } | Request::Sweep { .. } | Request::CacheTick { .. } => {
                    None
                }
                _ => Some(op.req.range()),
            };
            self.held.push_back((Completion { id, result }, range));
        } else {
            self.complete(id, result);
        }
        self.cache_spawn_pending();
    }

    fn complete(&mut self, id: RequestId, result: Result<Reply, VolumeError>) {
        self.completions.push_back(Completion { id, result });
    }
}
