//! The volume's side of the partial parity log (`crate::ppl`): which
//! writes log what, where records go in each member's ring, and the order
//! that makes a record worth having.
//!
//! A parity write that logs goes: reads, parity computed (and the record
//! with it, from the same buffers), [a flush of every member], the record
//! written to the stripe's parity members, those members flushed, then the
//! data and parity writes. The rules, each for a way recovery could
//! otherwise make parity wrong for bytes nobody was writing:
//!
//! 1. **A partial write logs** (some cell of its rows keeps its bytes):
//!    its partial parity is what recovery needs for those cells.
//! 2. **The record is durable before any write it speaks for is issued**:
//!    a write that landed with no record would leave the hole open.
//! 3. **A partial write to a stripe with an earlier write not yet flushed
//!    flushes every member first**: its partial parity (and, when it
//!    reconstructs, its parity) includes the earlier write's new bytes,
//!    which a crash could still undo on their member, and recovery, or a
//!    read rebuilding a lost member from that parity, would then use bytes
//!    no member holds. The earlier write may be a whole-stripe one (a
//!    stripe cache destage) that logged nothing.
//! 4. **Every write to a stripe that still has a record on a member logs,
//!    whole-row writes and trims included** (a *whole* record, no partial
//!    parity): recovery applies every record it finds, oldest first, and an
//!    old record's partial parity is stale once anything else wrote there.
//! 5. **A record's space is reused only once its writes are durable**:
//!    they completed before a flush of every member started. A write that
//!    finds no room flushes every member if that frees some; if only
//!    writes still running hold the space, it waits (`Stage::Waiting`)
//!    until one completes, then flushes and tries again.
//! 6. **Records leave a ring oldest first**: recovery takes the newest
//!    record it finds for each row, so an old record that outlives a newer
//!    one of its stripe is applied with partial parity that the newer
//!    write made stale, and parity comes out wrong in cells nobody was
//!    writing. Records that do not fit before the ring's end go to its
//!    start, over records newer than those left between the head and the
//!    end (the *tail*): the tail's records are zeroed, and that made
//!    durable, before the records at the start are written over.

mod state;

use super::plan::WritePieces;
use super::{MemberOp, Payload, Phase, RequestId, Stage, StripeJob, Volume};
use crate::ppl::{Layout, Piece, Record};
use bytes::Bytes;
pub(super) use state::LogState;
pub use state::LogStats;

/// A request's part in the log, from its parity computed to its finish.
#[derive(Default)]
pub(super) struct OpLog {
    /// Records computed with the writes; numbered when placed.
    records: Vec<Record>,
    /// Rule 3 applies: a clearing flush before placing.
    needs_clearing: bool,
    /// The tick when the request's clearing flush was issued.
    clearing_tick: u64,
    /// The log writes, once placed in the rings (emptied once written:
    /// then the members to flush).
    placed: Vec<(u32, u64, Payload)>,
    is_placed: bool,
    /// The number of its first record, once placed.
    first_seq: u64,
    /// Records of other requests that the log writes overwrite: they leave
    /// `on_disk` once those writes are flushed.
    superseded: Vec<u64>,
    synced: bool,
    /// Stripes written partially (rule 3: whether to clear first).
    partial_stripes: Vec<u64>,
    /// Every stripe the request writes with parity, whole or partial,
    /// logged or not (rule 3's bookkeeping, at completion).
    written_stripes: Vec<u64>,
    /// Whole stripes written or released that have records on disk: one
    /// whole record lists them all.
    whole_stripes: Vec<u64>,
    /// Per member, the ring's tail `(member, start, len)` to zero before
    /// the records go to the ring's start (rule 6); emptied once zeroed
    /// and flushed.
    tails: Vec<(u32, u64, u64)>,
    tails_zeroed: bool,
}

/// What one stripe job logs.
pub(super) enum JobLog {
    Nothing,
    /// A record with partial parity.
    Partial(Record),
    /// A whole record of part of the stripe's rows.
    Whole(Record),
    /// The whole stripe, rows and all: listed in the request's one whole
    /// record.
    WholeStripe(u64),
}

