//! The portable [`IoLayer`]: per member device a FIFO of I/Os served by up
//! to `queue_depth` threads, each making the synchronous [`Member`] call.
//! Threads are started when I/Os wait and none is free, and end after
//! [`IDLE_EXIT`] without work, so an idle server holds none and a busy one
//! holds at most the queue depth per member. One watchdog thread per pool
//! fails I/Os that outlive the timeout; it sleeps without a deadline while
//! nothing is outstanding (no polling on an idle server).
//!
//! A thread stuck in a device that stopped answering stays stuck (a
//! blocking system call cannot be taken back); it keeps its place in the
//! depth, and its late answer is dropped. The member is taken out of use
//! by the timeout, so no new I/O goes to it.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use platter_core::volume::{IoError, IoErrorKind, MemberOp};

use super::{
    average_step, Completed, IoDone, IoLayer, MemberQueue, Pace, QueueLoad, RECENT_NS_START,
};
use crate::member::Member;

/// What `serve --member-queue-depth` defaults to.
pub const QUEUE_DEPTH_DEFAULT: usize = 32;
/// What `serve --member-timeout` defaults to.
pub const TIMEOUT_DEFAULT: Duration = Duration::from_secs(30);
/// A thread with no I/O for this long ends.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug)]
pub struct PoolConfig {
    /// I/Os on one device at once (at least 1).
    pub queue_depth: usize,
    /// An I/O not completed this long after its submission fails.
    pub timeout: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            queue_depth: QUEUE_DEPTH_DEFAULT,
            timeout: TIMEOUT_DEFAULT,
        }
    }
}

pub struct ThreadPool {
    shared: Arc<Shared>,
}

struct Shared {
    config: PoolConfig,
    /// I/Os submitted and not completed, over every queue: the watchdog
    /// sleeps without a deadline while this is zero.
    outstanding: AtomicU64,
    /// The watchdog sleeps without a deadline: the first I/O must wake it.
    /// While it ticks, I/Os need not touch its lock (on a fast member at
    /// depth 1 every I/O takes `outstanding` from 0 to 1, and waking the
    /// watchdog for each would cost a context switch per I/O).
    watchdog_asleep: AtomicBool,
    watch: Mutex<Watch>,
    watch_wake: Condvar,
}

struct Watch {
    queues: Vec<Weak<Inner>>,
    started: bool,
    stop: bool,
}

struct Inner {
    device: Arc<dyn Member>,
    pool: Arc<Shared>,
    /// The device's recent I/O time (ns), [`average_step`]. Updated
    /// without a lock; a lost update only makes it a little less recent.
    recent_ns: AtomicU64,
    /// The bytes those I/Os moved, a plain moving average over about 8.
    recent_bytes: AtomicU64,
    /// I/Os in [`MemberQueue::perform_here`] now.
    here_now: AtomicU32,
    state: Mutex<QueueState>,
    work: Condvar,
}

struct QueueState {
    /// I/Os waiting for a thread, oldest first.
    pending: VecDeque<(u64, MemberOp)>,
    /// Every I/O submitted and not completed, by submission number (so
    /// oldest first): whoever removes an entry owns its `done`.
    waiting: BTreeMap<u64, Waiting>,
    next_seq: u64,
    threads: usize,
    /// Threads waiting for work (including any woken and not yet running).
    idle: usize,
    /// The queue's handle is gone: threads end once `pending` is empty.
    closed: bool,
}

struct Waiting {
    since: Instant,
    op: OpSummary,
    done: IoDone,
}

/// An I/O in few words, for the timeout's message.
#[derive(Clone, Copy)]
struct OpSummary {
    kind: &'static str,
    offset_bytes: u64,
    len_bytes: u64,
}

impl OpSummary {
    fn of(op: &MemberOp) -> OpSummary {
        let (kind, offset_bytes, len_bytes) = match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => ("read", *offset_bytes, *len_bytes),
            MemberOp::Write { offset_bytes, data } => ("write", *offset_bytes, data.len() as u64),
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => ("trim", *offset_bytes, *len_bytes),
            MemberOp::Flush => ("flush", 0, 0),
        };
        OpSummary {
            kind,
            offset_bytes,
            len_bytes,
        }
    }
}

impl ThreadPool {
    /// # Panics
    /// If `config.queue_depth` is 0 (the command line refuses it).
    pub fn new(config: PoolConfig) -> ThreadPool {
        assert!(config.queue_depth > 0, "a queue depth of 0 serves nothing");
        ThreadPool {
            shared: Arc::new(Shared {
                config,
                outstanding: AtomicU64::new(0),
                watchdog_asleep: AtomicBool::new(false),
                watch: Mutex::new(Watch {
                    queues: Vec::new(),
                    started: false,
                    stop: false,
                }),
                watch_wake: Condvar::new(),
            }),
        }
    }
}

