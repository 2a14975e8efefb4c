//! The io_uring back end: one ring per layer, shared by every member's
//! queue, and one thread that waits for its completions.
//!
//! A queue hands an I/O that holds a slot to [`Ring::try_push`]; reads,
//! writes and flushes of members that offer their descriptor
//! ([`Member::ring_target`](crate::member::Member::ring_target)) go in, the
//! rest go back to the queue's threads (trims; writes without `O_DIRECT`,
//! which io_uring could only hand to a kernel worker; `O_DIRECT` I/Os that
//! are not block-aligned, which the member bounces itself). Every I/O in the
//! ring owns its buffers (`slots`) until its completion arrives, even
//! when the watchdog has long given up on it: the kernel may still write
//! into them.
//!
//! Submissions come from any thread under `state`'s lock (the submission
//! queue is single-producer); completions are read by the ring's thread
//! alone. At most `room` I/Os are in the kernel at once, the completion
//! queue's size, so completions never overflow; the rest wait in
//! `backlog` and go in as completions make room. Buffers are not
//! registered with the kernel: they are the clients' own (writes) and the
//! recycled read buffers handed to the clients (reads), and a registered
//! pool would cost a copy of every byte to save a page pin per I/O.

use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use io_uring::{opcode, squeue, types, IoUring, Probe};
use platter_core::volume::{IoResult, MemberOp, Payload};

use super::queue::{Queue, Started};
use crate::buffers::{Aligned, ReadBuf};
use crate::error::{MemberError, Op};

/// Submission queue entries; the completion queue has twice as many.
const ENTRIES: u32 = 256;
/// The `user_data` of the no-op that wakes the ring's thread to stop.
const WAKE: u64 = u64::MAX;
/// Times an I/O is resubmitted after `EAGAIN`/`EINTR` before it fails.
const RETRIES_MAX: u32 = 8;
/// The kernel's io_uring workers for file I/O at most (per NUMA node),
/// and for anything else.
const IOWQ_BOUNDED_MAX: u32 = 64;
const IOWQ_UNBOUNDED_MAX: u32 = 4;
/// `O_DIRECT` memory alignment asked of write buffers (a page satisfies
/// every device; `direct.rs` asks the same).
const DIRECT_MEMORY_ALIGN_BYTES: u64 = 4096;

pub(crate) struct Ring {
    uring: IoUring,
    state: Mutex<RingState>,
    /// I/Os in the kernel at most.
    room: usize,
}

#[derive(Default)]
struct RingState {
    /// Every I/O in the ring or its backlog, by its `user_data`.
    slots: Vec<Option<InFlight>>,
    free: Vec<usize>,
    backlog: VecDeque<usize>,
    in_kernel: usize,
    stop: bool,
    /// The ring's thread has ended: nothing more may go in.
    exited: bool,
}

struct InFlight {
    queue: Arc<Queue>,
    started_seq: u64,
    at: Instant,
    op: Op,
    offset_bytes: u64,
    len_bytes: u64,
    /// Read or written so far (short transfers are resubmitted).
    moved_bytes: u64,
    retries: u32,
    io: Io,
}

enum Io {
    Read(ReadBuf),
    Write {
        data: Payload,
        /// An aligned copy of `data`, for `O_DIRECT` when its parts are not.
        bounce: Option<Aligned>,
        iovecs: IoVecs,
    },
    Flush,
    /// Refused before the kernel saw it; a no-op carries the answer back
    /// through the ring's thread (a queue must not complete an I/O on the
    /// submitting thread, which may hold locks).
    Refused(MemberError),
}

/// The vector of a `writev` in the kernel: its pointers are into `data`,
/// owned by the same [`InFlight`].
struct IoVecs(Vec<libc::iovec>);

// SAFETY: the pointers point into the `Payload` (shared, immutable
// `Bytes`) held beside them; nothing writes through them.
unsafe impl Send for IoVecs {}

