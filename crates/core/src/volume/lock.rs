//! Stripe range locks: writers exclusive, readers shared, FIFO among
//! overlapping waiters so that neither starves and overlapping requests
//! apply in arrival order (mirror copies and parity stay consistent).

use super::request::RequestId;
use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub first_stripe: u64,
    pub last_stripe: u64,
    pub exclusive: bool,
}

impl Span {
    fn conflicts(&self, other: &Span) -> bool {
        let overlap =
            self.first_stripe <= other.last_stripe && other.first_stripe <= self.last_stripe;
        overlap && (self.exclusive || other.exclusive)
    }
}

#[derive(Default, Debug)]
pub struct RangeLocks {
    held: Vec<(RequestId, Span)>,
    waiting: VecDeque<(RequestId, Span)>,
}

impl RangeLocks {
    /// Takes the span now (true) or queues the request behind its conflicts.
    pub fn acquire(&mut self, id: RequestId, span: Span) -> bool {
        let blocked = self.held.iter().any(|(_, s)| s.conflicts(&span))
            || self.waiting.iter().any(|(_, s)| s.conflicts(&span));
        if blocked {
            self.waiting.push_back((id, span));
            false
        } else {
            self.held.push((id, span));
            true
        }
    }

    /// Releases `id`'s span and returns the waiters that now hold theirs.
    pub fn release(&mut self, id: RequestId) -> Vec<RequestId> {
        let at = self
            .held
            .iter()
            .position(|(h, _)| *h == id)
            .expect("released a lock that is not held");
        self.held.swap_remove(at);
        self.grant()
    }

    /// Shrinks `id`'s held span to `[first_stripe, last_stripe]` (inside
    /// it) and returns the waiters that now hold theirs: a request lets go
    /// of the stripes it turned out not to write.
    pub fn narrow(&mut self, id: RequestId, first_stripe: u64, last_stripe: u64) -> Vec<RequestId> {
        let (_, span) = self
            .held
            .iter_mut()
            .find(|(h, _)| *h == id)
            .expect("narrowed a lock that is not held");
        assert!(
            span.first_stripe <= first_stripe
                && first_stripe <= last_stripe
                && last_stripe <= span.last_stripe,
            "a lock only narrows"
        );
        if (span.first_stripe, span.last_stripe) == (first_stripe, last_stripe) {
            return Vec::new();
        }
        span.first_stripe = first_stripe;
        span.last_stripe = last_stripe;
        self.grant()
    }

    /// Grants, in order, the waiters that no held span and no earlier
    /// waiter blocks.
    fn grant(&mut self) -> Vec<RequestId> {
        if self.waiting.is_empty() {
            return Vec::new();
        }
        let mut granted = Vec::new();
        let mut still: VecDeque<(RequestId, Span)> = VecDeque::with_capacity(self.waiting.len());
        while let Some((w, span)) = self.waiting.pop_front() {
            let blocked = self.held.iter().any(|(_, s)| s.conflicts(&span))
                || still.iter().any(|(_, s)| s.conflicts(&span));
            if blocked {
                still.push_back((w, span));
            } else {
                self.held.push((w, span));
                granted.push(w);
            }
        }
        self.waiting = still;
        granted
    }

    pub fn is_idle(&self) -> bool {
        self.held.is_empty() && self.waiting.is_empty()
    }

