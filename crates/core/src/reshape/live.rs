//! A volume while it is reshaped (docs/reshape.md, "While it serves").
//!
//! Two [`Volume`]s share the members: the old layout's serves the volume
//! bytes at or after the reshape's position, the new layout's those below
//! it. A client request is split at the position and each part runs in
//! the volume of its layout, with everything a volume does (degraded
//! reads, read-modify-write, a member that fails taken out of both). A
//! window is moved with the volumes' own requests: a read through the old
//! layout, then a write of whole new stripes (parity computed from the
//! data, nothing read back) through the new. While it moves, client
//! requests on its bytes wait here, and writes to bytes moved but not yet
//! for good wait for the labels to catch up ([`Reshape::write_must_wait`]).
//!
//! Sans-I/O like the volume: the host performs the member I/O handed out
//! by [`Reshaping::next_io`], writes the labels when asked
//! ([`Action::Persist`]), and lets the move go at its rate
//! ([`Reshaping::allow_bytes`]).
//!
//! While a reshape runs, neither volume keeps a write-intent bitmap, a
//! stripe cache, checksums or a partial parity log: each is kept in terms
//! of one layout. Of upkeep only a resync runs (after a crash, copies and
//! parity made to agree with the data as it stands): its stripes, of the
//! new layout, are resynced through whichever layout holds each byte.

use super::{Reshape, Span, Step, UndoArea, UndoRecord};
use crate::geometry::Geometry;
use crate::volume::{
    CheckReport, Completion, ErrorKind, Event, Health, IdMap, IoId, IoResult, Limits, Maintenance,
    MemberIo, MemberOp, ReadData, Reply, Request, RequestId, Volume, VolumeError,
};
use bytes::Bytes;
use smallvec::SmallVec;
use std::collections::VecDeque;

/// Member I/O ids handed out carry in their low bits whose they are.
const TAG_BITS: u32 = 2;
const TAG_OLD: u64 = 0;
const TAG_NEW: u64 = 1;
const TAG_OWN: u64 = 2;

/// Rounds of [`Reshaping::pump`] at most per call: each round consumes a
/// completion or an event, or moves the work along, and they run out.
const PUMP_ROUNDS_MAX: u32 = 1 << 20;

/// What the host fixes for a reshape.
#[derive(Clone, Debug)]
pub struct Setup {
    /// Written into undo records, which a restart checks.
    pub volume_uuid: [u8; 16],
    pub reshape_id: u64,
    /// New stripes one window moves at most.
    pub window_stripes_max: u64,
    /// Bytes moved after which the labels' restart point is moved up,
    /// bounding what a crash makes the reshape copy again.
    pub persist_every_bytes: u64,
    /// Client requests at once (the two volumes take their parts).
    pub limits: Limits,
}

/// What the host must do for the reshape.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Every member is flushed: write the labels with `position_bytes` as
    /// the reshape's durable position, flush them, then call
    /// [`Reshaping::persisted`]. Writes to bytes moved since the last
    /// persist wait for it.
    Persist { position_bytes: u64 },
    /// Everything is in the new layout and the labels say so. Once
    /// [`Reshaping::is_idle`], [`Reshaping::into_new_volume`] is the
    /// volume from now on.
    Finished,
    /// The reshape cannot go on (a window could not be read or written:
    /// members lost beyond what the level survives, or the one that keeps
    /// the backup failed). Clients are still served through both layouts.
    Stuck { position_bytes: u64, reason: String },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Old,
    New,
}

struct Client {
    req: Request,
    /// Volume bytes it touches, `(offset, len)`: for a resync, its
    /// stripes' bytes.
    span: (u64, u64),
    started: bool,
    parts_left: u32,
    /// Read data: (offset in the request, bytes).
    pieces: SmallVec<[(u64, Bytes); 2]>,
    /// A resync's findings, both layouts' together (stripes numbered in
    /// each one's own layout).
    checked: Option<CheckReport>,
    error: Option<VolumeError>,
}

impl Client {
    fn range(&self) -> (u64, u64) {
        self.span
    }
    fn writes(&self) -> bool {
        matches!(
            self.req,
            Request::Write { .. } | Request::WriteZeroes { .. } | Request::Trim { .. }
        )
    }
}

/// Whose a volume request is.
enum Owner {
    Client { id: RequestId, at_bytes: u64 },
    Work,
}

/// What moving the volume is doing now.
#[derive(Debug)]
enum Work {
    Idle,
    /// The step's window waits for client requests on it to finish.
    Draining(Step),
    CopyReading {
        position_bytes: u64,
        len_bytes: u64,
    },
    CopyWriting {
        position_bytes: u64,
        len_bytes: u64,
    },
    /// Every member is being flushed before a persist.
    Flushing {
        position_bytes: u64,
    },
    /// The host is writing the labels.
    Persisting {
        position_bytes: u64,
    },
    /// Reading the before-images for an undo record.
    UndoReading {
        position_bytes: u64,
        span: Span,
        images: Vec<Vec<u8>>,
        left: u32,
    },
    /// Writing the record (or each member's own), then flushing the
    /// members written; `left` I/Os of the phase outstanding.
    UndoWriting {
        position_bytes: u64,
        flushing: bool,
        left: u32,
    },
    Finished,
    /// Stopped for good until a restart, and why ([`Action::Stuck`]).
    Stuck {
        reason: String,
    },
}

