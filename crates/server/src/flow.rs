//! Bounds on work in flight, so memory stays bounded whatever clients send:
//! a request is read only once its bytes fit the budget, and they count
//! until its reply is sent.

use std::sync::{Condvar, Mutex};

struct Used {
    requests: u64,
    bytes: u64,
    waiters: u32,
}

pub struct Budget {
    limit_requests: u64,
    limit_bytes: u64,
    used: Mutex<Used>,
    freed: Condvar,
}

impl Budget {
    pub fn new(limit_requests: u64, limit_bytes: u64) -> Budget {
        assert!(limit_requests > 0 && limit_bytes > 0);
        Budget {
            limit_requests,
            limit_bytes,
            used: Mutex::new(Used {
                requests: 0,
                bytes: 0,
                waiters: 0,
            }),
            freed: Condvar::new(),
        }
    }

    /// Blocks until one request of `bytes` fits. A request larger than the
    /// whole budget waits until nothing else is in flight, then runs alone.
    pub fn acquire(&self, bytes: u64) {
        let mut u = self.used.lock().expect("budget lock");
        loop {
            let fits = u.requests < self.limit_requests
                && (u.bytes + bytes <= self.limit_bytes || u.requests == 0);
            if fits {
                u.requests += 1;
                u.bytes += bytes;
                return;
            }
            u.waiters += 1;
            u = self.freed.wait(u).expect("budget lock");
            u.waiters -= 1;
        }
    }

    pub fn release(&self, bytes: u64) {
        let mut u = self.used.lock().expect("budget lock");
        assert!(
            u.requests > 0 && u.bytes >= bytes,
            "released more than acquired"
        );
        u.requests -= 1;
        u.bytes -= bytes;
        // Waking costs a system call; most releases have nobody waiting.
        if u.waiters > 0 {
            self.freed.notify_all();
        }
    }

    /// Blocks until nothing is in flight.
    pub fn wait_empty(&self) {
        let mut u = self.used.lock().expect("budget lock");
        while u.requests > 0 {
            u.waiters += 1;
            u = self.freed.wait(u).expect("budget lock");
            u.waiters -= 1;
        }
    }

    pub fn in_flight(&self) -> (u64, u64) {
        let u = self.used.lock().expect("budget lock");
        (u.requests, u.bytes)
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
