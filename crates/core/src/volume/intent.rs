//! The engine side of the write-intent bitmap (format in [`crate::intent`]).
//!
//! A request that writes (client writes, zeroes, trims, repairs) is
//! *admitted* once it holds its stripe locks: its regions are counted as
//! active and added to the bitmap, and it starts only when their bits are
//! known durable on the members. Bitmap writes go out in *rounds*, one at a
//! time: write the pages that changed, then flush, on every member in use.
//! Every request that arrived before a round is released by it, so a waiter
//! waits for at most two rounds.
//!
//! Bits are cleared by a [`Request::Sweep`]: regions with no write in flight
//! and none admitted since the previous sweep lose their bit. Clearing must
//! never run ahead of the data, so a clearing round first flushes every
//! member (the region's writes are complete, but may sit in a volatile
//! cache), and a cleared bit stops counting as durable the moment the round
//! starts: a write that arrives meanwhile waits for a later round to set it
//! again. Regions found dirty at start-up stay set until the resync has
//! repaired them ([`Volume::resynced`]).

use super::plan::Dests;
use super::{MemberOp, Reply, Request, RequestId, Volume};
use crate::intent::{IntentLayout, RegionSet, INTENT_OFFSET_BYTES, INTENT_PAGE_BYTES};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

/// The owner of bitmap I/O in the in-flight table: no client request has it.
pub(super) const INTENT_OWNER: RequestId = RequestId(u64::MAX);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Make the data of regions about to be cleared durable first.
    PreFlush,
    Write,
    PostFlush,
}

struct Round {
    phase: Phase,
    pending: u32,
    /// The bitmap as it is on the members once the round ends.
    image: RegionSet,
    pages: Vec<u64>,
    members: Vec<u32>,
    /// Sweeps that complete with this round.
    sweeps: Vec<RequestId>,
}

pub(super) struct IntentState {
    layout: IntentLayout,
    /// Regions with writes in flight, written recently, or not yet resynced.
    want: RegionSet,
    /// Regions whose bit is durable on every member in use: a write may be
    /// issued to a region only while it is here.
    on_disk: RegionSet,
    /// What the last round left on the members.
    written: RegionSet,
    /// Found dirty at start-up and not yet resynced: no sweep clears them.
    unsynced: RegionSet,
    /// Admitted since the last sweep.
    recent: RegionSet,
    /// Regions that may differ on a member out of use: every region marked
    /// when it left, and every region written since while any member was
    /// out of use. No sweep clears them until every member is in use again
    /// (md: bits are not cleared while the array is degraded), so a member
    /// that comes back needs only these rebuilt
    /// ([`Volume::start_partial_rebuild`]).
    missed: RegionSet,
    /// Admitted writes per region, waiting or running.
    active: BTreeMap<u64, u32>,
    waiters: VecDeque<RequestId>,
    sweeps: VecDeque<(RequestId, bool)>,
    round: Option<Round>,
    /// A member joined: the next round writes every page to every member.
    rewrite_all: bool,
    rounds: u64,
}

/// What the bitmap looks like now, for status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IntentStatus {
    pub layout: IntentLayout,
    /// Regions whose bit is set (in memory; on disk once durable).
    pub dirty_regions: u64,
    /// Regions found dirty at start-up still waiting for their resync.
    pub unsynced_regions: u64,
    /// Regions a member out of use may have missed (kept set until it is
    /// back).
    pub missed_regions: u64,
    /// Bitmap rounds (write + flush on every member) so far.
    pub rounds: u64,
}

