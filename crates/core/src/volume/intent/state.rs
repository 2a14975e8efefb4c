//! The write-intent bitmap's state and the rules that change it: which
//! regions are wanted, durable, owed a resync or missed by an absent
//! member; the writes admitted per region; the waiters and sweeps; and the
//! one round of bitmap I/O at a time. It knows no requests beyond their
//! ids and issues no I/O itself: the volume's side (`mod.rs`) admits
//! requests, sends the round's I/O and starts what a round releases.

use super::super::{MemberOp, RequestId};
use crate::intent::{IntentLayout, RegionSet, INTENT_OFFSET_BYTES, INTENT_PAGE_BYTES};
use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};

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

/// What asking for a round ([`IntentState::plan_round`]) came to.
pub(in crate::volume) enum Planned {
    /// A round runs already, or none is owed.
    Nothing,
    /// Nothing to write: these sweeps are done, and every waiter's bit is
    /// durable.
    Done(Vec<RequestId>),
    /// A round started: its first phase's I/O is to be sent.
    Started,
}

pub(in crate::volume) struct IntentState {
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
    /// ([`crate::volume::Volume::start_partial_rebuild`]).
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

impl IntentState {
    /// The bitmap as the members hold it (`on_members`, OR-ed): with
    /// `resync` its regions are owed a resync; without `all_in_use` they
    /// are what an absent member missed. Either way they stay set.
    pub fn new(
        layout: IntentLayout,
        on_members: RegionSet,
        resync: bool,
        all_in_use: bool,
    ) -> IntentState {
        let empty = RegionSet::new(&layout);
        let unsynced = if resync {
            on_members.clone()
        } else {
            empty.clone()
        };
        let missed = if all_in_use {
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
        IntentState {
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
        }
    }

    pub fn layout(&self) -> &IntentLayout {
        &self.layout
    }

    /// (dirty, unsynced, missed) regions and rounds so far, for status.
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        (
            self.want.len(),
            self.unsynced.len(),
            self.missed.len(),
            self.rounds,
        )
    }

    pub fn missed(&self, region: u64) -> bool {
        self.missed.contains(region)
    }

    /// A member went out of use: whatever the bitmap marks now (writes in
    /// flight, recent ones, regions owed a resync) may be missing on it.
    pub fn member_left(&mut self) {
        let marked = self.want.clone();
        self.missed.union_with(&marked);
    }

    /// Every member is in use again: nothing is owed to an absent one, and
    /// the missed regions clear like any other.
    pub fn all_back(&mut self) {
        self.missed = RegionSet::new(&self.layout);
    }

    /// A member joined (a rebuild): its bitmap area holds nothing useful.
    pub fn member_joined(&mut self) {
        self.rewrite_all = true;
    }

    /// From `stripe` (below `total`), the first stripe of a region a
    /// returning member must have rebuilt (missed, or owed a resync), and
    /// the end of that region; `total` twice when none is left.
    pub fn next_missed_run(&self, stripe: u64, total: u64) -> (u64, u64) {
        assert!(stripe < total);
        let from = self.layout.region_of(stripe);
        let next = [self.missed.next_from(from), self.unsynced.next_from(from)]
            .into_iter()
            .flatten()
            .min();
        match next {
            Some(region) => {
                let (first, count) = self.layout.stripes_of(region);
                assert!(
                    first + count > stripe,
                    "a run ends past where it is asked from"
                );
                (stripe.max(first), first + count)
            }
            None => (total, total),
        }
    }

    pub fn unsynced_from(&self, from_region: u64) -> Option<u64> {
        self.unsynced.next_from(from_region)
    }

    /// Whether a region holding any of stripes `[first, last]` is owed
    /// its resync.
    pub fn span_unsynced(&self, first_stripe: u64, last_stripe: u64) -> bool {
        let last = self.layout.region_of(last_stripe);
        self.unsynced
            .next_from(self.layout.region_of(first_stripe))
            .is_some_and(|r| r <= last)
    }

    pub fn resynced(&mut self, region: u64) {
        self.unsynced.remove(region);
    }

    /// Stripes `[first, last]` may disagree: their regions stay marked
    /// until a resync repairs them.
    pub fn keep_unsynced(&mut self, first_stripe: u64, last_stripe: u64) {
        for r in self.layout.region_of(first_stripe)..=self.layout.region_of(last_stripe) {
            self.want.insert(r);
            self.unsynced.insert(r);
        }
    }