/// What one of the reshape's own member I/Os is for.
#[derive(Clone, Copy)]
enum OwnIo {
    Image { member: u32 },
    Record { member: u32 },
}

pub struct Reshaping {
    rs: Reshape,
    setup: Setup,
    old: Volume,
    new: Volume,
    /// Requests the volumes run for us: key = inner id << 1 | side.
    owners: IdMap<u64, Owner>,
    clients: IdMap<RequestId, Client>,
    /// Client requests not yet started, in arrival order.
    waiting: VecDeque<RequestId>,
    work: Work,
    own_queue: VecDeque<MemberIo>,
    own_ios: IdMap<u64, OwnIo>,
    next_own_io: u64,
    next_request: u64,
    completions: VecDeque<Completion>,
    events: VecDeque<Event>,
    actions: VecDeque<Action>,
    /// Bytes the host lets the move go on for.
    allowed_bytes: u64,
    /// Bytes moved beyond what was allowed (a window is moved whole once
    /// started): paid from the next allowances, so the rate holds.
    overdrawn_bytes: u64,
    /// A member's failure is reported once, whichever volume saw it.
    failure_reported: Vec<bool>,
    /// Moved since the last persist (for `persist_every_bytes`).
    moved_since_persist_bytes: u64,
}

impl Reshaping {
    /// Every invariant of the reshape and of both volumes, after any step
    /// (the simulator and the reshape's seeded tests call it after each):
    /// the position's own ([`Reshape::check`]); each client request either
    /// waits (once in the queue, no part submitted) or runs with exactly
    /// as many parts left as the volumes hold for it; the reshape's own
    /// I/O is counted by the phase that issued it and by nothing else; and
    /// a finished or stuck reshape moves nothing more.
    pub fn check_invariants(&self) {
        self.rs.check();
        self.old.check_invariants();
        self.new.check_invariants();
        let mut parts: IdMap<RequestId, u32> = IdMap::default();
        for owner in self.owners.values() {
            if let Owner::Client { id, .. } = owner {
                *parts.entry(*id).or_insert(0) += 1;
            }
        }
        for (id, c) in &self.clients {
            let submitted = parts.get(id).copied().unwrap_or(0);
            if c.started {
                assert!(c.parts_left > 0, "reshape: {id:?} runs with no part left");
                assert_eq!(c.parts_left, submitted, "reshape: {id:?}'s parts");
            } else {
                assert_eq!(submitted, 0, "reshape: {id:?} waits with parts submitted");
                let queued = self.waiting.iter().filter(|w| *w == id).count();
                assert_eq!(queued, 1, "reshape: {id:?} waits once in the queue");
            }
        }
        assert!(
            parts.keys().all(|id| self.clients.contains_key(id)),
            "reshape: a part of a request that is gone"
        );
        assert!(
            self.waiting.iter().all(|id| self.clients.contains_key(id)),
            "reshape: a waiter that is gone"
        );
        self.check_own_ios();
    }

    /// Counts one part too many for a running client request, as a bug in
    /// the split at the position would, so a test can show that
    /// [`Reshaping::check_invariants`] catches it. False when no client
    /// request runs. Never call it outside a test.
    #[cfg(feature = "test-hooks")]
    pub fn break_parts_count_for_tests(&mut self) -> bool {
        let Some(c) = self.clients.values_mut().find(|c| c.started) else {
            return false;
        };
        c.parts_left += 1;
        true
    }

    /// The undo record's I/Os are the only ones of the reshape's own, and
    /// the phase that issued them counts them.
    fn check_own_ios(&self) {
        let own = self.own_ios.len() as u64;
        match &self.work {
            Work::UndoReading { left, .. } => {
                assert_eq!(own, u64::from(*left), "reshape: image reads outstanding");
                assert!(self
                    .own_ios
                    .values()
                    .all(|w| matches!(w, OwnIo::Image { .. })));
            }
            Work::UndoWriting { left, .. } => {
                assert_eq!(own, u64::from(*left), "reshape: record I/Os outstanding");
                assert!(self
                    .own_ios
                    .values()
                    .all(|w| matches!(w, OwnIo::Record { .. })));
            }
            _ => assert_eq!(own, 0, "reshape: own I/O outside the undo phases"),
        }
        assert!(
            self.own_queue.len() as u64 <= own,
            "reshape: own I/O queued that is not counted"
        );
        if matches!(self.work, Work::Finished | Work::Stuck { .. }) {
            assert!(
                !self.owners.values().any(|o| matches!(o, Owner::Work)),
                "reshape: moving data after it ended"
            );
        }
    }
}

