//! One member device's queue: the I/Os submitted to it, at most
//! `queue_depth` of them on the device at once, the rest waiting in order.
//!
//! An I/O goes through these stages, each owned by one part:
//!
//! 1. *Waiting for a slot* (`pending`, here): fewer than `queue_depth`
//!    slots free.
//! 2. *Delayed* (the layer's [`Timer`](super::timer::Timer)): the member
//!    has injected latency (`--inject latency=`); the I/O holds its slot
//!    as a slow disk would, and no thread waits for it.
//! 3. *On the device*: sent by the submitting thread itself when the
//!    member keeps requests in flight on its own ([`Member::start`]: an NBD
//!    member; its reader thread completes it), or in the layer's io_uring
//!    ([`Ring`](super::ring::Ring)) when the member offers its descriptor
//!    and the I/O suits it, else in `ready` for one of the queue's
//!    threads, which makes the synchronous [`Member`] call.
//! 4. *Completed*: the slot is freed (the next waiting I/O takes it), then
//!    whoever takes the I/O off `waiting` calls its `done`: the completion,
//!    or the watchdog's timeout if it came first.
//!
//! `waiting` holds every I/O from submission to completion, so the
//! watchdog sees all of them whatever stage they are in.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use platter_core::volume::{IoError, IoErrorKind, IoResult, MemberOp};

use super::layer::Shared;
use super::{average_step, Completed, Delay, IoDone, MemberQueue, Pace, QueueLoad};
use crate::member::Member;

/// A thread with no I/O for this long ends.
pub const IDLE_EXIT: Duration = Duration::from_secs(2);
/// One I/O in this many goes to a queue thread even when the ring could
/// take it: the member's own call is timed there, which the recent
/// average needs (see [`Queue::slot_done`]).
pub const PROBE_EVERY: u64 = 32;
/// Threads per member at most, whatever the depth: I/Os the ring cannot
/// take run on them, and a depth of thousands (slow members, mostly
/// waiting on the injected-latency timer) must not become thousands of
/// threads. Past this, the depth counts I/Os waiting for a thread.
pub const THREADS_MAX: usize = 64;

pub(super) struct Queue {
    pub(super) device: Arc<dyn Member>,
    pub(super) layer: Arc<Shared>,
    /// Injected latency, drawn per I/O by its number.
    delay: Option<Delay>,
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
    /// I/Os waiting for a slot, oldest first.
    pending: VecDeque<(u64, MemberOp)>,
    /// I/Os holding a slot and waiting for one of the queue's threads.
    ready: VecDeque<Started>,
    /// When the device last answered an I/O ([`MemberQueue::pace`]).
    last_done: Option<Instant>,
    /// I/Os holding a slot that the submitting thread starts itself, once
    /// it has let go of the lock, on a member that keeps requests in
    /// flight on its own ([`Member::start`]: no thread waits them out).
    direct: VecDeque<Started>,
    /// Slots taken: I/Os delayed, ready, on a thread or in the ring.
    in_slot: usize,
    /// Every I/O submitted and not completed, by submission number (so
    /// oldest first): whoever removes an entry owns its `done`.
    waiting: BTreeMap<u64, Waiting>,
    next_seq: u64,
    /// I/Os that took a slot, for the injected latency's draw.
    slotted: u64,
    threads: usize,
    /// Threads waiting for work (including any woken and not yet running).
    idle: usize,
    /// The queue's handle is gone: threads end once `ready` is empty.
    closed: bool,
}

/// An I/O that holds a slot.
pub(super) struct Started {
    pub(super) seq: u64,
    pub(super) op: MemberOp,
    /// When it took its slot: its device time counts from here (injected
    /// latency included, as a slow disk's would be).
    pub(super) at: Instant,
}

struct Waiting {
    since: Instant,
    /// When it reached the device (a queue thread's call, the ring, the
    /// member's own start, a caller's thread): its age from here, not
    /// from `since`, tells a device that stopped answering
    /// ([`MemberQueue::pace`]). Time spent waiting for a slot or for a
    /// queue thread to run is the machine's, not the device's.
    on_device: Option<Instant>,
    op: OpSummary,
    done: IoDone,
}

/// An I/O in few words, for the timeout's message.
#[derive(Clone, Copy)]
pub(super) struct OpSummary {
    pub(super) kind: &'static str,
    pub(super) offset_bytes: u64,
    pub(super) len_bytes: u64,
}

