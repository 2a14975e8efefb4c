//! The event queue: earliest time first, ties broken by insertion order, so
//! that two runs with one seed pop the same events in the same order.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

struct Entry<T> {
    at_ns: u64,
    seq: u64,
    item: T,
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at_ns, self.seq) == (other.at_ns, other.seq)
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    /// Reversed: `BinaryHeap` is a max-heap and we want the earliest event.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at_ns, other.seq).cmp(&(self.at_ns, self.seq))
    }
}

/// A bounded priority queue of timed events.
pub struct EventQueue<T> {
    heap: BinaryHeap<Entry<T>>,
    next_seq: u64,
    max_len: usize,
}

impl<T> EventQueue<T> {
    /// A queue that asserts it never holds more than `max_len` events: an
    /// unbounded queue in a simulation is a bug (a feedback loop), not load.
    pub fn new(max_len: usize) -> EventQueue<T> {
        assert!(max_len > 0);
        EventQueue {
            heap: BinaryHeap::new(),
            next_seq: 0,
            max_len,
        }
    }

    pub fn push(&mut self, at_ns: u64, item: T) {
        assert!(
            self.heap.len() < self.max_len,
            "event queue over its bound of {} events",
            self.max_len
        );
        self.heap.push(Entry {
            at_ns,
            seq: self.next_seq,
            item,
        });
        self.next_seq += 1;
    }

    /// The earliest event and its time.
    pub fn pop(&mut self) -> Option<(u64, T)> {
        self.heap.pop().map(|e| (e.at_ns, e.item))
    }

    pub fn peek_time_ns(&self) -> Option<u64> {
        self.heap.peek().map(|e| e.at_ns)
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn earliest_first_ties_in_insertion_order() {
        let mut q = EventQueue::new(16);
        q.push(30, "c");
        q.push(10, "a1");
        q.push(20, "b");
        q.push(10, "a2");
        let order: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(order, [(10, "a1"), (10, "a2"), (20, "b"), (30, "c")]);
    }

    #[test]
    #[should_panic(expected = "over its bound")]
    fn the_bound_is_enforced() {
        let mut q = EventQueue::new(2);
        for i in 0..3 {
            q.push(i, ());
        }
    }
}