fn key(inner: RequestId, side: Side) -> u64 {
    inner.0 << 1 | u64::from(side == Side::New)
}

fn overlaps(a: (u64, u64), b: (u64, u64)) -> bool {
    a.1 > 0 && b.1 > 0 && a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

impl Reshaping {
    /// Starts, or resumes at the labels' durable position, a reshape from
    /// `rs.plan().old()` to its new geometry. `health` is per slot of the
    /// new geometry (added members are `Online`: below the position they
    /// hold the new layout, above it nothing is read from them).
    pub fn new(rs: Reshape, health: Vec<Health>, setup: Setup) -> Reshaping {
        let old_geometry = rs.plan().old().clone();
        let new_geometry = rs.plan().new_geometry().clone();
        let n_old = old_geometry.members() as usize;
        assert_eq!(health.len(), new_geometry.members() as usize);
        let limits = setup.limits.clone();
        let old = Volume::new(old_geometry, health[..n_old].to_vec(), limits.clone());
        let new = Volume::new(new_geometry, health.clone(), limits);
        Reshaping {
            rs,
            setup,
            old,
            new,
            owners: IdMap::default(),
            clients: IdMap::default(),
            waiting: VecDeque::new(),
            work: Work::Idle,
            own_queue: VecDeque::new(),
            own_ios: IdMap::default(),
            next_own_io: 0,
            next_request: 0,
            completions: VecDeque::new(),
            events: VecDeque::new(),
            actions: VecDeque::new(),
            allowed_bytes: 0,
            overdrawn_bytes: 0,
            failure_reported: vec![false; health.len()],
            moved_since_persist_bytes: 0,
        }
    }

    pub fn reshape(&self) -> &Reshape {
        &self.rs
    }
    pub fn old_geometry(&self) -> &Geometry {
        self.old.geometry()
    }
    pub fn new_geometry(&self) -> &Geometry {
        self.new.geometry()
    }
    /// Clients see the old size until the reshape is done, then the new
    /// one (NBD has no resize notice: a client reconnects to see it).
    pub fn size_bytes(&self) -> u64 {
        if self.is_finished() {
            self.new.size_bytes()
        } else {
            self.old.size_bytes()
        }
    }
    /// Per slot of the new geometry.
    pub fn health(&self) -> &[Health] {
        self.new.health()
    }
    pub fn is_finished(&self) -> bool {
        matches!(self.work, Work::Finished)
    }
    /// Why the move stopped, if it did ([`Action::Stuck`]): nothing moves
    /// further until a restart.
    pub fn stuck_reason(&self) -> Option<&str> {
        match &self.work {
            Work::Stuck { reason } => Some(reason),
            _ => None,
        }
    }

    /// The new layout's volume, for queries and settings (statistics, read
    /// balancing). Requests and member failures go through `Reshaping`:
    /// a failure told to one volume only would leave the other reading a
    /// member out of use.
    pub fn new_volume_mut(&mut self) -> &mut Volume {
        &mut self.new
    }

    /// Tells both layouts' read balancing a member's recent I/O time.
    pub fn set_member_latency(&mut self, member: u32, latency_ns: u64) {
        if member < self.old.geometry().members() {
            self.old.set_member_latency(member, latency_ns);
        }
        self.new.set_member_latency(member, latency_ns);
    }

    /// Bytes the host has let the move go on for and it has not moved.
    pub fn allowed_bytes(&self) -> u64 {
        self.allowed_bytes
    }

    /// Lets the move go on for `bytes` more (a rate limit); a window
    /// already started finishes whatever is left.
    pub fn allow_bytes(&mut self, bytes: u64) {
        let paid = bytes.min(self.overdrawn_bytes);
        self.overdrawn_bytes -= paid;
        self.allowed_bytes = self.allowed_bytes.saturating_add(bytes - paid);
        // Credit pays off a debt first: never both at once.
        assert!(self.overdrawn_bytes == 0 || self.allowed_bytes == 0);
        self.pump();
    }

    /// True when nothing is in flight: no client request, no member I/O.
    pub fn is_idle(&self) -> bool {
        self.clients.is_empty()
            && self.old.is_idle()
            && self.new.is_idle()
            && self.own_ios.is_empty()
            && self.own_queue.is_empty()
    }

    /// The volume of the new layout, once the reshape is finished and idle.
    pub fn into_new_volume(self) -> Volume {
        assert!(self.is_finished() && self.is_idle());
        self.new
    }

    pub fn submit(&mut self, req: Request) -> RequestId {
        let id = RequestId(self.next_request);
        self.next_request += 1;
        let size = self.size_bytes();
        let refuse = |kind, msg: String| Completion {
            id,
            result: Err(VolumeError::new(kind, msg)),
        };
        if let Some(e) = req.refusal(size, self.clients.len(), self.setup.limits.max_requests) {
            self.completions
                .push_back(Completion { id, result: Err(e) });
            return id;
        }
        match req {
            // Neither volume keeps a bitmap or a cache while it reshapes.
            Request::Sweep { .. } | Request::CacheTick { .. } => {
                self.completions.push_back(Completion {
                    id,
                    result: Ok(Reply::Done),
                });
                return id;
            }
            Request::Maintain {
                action: Maintenance::Resync,
                ..
            } => {}
            // Once everything is in the new layout, its volume runs any
            // upkeep but a rebuild (whose state the host keeps).
            Request::Maintain { action, .. }
                if self.is_finished() && action != Maintenance::Rebuild => {}
            Request::Maintain { action, .. } => {
                let msg = format!(
                    "{action:?} is not run while the volume is reshaped (each layout's \
                     stripes are checked on their own); it can run once the reshape is done"
                );
                self.completions.push_back(refuse(ErrorKind::Busy, msg));
                return id;
            }
            _ => {}
        }
        let span = match req {
            Request::Maintain {
                first_stripe,
                stripe_count,
                ..
            } => {
                let sb = self.rs.plan().stripe_bytes();
                let a = first_stripe.saturating_mul(sb).min(size);
                let b = first_stripe
                    .saturating_add(stripe_count)
                    .saturating_mul(sb)
                    .min(size);
                (a, b - a)
            }
            _ => req.range(),
        };
        assert!(
            span.0.checked_add(span.1).is_some_and(|end| end <= size),
            "an admitted request lies in the volume"
        );
        assert!(!self.clients.contains_key(&id));
        self.clients.insert(
            id,
            Client {
                req,
                span,
                started: false,
                parts_left: 0,
                pieces: SmallVec::new(),
                checked: None,
                error: None,
            },
        );
        self.waiting.push_back(id);
        self.pump();
        id
    }

    pub fn next_io(&mut self) -> Option<MemberIo> {
        if let Some(io) = self.own_queue.pop_front() {
            return Some(io);
        }
        let (mut io, tag) = match self.old.next_io() {
            Some(io) => (io, TAG_OLD),
            None => (self.new.next_io()?, TAG_NEW),
        };
        assert_eq!(
            io.id.0 >> (64 - TAG_BITS),
            0,
            "an I/O id leaves room for its tag"
        );
        io.id = IoId(io.id.0 << TAG_BITS | tag);
        Some(io)
    }

    pub fn next_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn next_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    pub fn io_done(&mut self, io: IoId, result: IoResult) {
        let inner = IoId(io.0 >> TAG_BITS);
        match io.0 & ((1 << TAG_BITS) - 1) {
            TAG_OLD => self.old.io_done(inner, result),
            TAG_NEW => self.new.io_done(inner, result),
            TAG_OWN => self.own_io_done(inner.0, result),
            tag => panic!("a member I/O id with tag {tag}, which no I/O of ours has"),
        }
        self.pump();
    }

    /// The labels hold `position_bytes` as the durable position (after an
    /// [`Action::Persist`]).
    pub fn persisted(&mut self, position_bytes: u64) {
        match self.work {
            Work::Persisting { position_bytes: p } if p == position_bytes => {}
            ref w => panic!("persisted {position_bytes} while {w:?}"),
        }
        assert!(
            position_bytes <= self.rs.position_bytes(),
            "persisted past the copy"
        );
        self.rs.persist_done(position_bytes);
        self.moved_since_persist_bytes = 0;
        self.work = Work::Idle;
        self.pump();
    }

    /// Takes a member out of use (the operator's word), in both layouts.
    pub fn mark_faulty(&mut self, member: u32, reason: String) {
        self.mark_faulty_quietly(member, reason);
        self.pump();
    }

    /// The labels record `member`'s failure ([`Volume::failure_recorded`]).
    pub fn failure_recorded(&mut self, member: u32) {
        assert!(member < self.new.geometry().members(), "no member {member}");
        if member < self.old.geometry().members() {
            self.old.failure_recorded(member);
        }
        self.new.failure_recorded(member);
        self.pump();
    }

    /// Moves everything along until nothing changes.
    fn pump(&mut self) {
        for _ in 0..PUMP_ROUNDS_MAX {
            let mut moved = false;
            for side in [Side::Old, Side::New] {
                while let Some(c) = self.volume(side).next_completion() {
                    self.part_done(side, c);
                    moved = true;
                }
                while let Some(e) = self.volume(side).next_event() {
                    self.volume_event(side, e);
                    moved = true;
                }
            }
            moved |= self.advance_work();
            moved |= self.start_waiting();
            if !moved {
                return;
            }
        }
        panic!("the reshape's pump did not settle in {PUMP_ROUNDS_MAX} rounds");
    }

    fn volume(&mut self, side: Side) -> &mut Volume {
        match side {
            Side::Old => &mut self.old,
            Side::New => &mut self.new,
        }
    }

    fn volume_event(&mut self, side: Side, e: Event) {
        if let Event::MemberFaulty { member, reason } = &e {
            assert!((*member as usize) < self.failure_reported.len());
            // Out of both layouts: one copy of its bytes is as stale as
            // the other.
            let other = match side {
                Side::Old => Side::New,
                Side::New => Side::Old,
            };
            if *member < self.volume(other).geometry().members() {
                self.volume(other).mark_faulty(*member, reason.clone());
            }
            if std::mem::replace(&mut self.failure_reported[*member as usize], true) {
                return;
            }
        }
        self.events.push_back(e);
    }

    /// The window the current work keeps clients off, if any.
    fn window(&self) -> Option<(u64, u64)> {
        match self.work {
            Work::Draining(Step::Copy {
                position_bytes,
                len_bytes,
            })
            | Work::CopyReading {
                position_bytes,
                len_bytes,
            }
            | Work::CopyWriting {
                position_bytes,
                len_bytes,
            } => Some((position_bytes, len_bytes)),
            Work::Draining(Step::SaveUndo {
                position_bytes,
                len_bytes,
                ..
            }) => Some((position_bytes, len_bytes)),
            // The window the record is for: its copy follows. The step
            // comes back the same until the record is saved.
            Work::UndoReading { .. } | Work::UndoWriting { .. } => match self.rs.next_step() {
                Step::SaveUndo {
                    position_bytes,
                    len_bytes,
                    ..
                } => Some((position_bytes, len_bytes)),
                other => unreachable!("saving an undo record while the next step is {other:?}"),
            },
            _ => None,
        }
    }

    fn must_wait(&mut self, id: RequestId) -> bool {
        let c = &self.clients[&id];
        assert!(!c.started, "{id:?} waits after it started");
        let (range, writes) = (c.range(), c.writes());
        if self.window().is_some_and(|w| overlaps(range, w)) {
            return true;
        }
        if self
            .rs
            .undo_window()
            .is_some_and(|(a, b)| overlaps(range, (a, b - a)))
        {
            return true;
        }
        writes && range.1 > 0 && self.rs.write_must_wait(range.0, range.1)
    }

    fn start_waiting(&mut self) -> bool {
        let mut started = false;
        let mut still = VecDeque::with_capacity(self.waiting.len());
        while let Some(id) = self.waiting.pop_front() {
            if self.must_wait(id) {
                still.push_back(id);
            } else {
                self.start_client(id);
                started = true;
            }
        }
        // Each waiter started or waits still, in the order it came.
        assert!(still.iter().all(|id| !self.clients[id].started));
        self.waiting = still;
        started
    }

    /// Splits a client request at the position; each part runs in the
    /// volume of its layout.
    fn start_client(&mut self, id: RequestId) {
        let c = self.clients.get_mut(&id).expect("a waiting client");
        assert!(!c.started, "{id:?} starts once");
        c.started = true;
        let req = c.req.clone();
        let mut parts: SmallVec<[(Side, Request, u64); 2]> = SmallVec::new();
        match req {
            Request::Flush => parts.push((Side::New, Request::Flush, 0)),
            Request::Maintain { .. } if self.is_finished() => parts.push((Side::New, req, 0)),
            Request::Maintain { .. } => {
                let (offset, len) = self.clients[&id].span;
                self.resync_parts(offset, offset + len, &mut parts);
            }
            _ => {
                let (offset, len) = req.range();
                let split = self.rs.position_bytes().clamp(offset, offset + len);
                for (side, a, b) in [(Side::New, offset, split), (Side::Old, split, offset + len)] {
                    if b > a || (len == 0 && side == Side::Old) {
                        parts.push((side, piece(&req, offset, a, b), a - offset));
                    }
                }
            }
        }
        assert!(!parts.is_empty(), "{id:?} runs in at least one layout");
        if matches!(
            self.clients[&id].req,
            Request::Read { .. } | Request::Write { .. }
        ) {
            let parted: u64 = parts.iter().map(|p| p.1.range().1).sum();
            assert_eq!(
                parted, self.clients[&id].span.1,
                "{id:?}'s parts cover it once"
            );
        }
        self.clients.get_mut(&id).expect("started").parts_left = parts.len() as u32;
        for (side, part, at_bytes) in parts {
            self.submit_to(side, part, Owner::Client { id, at_bytes });
        }
    }

    /// A resync of volume bytes `[a, b)`: the new layout's stripes below
    /// the position, the old layout's stripes holding the rest.
    fn resync_parts(&self, a: u64, b: u64, parts: &mut SmallVec<[(Side, Request, u64); 2]>) {
        let position = self.rs.position_bytes();
        let resync = |first_stripe: u64, end_stripe: u64| {
            assert!(first_stripe < end_stripe, "a resync part has stripes");
            Request::Maintain {
                first_stripe,
                stripe_count: end_stripe - first_stripe,
                action: Maintenance::Resync,
            }
        };
        let sb_new = self.new.geometry().stripe_data_bytes();
        let sb_old = self.old.geometry().stripe_data_bytes();
        if a >= b {
            // Stripes past the end the clients see: nothing to resync.
            parts.push((Side::New, Request::Flush, 0));
            return;
        }
        if a < position {
            let req = resync(a / sb_new, b.min(position).div_ceil(sb_new));
            parts.push((Side::New, req, 0));
        }
        if b > position {
            let req = resync(a.max(position) / sb_old, b.div_ceil(sb_old));
            parts.push((Side::Old, req, 0));
        }
    }

    fn submit_to(&mut self, side: Side, req: Request, owner: Owner) {
        let inner = self.volume(side).submit(req);
        let before = self.owners.insert(key(inner, side), owner);
        assert!(before.is_none(), "{inner:?} of {side:?} has one owner");
    }

    fn part_done(&mut self, side: Side, c: Completion) {
        let owner = self
            .owners
            .remove(&key(c.id, side))
            .expect("a completion of a request we submitted");
        match owner {
            Owner::Work => self.work_done(c.result),
            Owner::Client { id, at_bytes } => {
                let client = self.clients.get_mut(&id).expect("a live client");
                match c.result {
                    Ok(Reply::Data(data)) => {
                        let mut at = at_bytes;
                        for s in data.into_segments() {
                            at += s.len() as u64;
                            client.pieces.push((at - s.len() as u64, s));
                        }
                    }
                    Ok(Reply::Checked(r)) => match &mut client.checked {
                        None => client.checked = Some(r),
                        Some(c) => {
                            c.mismatched_stripes.extend(r.mismatched_stripes);
                            c.unchecked_stripes += r.unchecked_stripes;
                            c.wrong_members.extend(r.wrong_members);
                            c.unlocated_stripes.extend(r.unlocated_stripes);
                        }
                    },
                    Ok(_) => {}
                    Err(e) => {
                        client.error.get_or_insert(e);
                    }
                }
                assert!(client.parts_left > 0, "{id:?}: a part done past its last");
                client.parts_left -= 1;
                if client.parts_left == 0 {
                    let client = self.clients.remove(&id).expect("a live client");
                    let result = match (client.error, &client.req) {
                        (Some(e), _) => Err(e),
                        (None, Request::Read { len_bytes, .. }) => {
                            Ok(Reply::Data(ReadData::assemble(client.pieces, *len_bytes)))
                        }
                        // A resync answers with its findings, as a
                        // volume's does (none when its stripes were past
                        // the end).
                        (
                            None,
                            &Request::Maintain {
                                first_stripe,
                                stripe_count,
                                ..
                            },
                        ) => Ok(Reply::Checked(client.checked.unwrap_or(CheckReport {
                            first_stripe,
                            stripe_count,
                            ..CheckReport::default()
                        }))),
                        (None, _) => Ok(Reply::Done),
                    };
                    self.completions.push_back(Completion { id, result });
                }
            }
        }
    }

    /// Starts the next step when nothing is under way. True if anything
    /// changed.
    fn advance_work(&mut self) -> bool {
        match self.work {
            Work::Idle => {}
            Work::Draining(step) => {
                let window = self.window().expect("a draining step has a window");
                let busy = self
                    .clients
                    .values()
                    .any(|c| c.started && overlaps(c.range(), window));
                if busy {
                    return false;
                }
                self.begin(step);
                return true;
            }
            _ => return false,
        }
        match self.rs.next_step() {
            Step::Persist { position_bytes } => {
                self.work = Work::Flushing { position_bytes };
                self.submit_to(Side::New, Request::Flush, Owner::Work);
            }
            step @ (Step::Copy { .. } | Step::SaveUndo { .. }) => {
                if self.allowed_bytes == 0 {
                    return false;
                }
                self.work = Work::Draining(step);
            }
            Step::Done => {
                self.work = Work::Finished;
                self.actions.push_back(Action::Finished);
            }
            Step::Stuck { position_bytes } => self.stuck(
                position_bytes,
                "the next window would overwrite data it does not move".into(),
            ),
        }
        true
    }

    fn begin(&mut self, step: Step) {
        assert!(
            matches!(self.work, Work::Draining(s) if s == step),
            "a step begins once drained"
        );
        match step {
            Step::Copy {
                position_bytes,
                len_bytes,
            } => {
                let readable = self
                    .size_bytes()
                    .saturating_sub(position_bytes)
                    .min(len_bytes);
                if readable == 0 {
                    // Past the old end: the new layout gets zeros.
                    self.work = Work::CopyWriting {
                        position_bytes,
                        len_bytes,
                    };
                    let data = Bytes::from(vec![0u8; len_bytes as usize]);
                    self.copy_write(position_bytes, data);
                } else {
                    self.work = Work::CopyReading {
                        position_bytes,
                        len_bytes,
                    };
                    let read = Request::Read {
                        offset_bytes: position_bytes,
                        len_bytes: readable,
                    };
                    self.submit_to(Side::Old, read, Owner::Work);
                }
            }
            Step::SaveUndo {
                position_bytes,
                span,
                ..
            } => self.read_images(position_bytes, span),
            other => unreachable!("{other:?} has no window"),
        }
    }

    fn copy_write(&mut self, position_bytes: u64, data: Bytes) {
        assert!(!data.is_empty());
        assert_eq!(
            position_bytes,
            self.rs.position_bytes(),
            "windows copy in order"
        );
        let write = Request::Write {
            offset_bytes: position_bytes,
            data,
            fua: false,
        };
        self.submit_to(Side::New, write, Owner::Work);
    }

    fn work_done(&mut self, result: Result<Reply, VolumeError>) {
        let position = self.rs.position_bytes();
        match (&self.work, result) {
            (
                &Work::CopyReading {
                    position_bytes,
                    len_bytes,
                },
                Ok(Reply::Data(data)),
            ) => {
                assert!(data.len() <= len_bytes, "read no more than the window");
                let mut bytes = Vec::with_capacity(len_bytes as usize);
                for s in data.segments() {
                    bytes.extend_from_slice(s);
                }
                bytes.resize(len_bytes as usize, 0);
                self.work = Work::CopyWriting {
                    position_bytes,
                    len_bytes,
                };
                self.copy_write(position_bytes, Bytes::from(bytes));
            }
            (
                &Work::CopyWriting {
                    position_bytes,
                    len_bytes,
                },
                Ok(_),
            ) => {
                self.rs.copy_done(position_bytes, len_bytes);
                let taken = len_bytes.min(self.allowed_bytes);
                self.allowed_bytes -= taken;
                self.overdrawn_bytes = self.overdrawn_bytes.saturating_add(len_bytes - taken);
                self.moved_since_persist_bytes += len_bytes;
                if self.moved_since_persist_bytes >= self.setup.persist_every_bytes {
                    self.rs.want_persist();
                }
                self.work = Work::Idle;
            }
            (&Work::Flushing { position_bytes }, Ok(_)) => {
                self.work = Work::Persisting { position_bytes };
                self.actions.push_back(Action::Persist { position_bytes });
            }
            (Work::CopyReading { .. }, Err(e)) => {
                self.stuck(position, format!("the old layout could not be read: {e}"))
            }
            (Work::CopyWriting { .. }, Err(e)) => self.stuck(
                position,
                format!("the new layout could not be written: {e}"),
            ),
            (Work::Flushing { .. }, Err(e)) => {
                self.stuck(position, format!("the members could not be flushed: {e}"))
            }
            (w, r) => unreachable!("{r:?} for the reshape while {w:?}"),
        }
    }

    fn stuck(&mut self, position_bytes: u64, reason: String) {
        self.work = Work::Stuck {
            reason: reason.clone(),
        };
        self.actions.push_back(Action::Stuck {
            position_bytes,
            reason,
        });
    }

    fn own_io(&mut self, member: u32, op: MemberOp, what: OwnIo) {
        assert!(member < self.new.geometry().members());
        let inner = self.next_own_io;
        self.next_own_io += 1;
        let before = self.own_ios.insert(inner, what);
        assert!(before.is_none());
        self.own_queue.push_back(MemberIo {
            id: IoId(inner << TAG_BITS | TAG_OWN),
            member,
            op,
        });
    }

    /// Reads every old member's bytes of `span` (a member out of use has
    /// none worth keeping: its image is zeros).
    fn read_images(&mut self, position_bytes: u64, span: Span) {
        let n_old = self.old.geometry().members();
        assert!(span.start_bytes < span.end_bytes, "an image has bytes");
        assert!(self.own_ios.is_empty(), "one undo phase at a time");
        let len = span.end_bytes - span.start_bytes;
        // The span is the new layout's rows, from its data offset.
        let data_offset = self.new.geometry().spec().data_offset_bytes;
        let mut left = 0;
        for m in 0..n_old {
            if self.old.health()[m as usize] == Health::Online {
                let op = MemberOp::Read {
                    offset_bytes: data_offset + span.start_bytes,
                    len_bytes: len,
                };
                self.own_io(m, op, OwnIo::Image { member: m });
                left += 1;
            }
        }
        self.work = Work::UndoReading {
            position_bytes,
            span,
            images: vec![vec![0; len as usize]; n_old as usize],
            left,
        };
        if left == 0 {
            self.write_record();
        }
    }

    fn write_record(&mut self) {
        let Work::UndoReading {
            position_bytes,
            span,
            ref mut images,
            ..
        } = self.work
        else {
            unreachable!("the record is written after its images are read");
        };
        let images = std::mem::take(images);
        assert_eq!(images.len(), self.old.geometry().members() as usize);
        let record = |first_slot: u32, images: Vec<Vec<u8>>| UndoRecord {
            volume_uuid: self.setup.volume_uuid,
            reshape_id: self.setup.reshape_id,
            position_bytes,
            span,
            first_slot,
            images,
        };
        let area = self
            .rs
            .plan()
            .undo_area()
            .expect("a step that saves an undo record has an undo area");
        let records: Vec<(u32, UndoRecord)> = match area {
            UndoArea::Added { slot, .. } => {
                if self.new.health()[slot as usize] != Health::Online {
                    return self.stuck(
                        position_bytes,
                        format!("member {slot}, which keeps the reshape's backup, is out of use"),
                    );
                }
                vec![(slot, record(0, images))]
            }
            // A member out of use has no bytes worth keeping, nor a place
            // to keep them.
            UndoArea::Reserved { .. } => (0u32..)
                .zip(images)
                .filter(|(m, _)| self.old.health()[*m as usize] == Health::Online)
                .map(|(m, image)| (m, record(m, vec![image])))
                .collect(),
        };
        self.work = Work::UndoWriting {
            position_bytes,
            flushing: false,
            left: records.len() as u32,
        };
        if records.is_empty() {
            return self.undo_phase_done();
        }
        for (member, r) in records {
            let op = MemberOp::Write {
                offset_bytes: area.offset_bytes(),
                data: r.encode().into(),
            };
            self.own_io(member, op, OwnIo::Record { member });
        }
    }

    /// Every record written (then flush them) or flushed (then the window
    /// may be copied).
    fn undo_phase_done(&mut self) {
        let Work::UndoWriting {
            position_bytes,
            flushing,
            ..
        } = self.work
        else {
            unreachable!("an undo phase ends while writing one");
        };
        let area = self.rs.plan().undo_area().expect("an undo area");
        let holders: Vec<u32> = area
            .holders(self.old.geometry().members())
            .filter(|&m| self.new.health()[m as usize] == Health::Online)
            .collect();
        if flushing || holders.is_empty() {
            self.rs.undo_saved(position_bytes);
            self.work = Work::Idle;
            return;
        }
        self.work = Work::UndoWriting {
            position_bytes,
            flushing: true,
            left: holders.len() as u32,
        };
        for member in holders {
            self.own_io(member, MemberOp::Flush, OwnIo::Record { member });
        }
    }

    fn own_io_done(&mut self, inner: u64, result: IoResult) {
        let what = self
            .own_ios
            .remove(&inner)
            .expect("a completion of a reshape I/O we issued");
        match (what, &mut self.work) {
            (
                OwnIo::Image { member },
                Work::UndoReading {
                    images, left, span, ..
                },
            ) => {
                assert!(*left > 0, "an image read past the last");
                *left -= 1;
                match result {
                    Ok(Some(data)) if data.len() as u64 == span.end_bytes - span.start_bytes => {
                        images[member as usize].copy_from_slice(&data)
                    }
                    Ok(_) => panic!("a member read returned a wrong length"),
                    // The member leaves; its bytes will not be read again.
                    Err(e) => self.mark_faulty_quietly(member, e.message),
                }
                if matches!(self.work, Work::UndoReading { left: 0, .. }) {
                    self.write_record();
                }
            }
            (
                OwnIo::Record { member },
                &mut Work::UndoWriting {
                    position_bytes,
                    ref mut left,
                    ..
                },
            ) => {
                assert!(*left > 0, "a record I/O past the last");
                *left -= 1;
                let last = *left == 0;
                if let Err(e) = result {
                    self.mark_faulty_quietly(member, e.message.clone());
                    if let Some(UndoArea::Added { .. }) = self.rs.plan().undo_area() {
                        return self.stuck(
                            position_bytes,
                            format!("the reshape's backup could not be written: {}", e.message),
                        );
                    }
                    // A member's own record: the member is out of both
                    // layouts, and its bytes are not needed again.
                }
                if last {
                    self.undo_phase_done();
                }
            }
            (_, w) => unreachable!("a reshape I/O completed while {w:?}"),
        }
    }

    /// Out of both layouts, without pumping (our own I/O's completion
    /// pumps after it; the pump reports the failure once).
    fn mark_faulty_quietly(&mut self, member: u32, reason: String) {
        assert!(member < self.new.geometry().members(), "no member {member}");
        if member < self.old.geometry().members() {
            self.old.mark_faulty(member, reason.clone());
        }
        self.new.mark_faulty(member, reason);
    }
}

/// The part of `req` (which starts at `offset`) over volume bytes `[a, b)`.
fn piece(req: &Request, offset: u64, a: u64, b: u64) -> Request {
    assert!(offset <= a && a <= b, "a part lies in its request");
    match req {
        Request::Read { .. } => Request::Read {
            offset_bytes: a,
            len_bytes: b - a,
        },
        Request::Write { data, fua, .. } => Request::Write {
            offset_bytes: a,
            data: data.slice((a - offset) as usize..(b - offset) as usize),
            fua: *fua,
        },
        Request::WriteZeroes { fua, .. } => Request::WriteZeroes {
            offset_bytes: a,
            len_bytes: b - a,
            fua: *fua,
        },
        Request::Trim { .. } => Request::Trim {
            offset_bytes: a,
            len_bytes: b - a,
        },
        other => unreachable!("{} is not split", other.name()),
    }
}
