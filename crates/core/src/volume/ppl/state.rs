//! The log's own state: each member's ring of records, which stripes
//! still have a record a recovery could find, and the ticks that say which
//! records' writes are durable. The rules it keeps are numbered in the
//! parent module; the request-side steps (`OpLog`) belong to the volume.

use super::super::{Payload, RequestId};
use super::OpLog;
use crate::ppl::Layout;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap, VecDeque};

pub use crate::stats::PplStats as LogStats;

/// The log's state in the volume.
pub(in crate::volume) struct LogState {
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

impl LogState {
    pub(super) fn new(layout: Layout, volume_uuid: [u8; 16], members: u32) -> Self {
        LogState {
            layout,
            volume_uuid,
            next_seq: 1,
            rings: (0..members).map(|_| Ring::default()).collect(),
            on_disk: BTreeMap::new(),
            written: HashMap::new(),
            tick: 0,
            durable_tick: 0,
            waiters: VecDeque::new(),
            stats: LogStats::default(),
        }
    }

    fn ring_bytes(&self) -> u64 {
        self.layout.len_bytes
    }

    /// Where the rings start on each member.
    pub(super) fn offset_bytes(&self) -> u64 {
        self.layout.offset_bytes
    }

    pub(super) fn stats(&self) -> LogStats {
        self.stats
    }

    /// The tick a flush of every member issued now would make durable.
    pub(super) fn tick(&self) -> u64 {
        self.tick
    }

    /// Whether some member may hold a partial record of `stripe` (rule 4).
    pub(super) fn has_record(&self, stripe: u64) -> bool {
        self.on_disk.contains_key(&stripe)
    }

    /// Per stripe, the copies of partial records counted on the members.
    #[cfg(feature = "test-hooks")]
    pub(super) fn recorded_stripes(&self) -> BTreeMap<u64, u32> {
        self.on_disk.clone()
    }

    /// Stripes in `first..end` with a partial record on some member.
    pub(super) fn recorded_in(&self, first: u64, end: u64, out: &mut Vec<u64>) {
        out.extend(self.on_disk.range(first..end).map(|(&s, _)| s));
    }