/// Where a logging request is between its parity and its data writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LogStep {
    /// A flush of every member (rule 3, or to free log space).
    Clearing,
    /// Zeros over the rings' tails (rule 6).
    ZeroingTails,
    /// The members whose tails were zeroed, flushed.
    SyncingTails,
    /// The records going to the parity members.
    Writing,
    /// The parity members flushed after them.
    Syncing,
}

impl OpLog {
    /// A stripe job of the request writes `stripe` with its parity.
    pub(super) fn wrote(&mut self, stripe: u64) {
        self.written_stripes.push(stripe);
    }

    pub(super) fn whole_stripes_mut(&mut self) -> &mut Vec<u64> {
        &mut self.whole_stripes
    }

    /// A stripe job's part (`log_record`).
    pub(super) fn add(&mut self, log: JobLog) {
        match log {
            JobLog::Nothing => {}
            JobLog::Partial(r) => {
                self.partial_stripes.push(r.stripes[0]);
                self.records.push(r);
            }
            JobLog::Whole(r) => self.records.push(r),
            JobLog::WholeStripe(s) => self.whole_stripes.push(s),
        }
    }
}

impl Volume {
    /// Logs partial parity for RAID-5/6 writes from now on, into each
    /// member's `layout` area, which the host has emptied (after applying
    /// it with `crate::ppl::recover`, if the volume was not shut down
    /// cleanly).
    pub fn enable_ppl(&mut self, layout: Layout, volume_uuid: [u8; 16]) {
        assert!(self.is_idle(), "the log is enabled before any request");
        assert!(
            self.geometry.level().is_parity(),
            "a partial parity log needs parity"
        );
        assert!(
            layout.len_bytes >= crate::ppl::ring_bytes_min(self.geometry.interleave_bytes()),
            "a log area of {} bytes is too small for the interleave",
            layout.len_bytes
        );
        assert!(
            layout.offset_bytes.is_multiple_of(crate::ppl::BLOCK_BYTES)
                && layout.len_bytes.is_multiple_of(crate::ppl::BLOCK_BYTES)
                && layout.offset_bytes + layout.len_bytes <= self.geometry.spec().data_offset_bytes,
            "the log area lies in whole blocks before the data"
        );
        self.log = Some(LogState::new(layout, volume_uuid, self.geometry.members()));
    }

    /// Test support: per stripe, the copies of partial records the volume
    /// counts as on the members (rule 4 logs a whole record before writing
    /// over such a stripe). The members' logs must hold no more.
    #[cfg(feature = "test-hooks")]
    pub fn ppl_recorded_stripes_for_tests(&self) -> std::collections::BTreeMap<u64, u32> {
        self.log
            .as_ref()
            .map_or_else(Default::default, |l| l.recorded_stripes())
    }

    /// Test support: claims a record past the end of the first member's
    /// ring, as a bug in placing would, so a test can show that
    /// [`Volume::check_invariants`] looks at the log. False without a log.
    /// Never call it outside a test.
    #[cfg(feature = "test-hooks")]
    pub fn break_log_for_tests(&mut self) -> bool {
        let Some(log) = self.log.as_mut() else {
            return false;
        };
        log.break_for_tests(super::intent::INTENT_OWNER);
        true
    }

    pub fn ppl_stats(&self) -> Option<LogStats> {
        self.log.as_ref().map(|l| l.stats())
    }

    /// Whole records for whole stripes a write-zeroes or trim releases
    /// that still have records on the members (rule 4).
    pub(super) fn log_released(&self, first: u64, end: u64, out: &mut Vec<u64>) {
        let Some(log) = &self.log else {
            return;
        };
        log.recorded_in(first, end, out);
    }

    /// A repair rewrites a member's chunk (data, on RAID-6, when the
    /// syndrome names it) and a resync parity, neither logged: a stripe
    /// that still has a record on a member gets a whole record first, so
    /// that recovery does not apply partial parity older than the repair.
    pub(super) fn log_scrub_writes(&mut self, id: RequestId, writes: &WritePieces) {
        let Some(log) = &self.log else {
            return;
        };
        let g = &self.geometry;
        let (offset, il) = (g.spec().data_offset_bytes, g.interleave_bytes());
        let mut stripes: Vec<u64> = writes
            .iter()
            .map(|w| (w.offset_bytes - offset) / il)
            .filter(|&s| log.has_record(s))
            .collect();
        if stripes.is_empty() {
            return;
        }
        stripes.sort_unstable();
        stripes.dedup();
        let op = self.ops.get_mut(&id).expect("live request");
        let ol = op.plan.log.get_or_insert_with(OpLog::default);
        ol.whole_stripes.extend(stripes);
    }