impl Default for ThreadPool {
    fn default() -> Self {
        ThreadPool::new(PoolConfig::default())
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.shared.watch().stop = true;
        self.shared.watch_wake.notify_all();
    }
}

impl IoLayer for ThreadPool {
    fn queue(&self, device: Arc<dyn Member>) -> Arc<dyn MemberQueue> {
        let inner = Arc::new(Inner {
            device,
            pool: Arc::clone(&self.shared),
            recent_ns: AtomicU64::new(RECENT_NS_START),
            recent_bytes: AtomicU64::new(0),
            here_now: AtomicU32::new(0),
            state: Mutex::new(QueueState {
                pending: VecDeque::new(),
                waiting: BTreeMap::new(),
                next_seq: 0,
                threads: 0,
                idle: 0,
                closed: false,
            }),
            work: Condvar::new(),
        });
        let mut w = self.shared.watch();
        w.queues.retain(|q| q.strong_count() > 0);
        w.queues.push(Arc::downgrade(&inner));
        if !w.started {
            let shared = Arc::clone(&self.shared);
            match std::thread::Builder::new()
                .name("platter-io-watchdog".into())
                .spawn(move || shared.watchdog())
            {
                Ok(_) => w.started = true,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the member I/O watchdog; member I/Os are not timed out")
                }
            }
        }
        Arc::new(PoolQueue(inner))
    }
}

impl Shared {
    fn watch(&self) -> MutexGuard<'_, Watch> {
        self.watch.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fails every I/O older than the timeout, looking about ten times per
    /// timeout while any I/O is outstanding.
    fn watchdog(&self) {
        let tick =
            (self.config.timeout / 10).clamp(Duration::from_millis(10), Duration::from_secs(1));
        let mut w = self.watch();
        loop {
            if w.stop {
                return;
            }
            // Asleep is announced before `outstanding` is looked at, and
            // an I/O counts itself before it looks at `asleep`: one of the
            // two sees the other (both sequentially consistent). The waker
            // notifies under this lock, so not between the check and the
            // wait.
            self.watchdog_asleep.store(true, Ordering::SeqCst);
            if self.outstanding.load(Ordering::SeqCst) == 0 {
                w = self.watch_wake.wait(w).unwrap_or_else(|p| p.into_inner());
                continue;
            }
            self.watchdog_asleep.store(false, Ordering::SeqCst);
            w = self
                .watch_wake
                .wait_timeout(w, tick)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            let queues: Vec<Arc<Inner>> = w.queues.iter().filter_map(Weak::upgrade).collect();
            drop(w);
            for q in queues {
                q.expire(self.config.timeout);
            }
            w = self.watch();
        }
    }
}

/// The handle the engine holds; dropping it ends the queue's threads once
/// they have nothing left to do.
struct PoolQueue(Arc<Inner>);

impl Drop for PoolQueue {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.work.notify_all();
    }
}

impl MemberQueue for PoolQueue {
    fn submit(&self, op: MemberOp, done: IoDone) {
        let inner = &self.0;
        let mut st = inner.lock();
        let seq = Inner::register(&mut st, &op, done);
        st.pending.push_back((seq, op));
        if st.pending.len() > st.idle && st.threads < inner.pool.config.queue_depth {
            let me = Arc::clone(inner);
            match std::thread::Builder::new()
                .name("platter-member-io".into())
                .spawn(move || me.serve())
            {
                Ok(_) => st.threads += 1,
                // The threads there are serve it; with none, the watchdog
                // fails it in time.
                Err(e) => {
                    tracing::warn!(member = inner.device.describe(), error = %e, "cannot start a member I/O thread")
                }
            }
        } else {
            inner.work.notify_one();
        }
        drop(st);
        inner.pool.counted();
    }

    fn perform_here(&self, op: MemberOp, done: IoDone) -> Option<Completed> {
        let inner = &self.0;
        let seq = Inner::register(&mut inner.lock(), &op, done);
        inner.pool.counted();
        inner.here_now.fetch_add(1, Ordering::Relaxed);
        let (result, device_ns) = inner.perform(&op);
        inner.here_now.fetch_sub(1, Ordering::Relaxed);
        drop(op);
        // Still there: the watchdog did not time it out, and its `done`
        // is not needed.
        inner.take(seq)?;
        Some(Completed {
            result,
            device_ns,
            timed_out: false,
        })
    }

    fn pace(&self) -> Pace {
        let oldest = self
            .0
            .lock()
            .waiting
            .first_key_value()
            .map(|(_, w)| w.since);
        Pace {
            recent_ns: self.0.recent_ns.load(Ordering::Relaxed),
            recent_bytes: self.0.recent_bytes.load(Ordering::Relaxed),
            oldest_out_ns: oldest.map_or(0, |since| {
                u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }),
            here_now: self.0.here_now.load(Ordering::Relaxed),
        }
    }

