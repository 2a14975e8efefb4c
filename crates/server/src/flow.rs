//! Bounds on work in flight, so memory stays bounded whatever clients send:
//! a request is read only once its bytes fit the budget.

use std::sync::{Condvar, Mutex};

pub struct Budget {
    limit_requests: u64,
    limit_bytes: u64,
    used: Mutex<(u64, u64)>,
    freed: Condvar,
}

impl Budget {
    pub fn new(limit_requests: u64, limit_bytes: u64) -> Budget {
        assert!(limit_requests > 0 && limit_bytes > 0);
        Budget {
            limit_requests,
            limit_bytes,
            used: Mutex::new((0, 0)),
            freed: Condvar::new(),
        }
    }

    /// Blocks until one request of `bytes` fits. A request larger than the
    /// whole budget waits until nothing else is in flight, then runs alone.
    pub fn acquire(&self, bytes: u64) {
        let mut used = self.used.lock().expect("budget lock");
        loop {
            let (reqs, b) = *used;
            let fits = reqs < self.limit_requests && (b + bytes <= self.limit_bytes || reqs == 0);
            if fits {
                *used = (reqs + 1, b + bytes);
                return;
            }
            used = self.freed.wait(used).expect("budget lock");
        }
    }

    pub fn release(&self, bytes: u64) {
        let mut used = self.used.lock().expect("budget lock");
        assert!(used.0 > 0 && used.1 >= bytes, "released more than acquired");
        used.0 -= 1;
        used.1 -= bytes;
        self.freed.notify_all();
    }

    /// Blocks until nothing is in flight.
    pub fn wait_empty(&self) {
        let mut used = self.used.lock().expect("budget lock");
        while used.0 > 0 {
            used = self.freed.wait(used).expect("budget lock");
        }
    }

    pub fn in_flight(&self) -> (u64, u64) {
        *self.used.lock().expect("budget lock")
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
}