    /// The record a stripe job's write needs, if any, from its buffers
    /// before the parity is made: for read-modify-write the old parity and
    /// the old bytes of the modified cells; otherwise the data as read
    /// (reconstruct-write reads only unmodified cells; a reconstruction
    /// reads every cell, and the modified ones are taken out again).
    pub(super) fn log_record(&self, job: &StripeJob) -> JobLog {
        let Some(log) = self.log.as_ref() else {
            return JobLog::Nothing;
        };
        let roles = &job.roles;
        let stripe = job.stripe;
        let p_live = self.usable(roles.p, stripe);
        let q_live = roles.q.is_some_and(|q| self.usable(q, stripe));
        if !p_live && !q_live {
            return JobLog::Nothing;
        }
        let (lo, hi) = (job.lo_bytes, job.hi_bytes);
        assert!(
            lo < hi && hi <= self.geometry.interleave_bytes(),
            "a logged hull lies in one chunk"
        );
        let hull = (hi - lo) as usize;
        let pieces = crate::ppl::merged_pieces(
            lo,
            hi,
            job.new_data
                .iter()
                .map(|(d, w, b)| (*d, *w, b.len() as u64)),
        );
        if covers_every_cell(roles.data.len() as u32, &pieces, hi - lo) {
            if !log.has_record(stripe) {
                return JobLog::Nothing;
            }
            if lo == 0 && hi == self.geometry.interleave_bytes() {
                return JobLog::WholeStripe(stripe);
            }
            return JobLog::Whole(Record {
                seq: 0,
                stripes: vec![stripe],
                lo_bytes: lo,
                hi_bytes: hi,
                pieces,
                pp: None,
                pq: None,
                whole: true,
            });
        }
        // Rule 1: a partial record speaks for cells being written; its
        // parity is for the rest, which recovery keeps.
        assert!(
            !pieces.is_empty(),
            "stripe {stripe}: a partial record writes something"
        );
        let (pp, pq) = partial_parity(job, &pieces, hull, (p_live, q_live));
        JobLog::Partial(Record {
            seq: 0,
            stripes: vec![stripe],
            lo_bytes: lo,
            hi_bytes: hi,
            pieces,
            pp: pp.map(Bytes::from),
            pq: pq.map(Bytes::from),
            whole: false,
        })
    }

    /// After the parity is computed: log first if anything needs it,
    /// else write at once.
    pub(super) fn log_then_write(&mut self, id: RequestId, writes: WritePieces) {
        let Some(log) = &self.log else {
            return self.issue_writes(id, writes);
        };
        let il = self.geometry.interleave_bytes();
        let k = self.geometry.data_per_stripe();
        let op = self.ops.get_mut(&id).expect("live request");
        let Some(ol) = op.plan.log.as_mut() else {
            return self.issue_writes(id, writes);
        };
        let mut whole = std::mem::take(&mut ol.whole_stripes);
        whole.sort_unstable();
        whole.dedup();
        for stripes in whole.chunks(crate::ppl::MAX_STRIPES) {
            ol.records.push(Record {
                seq: 0,
                stripes: stripes.to_vec(),
                lo_bytes: 0,
                hi_bytes: il,
                pieces: (0..k)
                    .map(|d| Piece {
                        data_index: d,
                        within_bytes: 0,
                        len_bytes: il,
                    })
                    .collect(),
                pp: None,
                pq: None,
                whole: true,
            });
        }
        if ol.records.is_empty() {
            return self.issue_writes(id, writes);
        }
        assert!(!ol.is_placed, "{id:?} logs once per write phase");
        assert!(ol
            .records
            .iter()
            .all(|r| r.stripes.len() <= crate::ppl::MAX_STRIPES));
        ol.needs_clearing = log.needs_clearing(&ol.partial_stripes);
        op.plan.planned = writes;
        self.log_next(id);
    }