impl Volume {
    /// Turns on the write-intent bitmap. `on_members` is what the members'
    /// bitmap areas hold (OR-ed); with `resync` (the volume was not shut
    /// down cleanly) those regions are kept dirty until
    /// [`Volume::resynced`], otherwise they are cleared by the next round.
    ///
    /// On a volume assembled without some member, the bits on the members
    /// are what that member missed (no sweep cleared them while it was
    /// away): they stay set, and count as missed, until it is back.
    pub fn enable_intent(&mut self, layout: IntentLayout, on_members: RegionSet, resync: bool) {
        assert!(self.is_idle(), "the bitmap is enabled before any request");
        assert_eq!(layout.stripes, self.geometry.stripes());
        let empty = RegionSet::new(&layout);
        let unsynced = if resync {
            on_members.clone()
        } else {
            empty.clone()
        };
        let missed = if self.all_in_use() {
            empty.clone()
        } else {
            on_members.clone()
        };
        let mut dirty = unsynced.clone();
        dirty.union_with(&missed);
        // Bits on the members that are not kept (a clean start whose last
        // clearing round did not land on some member: a member that
        // dropped the write, or failed it at the stop) are cleared by the
        // first round, on every member: a page is skipped only when every
        // member already holds it as wanted, and before that round the
        // copies may differ. Seen in the simulator as "waiters for bits
        // that are written but not durable": a member that dropped the
        // stop's bitmap writes kept a region's bit, and the first write to
        // that region after the start found its page already as wanted.
        let rewrite_all = on_members != dirty;
        self.intent = Some(IntentState {
            layout,
            want: dirty.clone(),
            on_disk: dirty,
            written: on_members,
            unsynced,
            missed,
            recent: empty,
            active: BTreeMap::new(),
            waiters: VecDeque::new(),
            sweeps: VecDeque::new(),
            round: None,
            rewrite_all,
            rounds: 0,
        });
    }

    pub fn intent_status(&self) -> Option<IntentStatus> {
        self.intent.as_ref().map(|s| IntentStatus {
            layout: s.layout,
            dirty_regions: s.want.len(),
            unsynced_regions: s.unsynced.len(),
            missed_regions: s.missed.len(),
            rounds: s.rounds,
        })
    }

    /// Whether `region` may differ on a member now out of use (see
    /// `IntentState::missed`).
    pub fn region_missed(&self, region: u64) -> bool {
        self.intent
            .as_ref()
            .is_some_and(|s| s.missed.contains(region))
    }

    /// A member went out of use: whatever the bitmap marks now (writes in
    /// flight, recent ones, regions owed a resync) may be missing on it.
    pub(super) fn intent_member_left(&mut self) {
        if let Some(s) = self.intent.as_mut() {
            let marked = s.want.clone();
            s.missed.union_with(&marked);
        }
    }

