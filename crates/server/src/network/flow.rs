//! Bounds on work in flight, so memory stays bounded whatever clients send:
//! a request is read only once its bytes fit the budget, and they count
//! until its reply is sent. Each connection has its own budget inside one
//! the whole server shares: a request takes room in both, so no client can
//! hold more than its share, and all of them together no more than the
//! server's limit.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// Requests in flight live in the top bits of one word, their bytes in the
/// rest, so that taking and giving back budget is one atomic operation each
/// (this runs twice for every request).
const REQUEST_SHIFT: u32 = 48;
const BYTES_MASK: u64 = (1 << REQUEST_SHIFT) - 1;

fn pack(requests: u64, bytes: u64) -> u64 {
    (requests << REQUEST_SHIFT) | bytes
}

fn unpack(used: u64) -> (u64, u64) {
    (used >> REQUEST_SHIFT, used & BYTES_MASK)
}

pub struct Budget {
    limit_requests: u64,
    limit_bytes: u64,
    used: AtomicU64,
    /// Threads waiting for room; a release wakes them only when there are.
    waiters: AtomicU32,
    lock: Mutex<()>,
    freed: Condvar,
    /// The budget this one is part of: room is taken there after here,
    /// and given back to both.
    parent: Option<Arc<Budget>>,
}

/// The most requests a budget can count.
pub const REQUESTS_MAX: u64 = (1 << (64 - REQUEST_SHIFT)) - 1;

impl Budget {
    pub fn new(limit_requests: u64, limit_bytes: u64) -> Budget {
        assert!(limit_requests > 0 && limit_bytes > 0);
        assert!(limit_requests <= REQUESTS_MAX && limit_bytes <= BYTES_MASK / 2);
        Budget {
            limit_requests,
            limit_bytes,
            used: AtomicU64::new(0),
            waiters: AtomicU32::new(0),
            lock: Mutex::new(()),
            freed: Condvar::new(),
            parent: None,
        }
    }

    /// A budget whose requests also take room in `parent`.
    pub fn within(limit_requests: u64, limit_bytes: u64, parent: Arc<Budget>) -> Budget {
        Budget {
            parent: Some(parent),
            ..Budget::new(limit_requests, limit_bytes)
        }
    }

    fn fits(&self, used: u64, bytes: u64) -> bool {
        let (requests, used_bytes) = unpack(used);
        requests < self.limit_requests && (used_bytes + bytes <= self.limit_bytes || requests == 0)
    }

    /// Blocks until one request of `bytes` fits here and in the parent. A
    /// request larger than a whole budget waits until nothing else is in
    /// flight there, then runs alone.
    pub fn acquire(&self, bytes: u64) {
        self.acquire_here(bytes);
        if let Some(p) = &self.parent {
            p.acquire(bytes);
        }
    }

    fn acquire_here(&self, bytes: u64) {
        let bytes = bytes.min(BYTES_MASK / 2);
        let mut used = self.used.load(Ordering::SeqCst);
        loop {
            if self.fits(used, bytes) {
                match self.used.compare_exchange_weak(
                    used,
                    used + pack(1, bytes),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                ) {
                    Ok(_) => return,
                    Err(now) => {
                        used = now;
                        continue;
                    }
                }
            }
            used = self.wait_until(|used| self.fits(used, bytes));
        }
    }

    /// Takes room for one request of `bytes` if it fits now, here and in
    /// the parent.
    pub fn try_acquire(&self, bytes: u64) -> bool {
        if !self.try_acquire_here(bytes) {
            return false;
        }
        match &self.parent {
            Some(p) if !p.try_acquire(bytes) => {
                self.release_here(bytes);
                false
            }
            _ => true,
        }
    }

    fn try_acquire_here(&self, bytes: u64) -> bool {
        let bytes = bytes.min(BYTES_MASK / 2);
        let mut used = self.used.load(Ordering::SeqCst);
        while self.fits(used, bytes) {
            match self.used.compare_exchange_weak(
                used,
                used + pack(1, bytes),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return true,
                Err(now) => used = now,
            }
        }
        false
    }

    /// Waits until `ok(used)` might hold, and returns `used` as it is then.
    /// The waiter counts itself and checks again under the lock; a release
    /// takes the lock to notify whenever it sees a waiter, so no wake-up is
    /// lost between the check and the wait.
    fn wait_until(&self, ok: impl Fn(u64) -> bool) -> u64 {
        let mut g = self.lock.lock().expect("budget lock");
        self.waiters.fetch_add(1, Ordering::SeqCst);
        loop {
            let used = self.used.load(Ordering::SeqCst);
            if ok(used) {
                self.waiters.fetch_sub(1, Ordering::SeqCst);
                return used;
            }
            g = self.freed.wait(g).expect("budget lock");
        }
    }

    pub fn release(&self, bytes: u64) {
        self.release_here(bytes);
        if let Some(p) = &self.parent {
            p.release(bytes);
        }
    }

    fn release_here(&self, bytes: u64) {
        let bytes = bytes.min(BYTES_MASK / 2);
        let before = self.used.fetch_sub(pack(1, bytes), Ordering::SeqCst);
        let (requests, used_bytes) = unpack(before);
        assert!(
            requests > 0 && used_bytes >= bytes,
            "released more than acquired"
        );
        // Waking costs a system call; most releases have nobody waiting.
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _g = self.lock.lock().expect("budget lock");
            self.freed.notify_all();
        }
    }

    /// Blocks until nothing is in flight.
    pub fn wait_empty(&self) {
        self.wait_until(|used| unpack(used).0 == 0);
    }

    pub fn in_flight(&self) -> (u64, u64) {
        unpack(self.used.load(Ordering::SeqCst))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn waits_for_room_and_lets_an_oversized_request_run_alone() {
        let b = Arc::new(Budget::new(2, 100));
        b.acquire(60);
        b.acquire(40);
        let b2 = Arc::clone(&b);
        let t = std::thread::spawn(move || {
            b2.acquire(500);
            b2.release(500);
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished(), "oversized request ran beside others");
        b.release(60);
        b.release(40);
        t.join().unwrap();
        assert_eq!(b.in_flight(), (0, 0));
    }

    #[test]
    fn a_connection_waits_for_room_in_the_shared_budget() {
        let all = Arc::new(Budget::new(100, 100));
        let a = Budget::within(10, 80, Arc::clone(&all));
        let b = Arc::new(Budget::within(10, 80, Arc::clone(&all)));
        a.acquire(70);
        assert!(!b.try_acquire(40), "took room the shared budget lacks");
        assert_eq!(b.in_flight(), (0, 0), "a failed try kept its own room");
        let b2 = Arc::clone(&b);
        let t = std::thread::spawn(move || b2.acquire(40));
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!t.is_finished(), "ran past the shared budget");
        a.release(70);
        t.join().unwrap();
        assert_eq!(all.in_flight(), (1, 40));
        b.release(40);
        assert_eq!(all.in_flight(), (0, 0));
    }
}