    fn log_next(&mut self, id: RequestId) {
        let op = self.ops.get_mut(&id).expect("live request");
        let ol = op.plan.log.as_mut().expect("a logging request");
        if !ol.is_placed {
            if !ol.needs_clearing {
                if self.log_place(id) {
                    return self.log_next(id);
                }
                // Only writes still running hold the space: wait for one
                // to complete (`log_wake`) rather than flush.
                if self.log.as_mut().expect("log on").wait_for_space(id) {
                    let op = self.ops.get_mut(&id).expect("live request");
                    op.stage = Stage::Waiting;
                    return;
                }
            }
            return self.log_clear(id);
        }
        if self.ops[&id]
            .plan
            .log
            .as_ref()
            .is_some_and(|l| !l.tails.is_empty())
        {
            return self.log_tails(id);
        }
        let op = self.ops.get_mut(&id).expect("live request");
        let ol = op.plan.log.as_mut().expect("a logging request");
        if !ol.synced {
            let placed = std::mem::take(&mut ol.placed);
            let step = if placed.iter().all(|(_, _, p)| p.is_empty()) {
                LogStep::Syncing
            } else {
                LogStep::Writing
            };
            let ios: Vec<(u32, MemberOp)> = placed
                .iter()
                .map(|(m, start, payload)| {
                    let op = match step {
                        LogStep::Writing => MemberOp::Write {
                            offset_bytes: self.log.as_ref().expect("log on").offset_bytes() + start,
                            data: payload.clone(),
                        },
                        _ => MemberOp::Flush,
                    };
                    (*m, op)
                })
                .collect();
            // Written payloads are emptied: the same list, flushed next.
            let ol = self
                .ops
                .get_mut(&id)
                .expect("live request")
                .plan
                .log
                .as_mut()
                .expect("logging");
            ol.placed = placed
                .into_iter()
                .map(|(m, s, _)| (m, s, Payload::default()))
                .collect();
            return self.issue_log_ios(id, step, ios);
        }
        // Rule 2: the records are durable before a write they speak for.
        assert!(ol.is_placed && ol.synced && ol.tails.is_empty());
        let writes = std::mem::take(&mut op.plan.planned);
        // A member lost while the log was written takes no writes.
        let writes = writes
            .into_iter()
            .filter(|w| self.in_use(w.member))
            .collect();
        self.issue_writes(id, writes)
    }

    /// Rule 6: zeros over the tails of the rings the request's records wrap
    /// in, then a flush of those members, before any record is written.
    fn log_tails(&mut self, id: RequestId) {
        let op = self.ops.get_mut(&id).expect("live request");
        let ol = op.plan.log.as_mut().expect("logging");
        assert!(
            ol.is_placed && !ol.synced,
            "tails are zeroed before records go out"
        );
        let offset_bytes = self.log.as_ref().expect("log on").offset_bytes();
        let (step, ios) = if ol.tails_zeroed {
            let ios = ol
                .tails
                .iter()
                .map(|&(m, _, _)| (m, MemberOp::Flush))
                .collect();
            (LogStep::SyncingTails, ios)
        } else {
            let ios = ol
                .tails
                .iter()
                .map(|&(m, start, len)| {
                    assert!(len > 0, "a tail with records is not empty");
                    let zeros = Bytes::from(vec![0u8; len as usize]);
                    let data = Payload::from(zeros);
                    (
                        m,
                        MemberOp::Write {
                            offset_bytes: offset_bytes + start,
                            data,
                        },
                    )
                })
                .collect();
            (LogStep::ZeroingTails, ios)
        };
        self.issue_log_ios(id, step, ios)
    }

    /// A flush of every member in use, before placing the request's
    /// records: rule 3, or to make space held by completed writes free.
    fn log_clear(&mut self, id: RequestId) {
        let tick = self.log.as_mut().expect("log on").clearing();
        let op = self.ops.get_mut(&id).expect("live request");
        let ol = op.plan.log.as_mut().expect("logging");
        assert!(!ol.is_placed, "a clearing flush comes before placing");
        ol.clearing_tick = tick;
        let flushes = (0..self.geometry.members())
            .map(|m| (m, MemberOp::Flush))
            .collect();
        self.issue_log_ios(id, LogStep::Clearing, flushes)
    }