    /// Counts a write to stripes `[first, last]` as admitted: its regions
    /// (returned) are active and wanted, and missed when `degraded`. True
    /// when every bit is durable already.
    pub fn admit(
        &mut self,
        first_stripe: u64,
        last_stripe: u64,
        degraded: bool,
    ) -> ((u64, u64), bool) {
        let first = self.layout.region_of(first_stripe);
        let last = self.layout.region_of(last_stripe);
        let mut ready = true;
        for r in first..=last {
            *self.active.entry(r).or_insert(0) += 1;
            self.recent.insert(r);
            self.want.insert(r);
            if degraded {
                self.missed.insert(r);
            }
            ready &= self.on_disk.contains(r);
        }
        ((first, last), ready)
    }

    pub fn wait(&mut self, id: RequestId) {
        self.waiters.push_back(id);
    }

    pub fn queue_sweep(&mut self, id: RequestId, all: bool) {
        self.sweeps.push_back((id, all));
    }

    /// A request that held regions `[first, last]` finished.
    pub fn release(&mut self, first: u64, last: u64) {
        for r in first..=last {
            let n = self
                .active
                .get_mut(&r)
                .expect("an admitted region is active");
            *n -= 1;
            if *n == 0 {
                self.active.remove(&r);
            }
        }
    }

    /// Starts a round if one is owed and none runs, on `members` (those in
    /// use). Sweeps clear the idle regions' bits unless `keep_bits` (a
    /// failure not yet in the labels: the regions written without the
    /// failed member must stay marked for the resync after a crash).
    pub fn plan_round(&mut self, members: Vec<u32>, keep_bits: bool) -> Planned {
        if self.round.is_some() || (self.sweeps.is_empty() && self.waiters.is_empty()) {
            return Planned::Nothing;
        }
        let mut sweeps = Vec::new();
        let mut cleared = false;
        // Bounded by the queue: each sweep is taken once.
        while let Some((id, all)) = self.sweeps.pop_front() {
            sweeps.push(id);
            if !keep_bits {
                cleared |= self.clear_idle(all);
            }
        }
        let image = self.want.clone();
        let pages = if std::mem::take(&mut self.rewrite_all) {
            (0..self.layout.pages()).collect()
        } else {
            image.pages_differing(&self.written)
        };
        if pages.is_empty() {
            assert!(
                self.waiters.is_empty() || self.on_disk == image,
                "waiters for bits that are written but not durable"
            );
            return Planned::Done(sweeps);
        }
        let phase = if cleared {
            Phase::PreFlush
        } else {
            Phase::Write
        };
        self.round = Some(Round {
            phase,
            pending: 0,
            image,
            pages,
            members,
            sweeps,
        });
        Planned::Started
    }

    /// One sweep: regions with no write admitted, no resync owed, nothing
    /// missed and (unless `all`) no write since the last sweep lose their
    /// bit, which stops counting as durable at once. True if any did.
    fn clear_idle(&mut self, all: bool) -> bool {
        let idle: Vec<u64> = self
            .want
            .iter()
            .filter(|r| {
                !self.active.contains_key(r)
                    && !self.unsynced.contains(*r)
                    && !self.missed.contains(*r)
                    && (all || !self.recent.contains(*r))
            })
            .collect();
        for &r in &idle {
            self.want.remove(r);
            self.on_disk.remove(r);
        }
        self.recent = RegionSet::new(&self.layout);
        !idle.is_empty()
    }

    /// The members the running round writes to.
    pub fn round_members(&self) -> &[u32] {
        &self.round.as_ref().expect("a round is running").members
    }

