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
//! 3. **A partial write to a stripe with an earlier partial write not yet
//!    flushed flushes every member first**: its partial parity includes
//!    the earlier write's new bytes, which a crash could still undo, and
//!    recovery would then make parity from bytes no member holds.
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

use super::plan::WritePieces;
use super::{MemberOp, Payload, Phase, RequestId, Stage, StripeJob, Volume};
use crate::ppl::{Layout, Piece, Record};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// The log's state in the volume.
pub(super) struct LogState {
    layout: Layout,
    volume_uuid: [u8; 16],
    next_seq: u64,
    rings: Vec<Ring>,
    /// Per stripe, records a recovery could find on some member (written
    /// or being written, not yet overwritten durably): rule 4.
    on_disk: BTreeMap<u64, u32>,
    /// Stripes whose last partial write completed at this tick (rule 3);
    /// pruned as flushes make them durable.
    written: HashMap<u64, u64>,
    /// Ticks count completed logged writes.
    tick: u64,
    /// Writes completed at or before this tick are durable.
    durable_tick: u64,
    /// Requests waiting (`Stage::Waiting`) for ring space that writes
    /// still running hold, oldest first: the first is woken when a logged
    /// request's writes complete, and every one that fits is placed after
    /// its clearing flush.
    waiters: VecDeque<RequestId>,
    stats: LogStats,
}

pub use crate::stats::PplStats as LogStats;

/// One member's ring of records.
#[derive(Default)]
struct Ring {
    /// Where the next record goes.
    head_bytes: u64,
    /// Records on the member, oldest first.
    entries: VecDeque<Entry>,
    /// A tail a request zeroes (rule 6), `(owner, start, end)`: no record
    /// goes there until the zeros are durable, or the zeros could land
    /// over it.
    zeroing: Option<(RequestId, u64, u64)>,
}

struct Entry {
    start_bytes: u64,
    len_bytes: u64,
    /// A record with partial parity: its stripe, counted in `on_disk`.
    /// Whole records are never stale (their parity is the data's), so
    /// nothing needs to supersede them.
    stripe: Option<u64>,
    owner: RequestId,
    /// The tick its writes completed at; none while they may still run.
    done_tick: Option<u64>,
    /// Its record's number (older entries have smaller ones).
    seq: u64,
}

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
    /// Stripes written partially (rule 3's bookkeeping, at completion).
    partial_stripes: Vec<u64>,
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

impl LogState {
    fn ring_bytes(&self) -> u64 {
        self.layout.len_bytes
    }

    /// Records whose writes completed but are not yet durable (a flush of
    /// every member makes their space free), and records whose writes
    /// are still running.
    fn undurable(&self) -> (usize, usize) {
        let mut out = (0, 0);
        for e in self.rings.iter().flat_map(|r| &r.entries) {
            match e.done_tick {
                Some(t) if t > self.durable_tick => out.0 += 1,
                None => out.1 += 1,
                Some(_) => {}
            }
        }
        out
    }