    /// A logged request's writes completed (or it ended): the first request
    /// waiting for space flushes every member and tries again.
    fn log_wake(&mut self) {
        let Some(id) = self.log.as_mut().and_then(|l| l.pop_waiter()) else {
            return;
        };
        let op = self.ops.get_mut(&id).expect("a log waiter is live");
        assert_eq!(op.stage, Stage::Waiting, "{id:?} waits for log space");
        let ol = op.plan.log.as_mut().expect("logging");
        assert!(!ol.is_placed);
        ol.needs_clearing = true;
        self.log_clear(id)
    }

    /// One log step's member I/O; a member that failed since the request
    /// placed its records (its record write, say) gets none.
    fn issue_log_ios(&mut self, id: RequestId, step: LogStep, ios: Vec<(u32, MemberOp)>) {
        let ios: Vec<(u32, MemberOp)> = ios.into_iter().filter(|(m, _)| self.in_use(*m)).collect();
        let op = self.ops.get_mut(&id).expect("live request");
        op.stage = Stage::Logging(Phase::issued(ios.len()), step);
        if ios.is_empty() {
            return self.log_advance(id, step);
        }
        for (m, mop) in ios {
            self.new_io(id, m, mop, super::Dests::new());
        }
    }

    /// A log step's I/O is done (failed members are out of use already).
    pub(super) fn log_advance(&mut self, id: RequestId, step: LogStep) {
        let op = self.ops.get_mut(&id).expect("live request");
        assert!(
            matches!(op.stage, Stage::Logging(phase, s) if s == step && phase.pending == 0),
            "{id:?}: {step:?} advances once its I/O is done"
        );
        let ol = op.plan.log.as_mut().expect("logging");
        match step {
            LogStep::Clearing => {
                ol.needs_clearing = false;
                let t = ol.clearing_tick;
                self.log_durable(t);
                // The flush freed space for the waiters too: each that fits
                // now goes on, in order.
                while let Some(w) = self.log.as_ref().expect("log on").first_waiter() {
                    if !self.log_place(w) {
                        break;
                    }
                    self.log.as_mut().expect("log on").pop_waiter();
                    self.log_next(w);
                }
            }
            LogStep::ZeroingTails => ol.tails_zeroed = true,
            LogStep::SyncingTails => {
                ol.tails.clear();
                self.log.as_mut().expect("log on").tails_done(id);
            }
            // Next: the same members flushed (their payloads are gone).
            LogStep::Writing => {}
            LogStep::Syncing => {
                ol.synced = true;
                let superseded = std::mem::take(&mut ol.superseded);
                self.log.as_mut().expect("log on").forget(superseded);
            }
        }
        self.log_next(id)
    }

    /// Places the request's records in the rings of their stripes' parity
    /// members, all or none: false when some ring has no room yet.
    fn log_place(&mut self, id: RequestId) -> bool {
        let usable: Vec<Vec<u32>> = {
            let this: &Volume = self;
            let op = &this.ops[&id];
            let ol = op.plan.log.as_ref().expect("logging");
            ol.records
                .iter()
                .map(|r| {
                    // A whole record listing stripes goes to every parity
                    // member of any of them.
                    let mut ms: Vec<u32> = r
                        .stripes
                        .iter()
                        .flat_map(|&s| {
                            let roles = this.geometry.parity_roles(s).expect("parity level");
                            std::iter::once(roles.p)
                                .chain(roles.q)
                                .filter(move |&m| this.usable(m, s))
                        })
                        .collect();
                    ms.sort_unstable();
                    ms.dedup();
                    ms
                })
                .collect()
        };
        let log = self.log.as_mut().expect("log on");
        let op = self.ops.get_mut(&id).expect("live request");
        let ol = op.plan.log.as_mut().expect("logging");
        log.place(id, ol, &usable)
    }