impl Ring {
    /// A ring and its thread, or why not.
    pub(super) fn new() -> Result<Arc<Ring>, String> {
        let uring = IoUring::new(ENTRIES).map_err(|e| {
            let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| s != "0")
                .map(|s| format!(" (kernel.io_uring_disabled is {s})"))
                .unwrap_or_default();
            format!("the kernel refused io_uring_setup: {e}{disabled}")
        })?;
        let mut probe = Probe::new();
        uring
            .submitter()
            .register_probe(&mut probe)
            .map_err(|e| format!("the kernel's io_uring cannot be probed: {e}"))?;
        for (name, code) in [
            ("read", opcode::Read::CODE),
            ("write", opcode::Write::CODE),
            ("writev", opcode::Writev::CODE),
            ("fsync", opcode::Fsync::CODE),
            ("nop", opcode::Nop::CODE),
        ] {
            if !probe.is_supported(code) {
                return Err(format!("the kernel's io_uring has no {name} operation"));
            }
        }
        // The kernel's own workers for I/O it cannot do inline (buffered
        // writes, mostly) get a bound too: io_uring's default is the
        // process's thread limit.
        let mut workers = [IOWQ_BOUNDED_MAX, IOWQ_UNBOUNDED_MAX];
        if let Err(e) = uring.submitter().register_iowq_max_workers(&mut workers) {
            tracing::debug!(error = %e, "the kernel's io_uring workers keep their default bound");
        }
        let room = uring.params().cq_entries() as usize;
        let ring = Arc::new(Ring {
            uring,
            state: Mutex::new(RingState::default()),
            room,
        });
        let me = Arc::clone(&ring);
        std::thread::Builder::new()
            .name("platter-io-ring".into())
            .spawn(move || me.run())
            .map_err(|e| format!("cannot start the ring's thread: {e}"))?;
        Ok(ring)
    }

    fn lock(&self) -> MutexGuard<'_, RingState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `started` into the ring, or gives it back when the ring
    /// cannot perform it (the queue's threads then do).
    pub(super) fn try_push(&self, queue: &Arc<Queue>, started: Started) -> Result<(), Started> {
        let Some(target) = queue.device.ring_target() else {
            return Err(started);
        };
        let (op, offset_bytes, len_bytes) = match &started.op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => (Op::Read, *offset_bytes, *len_bytes),
            MemberOp::Write { offset_bytes, data } => (Op::Write, *offset_bytes, data.len() as u64),
            MemberOp::Flush => (Op::Flush, 0, 0),
            MemberOp::Trim { .. } => return Err(started),
        };
        let direct = target.direct_block_bytes();
        let fits = match (op, direct) {
            (Op::Flush, _) => true,
            // A buffered write cannot be done without blocking, so io_uring
            // hands it to a kernel worker, one file's writes one at a time:
            // a thread hop like ours, and the hop's time taken for the
            // device's made a tmpfs member look slow (4k random writes at
            // depth 32 fell to 0.67 of the thread pool's, bench/serve.sh).
            // The member's own call on a queue thread does it instead.
            (Op::Write, None) => false,
            // Nothing to do, or more than one kernel call can move.
            _ if len_bytes == 0 || len_bytes > u64::from(u32::MAX) => false,
            (_, Some(block)) => {
                offset_bytes.is_multiple_of(block) && len_bytes.is_multiple_of(block)
            }
            (_, None) => true,
        };
        if !fits {
            return Err(started);
        }
        let mut st = self.lock();
        if st.stop || st.exited {
            return Err(started);
        }
        let io = match (target.check_before(op, offset_bytes, len_bytes), started.op) {
            (Err(refused), _) => Io::Refused(refused),
            (Ok(()), MemberOp::Read { .. }) => {
                let align = direct.map_or(1, |b| b.max(DIRECT_MEMORY_ALIGN_BYTES)) as usize;
                Io::Read(ReadBuf::new(len_bytes as usize, align))
            }
            (Ok(()), MemberOp::Write { data, .. }) => {
                let bounce = direct.and_then(|block| bounce_if_unaligned(&data, block));
                Io::Write {
                    data,
                    bounce,
                    iovecs: IoVecs(Vec::new()),
                }
            }
            (Ok(()), _) => Io::Flush,
        };
        let flight = InFlight {
            queue: Arc::clone(queue),
            started_seq: started.seq,
            at: started.at,
            op,
            offset_bytes,
            len_bytes,
            moved_bytes: 0,
            retries: 0,
            io,
        };
        let index = match st.free.pop() {
            Some(i) => {
                st.slots[i] = Some(flight);
                i
            }
            None => {
                st.slots.push(Some(flight));
                st.slots.len() - 1
            }
        };
        if st.in_kernel < self.room {
            self.enter(&mut st, index);
        } else {
            st.backlog.push_back(index);
        }
        Ok(())
    }

    /// Puts slot `index` (what is left of it) into the submission queue
    /// and submits it.
    fn enter(&self, st: &mut RingState, index: usize) {
        let flight = st.slots[index].as_mut().expect("a slot in use");
        let target = flight
            .queue
            .device
            .ring_target()
            .expect("a member that offered its descriptor keeps offering it");
        let fd = types::Fd(target.fd());
        let at_bytes = target.base_offset_bytes() + flight.offset_bytes + flight.moved_bytes;
        let rest = (flight.len_bytes - flight.moved_bytes) as u32;
        let moved = flight.moved_bytes as usize;
        let entry: squeue::Entry = match &mut flight.io {
            Io::Refused(_) => opcode::Nop::new().build(),
            Io::Flush => opcode::Fsync::new(fd)
                .flags(types::FsyncFlags::DATASYNC)
                .build(),
            // SAFETY (pointer arithmetic): `moved` < the buffer's length.
            Io::Read(buf) => opcode::Read::new(fd, unsafe { buf.as_mut_ptr().add(moved) }, rest)
                .offset(at_bytes)
                .build(),
            Io::Write {
                bounce: Some(b), ..
            } => opcode::Write::new(fd, unsafe { b.as_mut_ptr().add(moved) }, rest)
                .offset(at_bytes)
                .build(),
            Io::Write {
                data,
                bounce: None,
                iovecs,
            } => {
                iovecs.0 = iovecs_from(data, moved);
                if let [one] = iovecs.0[..] {
                    opcode::Write::new(fd, one.iov_base as *const u8, one.iov_len as u32)
                        .offset(at_bytes)
                        .build()
                } else {
                    opcode::Writev::new(fd, iovecs.0.as_ptr(), iovecs.0.len() as u32)
                        .offset(at_bytes)
                        .build()
                }
            }
        }
        .user_data(index as u64);
        // SAFETY: submissions are made under `state`'s lock only, so the
        // submission queue has one producer at a time; every buffer the
        // entry points to lives in the slot until its completion.
        let pushed = unsafe { self.uring.submission_shared().push(&entry) }.is_ok()
            || (self.uring.submit().is_ok()
                && unsafe { self.uring.submission_shared().push(&entry) }.is_ok());
        if !pushed {
            st.backlog.push_front(index);
            return;
        }
        st.in_kernel += 1;
        if let Err(e) = self.uring.submit() {
            // Left in the submission queue: the ring's thread submits it
            // with its next wait.
            tracing::debug!(error = %e, "io_uring submit deferred");
        }
    }

    pub(super) fn stop(&self) {
        let mut st = self.lock();
        st.stop = true;
        let wake = opcode::Nop::new().build().user_data(WAKE);
        // SAFETY: under the lock, as every submission; a no-op has no buffers.
        let pushed = unsafe { self.uring.submission_shared().push(&wake) }.is_ok();
        drop(st);
        if !pushed {
            tracing::debug!("the ring's stop waits for its I/Os instead");
        }
        let _ = self.uring.submit();
    }

    /// The ring's thread: waits for completions, finishes their I/Os (or
    /// resubmits what is left of a short one), refills from the backlog.
    fn run(self: Arc<Self>) {
        loop {
            if let Err(e) = self.uring.submit_and_wait(1) {
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR | libc::EBUSY | libc::EAGAIN)
                ) {
                    tracing::error!(error = %e, "waiting for io_uring completions failed");
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            }
            let mut finished = Vec::new();
            let exit = {
                let mut st = self.lock();
                // SAFETY: only this thread reads the completion queue.
                let completions: Vec<(u64, i32)> = unsafe { self.uring.completion_shared() }
                    .map(|c| (c.user_data(), c.result()))
                    .collect();
                for (user_data, result) in completions {
                    if user_data == WAKE {
                        continue;
                    }
                    st.in_kernel -= 1;
                    if let Some(f) = self.completed(&mut st, user_data as usize, result) {
                        finished.push(f);
                    }
                }
                // Bounded by the backlog, which `enter` shrinks or leaves.
                while st.in_kernel < self.room {
                    let Some(index) = st.backlog.pop_front() else {
                        break;
                    };
                    let before = st.backlog.len();
                    self.enter(&mut st, index);
                    if st.backlog.len() > before {
                        break;
                    }
                }
                let exit = st.stop && st.in_kernel == 0 && st.backlog.is_empty();
                st.exited |= exit;
                exit
            };
            for (queue, seq, at, result) in finished {
                queue.slot_done(seq, at, result, None, true);
            }
            if exit {
                return;
            }
        }
    }

    /// What the kernel answered for slot `index`: the finished I/O, or
    /// `None` when what is left of it went back in.
    fn completed(
        &self,
        st: &mut RingState,
        index: usize,
        result: i32,
    ) -> Option<(Arc<Queue>, u64, Instant, IoResult)> {
        let flight = st.slots[index]
            .as_mut()
            .expect("a completion for a slot in use");
        let queue = Arc::clone(&flight.queue);
        let target = queue
            .device
            .ring_target()
            .expect("a member that offered its descriptor keeps offering it");
        let (op, offset_bytes, len_bytes) = (flight.op, flight.offset_bytes, flight.len_bytes);
        let outcome: Result<bool, MemberError> = if let Io::Refused(_) = flight.io {
            Ok(true)
        } else if result < 0 {
            let err = io::Error::from_raw_os_error(-result);
            if matches!(-result, libc::EAGAIN | libc::EINTR) && flight.retries < RETRIES_MAX {
                flight.retries += 1;
                self.enter(st, index);
                return None;
            }
            Err(target.error(err, op, offset_bytes, len_bytes))
        } else if op == Op::Flush {
            Ok(true)
        } else if result == 0 {
            let at = offset_bytes + flight.moved_bytes;
            let err = if op == Op::Read {
                io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "short read: end of file at byte {at} (the member is smaller than \
                         when it was opened; was it truncated?)"
                    ),
                )
            } else {
                io::Error::new(io::ErrorKind::WriteZero, "failed to write whole buffer")
            };
            Err(target.error(err, op, offset_bytes, len_bytes))
        } else {
            flight.moved_bytes += result as u64;
            if flight.moved_bytes < flight.len_bytes {
                self.enter(st, index);
                return None;
            }
            Ok(true)
        };
        let flight = st.slots[index].take().expect("a slot in use");
        st.free.push(index);
        let result: IoResult = match (outcome, flight.io) {
            (_, Io::Refused(e)) | (Err(e), _) => Err(crate::perform::io_error(e)),
            (Ok(_), Io::Read(buf)) => {
                // SAFETY: the kernel wrote all `len_bytes` of it (moved ==
                // len, checked above).
                Ok(Some(unsafe { buf.into_bytes() }))
            }
            (Ok(_), Io::Write { .. }) => target
                .check_after(op, offset_bytes, len_bytes)
                .map(|()| None)
                .map_err(crate::perform::io_error),
            (Ok(_), Io::Flush) => Ok(None),
        };
        Some((queue, flight.started_seq, flight.at, result))
    }
}

