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

mod state;

use super::plan::Dests;
use super::{Reply, Request, RequestId, Volume};
use crate::intent::{IntentLayout, RegionSet};
pub(super) use state::IntentState;
use state::Planned;
use std::collections::BTreeMap;

/// The owner of bitmap I/O in the in-flight table: no client request has it.
pub(super) const INTENT_OWNER: RequestId = RequestId(u64::MAX);

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
        let all_in_use = self.all_in_use();
        self.intent = Some(IntentState::new(layout, on_members, resync, all_in_use));
    }

    pub fn intent_status(&self) -> Option<IntentStatus> {
        self.intent.as_ref().map(|s| {
            let (dirty_regions, unsynced_regions, missed_regions, rounds) = s.counts();
            IntentStatus {
                layout: *s.layout(),
                dirty_regions,
                unsynced_regions,
                missed_regions,
                rounds,
            }
        })
    }

    /// Whether `region` may differ on a member now out of use.
    pub fn region_missed(&self, region: u64) -> bool {
        self.intent.as_ref().is_some_and(|s| s.missed(region))
    }

    pub(super) fn intent_member_left(&mut self) {
        if let Some(s) = self.intent.as_mut() {
            s.member_left();
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
        s.next_missed_run(stripe, total)
    }

    pub(super) fn intent_all_back(&mut self) {
        if let Some(s) = self.intent.as_mut() {
            s.all_back();
        }
    }

    /// The next region at or after `from_region` that still needs its
    /// resync after an unclean shutdown.
    pub fn unsynced_from(&self, from_region: u64) -> Option<u64> {
        self.intent.as_ref()?.unsynced_from(from_region)
    }

    /// Whether a region holding any of stripes `[first, last]` still
    /// needs its resync after an unclean shutdown.
    pub(super) fn span_unsynced(&self, first_stripe: u64, last_stripe: u64) -> bool {
        self.intent
            .as_ref()
            .is_some_and(|s| s.span_unsynced(first_stripe, last_stripe))
    }

    /// The resync has repaired every stripe of `region`: a sweep may now
    /// clear its bit.
    pub fn resynced(&mut self, region: u64) {
        if let Some(s) = self.intent.as_mut() {
            s.resynced(region);
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
        s.keep_unsynced(first_stripe, last_stripe);
        true
    }

    pub(super) fn intent_member_joined(&mut self) {
        if let Some(s) = self.intent.as_mut() {
            s.member_joined();
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
        let (regions, ready) = s.admit(span.first_stripe, span.last_stripe, degraded);
        if !ready {
            s.wait(id);
        }
        self.ops
            .get_mut(&id)
            .expect("live request")
            .holds
            .intent_regions = Some(regions);
        if ready {
            return self.begin(id);
        }
        self.intent_kick();
    }

    /// A request that held regions finished.
    pub(super) fn intent_release(&mut self, first: u64, last: u64) {
        let s = self.intent.as_mut().expect("regions held under a bitmap");
        s.release(first, last);
    }

    /// A [`Request::Sweep`]: completes when its round has written the
    /// bitmap (at once when there is no bitmap).
    pub(super) fn sweep(&mut self, id: RequestId, all: bool) {
        let Some(s) = self.intent.as_mut() else {
            return self.finish(id, Ok(Reply::Done));
        };
        s.queue_sweep(id, all);
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
        match s.plan_round(members, keep_bits) {
            Planned::Nothing => {}
            Planned::Done(sweeps) => self.intent_round_done(sweeps),
            Planned::Started => self.intent_issue(),
        }
    }

    /// Issues the I/O of the round's current phase, to the round's
    /// members still in use.
    fn intent_issue(&mut self) {
        let s = self.intent.as_ref().expect("bitmap enabled");
        let members: Vec<u32> = s
            .round_members()
            .iter()
            .copied()
            .filter(|&m| self.in_use(m))
            .collect();
        let s = self.intent.as_mut().expect("bitmap enabled");
        let ios = s.phase_ios(&members);
        if ios.is_empty() {
            return self.intent_phase_done();
        }
        for (m, op) in ios {
            self.new_io(INTENT_OWNER, m, op, Dests::new());
        }
    }

    /// A bitmap I/O finished. A member that fails it is faulty like any
    /// other; the bits stand on the members that remain.
    pub(super) fn intent_io_done(&mut self, member: u32, result: Result<(), String>) {
        if let Err(reason) = result {
            self.mark_faulty(member, reason);
        }
        let s = self.intent.as_mut().expect("bitmap enabled");
        if s.io_done() {
            self.intent_phase_done();
        }
    }

    fn intent_phase_done(&mut self) {
        let s = self.intent.as_mut().expect("bitmap enabled");
        match s.next_phase() {
            Some(sweeps) => self.intent_round_done(sweeps),
            None => self.intent_issue(),
        }
    }

    /// Completes the round's sweeps, starts the waiters whose bits are now
    /// durable, and starts the next round if one is owed.
    fn intent_round_done(&mut self, sweeps: Vec<RequestId>) {
        for id in sweeps {
            self.finish(id, Ok(Reply::Done));
        }
        let ops = &self.ops;
        let s = self.intent.as_mut().expect("bitmap enabled");
        let ready = s.take_ready(|id| ops[&id].holds.intent_regions.expect("an admitted request"));
        for id in ready {
            self.begin(id);
        }
        self.intent_kick();
    }

    /// The bitmap's invariants against the requests: the state's own
    /// (`IntentState::check`) given the regions the live requests hold and
    /// which of them run (not wait); waiters are live requests waiting,
    /// and sweeps live sweeps.
    pub(super) fn check_intent(&self, bitmap_ios_in_flight: u32) {
        let Some(s) = &self.intent else {
            assert_eq!(bitmap_ios_in_flight, 0, "bitmap I/O without a bitmap");
            return;
        };
        let mut held: BTreeMap<u64, u32> = BTreeMap::new();
        let mut running = Vec::new();
        for (id, op) in &self.ops {
            let Some((first, last)) = op.holds.intent_regions else {
                continue;
            };
            assert!(first <= last, "intent: {id:?}'s regions");
            for r in first..=last {
                *held.entry(r).or_insert(0) += 1;
            }
            if op.stage != super::Stage::Waiting {
                running.push((*id, first, last));
            }
        }
        s.check(&held, &running, self.all_in_use(), bitmap_ios_in_flight);
        for id in s.waiters() {
            let op = self
                .ops
                .get(id)
                .expect("intent: a waiter is a live request");
            assert!(op.stage == super::Stage::Waiting && op.holds.intent_regions.is_some());
        }
        for id in s.sweeps() {
            let op = self.ops.get(id).expect("intent: a sweep is a live request");
            assert!(matches!(op.req, Request::Sweep { .. }));
        }
    }
}