impl OpSummary {
    pub(super) fn of(op: &MemberOp) -> OpSummary {
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

impl Queue {
    pub(super) fn new(device: Arc<dyn Member>, layer: Arc<Shared>, delay: Option<Delay>) -> Queue {
        let start_ns = delay.as_ref().map_or(super::RECENT_NS_START, |d| {
            d.base_ns().max(super::RECENT_NS_START)
        });
        Queue {
            device,
            layer,
            delay,
            recent_ns: AtomicU64::new(start_ns),
            recent_bytes: AtomicU64::new(0),
            here_now: AtomicU32::new(0),
            state: Mutex::new(QueueState {
                pending: VecDeque::new(),
                ready: VecDeque::new(),
                last_done: None,
                direct: VecDeque::new(),
                in_slot: 0,
                waiting: BTreeMap::new(),
                next_seq: 0,
                slotted: 0,
                threads: 0,
                idle: 0,
                closed: false,
            }),
            work: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, QueueState> {
        // The state is consistent between statements; a panic in a
        // completion callback happens outside the lock.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn depth(&self) -> usize {
        self.layer.config.queue_depth
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
                on_device: None,
                op: OpSummary::of(op),
                done,
            },
        );
        seq
    }

    /// Gives free slots to waiting I/Os, oldest first, and starts them.
    /// `direct`: the caller starts I/Os the member can take without a
    /// thread ([`Queue::start_direct`], after letting go of the lock);
    /// only a submitting thread does: a completion's thread (an NBD reader)
    /// must not send, and the timer's must not wait on a socket.
    fn fill_slots(self: &Arc<Self>, st: &mut QueueState, direct: bool) {
        // Bounded by `pending`, which only this loop shrinks.
        while st.in_slot < self.depth() {
            let Some((seq, op)) = st.pending.pop_front() else {
                return;
            };
            // Timed out while waiting for its turn: it must not reach the
            // device now that the volume has given up on it.
            if !st.waiting.contains_key(&seq) {
                continue;
            }
            st.in_slot += 1;
            let number = st.slotted;
            st.slotted += 1;
            let started = Started {
                seq,
                op,
                at: Instant::now(),
            };
            match self.delay.as_ref().map(|d| d.of(number)) {
                Some(delay) if !delay.is_zero() => {
                    self.layer
                        .timer
                        .schedule(started.at + delay, Arc::clone(self), started);
                }
                _ if direct && self.device.starts_requests() => st.direct.push_back(started),
                _ => self.dispatch(st, started),
            }
        }
    }

    /// Starts the I/Os put in `direct` with [`Member::start`]; one the
    /// member will not take that way goes to the queue's threads. Called
    /// without the lock: starting one may block on the member's socket.
    fn start_direct(self: &Arc<Self>) {
        // Bounded by `direct`, which only submitters fill, each draining
        // after its own.
        loop {
            let started = {
                let mut st = self.lock();
                let Some(s) = st.direct.pop_front() else {
                    return;
                };
                if !Self::reaches_device(&mut st, s.seq) {
                    // Timed out before it was sent.
                    self.free_slot(&mut st);
                    continue;
                }
                s
            };
            let Started { seq, op, at } = started;
            let q = Arc::clone(self);
            let call = Instant::now();
            let done: crate::member::MemberDone = Box::new(move |r| {
                let call_ns = u64::try_from(call.elapsed().as_nanos()).unwrap_or(u64::MAX);
                // On the device's own completion thread (an NBD reader).
                let r = r.map_err(crate::perform::io_error);
                q.slot_done(seq, at, r, Some(call_ns), false);
            });
            if self.device.start(&op, done).is_err() {
                let mut st = self.lock();
                self.dispatch(&mut st, Started { seq, op, at });
            }
        }
    }

    /// Hands an I/O that holds a slot to the device: to the ring if it can
    /// take it, else to the queue's threads.
    fn dispatch(self: &Arc<Self>, st: &mut QueueState, started: Started) {
        let probe = st.slotted.is_multiple_of(PROBE_EVERY);
        let started = match &self.layer.ring {
            Some(ring) if !probe => {
                let seq = started.seq;
                match ring.try_push(self, started) {
                    Ok(()) => {
                        Self::reaches_device(st, seq);
                        return;
                    }
                    Err(back) => back,
                }
            }
            _ => started,
        };
        st.ready.push_back(started);
        if st.ready.len() > st.idle && st.threads < self.depth().min(THREADS_MAX) {
            let me = Arc::clone(self);
            match std::thread::Builder::new()
                .name("platter-member-io".into())
                .spawn(move || me.serve())
            {
                Ok(_) => st.threads += 1,
                // The threads there are serve it; with none, the watchdog
                // fails it in time.
                Err(e) => {
                    tracing::warn!(member = self.device.describe(), error = %e, "cannot start a member I/O thread")
                }
            }
        } else {
            self.work.notify_one();
        }
    }

    /// The injected latency of a delayed I/O has passed.
    pub(super) fn delay_over(self: &Arc<Self>, started: Started) {
        let mut st = self.lock();
        if st.waiting.contains_key(&started.seq) {
            self.dispatch(&mut st, started);
        } else {
            // Timed out while delayed: it never reaches the device.
            self.free_slot(&mut st);
        }
    }

    fn free_slot(self: &Arc<Self>, st: &mut QueueState) {
        assert!(st.in_slot > 0, "a slot freed twice");
        st.in_slot -= 1;
        self.fill_slots(st, false);
    }

    /// An I/O holding a slot has finished on the device (or was dropped):
    /// frees the slot, then completes it unless the watchdog did.
    ///
    /// `call_ns`: how long the member's own call took, for an I/O a queue
    /// thread performed; `None` for the ring's. Only calls feed the recent
    /// average ([`MemberQueue::pace`]): a ring completion's time includes
    /// the ring thread's wake-up, which on a member of microseconds is most
    /// of it, and taken for the device's it kept tmpfs members "slow", off
    /// the submitting thread (4k random reads on a tmpfs mirror at half the
    /// build before io_uring). Every [`PROBE_EVERY`]th I/O goes to a thread
    /// for that reason, so a ring-only member is still measured.
    pub(super) fn slot_done(
        self: &Arc<Self>,
        seq: u64,
        at: Instant,
        result: IoResult,
        call_ns: Option<u64>,
        may_send: bool,
    ) {
        let since_slot_ns = u64::try_from(at.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Injected latency is part of the device's time, as a slow disk's.
        let device_ns = match (self.delay.is_some(), call_ns) {
            (false, Some(ns)) => ns,
            _ => since_slot_ns,
        };
        self.free_slot(&mut self.lock());
        self.finish(seq, result, device_ns, call_ns.is_some(), may_send);
    }

    /// Times the I/O into the recent average (if `sample`) and calls its
    /// `done`.
    fn finish(&self, seq: u64, result: IoResult, device_ns: u64, sample: bool, may_send: bool) {
        let Some(w) = self.take(seq) else {
            return;
        };
        if sample {
            self.note(device_ns, w.op.len_bytes);
        }
        (w.done)(Completed {
            result,
            device_ns,
            timed_out: false,
            may_send,
        });
    }

    fn note(&self, device_ns: u64, bytes: u64) {
        let avg_ns = self.recent_ns.load(Ordering::Relaxed);
        self.recent_ns
            .store(average_step(avg_ns, device_ns), Ordering::Relaxed);
        let avg_bytes = self.recent_bytes.load(Ordering::Relaxed);
        self.recent_bytes
            .store(avg_bytes - avg_bytes / 8 + bytes / 8, Ordering::Relaxed);
    }

    /// Takes I/O `seq` off the outstanding list; `None` if the watchdog
    /// already timed it out (its answer is then dropped).
    fn take(&self, seq: u64) -> Option<Waiting> {
        let mut st = self.lock();
        st.last_done = Some(Instant::now());
        let Some(w) = st.waiting.remove(&seq) else {
            tracing::debug!(
                member = self.device.describe(),
                "a member I/O answered after its timeout; the answer is dropped"
            );
            return None;
        };
        self.layer.outstanding.fetch_sub(1, Ordering::SeqCst);
        Some(w)
    }

    /// One thread: performs ready I/Os in order until it has had nothing
    /// to do for [`IDLE_EXIT`] or the queue is closed.
    fn serve(self: Arc<Self>) {
        loop {
            let mut st = self.lock();
            let started = loop {
                if let Some(job) = st.ready.pop_front() {
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
                if waited.timed_out() && st.ready.is_empty() {
                    st.threads -= 1;
                    return;
                }
            };
            if !Self::reaches_device(&mut st, started.seq) {
                // Timed out while it waited: the device must not see it.
                self.free_slot(&mut st);
                continue;
            }
            drop(st);
            let Started { seq, op, at } = started;
            let call = Instant::now();
            let result = crate::perform::perform(self.device.as_ref(), &op);
            let call_ns = u64::try_from(call.elapsed().as_nanos()).unwrap_or(u64::MAX);
            drop(op);
            self.slot_done(seq, at, result, Some(call_ns), true);
        }
    }

    /// Notes I/O `seq` as on its way to the device now; false when the
    /// watchdog has timed it out already.
    fn reaches_device(st: &mut QueueState, seq: u64) -> bool {
        match st.waiting.get_mut(&seq) {
            Some(w) => {
                w.on_device.get_or_insert_with(Instant::now);
                true
            }
            None => false,
        }
    }

    /// Completes, as timed out, every I/O submitted `timeout` or longer ago.
    pub(super) fn expire(&self, timeout: Duration) {
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
        self.layer
            .outstanding
            .fetch_sub(expired.len() as u64, Ordering::SeqCst);
        // Before the engine hears of it: a remote member then counts as
        // disconnected, not as failed for good.
        self.device.abandon(&format!(
            "an I/O not answered within {} s (--member-timeout)",
            timeout.as_secs_f64()
        ));
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
                result: Err(IoError::new(IoErrorKind::Timeout, message)),
                device_ns: 0,
                timed_out: true,
                may_send: true,
            });
        }
    }
}

/// The handle the engine holds; dropping it ends the queue's threads once
/// they have nothing left to do.
pub(super) struct QueueHandle(pub(super) Arc<Queue>);

impl Drop for QueueHandle {
    fn drop(&mut self) {
        self.0.lock().closed = true;
        self.0.work.notify_all();
    }
}

impl MemberQueue for QueueHandle {
    fn submit(&self, op: MemberOp, done: IoDone, may_send: bool) {
        let q = &self.0;
        // Counted before it can complete (on another thread, at once).
        q.layer.counted();
        let mut st = q.lock();
        let seq = Queue::register(&mut st, &op, done);
        st.pending.push_back((seq, op));
        let direct = may_send;
        q.fill_slots(&mut st, direct);
        drop(st);
        if direct {
            q.start_direct();
        }
    }