/// An aligned copy of `data` when its parts are not all aligned for
/// `O_DIRECT` (memory and length); `None` when they can go as they are.
fn bounce_if_unaligned(data: &Payload, block_bytes: u64) -> Option<Aligned> {
    let align = block_bytes.max(DIRECT_MEMORY_ALIGN_BYTES);
    let aligned = data.parts().iter().all(|p| {
        (p.as_ptr() as u64).is_multiple_of(align) && (p.len() as u64).is_multiple_of(block_bytes)
    });
    if aligned {
        return None;
    }
    let mut copy = Aligned::new(data.len(), align as usize);
    let mut at = 0;
    for part in data.parts() {
        // SAFETY: `copy` holds `data.len()` bytes, the sum of the parts.
        unsafe {
            std::ptr::copy_nonoverlapping(part.as_ptr(), copy.as_mut_ptr().add(at), part.len())
        };
        at += part.len();
    }
    Some(copy)
}

/// The `writev` vector of `data` from byte `skip` on.
fn iovecs_from(data: &Payload, mut skip: usize) -> Vec<libc::iovec> {
    let mut out = Vec::with_capacity(data.parts().len());
    for part in data.parts() {
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        out.push(libc::iovec {
            iov_base: part[skip..].as_ptr() as *mut libc::c_void,
            iov_len: part.len() - skip,
        });
        skip = 0;
    }
    out
}

#[cfg(test)]
mod tests;
