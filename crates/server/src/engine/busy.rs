//! Each member's busy time (iostat's %util): the union of its I/Os'
//! intervals.

use super::ns_between;
use std::time::Instant;

/// The union of a member's I/O intervals, summed: each completed I/O
/// covers `[end - device time, end]`; only what lies past the last end
/// counted adds. Completions that arrive out of order undercount a
/// little, never overcount.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct BusyClock {
    last_end: Option<Instant>,
    pub(super) busy_ns: u64,
}

impl BusyClock {
    pub(super) fn add(&mut self, end: Instant, device_ns: u64) {
        let start = end
            .checked_sub(std::time::Duration::from_nanos(device_ns))
            .unwrap_or(end);
        let from = match self.last_end {
            Some(last) if last > start => last,
            _ => start,
        };
        if end > from {
            self.busy_ns = self.busy_ns.saturating_add(ns_between(from, end));
        }
        if self.last_end.is_none_or(|last| end > last) {
            self.last_end = Some(end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::BusyClock;
    use std::time::{Duration, Instant};

    /// Overlapping I/Os count once; a gap counts nothing.
    #[test]
    fn busy_time_is_the_union_of_io_intervals() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let ms = |n: u64| n * 1_000_000;
        let mut b = BusyClock::default();
        b.add(at(10), ms(10)); // [0, 10]
        b.add(at(15), ms(10)); // [5, 15]: 5 more
        b.add(at(30), ms(5)); // [25, 30]: 5 more, the gap 15..25 not
        b.add(at(28), ms(20)); // [8, 28], arriving late: nothing more
        assert_eq!(b.busy_ns, ms(20));
    }
}