    /// The request's records, on the members it placed them on, are done
    /// at tick `t` (if not already). They are the newest of their rings
    /// when placed, so each ring is searched from its end back to them.
    fn mark_done(&mut self, id: RequestId, ol: &OpLog, t: u64) {
        for &(m, _, _) in &ol.placed {
            for e in self.rings[m as usize].entries.iter_mut().rev() {
                if e.owner == id {
                    e.done_tick.get_or_insert(t);
                } else if e.seq < ol.first_seq {
                    break;
                }
            }
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
        self.log = Some(LogState {
            layout,
            volume_uuid,
            next_seq: 1,
            rings: (0..self.geometry.members())
                .map(|_| Ring::default())
                .collect(),
            on_disk: BTreeMap::new(),
            written: HashMap::new(),
            tick: 0,
            durable_tick: 0,
            waiters: VecDeque::new(),
            stats: LogStats::default(),
        });
    }

    /// Test support: per stripe, the copies of partial records the volume
    /// counts as on the members (rule 4 logs a whole record before writing
    /// over such a stripe). The members' logs must hold no more.
    #[doc(hidden)]
    pub fn ppl_recorded_stripes_for_tests(&self) -> std::collections::BTreeMap<u64, u32> {
        self.log
            .as_ref()
            .map_or_else(Default::default, |l| l.on_disk.clone())
    }

    /// Test support: claims a record past the end of the first member's
    /// ring, as a bug in placing would, so a test can show that
    /// [`Volume::check_invariants`] looks at the log. False without a log.
    /// Never call it outside a test.
    #[doc(hidden)]
    pub fn break_log_for_tests(&mut self) -> bool {
        let Some(log) = self.log.as_mut() else {
            return false;
        };
        let start_bytes = log.ring_bytes();
        log.rings[0].entries.push_back(Entry {
            start_bytes,
            len_bytes: crate::ppl::BLOCK_BYTES,
            stripe: None,
            owner: super::intent::INTENT_OWNER,
            done_tick: Some(0),
            seq: 0,
        });
        true
    }

    pub fn ppl_stats(&self) -> Option<LogStats> {
        self.log.as_ref().map(|l| l.stats)
    }

    /// Whole records for whole stripes a write-zeroes or trim releases
    /// that still have records on the members (rule 4).
    pub(super) fn log_released(&self, first: u64, end: u64, out: &mut Vec<u64>) {
        let Some(log) = &self.log else {
            return;
        };
        out.extend(log.on_disk.range(first..end).map(|(&s, _)| s));
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
            .filter(|s| log.on_disk.contains_key(s))
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
        let hull = (hi - lo) as usize;
        let pieces = crate::ppl::merged_pieces(
            lo,
            hi,
            job.new_data
                .iter()
                .map(|(d, w, b)| (*d, *w, b.len() as u64)),
        );
        let whole = (0..roles.data.len() as u32).all(|d| {
            let covered: u64 = pieces
                .iter()
                .filter(|p| p.data_index == d)
                .map(|p| p.len_bytes)
                .sum();
            covered == hi - lo
        });
        if whole {
            if !log.on_disk.contains_key(&stripe) {
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
        for piece in &pieces {
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
        ol.needs_clearing = ol
            .partial_stripes
            .iter()
            .any(|s| log.written.get(s).is_some_and(|&t| t > log.durable_tick));
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
                let log = self.log.as_mut().expect("log on");
                let (done, running) = log.undurable();
                if done == 0 {
                    // Only writes still running hold the space: wait for
                    // one to complete (`log_wake`) rather than flush.
                    assert!(running > 0, "a request's records fit an empty ring");
                    log.stats.space_waits += 1;
                    let op = self.ops.get_mut(&id).expect("live request");
                    op.stage = Stage::Waiting;
                    return log.waiters.push_back(id);
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
                            offset_bytes: self.log.as_ref().expect("log on").layout.offset_bytes
                                + start,
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
        let offset_bytes = self.log.as_ref().expect("log on").layout.offset_bytes;
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

    /// The request's tails are zeroed and durable (or it ended): their
    /// space takes records again.
    fn log_tails_done(&mut self, id: RequestId) {
        let log = self.log.as_mut().expect("log on");
        for ring in &mut log.rings {
            if ring.zeroing.is_some_and(|(owner, _, _)| owner == id) {
                ring.zeroing = None;
            }
        }
    }

    /// A flush of every member in use, before placing the request's
    /// records: rule 3, or to make space held by completed writes free.
    fn log_clear(&mut self, id: RequestId) {
        let log = self.log.as_mut().expect("log on");
        log.stats.clearing_flushes += 1;
        let tick = log.tick;
        let op = self.ops.get_mut(&id).expect("live request");
        op.plan.log.as_mut().expect("logging").clearing_tick = tick;
        let flushes = (0..self.geometry.members())
            .map(|m| (m, MemberOp::Flush))
            .collect();
        self.issue_log_ios(id, LogStep::Clearing, flushes)
    }

    /// A logged request's writes completed (or it ended): the first request
    /// waiting for space flushes every member and tries again.
    fn log_wake(&mut self) {
        let Some(id) = self.log.as_mut().and_then(|l| l.waiters.pop_front()) else {
            return;
        };
        let op = self.ops.get_mut(&id).expect("a log waiter is live");
        let ol = op.plan.log.as_mut().expect("logging");
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
        let ol = op.plan.log.as_mut().expect("logging");
        match step {
            LogStep::Clearing => {
                ol.needs_clearing = false;
                let t = ol.clearing_tick;
                self.log_durable(t);
                // The flush freed space for the waiters too: each that fits
                // now goes on, in order.
                while let Some(&w) = self.log.as_ref().expect("log on").waiters.front() {
                    if !self.log_place(w) {
                        break;
                    }
                    self.log.as_mut().expect("log on").waiters.pop_front();
                    self.log_next(w);
                }
            }
            LogStep::ZeroingTails => ol.tails_zeroed = true,
            LogStep::SyncingTails => {
                ol.tails.clear();
                self.log_tails_done(id);
            }
            // Next: the same members flushed (their payloads are gone).
            LogStep::Writing => {}
            LogStep::Syncing => {
                ol.synced = true;
                let superseded = std::mem::take(&mut ol.superseded);
                let log = self.log.as_mut().expect("log on");
                for s in superseded {
                    forget(&mut log.on_disk, s);
                }
            }
        }
        self.log_next(id)
    }

    /// Places the request's records in the rings of their stripes' parity
    /// members, all or none: false when some ring has no room yet.
    fn log_place(&mut self, id: RequestId) -> bool {
        let members = self.geometry.members();
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
        let mut need = vec![0u64; members as usize];
        for (r, ms) in ol.records.iter().zip(&usable) {
            for &m in ms {
                need[m as usize] += r.encoded_bytes();
            }
        }
        let ring_bytes = log.ring_bytes();
        ol.is_placed = true;
        let mut starts = vec![None; members as usize];
        let mut tails = vec![None; members as usize];
        for m in 0..members as usize {
            if need[m] == 0 {
                continue;
            }
            // `area_bytes_for` sizes the ring so that this holds.
            assert!(
                need[m] <= ring_bytes,
                "a request's records ({} bytes) outgrow the log ({ring_bytes} bytes)",
                need[m]
            );
            match log.rings[m].find_room(need[m], ring_bytes, log.durable_tick) {
                Some((start, tail)) => {
                    starts[m] = Some(start);
                    tails[m] = tail;
                }
                None => {
                    ol.is_placed = false;
                    return false;
                }
            }
        }
        // Room everywhere: number, encode and claim.
        ol.first_seq = log.next_seq;
        let mut payloads: Vec<Vec<Bytes>> = vec![Vec::new(); members as usize];
        let mut at = starts.clone();
        for (r, ms) in ol.records.iter_mut().zip(&usable) {
            r.seq = log.next_seq;
            log.next_seq += 1;
            if r.whole {
                log.stats.whole_records += ms.len() as u64;
            }
            let bytes = Bytes::from(r.encode(&log.volume_uuid));
            for &m in ms {
                let start = at[m as usize].expect("room found");
                at[m as usize] = Some(start + bytes.len() as u64);
                log.stats.records += 1;
                log.stats.record_bytes += bytes.len() as u64;
                let stripe = (!r.whole).then_some(r.stripes[0]);
                if let Some(s) = stripe {
                    *log.on_disk.entry(s).or_insert(0) += 1;
                }
                log.rings[m as usize].entries.push_back(Entry {
                    start_bytes: start,
                    len_bytes: bytes.len() as u64,
                    stripe,
                    owner: id,
                    done_tick: None,
                    seq: r.seq,
                });
                payloads[m as usize].push(bytes.clone());
            }
        }
        let durable_tick = log.durable_tick;
        for (m, start) in starts.iter().enumerate() {
            let Some(start) = *start else {
                continue;
            };
            let ring = &mut log.rings[m];
            let end = start + need[m];
            ring.head_bytes = if end == ring_bytes { 0 } else { end };
            if let Some(tail) = tails[m] {
                assert!(
                    tail.0 < tail.1 && tail.1 <= ring_bytes,
                    "the tail lies in the ring"
                );
                log.stats.tails_zeroed += 1;
                ol.tails.push((m as u32, tail.0, tail.1 - tail.0));
                assert!(ring.zeroing.is_none(), "one tail zeroed at a time");
                ring.zeroing = Some((id, tail.0, tail.1));
            }
            let placed_now = payloads[m].len();
            ring.retire(
                (start, end),
                tails[m],
                placed_now,
                durable_tick,
                &mut ol.superseded,
            );
            let mut payload = Payload::default();
            for b in std::mem::take(&mut payloads[m]) {
                payload.push(b);
            }
            ol.placed.push((m as u32, start, payload));
        }
        true
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
        if !ol.is_placed {
            return;
        }
        log.tick += 1;
        let t = log.tick;
        for s in std::mem::take(&mut ol.partial_stripes) {
            log.written.insert(s, t);
        }
        log.mark_done(id, ol, t);
        self.log_wake();
    }

    /// A request ends: whatever it logged counts as done from now (its
    /// writes completed, or it never issued them).
    pub(super) fn log_finished(&mut self, id: RequestId, ol: Option<&OpLog>) {
        let (Some(log), Some(ol)) = (self.log.as_mut(), ol.filter(|l| l.is_placed)) else {
            return;
        };
        log.tick += 1;
        let t = log.tick;
        log.mark_done(id, ol, t);
        log.waiters.retain(|&w| w != id);
        self.log_tails_done(id);
        self.log_wake();
    }

    /// A flush of every member issued at tick `t` completed.
    pub(super) fn log_durable(&mut self, t: u64) {
        let Some(log) = self.log.as_mut() else {
            return;
        };
        if t > log.durable_tick {
            log.durable_tick = t;
            let d = log.durable_tick;
            log.written.retain(|_, &mut w| w > d);
        }
    }

    /// The tick a flush of every member issued now would make durable.
    pub(super) fn log_tick(&self) -> Option<u64> {
        self.log.as_ref().map(|l| l.tick)
    }

    /// The log against the requests (`check_invariants`).
    pub(super) fn check_log(&self) {
        let Some(log) = &self.log else {
            return;
        };
        for ring in &log.rings {
            if let Some((owner, a, b)) = ring.zeroing {
                assert!(
                    self.ops.contains_key(&owner),
                    "a tail zeroed for no request"
                );
                assert!(
                    ring.entries.iter().all(|e| e.owner == owner
                        || e.start_bytes + e.len_bytes <= a
                        || b <= e.start_bytes),
                    "another request's record in a tail being zeroed"
                );
            }
            let mut spans: Vec<(u64, u64)> = Vec::new();
            for e in &ring.entries {
                assert!(
                    e.start_bytes + e.len_bytes <= log.ring_bytes(),
                    "a record past the ring"
                );
                assert!(
                    e.stripe.is_none_or(|s| log.on_disk.contains_key(&s)),
                    "a ringed record not on disk"
                );
                if e.done_tick.is_none() {
                    assert!(
                        self.ops.contains_key(&e.owner),
                        "a live record of a finished request"
                    );
                }
                spans.push((e.start_bytes, e.start_bytes + e.len_bytes));
            }
            spans.sort_unstable();
            assert!(
                spans.windows(2).all(|w| w[0].1 <= w[1].0),
                "records overlap in a ring"
            );
        }
        assert!(log.durable_tick <= log.tick);
        for id in &log.waiters {
            let op = self.ops.get(id).expect("a log waiter is live");
            let ol = op.plan.log.as_ref().expect("a log waiter logs");
            assert!(
                op.stage == Stage::Waiting && !ol.is_placed,
                "{id:?} waits for log space"
            );
        }
        assert!(log
            .written
            .values()
            .all(|&t| t > log.durable_tick && t <= log.tick));
    }
}

impl Ring {
    /// Drops the records that the `placed_now` just placed in `new` write
    /// over, and those of `tail` (zeroed first, rule 6); the stripes of
    /// those with partial parity go to `superseded`.
    fn retire(
        &mut self,
        new: (u64, u64),
        tail: Option<(u64, u64)>,
        placed_now: usize,
        durable_tick: u64,
        superseded: &mut Vec<u64>,
    ) {
        let over =
            |e: &Entry, (a, b): (u64, u64)| e.start_bytes < b && a < e.start_bytes + e.len_bytes;
        let keep_from = self.entries.len() - placed_now;
        let mut kept = VecDeque::new();
        for (i, e) in self.entries.drain(..).enumerate() {
            if i < keep_from && (over(&e, new) || tail.is_some_and(|t| over(&e, t))) {
                // Rule 5: `find_room` chose space whose records are
                // durable; a live one written over reopens the hole.
                assert!(
                    e.done_tick.is_some_and(|t| t <= durable_tick),
                    "a record whose writes may not be durable written over"
                );
                superseded.extend(e.stripe);
            } else {
                kept.push_back(e);
            }
        }
        self.entries = kept;
    }

    /// Where `len` bytes fit without overwriting a record whose writes may
    /// not be durable: at the head, or (no room before the end) at 0. With
    /// the second, the span of the tail's records, to be zeroed first
    /// (rule 6): they too must be durable.
    #[allow(clippy::type_complexity)]
    fn find_room(
        &self,
        len: u64,
        ring_bytes: u64,
        durable_tick: u64,
    ) -> Option<(u64, Option<(u64, u64)>)> {
        let wraps = self.head_bytes + len > ring_bytes;
        let start = if wraps { 0 } else { self.head_bytes };
        let end = start + len;
        let overlaps =
            |e: &Entry, a: u64, b: u64| e.start_bytes < b && a < e.start_bytes + e.len_bytes;
        let tail = wraps.then_some((self.head_bytes, ring_bytes));
        let in_tail = |e: &Entry| tail.is_some_and(|(a, b)| overlaps(e, a, b));
        let blocked = self.entries.iter().any(|e| {
            (overlaps(e, start, end) || in_tail(e)) && e.done_tick.is_none_or(|t| t > durable_tick)
        });
        let zeroing = self.zeroing.is_some_and(|(_, a, b)| a < end && start < b);
        if blocked || zeroing {
            return None;
        }
        // The tail's records, from the first's start to the last's end.
        let span = self
            .entries
            .iter()
            .filter(|e| in_tail(e))
            .map(|e| (e.start_bytes, e.start_bytes + e.len_bytes))
            .reduce(|x, y| (x.0.min(y.0), x.1.max(y.1)));
        Some((start, span))
    }
}

fn forget(on_disk: &mut BTreeMap<u64, u32>, stripe: u64) {
    if let Some(n) = on_disk.get_mut(&stripe) {
        *n -= 1;
        if *n == 0 {
            on_disk.remove(&stripe);
        }
    }
}