    /// Rule 3: some of these stripes had a partial write that a flush has
    /// not yet made durable.
    pub(super) fn needs_clearing(&self, partial_stripes: &[u64]) -> bool {
        partial_stripes
            .iter()
            .any(|s| self.written.get(s).is_some_and(|&t| t > self.durable_tick))
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

    /// A request found no room: when only writes still running hold the
    /// space, it waits for one to complete (true) rather than flush.
    pub(super) fn wait_for_space(&mut self, id: RequestId) -> bool {
        let (done, running) = self.undurable();
        if done > 0 {
            return false;
        }
        assert!(running > 0, "a request's records fit an empty ring");
        assert!(!self.waiters.contains(&id), "{id:?} waits once");
        self.stats.space_waits += 1;
        self.waiters.push_back(id);
        true
    }

    pub(super) fn first_waiter(&self) -> Option<RequestId> {
        self.waiters.front().copied()
    }

    pub(super) fn pop_waiter(&mut self) -> Option<RequestId> {
        self.waiters.pop_front()
    }

    pub(super) fn waiters(&self) -> impl Iterator<Item = &RequestId> {
        self.waiters.iter()
    }

    /// A flush of every member is issued: the tick it will make durable.
    pub(super) fn clearing(&mut self) -> u64 {
        self.stats.clearing_flushes += 1;
        self.tick
    }

    /// A flush of every member issued at tick `t` completed.
    pub(super) fn durable(&mut self, t: u64) {
        if t > self.durable_tick {
            assert!(t <= self.tick, "a flush from the future");
            self.durable_tick = t;
            let d = self.durable_tick;
            self.written.retain(|_, &mut w| w > d);
        }
    }

    /// The records these stripes' were overwritten by are durable.
    pub(super) fn forget(&mut self, superseded: Vec<u64>) {
        for s in superseded {
            if let Some(n) = self.on_disk.get_mut(&s) {
                *n -= 1;
                if *n == 0 {
                    self.on_disk.remove(&s);
                }
            }
        }
    }

    /// The request's tails are zeroed and durable (or it ended): their
    /// space takes records again.
    pub(super) fn tails_done(&mut self, id: RequestId) {
        for ring in &mut self.rings {
            if ring.zeroing.is_some_and(|(owner, _, _)| owner == id) {
                ring.zeroing = None;
            }
        }
    }

    /// The request's member writes completed: what it wrote, and its
    /// records' writes if it placed any, are durable after the next flush
    /// of every member (rule 3 waits for that flush).
    pub(super) fn writes_done(&mut self, id: RequestId, ol: &mut OpLog) {
        let written = std::mem::take(&mut ol.written_stripes);
        if !ol.is_placed && written.is_empty() {
            return;
        }
        self.tick += 1;
        let t = self.tick;
        ol.partial_stripes.clear();
        for s in written {
            self.written.insert(s, t);
        }
        if ol.is_placed {
            self.mark_done(id, ol, t);
        }
    }

    /// A request ends: whatever it logged counts as done from now.
    pub(super) fn finished(&mut self, id: RequestId, ol: &OpLog) {
        self.tick += 1;
        let t = self.tick;
        self.mark_done(id, ol, t);
        self.waiters.retain(|&w| w != id);
        self.tails_done(id);
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

impl LogState {
    /// Places the request's records in the rings of `usable` (per record,
    /// the parity members it goes to), all or none: false when some ring
    /// has no room yet.
    pub(super) fn place(&mut self, id: RequestId, ol: &mut OpLog, usable: &[Vec<u32>]) -> bool {
        assert!(!ol.is_placed, "{id:?} places its records once");
        assert_eq!(ol.records.len(), usable.len(), "members for each record");
        let members = self.rings.len();
        let mut need = vec![0u64; members];
        for (r, ms) in ol.records.iter().zip(usable) {
            for &m in ms {
                need[m as usize] += r.encoded_bytes();
            }
        }
        let Some((starts, tails)) = self.find_rooms(&need) else {
            return false;
        };
        ol.is_placed = true;
        ol.first_seq = self.next_seq;
        let mut payloads = self.claim(id, ol, usable, &starts);
        let (ring_bytes, durable_tick) = (self.ring_bytes(), self.durable_tick);
        for (m, start) in starts.iter().enumerate() {
            let Some(start) = *start else {
                continue;
            };
            let ring = &mut self.rings[m];
            let end = start + need[m];
            ring.head_bytes = if end == ring_bytes { 0 } else { end };
            if let Some(tail) = tails[m] {
                assert!(
                    tail.0 < tail.1 && tail.1 <= ring_bytes,
                    "the tail lies in the ring"
                );
                self.stats.tails_zeroed += 1;
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

    /// Per member, where `need` bytes of records go and the tail to zero
    /// first; none when some ring has no room yet.
    #[allow(clippy::type_complexity)]
    fn find_rooms(&self, need: &[u64]) -> Option<(Vec<Option<u64>>, Vec<Option<(u64, u64)>>)> {
        let ring_bytes = self.ring_bytes();
        let mut starts = vec![None; need.len()];
        let mut tails = vec![None; need.len()];
        for (m, &bytes) in need.iter().enumerate() {
            if bytes == 0 {
                continue;
            }
            // `area_bytes_for` sizes the ring so that this holds.
            assert!(
                bytes <= ring_bytes,
                "a request's records ({bytes} bytes) outgrow the log ({ring_bytes} bytes)"
            );
            let (start, tail) = self.rings[m].find_room(bytes, ring_bytes, self.durable_tick)?;
            starts[m] = Some(start);
            tails[m] = tail;
        }
        Some((starts, tails))
    }

    /// Numbers and encodes the request's records and enters them in the
    /// rings from `starts`: per member, the encoded records in order.
    fn claim(
        &mut self,
        id: RequestId,
        ol: &mut OpLog,
        usable: &[Vec<u32>],
        starts: &[Option<u64>],
    ) -> Vec<Vec<Bytes>> {
        let mut payloads: Vec<Vec<Bytes>> = vec![Vec::new(); starts.len()];
        let mut at = starts.to_vec();
        for (r, ms) in ol.records.iter_mut().zip(usable) {
            r.seq = self.next_seq;
            self.next_seq += 1;
            if r.whole {
                self.stats.whole_records += ms.len() as u64;
            }
            let bytes = Bytes::from(r.encode(&self.volume_uuid));
            for &m in ms {
                let start = at[m as usize].expect("room found");
                at[m as usize] = Some(start + bytes.len() as u64);
                self.stats.records += 1;
                self.stats.record_bytes += bytes.len() as u64;
                let stripe = (!r.whole).then_some(r.stripes[0]);
                if let Some(s) = stripe {
                    *self.on_disk.entry(s).or_insert(0) += 1;
                }
                self.rings[m as usize].entries.push_back(Entry {
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
        payloads
    }

    /// The log's own invariants; `is_live` says whether a request is in
    /// the volume's table.
    pub(super) fn check(&self, is_live: impl Fn(RequestId) -> bool) {
        for ring in &self.rings {
            ring.check(self, &is_live);
        }
        assert!(self.durable_tick <= self.tick);
        assert!(self.next_seq > 0, "record numbers start at 1");
        assert!(
            self.waiters.iter().all(|&w| is_live(w)),
            "a log waiter is live"
        );
        assert!(self
            .written
            .values()
            .all(|&t| t > self.durable_tick && t <= self.tick));
        assert!(
            self.on_disk.values().all(|&n| n > 0),
            "a stripe counted with no record"
        );
    }

    /// Test support: claims a record past the end of the first member's
    /// ring, as a bug in placing would, so a test can show that the check
    /// looks at the log.
    #[cfg(feature = "test-hooks")]
    pub(super) fn break_for_tests(&mut self, owner: RequestId) {
        let start_bytes = self.ring_bytes();
        self.rings[0].entries.push_back(Entry {
            start_bytes,
            len_bytes: crate::ppl::BLOCK_BYTES,
            stripe: None,
            owner,
            done_tick: Some(0),
            seq: 0,
        });
    }
}

impl Ring {
    fn check(&self, log: &LogState, is_live: &impl Fn(RequestId) -> bool) {
        if let Some((owner, a, b)) = self.zeroing {
            assert!(is_live(owner), "a tail zeroed for no request");
            assert!(
                self.entries.iter().all(|e| e.owner == owner
                    || e.start_bytes + e.len_bytes <= a
                    || b <= e.start_bytes),
                "another request's record in a tail being zeroed"
            );
        }
        assert!(
            self.head_bytes < log.ring_bytes(),
            "the head lies in the ring"
        );
        let mut spans: Vec<(u64, u64)> = Vec::new();
        for e in &self.entries {
            assert!(
                e.start_bytes + e.len_bytes <= log.ring_bytes(),
                "a record past the ring"
            );
            assert!(
                e.stripe.is_none_or(|s| log.on_disk.contains_key(&s)),
                "a ringed record not on disk"
            );
            assert!(
                e.seq < log.next_seq,
                "a record numbered before it was placed"
            );
            if e.done_tick.is_none() {
                assert!(is_live(e.owner), "a live record of a finished request");
            }
            spans.push((e.start_bytes, e.start_bytes + e.len_bytes));
        }
        spans.sort_unstable();
        assert!(
            spans.windows(2).all(|w| w[0].1 <= w[1].0),
            "records overlap in a ring"
        );
    }

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
