//! A set of byte ranges: for the crash, the bytes that kept writes cover,
//! which the undo of older dropped writes must leave alone; for bad sectors,
//! the bytes that still fail reads.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent half-open ranges, keyed by start.
#[derive(Debug, Default)]
pub(super) struct RangeSet {
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// Adds `r`, merging it with the ranges it overlaps or touches.
    pub(super) fn insert(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        let (mut start, mut end) = (r.start, r.end);
        // The range starting at or before `start` may reach into `r`.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
                self.ranges.remove(&s);
            }
        }
        // Ranges starting inside `r` (or right at its end) merge into it.
        while let Some((&s, &e)) = self.ranges.range(start..=end).next() {
            end = end.max(e);
            self.ranges.remove(&s);
        }
        self.ranges.insert(start, end);
    }

    /// Takes `r` out of the set, splitting the ranges it cuts.
    pub(super) fn remove(&mut self, r: Range<u64>) {
        if r.is_empty() {
            return;
        }
        for o in self.overlapping(r.clone()) {
            self.ranges.remove(&o.start);
            if o.start < r.start {
                self.ranges.insert(o.start, r.start);
            }
            if o.end > r.end {
                self.ranges.insert(r.end, o.end);
            }
        }
    }

    /// The ranges of the set that overlap `r`, as stored (not clipped), in
    /// order.
    pub(super) fn overlapping(&self, r: Range<u64>) -> Vec<Range<u64>> {
        if r.is_empty() {
            return Vec::new();
        }
        self.reaching(&r)
            .filter(|&(_, e)| e > r.start)
            .map(|(s, e)| s..e)
            .collect()
    }

    /// The stored ranges that start before `r` ends, from the last one
    /// that starts at or before `r.start` (the first that can reach into
    /// `r`) on, as `(start, end)`.
    fn reaching(&self, r: &Range<u64>) -> impl Iterator<Item = (u64, u64)> + '_ {
        let first = self
            .ranges
            .range(..=r.start)
            .next_back()
            .map(|(&s, _)| s)
            .unwrap_or(r.start);
        self.ranges.range(first..r.end).map(|(&s, &e)| (s, e))
    }

    /// Every range, in order.
    pub(super) fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.ranges.iter().map(|(&s, &e)| s..e)
    }

    /// The parts of `r` that no range of the set covers, in order.
    pub(super) fn uncovered(&self, r: Range<u64>) -> Vec<Range<u64>> {
        let mut out = Vec::new();
        let mut at = r.start;
        for (s, e) in self.reaching(&r) {
            if e <= at {
                continue;
            }
            if s > at {
                out.push(at..s.min(r.end));
            }
            at = at.max(e);
            if at >= r.end {
                break;
            }
        }
        if at < r.end {
            out.push(at..r.end);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same questions answered with a bitmap; `removes` are taken out
    /// after the inserts.
    fn check(inserts: &[Range<u64>], removes: &[Range<u64>], query: Range<u64>) {
        let mut set = RangeSet::default();
        let mut bits = [false; 80];
        for r in inserts {
            set.insert(r.clone());
            for b in r.clone() {
                bits[b as usize] = true;
            }
        }
        for r in removes {
            set.remove(r.clone());
            for b in r.clone() {
                bits[b as usize] = false;
            }
        }
        // The stored ranges are the bitmap's runs.
        let mut runs = Vec::new();
        let mut b = 0;
        while b < bits.len() {
            if bits[b] {
                let s = b;
                while b < bits.len() && bits[b] {
                    b += 1;
                }
                runs.push(s as u64..b as u64);
            }
            b += 1;
        }
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            runs,
            "{inserts:?} - {removes:?}"
        );
        let hit: Vec<Range<u64>> = runs
            .iter()
            .filter(|r| !query.is_empty() && r.start < query.end && query.start < r.end)
            .cloned()
            .collect();
        assert_eq!(set.overlapping(query.clone()), hit, "{runs:?} {query:?}");
        let mut want = Vec::new();
        let mut run: Option<u64> = None;
        for b in query.clone() {
            match (bits[b as usize], run) {
                (false, None) => run = Some(b),
                (true, Some(s)) => {
                    want.push(s..b);
                    run = None;
                }
                _ => {}
            }
        }
        if let Some(s) = run {
            want.push(s..query.end);
        }
        assert_eq!(set.uncovered(query.clone()), want, "{inserts:?} {query:?}");
        // Stored ranges stay disjoint and non-adjacent.
        let v: Vec<_> = set.ranges.iter().collect();
        for w in v.windows(2) {
            assert!(w[0].1 < w[1].0, "{v:?}");
        }
    }

    #[test]
    fn agrees_with_a_bitmap() {
        let mut seed = 7u64;
        let mut next = |n: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        for _ in 0..2000 {
            let k = next(6);
            let inserts: Vec<Range<u64>> = (0..k)
                .map(|_| {
                    let s = next(60);
                    s..s + next(10)
                })
                .collect();
            let removes: Vec<Range<u64>> = (0..next(3))
                .map(|_| {
                    let s = next(60);
                    s..s + next(12)
                })
                .collect();
            let s = next(60);
            check(&inserts, &removes, s..(s + next(8)).min(64));
        }
    }
}