    /// The I/O of the round's current phase on `members` (those of the
    /// round still in use), counted as pending.
    pub fn phase_ios(&mut self, members: &[u32]) -> Vec<(u32, MemberOp)> {
        let round = self.round.as_mut().expect("a round is running");
        let mut ios = Vec::new();
        match round.phase {
            Phase::PreFlush | Phase::PostFlush => {
                ios.extend(members.iter().map(|&m| (m, MemberOp::Flush)));
            }
            Phase::Write => {
                for (first, n) in page_runs(&round.pages) {
                    let bytes: Vec<u8> = (first..first + n)
                        .flat_map(|p| round.image.page_bytes(p))
                        .collect();
                    let data = Bytes::from(bytes);
                    for &m in members {
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
        round.pending = u32::try_from(ios.len()).expect("a round's I/O count fits");
        ios
    }

    /// One of the round's I/O finished; true when its phase has none left.
    pub fn io_done(&mut self) -> bool {
        let round = self.round.as_mut().expect("bitmap I/O belongs to a round");
        assert!(round.pending > 0, "a bitmap I/O the round did not count");
        round.pending -= 1;
        round.pending == 0
    }

    /// The round's phase is done: on to the next (`None`), or the round
    /// ends, its image now durable, with the sweeps it completes.
    pub fn next_phase(&mut self) -> Option<Vec<RequestId>> {
        let round = self.round.as_mut().expect("a round is running");
        assert_eq!(round.pending, 0, "a phase ends with its I/O done");
        round.phase = match round.phase {
            Phase::PreFlush => Phase::Write,
            Phase::Write => Phase::PostFlush,
            Phase::PostFlush => {
                let round = self.round.take().expect("a round is running");
                self.rounds += 1;
                self.on_disk = round.image.clone();
                self.written = round.image;
                return Some(round.sweeps);
            }
        };
        None
    }

    /// The waiters whose regions (`regions_of`) are all durable now, in
    /// the order they came; the others wait on.
    pub fn take_ready(&mut self, regions_of: impl Fn(RequestId) -> (u64, u64)) -> Vec<RequestId> {
        let waiting = std::mem::take(&mut self.waiters);
        let mut ready = Vec::new();
        for id in waiting {
            let (first, last) = regions_of(id);
            if (first..=last).all(|r| self.on_disk.contains(r)) {
                ready.push(id);
            } else {
                self.waiters.push_back(id);
            }
        }
        ready
    }

    pub fn waiters(&self) -> impl Iterator<Item = &RequestId> {
        self.waiters.iter()
    }

    /// The sweeps queued and those the running round completes.
    pub fn sweeps(&self) -> impl Iterator<Item = &RequestId> {
        let round = self.round.iter().flat_map(|r| &r.sweeps);
        self.sweeps.iter().map(|(id, _)| id).chain(round)
    }

    /// Its own invariants, against the regions the live requests hold
    /// (`held`, per region) and which of them run (`running`): each
    /// region's count of admitted writes is the number of requests holding
    /// it; a region held stays wanted, and a running request's region is
    /// durable; missed regions stay marked, and none is kept with every
    /// member in use; the round's pending count is the bitmap I/O in
    /// flight.
    pub fn check(
        &self,
        held: &BTreeMap<u64, u32>,
        running: &[(RequestId, u64, u64)],
        all_in_use: bool,
        ios_in_flight: u32,
    ) {
        for r in held.keys() {
            assert!(*r < self.layout.regions, "intent: region {r} out of range");
            assert!(
                self.want.contains(*r),
                "intent: region {r} written and not wanted"
            );
        }
        for (id, first, last) in running {
            for r in *first..=*last {
                assert!(
                    self.on_disk.contains(r),
                    "intent: {id:?} runs in region {r} before its bit is durable"
                );
            }
        }
        assert_eq!(held, &self.active, "intent: admitted writes per region");
        if let Some(r) = self.missed.first_not_in(&self.want) {
            panic!("intent: missed region {r} not marked");
        }
        assert!(
            self.missed.is_empty() || !all_in_use,
            "intent: regions kept missed with every member in use"
        );
        assert!(
            self.on_disk.first_not_in(&self.want).is_none() || self.round.is_some(),
            "intent: a bit durable and not wanted outside a round"
        );
        let pending = self.round.as_ref().map_or(0, |r| r.pending);
        assert_eq!(
            pending, ios_in_flight,
            "intent: the round's pending count against its I/O in flight"
        );
    }
}

/// Adjacent pages as (first, count) runs: each goes out as one write.
fn page_runs(pages: &[u64]) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &p in pages {
        match runs.last_mut() {
            Some((first, n)) if *first + *n == p => *n += 1,
            _ => runs.push((p, 1)),
        }
    }
    runs
}