    /// The spans held now.
    pub fn held(&self) -> impl Iterator<Item = (RequestId, Span)> + '_ {
        self.held.iter().copied()
    }

    /// The spans waited for, in order.
    pub fn waiting(&self) -> impl Iterator<Item = (RequestId, Span)> + '_ {
        self.waiting.iter().copied()
    }

    /// The locks' own invariants: each request holds or waits for one
    /// span; no two held spans conflict (exclusive means exclusive); and
    /// every waiter is blocked, by a held span or an earlier waiter (else
    /// `grant` missed it and it would wait forever).
    pub fn check(&self) {
        let mut ids: Vec<RequestId> = self
            .held()
            .chain(self.waiting())
            .map(|(id, _)| id)
            .collect();
        ids.sort_unstable();
        assert!(
            ids.windows(2).all(|w| w[0] != w[1]),
            "locks: a request holds or waits for two spans"
        );
        for (id, s) in self.held().chain(self.waiting()) {
            assert!(
                s.first_stripe <= s.last_stripe,
                "locks: {id:?} has an empty span"
            );
        }
        // Exclusive spans are disjoint from each other (sorted, each ends
        // before the next begins), and no shared span overlaps one:
        // O(n log n) rather than every pair.
        let mut exclusive: Vec<Span> = self
            .held()
            .map(|(_, s)| s)
            .filter(|s| s.exclusive)
            .collect();
        exclusive.sort_unstable_by_key(|s| s.first_stripe);
        assert!(
            exclusive
                .windows(2)
                .all(|w| w[0].last_stripe < w[1].first_stripe),
            "locks: two exclusive spans overlap"
        );
        for (id, s) in self.held().filter(|(_, s)| !s.exclusive) {
            let at = exclusive.partition_point(|x| x.first_stripe <= s.last_stripe);
            assert!(
                at == 0 || exclusive[at - 1].last_stripe < s.first_stripe,
                "locks: {id:?}'s shared span overlaps an exclusive one"
            );
        }
        for (i, (id, s)) in self.waiting.iter().enumerate() {
            let blocked = self.held.iter().any(|(_, h)| h.conflicts(s))
                || self.waiting.iter().take(i).any(|(_, w)| w.conflicts(s));
            assert!(blocked, "locks: {id:?} waits for nothing");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(a: u64, b: u64, exclusive: bool) -> Span {
        Span {
            first_stripe: a,
            last_stripe: b,
            exclusive,
        }
    }

    #[test]
    fn readers_share_writers_wait_in_order() {
        let mut l = RangeLocks::default();
        assert!(l.acquire(RequestId(1), span(0, 3, false)));
        assert!(l.acquire(RequestId(2), span(2, 2, false)));
        assert!(!l.acquire(RequestId(3), span(3, 5, true)));
        // A reader behind a waiting writer on the same stripes waits too.
        assert!(!l.acquire(RequestId(4), span(5, 5, false)));
        // Unrelated stripes go ahead.
        assert!(l.acquire(RequestId(5), span(9, 9, true)));
        assert_eq!(l.release(RequestId(2)), vec![]);
        assert_eq!(l.release(RequestId(1)), vec![RequestId(3)]);
        assert_eq!(l.release(RequestId(3)), vec![RequestId(4)]);
        l.release(RequestId(4));
        l.release(RequestId(5));
        assert!(l.is_idle());
    }

    #[test]
    fn narrowing_lets_waiters_on_the_released_stripes_go() {
        let mut l = RangeLocks::default();
        assert!(l.acquire(RequestId(1), span(0, 5, true)));
        assert!(!l.acquire(RequestId(2), span(5, 9, true)));
        assert!(!l.acquire(RequestId(3), span(0, 0, false)));
        // Still overlapping the waiter: nobody goes.
        assert_eq!(l.narrow(RequestId(1), 0, 5), vec![]);
        assert_eq!(
            l.narrow(RequestId(1), 1, 4),
            vec![RequestId(2), RequestId(3)]
        );
        assert_eq!(l.release(RequestId(1)), vec![]);
        l.release(RequestId(2));
        l.release(RequestId(3));
        assert!(l.is_idle());
    }

    /// Found by mutation testing (docs/mutants.md): `is_idle` answering
    /// true while a span is held went unnoticed, and `Volume::is_idle`
    /// leans on it to say no request is left.
    #[test]
    fn locks_held_are_not_idle() {
        let mut l = RangeLocks::default();
        assert!(l.is_idle());
        assert!(l.acquire(RequestId(1), span(0, 3, true)));
        assert!(!l.is_idle(), "a held span");
        assert!(!l.acquire(RequestId(2), span(2, 2, false)));
        l.release(RequestId(1));
        assert!(!l.is_idle(), "the waiter now holds it");
        l.release(RequestId(2));
        assert!(l.is_idle());
    }

    /// The invariant check must see each kind of corruption it names
    /// (found by mutation testing: an empty `check` went unnoticed,
    /// because correct code never trips it).
    #[test]
    fn check_sees_corrupt_lock_tables() {
        let broken: [fn(&mut RangeLocks); 4] = [
            // Two exclusive holders of one stripe.
            |l| l.held.push((RequestId(9), span(1, 1, true))),
            // A request both holding and waiting.
            |l| l.waiting.push_back((RequestId(1), span(7, 7, true))),
            // A waiter that nothing blocks.
            |l| l.waiting.push_back((RequestId(8), span(50, 60, false))),
            // A shared holder inside an exclusive span.
            |l| l.held.push((RequestId(7), span(0, 0, false))),
        ];
        for (i, f) in broken.iter().enumerate() {
            let mut l = RangeLocks::default();
            assert!(l.acquire(RequestId(1), span(0, 3, true)));
            l.check();
            f(&mut l);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| l.check()));
            assert!(r.is_err(), "corruption {i} passed the check");
        }
    }
}