    fn load(&self) -> QueueLoad {
        QueueLoad {
            outstanding: self.0.lock().waiting.len() as u64,
            depth: self.0.pool.config.queue_depth as u64,
        }
    }
}

impl Shared {
    /// One more I/O is outstanding: wakes the watchdog if it sleeps.
    fn counted(&self) {
        self.outstanding.fetch_add(1, Ordering::SeqCst);
        if self.watchdog_asleep.load(Ordering::SeqCst) {
            // Under the watchdog's lock, so it cannot miss the change
            // between its check and its wait.
            let _w = self.watch();
            self.watch_wake.notify_all();
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // The state is consistent between statements; a panic in a
        // completion callback happens outside the lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Enters an I/O among those outstanding (the watchdog's list); its
    /// number.
    fn register(st: &mut QueueState, op: &MemberOp, done: IoDone) -> u64 {
        let seq = st.next_seq;
        st.next_seq += 1;
        st.waiting.insert(
            seq,
            Waiting {
                since: Instant::now(),
                op: OpSummary::of(op),
                done,
            },
        );
        seq
    }

    /// Takes I/O `seq` off the outstanding list; `None` if the watchdog
    /// already timed it out (its answer is then dropped).
    fn take(&self, seq: u64) -> Option<Waiting> {
        let Some(w) = self.lock().waiting.remove(&seq) else {
            tracing::debug!(
                member = self.device.describe(),
                "a member I/O answered after its timeout; the answer is dropped"
            );
            return None;
        };
        self.pool.outstanding.fetch_sub(1, Ordering::SeqCst);
        Some(w)
    }

    /// Makes the device call, timing it into the recent average.
    fn perform(&self, op: &MemberOp) -> (platter_core::volume::IoResult, u64) {
        let start = Instant::now();
        let result = crate::executor::perform(self.device.as_ref(), op);
        let device_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        let avg_ns = self.recent_ns.load(Ordering::Relaxed);
        self.recent_ns
            .store(average_step(avg_ns, device_ns), Ordering::Relaxed);
        let avg_bytes = self.recent_bytes.load(Ordering::Relaxed);
        let bytes = OpSummary::of(op).len_bytes;
        self.recent_bytes
            .store(avg_bytes - avg_bytes / 8 + bytes / 8, Ordering::Relaxed);
        (result, device_ns)
    }

    /// One thread: takes I/Os in order and performs them until it has had
    /// nothing to do for [`IDLE_EXIT`] or the queue is closed.
    fn serve(&self) {
        loop {
            let mut st = self.lock();
            let (seq, op) = loop {
                if let Some(job) = st.pending.pop_front() {
                    break job;
                }
                if st.closed {
                    st.threads -= 1;
                    return;
                }
                st.idle += 1;
                let (g, waited) = self
                    .work
                    .wait_timeout(st, IDLE_EXIT)
                    .unwrap_or_else(|p| p.into_inner());
                st = g;
                st.idle -= 1;
                if waited.timed_out() && st.pending.is_empty() {
                    st.threads -= 1;
                    return;
                }
            };
            // Timed out while waiting for its turn: it must not reach the
            // device now that the volume has given up on it.
            if !st.waiting.contains_key(&seq) {
                continue;
            }
            drop(st);
            let (result, device_ns) = self.perform(&op);
            drop(op);
            let Some(w) = self.take(seq) else {
                continue;
            };
            (w.done)(Completed {
                result,
                device_ns,
                timed_out: false,
            });
        }
    }

    /// Completes, as timed out, every I/O submitted `timeout` or longer ago.
    fn expire(&self, timeout: Duration) {
        let now = Instant::now();
        let mut expired = Vec::new();
        {
            let mut st = self.lock();
            while let Some(entry) = st.waiting.first_entry() {
                if now.saturating_duration_since(entry.get().since) < timeout {
                    break;
                }
                expired.push(entry.remove());
            }
        }
        if expired.is_empty() {
            return;
        }
        self.pool
            .outstanding
            .fetch_sub(expired.len() as u64, Ordering::SeqCst);
        for w in expired {
            let message = format!(
                "{} of {} bytes at byte {} on {} not answered within {} s (--member-timeout)",
                w.op.kind,
                w.op.len_bytes,
                w.op.offset_bytes,
                self.device.describe(),
                timeout.as_secs_f64()
            );
            (w.done)(Completed {
                result: Err(IoError::new(IoErrorKind::Media, message)),
                device_ns: 0,
                timed_out: true,
            });
        }
    }
}

#[cfg(test)]
mod tests;