    /// From `stripe` on, the first stripe of a region a returning member
    /// must have rebuilt (missed, or owed a resync), and the end of that
    /// region; the volume's stripe count when none is left.
    pub(super) fn intent_next_missed_run(&self, stripe: u64) -> (u64, u64) {
        let total = self.geometry.stripes();
        let s = self
            .intent
            .as_ref()
            .expect("a partial rebuild has a bitmap");
        if stripe >= total {
            return (total, total);
        }
        let from = s.layout.region_of(stripe);
        let next = [s.missed.next_from(from), s.unsynced.next_from(from)]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(region) => {
                let (first, count) = s.layout.stripes_of(region);
                (stripe.max(first), first + count)
            }
            None => (total, total),
        }
    }

    /// Every member is in use again: nothing is owed to an absent one, and
    /// the missed regions clear like any other.
    pub(super) fn intent_all_back(&mut self) {
        if let Some(s) = self.intent.as_mut() {
            s.missed = RegionSet::new(&s.layout);
        }
    }

    /// The next region at or after `from_region` that still needs its
    /// resync after an unclean shutdown.
    pub fn unsynced_from(&self, from_region: u64) -> Option<u64> {
        self.intent.as_ref()?.unsynced.next_from(from_region)
    }

    /// Whether a region holding any of stripes `[first, last]` still
    /// needs its resync after an unclean shutdown.
    pub(super) fn span_unsynced(&self, first_stripe: u64, last_stripe: u64) -> bool {
        let Some(s) = self.intent.as_ref() else {
            return false;
        };
        let last = s.layout.region_of(last_stripe);
        s.unsynced
            .next_from(s.layout.region_of(first_stripe))
            .is_some_and(|r| r <= last)
    }

    /// The resync has repaired every stripe of `region`: a sweep may now
    /// clear its bit.
    pub fn resynced(&mut self, region: u64) {
        if let Some(s) = self.intent.as_mut() {
            s.unsynced.remove(region);
        }
    }

    /// Stripes whose parity or copies may disagree (a write refused for
    /// space part way, `nospace.rs`): their regions stay marked until a
    /// resync repairs them. Their bits are durable already (the write was
    /// admitted). False without a bitmap.
    pub(super) fn intent_keep_unsynced(&mut self, first_stripe: u64, last_stripe: u64) -> bool {
        let Some(s) = self.intent.as_mut() else {
            return false;
        };
        for r in s.layout.region_of(first_stripe)..=s.layout.region_of(last_stripe) {
            s.want.insert(r);
            s.unsynced.insert(r);
        }
        true
    }

    /// A member joined (a rebuild): its bitmap area holds nothing useful.
    pub(super) fn intent_member_joined(&mut self) {
        if let Some(s) = self.intent.as_mut() {
            s.rewrite_all = true;
        }
    }

    /// Starts `id` once its regions' bits are durable (see the module
    /// comment). Called once per request, when it holds its locks.
    pub(super) fn admit(&mut self, id: RequestId) {
        let writes = matches!(
            self.ops[&id].req,
            Request::Write { .. }
                | Request::WriteZeroes { .. }
                | Request::Trim { .. }
                | Request::Maintain {
                    action: super::Maintenance::Repair
                        | super::Maintenance::Resync
                        | super::Maintenance::Destage,
                    ..
                }
        );
        let span = self.span_of(&self.ops[&id].req);
        let degraded = !self.all_in_use();
        let (Some(s), true, Some(span)) = (self.intent.as_mut(), writes, span) else {
            return self.begin(id);
        };
        let first = s.layout.region_of(span.first_stripe);
        let last = s.layout.region_of(span.last_stripe);
        let mut ready = true;
        for r in first..=last {
            *s.active.entry(r).or_insert(0) += 1;
            s.recent.insert(r);
            s.want.insert(r);
            if degraded {
                s.missed.insert(r);
            }
            ready &= s.on_disk.contains(r);
        }
        self.ops
            .get_mut(&id)
            .expect("live request")
            .holds
            .intent_regions = Some((first, last));
        if ready {
            return self.begin(id);
        }
        s.waiters.push_back(id);
        self.intent_kick();
    }

    /// A request that held regions finished.
    pub(super) fn intent_release(&mut self, first: u64, last: u64) {
        let s = self.intent.as_mut().expect("regions held under a bitmap");
        for r in first..=last {
            let n = s.active.get_mut(&r).expect("an admitted region is active");
            *n -= 1;
            if *n == 0 {
                s.active.remove(&r);
            }
        }
    }

    /// A [`Request::Sweep`]: completes when its round has written the
    /// bitmap (at once when there is no bitmap).
    pub(super) fn sweep(&mut self, id: RequestId, all: bool) {
        let Some(s) = self.intent.as_mut() else {
            return self.finish(id, Ok(Reply::Done));
        };
        s.sweeps.push_back((id, all));
        self.intent_kick();
    }

    /// Starts a round if one is owed and none is running.
    fn intent_kick(&mut self) {
        let members: Vec<u32> = (0..self.geometry.members())
            .filter(|&m| self.in_use(m))
            .collect();
        // While a failure is not yet in the labels, the failed member may
        // be assembled again after a crash: the regions written without it
        // must stay marked so that the resync makes its copies agree.
        let keep_bits = self.any_failure_unrecorded();
        let s = self.intent.as_mut().expect("bitmap enabled");
        if s.round.is_some() || (s.sweeps.is_empty() && s.waiters.is_empty()) {
            return;
        }
        let mut sweeps = Vec::new();
        let mut cleared = false;
        // Bounded by the queue: each sweep is taken once.
        while let Some((id, all)) = s.sweeps.pop_front() {
            sweeps.push(id);
            if keep_bits {
                continue;
            }
            let idle: Vec<u64> = s
                .want
                .iter()
                .filter(|r| {
                    !s.active.contains_key(r)
                        && !s.unsynced.contains(*r)
                        && !s.missed.contains(*r)
                        && (all || !s.recent.contains(*r))
                })
                .collect();
            for r in idle {
                s.want.remove(r);
                s.on_disk.remove(r);
                cleared = true;
            }
            s.recent = RegionSet::new(&s.layout);
        }
        let image = s.want.clone();
        let pages = if std::mem::take(&mut s.rewrite_all) {
            (0..s.layout.pages()).collect()
        } else {
            image.pages_differing(&s.written)
        };
        if pages.is_empty() {
            // Nothing to write: every waiter's bit is already durable.
            assert!(
                s.waiters.is_empty() || s.on_disk == image,
                "waiters for bits that are written but not durable"
            );
            return self.intent_round_done(sweeps);
        }
        s.round = Some(Round {
            phase: if cleared {
                Phase::PreFlush
            } else {
                Phase::Write
            },
            pending: 0,
            image,
            pages,
            members,
            sweeps,
        });
        self.intent_issue();
    }

    /// Issues the I/O of the round's current phase.
    fn intent_issue(&mut self) {
        let members: Vec<u32> = {
            let round = self.intent_round();
            round.members.clone()
        };
        let members: Vec<u32> = members.into_iter().filter(|&m| self.in_use(m)).collect();
        let s = self.intent.as_mut().expect("bitmap enabled");
        let round = s.round.as_mut().expect("a round is running");
        let mut ios = Vec::new();
        match round.phase {
            Phase::PreFlush | Phase::PostFlush => {
                for &m in &members {
                    ios.push((m, MemberOp::Flush));
                }
            }
            Phase::Write => {
                // Adjacent pages go out as one write.
                let mut runs: Vec<(u64, u64)> = Vec::new();
                for &p in &round.pages {
                    match runs.last_mut() {
                        Some((first, n)) if *first + *n == p => *n += 1,
                        _ => runs.push((p, 1)),
                    }
                }
                for (first, n) in runs {
                    let bytes: Vec<u8> = (first..first + n)
                        .flat_map(|p| round.image.page_bytes(p))
                        .collect();
                    let data = Bytes::from(bytes);
                    for &m in &members {
                        ios.push((
                            m,
                            MemberOp::Write {
                                offset_bytes: INTENT_OFFSET_BYTES + first * INTENT_PAGE_BYTES,
                                data: data.clone().into(),
                            },
                        ));
                    }
                }
            }
        }
        round.pending = ios.len() as u32;
        if ios.is_empty() {
            return self.intent_phase_done();
        }
        for (m, op) in ios {
            self.new_io(INTENT_OWNER, m, op, Dests::new());
        }
    }

    fn intent_round(&self) -> &Round {
        self.intent
            .as_ref()
            .and_then(|s| s.round.as_ref())
            .expect("a round is running")
    }

    /// A bitmap I/O finished. A member that fails it is faulty like any
    /// other; the bits stand on the members that remain.
    pub(super) fn intent_io_done(&mut self, member: u32, result: Result<(), String>) {
        if let Err(reason) = result {
            self.mark_faulty(member, reason);
        }
        let s = self.intent.as_mut().expect("bitmap enabled");
        let round = s.round.as_mut().expect("bitmap I/O belongs to a round");
        assert!(round.pending > 0);
        round.pending -= 1;
        if round.pending == 0 {
            self.intent_phase_done();
        }
    }

    fn intent_phase_done(&mut self) {
        let s = self.intent.as_mut().expect("bitmap enabled");
        let round = s.round.as_mut().expect("a round is running");
        round.phase = match round.phase {
            Phase::PreFlush => Phase::Write,
            Phase::Write => Phase::PostFlush,
            Phase::PostFlush => {
                let round = s.round.take().expect("a round is running");
                s.rounds += 1;
                s.on_disk = round.image.clone();
                s.written = round.image;
                return self.intent_round_done(round.sweeps);
            }
        };
        self.intent_issue();
    }

    /// Completes the round's sweeps, starts the waiters whose bits are now
    /// durable, and starts the next round if one is owed.
    fn intent_round_done(&mut self, sweeps: Vec<RequestId>) {
        for id in sweeps {
            self.finish(id, Ok(Reply::Done));
        }
        let s = self.intent.as_mut().expect("bitmap enabled");
        let waiting = std::mem::take(&mut s.waiters);
        let mut ready = Vec::new();
        for id in waiting {
            let (first, last) = self.ops[&id]
                .holds
                .intent_regions
                .expect("an admitted request");
            let s = self.intent.as_mut().expect("bitmap enabled");
            if (first..=last).all(|r| s.on_disk.contains(r)) {
                ready.push(id);
            } else {
                s.waiters.push_back(id);
            }
        }
        for id in ready {
            self.begin(id);
        }
        self.intent_kick();
    }

    /// The bitmap's invariants against the requests: each region's count
    /// of admitted writes is the number of live requests holding it; a
    /// region with writes admitted stays wanted; a request running (not
    /// waiting) writes only where the bit is durable; waiters and sweeps
    /// are live requests; and the round's I/O count matches the bitmap
    /// I/O in flight.
    pub(super) fn check_intent(&self, bitmap_ios_in_flight: u32) {
        let Some(s) = &self.intent else {
            assert_eq!(bitmap_ios_in_flight, 0, "bitmap I/O without a bitmap");
            return;
        };
        let mut held: BTreeMap<u64, u32> = BTreeMap::new();
        for (id, op) in &self.ops {
            let Some((first, last)) = op.holds.intent_regions else {
                continue;
            };
            assert!(
                first <= last && last < s.layout.regions,
                "intent: {id:?}'s regions"
            );
            let running = op.stage != super::Stage::Waiting;
            for r in first..=last {
                *held.entry(r).or_insert(0) += 1;
                assert!(
                    s.want.contains(r),
                    "intent: region {r} written and not wanted"
                );
                assert!(
                    !running || s.on_disk.contains(r),
                    "intent: {id:?} runs in region {r} before its bit is durable"
                );
            }
        }
        assert_eq!(held, s.active, "intent: admitted writes per region");
        // A missed region stays marked until every member is back.
        if let Some(r) = s.missed.first_not_in(&s.want) {
            panic!("intent: missed region {r} not marked");
        }
        assert!(
            s.missed.is_empty() || !self.all_in_use(),
            "intent: regions kept missed with every member in use"
        );
        for id in &s.waiters {
            let op = self
                .ops
                .get(id)
                .expect("intent: a waiter is a live request");
            assert!(op.stage == super::Stage::Waiting && op.holds.intent_regions.is_some());
        }
        let round_sweeps = s.round.iter().flat_map(|r| &r.sweeps);
        for id in s.sweeps.iter().map(|(id, _)| id).chain(round_sweeps) {
            let op = self.ops.get(id).expect("intent: a sweep is a live request");
            assert!(matches!(op.req, Request::Sweep { .. }));
        }
        let pending = s.round.as_ref().map_or(0, |r| r.pending);
        assert_eq!(
            pending, bitmap_ios_in_flight,
            "intent: the round's pending count against its I/O in flight"
        );
    }
}
