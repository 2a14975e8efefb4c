//! Injected latency as a timer: one thread per layer holds every delayed
//! I/O in a heap by deadline and hands each back to its queue when its
//! time comes. Thousands of slow I/Os cost a heap entry each, not a
//! thread. With nothing delayed the thread waits without a deadline; it is
//! started by the first delay.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::queue::{Queue, Started};

#[derive(Default)]
pub(crate) struct Timer {
    state: Mutex<TimerState>,
    wake: Condvar,
}

#[derive(Default)]
struct TimerState {
    /// Deadline, then a number that keeps equal deadlines in order.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    entries: std::collections::HashMap<u64, (Arc<Queue>, Started)>,
    next: u64,
    running: bool,
    /// The layer is gone: the thread ends once every entry has fired.
    stop: bool,
}

impl Timer {
    fn lock(&self) -> MutexGuard<'_, TimerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `started` back to `queue` ([`Queue::delay_over`]) at `at`.
    pub(super) fn schedule(self: &Arc<Self>, at: Instant, queue: Arc<Queue>, started: Started) {
        let mut st = self.lock();
        let key = st.next;
        st.next += 1;
        let earliest = st.heap.peek().is_none_or(|Reverse((first, _))| at < *first);
        st.heap.push(Reverse((at, key)));
        st.entries.insert(key, (queue, started));
        if !st.running {
            let me = Arc::clone(self);
            match std::thread::Builder::new()
                .name("platter-io-timer".into())
                .spawn(move || me.run())
            {
                Ok(_) => st.running = true,
                Err(e) => {
                    // Nothing would ever hand the I/O back: send it on now.
                    tracing::error!(error = %e, "cannot start the injected-latency timer; latency is not injected");
                    let (queue, started) = st.entries.remove(&key).expect("just inserted");
                    st.heap.pop();
                    drop(st);
                    queue.delay_over(started);
                }
            }
        } else if earliest {
            self.wake.notify_one();
        }
    }

    pub(super) fn stop(&self) {
        self.lock().stop = true;
        self.wake.notify_one();
    }

    fn run(&self) {
        let mut st = self.lock();
        loop {
            let now = Instant::now();
            let mut due = Vec::new();
            // Bounded by the heap, which only `schedule` grows.
            while let Some(Reverse((at, key))) = st.heap.peek().copied() {
                if at > now {
                    break;
                }
                st.heap.pop();
                due.push(st.entries.remove(&key).expect("every key has its entry"));
            }
            if !due.is_empty() {
                drop(st);
                for (queue, started) in due {
                    queue.delay_over(started);
                }
                st = self.lock();
                continue;
            }
            match st.heap.peek().copied() {
                Some(Reverse((at, _))) => {
                    st = self
                        .wake
                        .wait_timeout(st, at.saturating_duration_since(now))
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                None if st.stop => {
                    st.running = false;
                    return;
                }
                None => st = self.wake.wait(st).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}