    fn perform_here(&self, op: MemberOp, done: IoDone) -> Option<Completed> {
        let q = &self.0;
        q.layer.counted();
        let seq = {
            let mut st = q.lock();
            let seq = Queue::register(&mut st, &op, done);
            Queue::reaches_device(&mut st, seq);
            seq
        };
        q.here_now.fetch_add(1, Ordering::Relaxed);
        let start = Instant::now();
        if let Some(delay) = &q.delay {
            // Not chosen in practice: `pace` reports at least the injected
            // latency, far above what makes a caller perform an I/O here.
            let number = {
                let mut st = q.lock();
                st.slotted += 1;
                st.slotted - 1
            };
            std::thread::sleep(delay.of(number));
        }
        let result = crate::perform::perform(q.device.as_ref(), &op);
        let device_ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        q.here_now.fetch_sub(1, Ordering::Relaxed);
        drop(op);
        // Still there: the watchdog did not time it out, and its `done`
        // is not needed.
        let w = q.take(seq)?;
        q.note(device_ns, w.op.len_bytes);
        Some(Completed {
            result,
            device_ns,
            timed_out: false,
            may_send: true,
        })
    }

    fn pace(&self) -> Pace {
        // The oldest I/O on the device (slots are given oldest first, so
        // it is among the first few outstanding), or the device's last
        // answer if later: a device that answers I/O after I/O is not
        // stalled, though one of them waits for the CPU mid-call.
        let oldest = {
            let st = self.0.lock();
            let on_device = st.waiting.values().find_map(|w| w.on_device);
            on_device.map(|o| st.last_done.map_or(o, |d| o.max(d)))
        };
        let floor_ns = self.0.delay.as_ref().map_or(0, Delay::base_ns);
        Pace {
            recent_ns: self.0.recent_ns.load(Ordering::Relaxed).max(floor_ns),
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
            depth: self.0.depth() as u64,
        }
    }
}