    /// The request's member writes completed: its records' writes are
    /// done, to be durable after the next flush of every member.
    pub(super) fn log_writes_done(&mut self, id: RequestId) {
        let Some(log) = self.log.as_mut() else {
            return;
        };
        let Some(ol) = self.ops.get_mut(&id).and_then(|op| op.plan.log.as_mut()) else {
            return;
        };
        log.writes_done(id, ol);
        if ol.is_placed {
            self.log_wake();
        }
    }

    /// A request ends: whatever it logged counts as done from now (its
    /// writes completed, or it never issued them).
    pub(super) fn log_finished(&mut self, id: RequestId, ol: Option<&OpLog>) {
        let (Some(log), Some(ol)) = (self.log.as_mut(), ol.filter(|l| l.is_placed)) else {
            return;
        };
        log.finished(id, ol);
        self.log_wake();
    }

    /// A flush of every member issued at tick `t` completed.
    pub(super) fn log_durable(&mut self, t: u64) {
        if let Some(log) = self.log.as_mut() {
            log.durable(t);
        }
    }

    /// The tick a flush of every member issued now would make durable.
    pub(super) fn log_tick(&self) -> Option<u64> {
        self.log.as_ref().map(|l| l.tick())
    }

    /// The log against the requests (`check_invariants`).
    pub(super) fn check_log(&self) {
        let Some(log) = &self.log else {
            return;
        };
        log.check(|id| self.ops.contains_key(&id));
        for id in log.waiters() {
            let op = self.ops.get(id).expect("a log waiter is live");
            let ol = op.plan.log.as_ref().expect("a log waiter logs");
            assert!(
                op.stage == Stage::Waiting && !ol.is_placed,
                "{id:?} waits for log space"
            );
        }
    }
}

/// Whether the pieces being written cover every data cell of the hull
/// (`hull_bytes` of each): then no old bytes need keeping.
fn covers_every_cell(data_cells: u32, pieces: &[crate::ppl::Piece], hull_bytes: u64) -> bool {
    (0..data_cells).all(|d| {
        let covered: u64 = pieces
            .iter()
            .filter(|p| p.data_index == d)
            .map(|p| p.len_bytes)
            .sum();
        covered == hull_bytes
    })
}

/// Rule 1's partial parity of `job`'s hull: the parity of the cells not
/// being written (the new parity with the written cells' old bytes taken
/// out), for each of P and Q still live.
fn partial_parity(
    job: &StripeJob,
    pieces: &[crate::ppl::Piece],
    hull: usize,
    (p_live, q_live): (bool, bool),
) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let roles = &job.roles;
    let lo = job.lo_bytes;
    let zeros = vec![0u8; hull];
    let cells = |m: u32| -> &[u8] {
        let b = &job.bufs[m as usize];
        if b.is_empty() {
            &zeros
        } else {
            b
        }
    };
    let (mut pp, mut pq) = match job.strategy {
        super::write::Strategy::ReadModifyWrite => (
            p_live.then(|| cells(roles.p).to_vec()),
            roles.q.filter(|_| q_live).map(|q| cells(q).to_vec()),
        ),
        _ => {
            let k = roles.data.len();
            let mut data: Vec<&[u8]> = vec![&[]; k];
            for (d, &m) in roles.data.iter().enumerate() {
                data[roles.q_slot[d] as usize] = cells(m);
            }
            let mut p = vec![0u8; hull];
            let mut q = vec![0u8; hull];
            if roles.q.is_some() {
                platter_parity::gen_pq(&data, &mut p, &mut q);
            } else {
                platter_parity::gen_p(&data, &mut p);
            }
            (p_live.then_some(p), q_live.then_some(q))
        }
    };
    // Out with the modified cells' old bytes (zeros where never read).
    for piece in pieces {
        let m = roles.data[piece.data_index as usize];
        let at = (piece.within_bytes - lo) as usize;
        let old = &cells(m)[at..at + piece.len_bytes as usize];
        if let Some(p) = pp.as_mut() {
            platter_parity::xor_into(&mut p[at..at + old.len()], old);
        }
        if let Some(q) = pq.as_mut() {
            let coef = platter_parity::gf_exp2(roles.q_slot[piece.data_index as usize]);
            platter_parity::mul_xor_into(coef, old, &mut q[at..at + old.len()]);
        }
    }
    (pp, pq)
}
