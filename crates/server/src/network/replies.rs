//! A connection's outgoing replies.
//!
//! Any thread may finish any connection's request (a member I/O thread
//! completes whichever request its I/O ends), so a reply must never block its writer on a client
//! that does not read. Replies are queued and written with non-blocking sends
//! by one thread at a time, which keeps each reply's bytes together: the
//! thread whose push finds nobody sending takes the whole queue out, sends
//! it in one `sendmsg` outside the lock, and comes back for what was queued
//! meanwhile, so replies finished together leave together. When the socket
//! is full, the connection's own writer thread waits for room (outside the
//! lock) and carries on. Every queued reply holds its share of the
//! connection's budget until its last byte is sent, so a client that stops
//! reading stops its own reader, and nobody else.

use crate::network::flow::Budget;
use bytes::Bytes;
use smallvec::SmallVec;
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// iovecs gathered into one `sendmsg` (Linux's IOV_MAX is 1024).
const IOV_MAX: usize = 1024;
/// Batches a pushing thread sends before it leaves the rest to the writer.
const SEND_ROUNDS: usize = 4;

pub struct Chunk {
    /// The reply header (and an error message, rarely longer).
    pub head: SmallVec<[u8; 32]>,
    /// Read data, as the engine's segments (not copied together).
    pub data: SmallVec<[Bytes; 2]>,
    /// Budget bytes released once this chunk is sent (or dropped).
    pub release_bytes: u64,
}

struct State {
    queue: VecDeque<Chunk>,
    /// Bytes of the first chunk already sent.
    sent_bytes: usize,
    /// The writer thread owns the queue until it empties.
    handed_off: bool,
    /// A pushing thread is sending a batch it took out of the queue, outside
    /// the lock; replies pushed meanwhile wait for it to come back for them,
    /// so that replies finished together leave in one `sendmsg`.
    sending: bool,
    /// An empty queue kept for its capacity (batches swap with the queue).
    spare: VecDeque<Chunk>,
    broken: bool,
    closed: bool,
}

pub struct Replies {
    fd: RawFd,
    budget: Arc<Budget>,
    state: Mutex<State>,
    wake: Condvar,
    /// Bytes sent in all, so the writer can tell a client that takes none
    /// of its replies.
    sent_bytes_total: AtomicU64,
    /// A client that takes no reply bytes for this long is disconnected
    /// (`--idle-timeout`): its replies hold budget the whole server shares.
    stall_limit: Option<Duration>,
    /// Who the client is, for the log.
    peer: String,
}

enum Progress {
    Empty,
    Full,
    Failed(io::Error),
}

impl Replies {
    /// `fd` must stay open for the life of this queue (the connection owns it).
    pub fn new(
        fd: RawFd,
        budget: Arc<Budget>,
        stall_limit: Option<Duration>,
        peer: String,
    ) -> Replies {
        Replies {
            fd,
            budget,
            state: Mutex::new(State {
                queue: VecDeque::new(),
                sent_bytes: 0,
                handed_off: false,
                sending: false,
                spare: VecDeque::new(),
                broken: false,
                closed: false,
            }),
            wake: Condvar::new(),
            sent_bytes_total: AtomicU64::new(0),
            stall_limit,
            peer,
        }
    }

    /// Queues `chunk` and sends what is queued, unless `corked`: then it
    /// waits in the queue for the next send. Whoever corks a reply must
    /// [`flush`](Replies::flush) before it next waits for anything.
    pub fn push(&self, chunk: Chunk, corked: bool) {
        let mut st = self.state.lock().expect("reply queue lock");
        if st.broken {
            drop(st);
            self.budget.release(chunk.release_bytes);
            return;
        }
        st.queue.push_back(chunk);
        if corked {
            return;
        }
        self.send_queued(st);
    }

    /// Sends the replies queued and corked, if nobody else is sending them.
    pub fn flush(&self) {
        let st = self.state.lock().expect("reply queue lock");
        if st.queue.is_empty() {
            return;
        }
        self.send_queued(st);
    }

    fn send_queued<'a>(&'a self, mut st: std::sync::MutexGuard<'a, State>) {
        if st.handed_off || st.sending || st.broken {
            return;
        }
        st.sending = true;
        // Each round sends what was queued when it began; a thread that
        // keeps finding more after a few rounds leaves it to the writer
        // thread and goes back to its own work.
        for _ in 0..SEND_ROUNDS {
            let mut batch = std::mem::take(&mut st.spare);
            std::mem::swap(&mut batch, &mut st.queue);
            let mut sent_bytes = std::mem::take(&mut st.sent_bytes);
            drop(st);
            let progress = self.send_some(&mut batch, &mut sent_bytes);
            st = self.state.lock().expect("reply queue lock");
            if batch.is_empty() {
                st.spare = batch;
            } else {
                // Unsent replies go back ahead of those queued meanwhile.
                batch.append(&mut st.queue);
                st.spare = std::mem::replace(&mut st.queue, batch);
            }
            st.sent_bytes = sent_bytes;
            match progress {
                Progress::Empty if st.queue.is_empty() => {
                    st.sending = false;
                    // The connection may have closed the queue while this
                    // batch was out (its budget is released as it is
                    // sent); the writer, which saw `sending`, waits for
                    // word that it is over.
                    if st.closed {
                        self.wake.notify_all();
                    }
                    return;
                }
                Progress::Empty => {}
                Progress::Full => break,
                Progress::Failed(e) => {
                    st.sending = false;
                    self.fail(&mut st, e);
                    return;
                }
            }
        }
        st.sending = false;
        st.handed_off = true;
        self.wake.notify_one();
    }

    /// The connection's writer thread: waits for room on the socket when the
    /// queue was handed off, until the queue is closed and empty or broken.
    pub fn run_writer(&self) {
        let mut st = self.state.lock().expect("reply queue lock");
        // Since when the client has taken none of the bytes waiting for it.
        let mut stalled_since: Option<Instant> = None;
        // Each round either sends bytes, waits for room (bounded by the poll
        // timeout), or ends; a dead peer makes sends fail and ends it.
        loop {
            if st.broken || (st.closed && st.queue.is_empty() && !st.sending) {
                return;
            }
            if !st.handed_off {
                stalled_since = None;
                st = self.wake.wait(st).expect("reply queue lock");
                continue;
            }
            drop(st);
            let mut pfd = libc::pollfd {
                fd: self.fd,
                events: libc::POLLOUT,
                revents: 0,
            };
            // SAFETY: one valid pollfd that lives across the call.
            unsafe { libc::poll(&mut pfd, 1, 1000) };
            st = self.state.lock().expect("reply queue lock");
            let st = &mut *st;
            let sent_before = self.sent_bytes_total.load(Ordering::Relaxed);
            match self.send_some(&mut st.queue, &mut st.sent_bytes) {
                Progress::Empty => st.handed_off = false,
                Progress::Full if self.sent_bytes_total.load(Ordering::Relaxed) != sent_before => {
                    stalled_since = None;
                }
                Progress::Full => {
                    let since = *stalled_since.get_or_insert_with(Instant::now);
                    if let Some(limit) = self.stall_limit.filter(|l| since.elapsed() >= *l) {
                        tracing::info!(
                            peer = %self.peer,
                            idle_timeout_s = limit.as_secs(),
                            "client takes none of its replies; closing the connection"
                        );
                        // The reader may wait for budget these replies hold,
                        // or for the client: both end once the socket does.
                        // SAFETY: shutdown on the connection's open socket.
                        unsafe { libc::shutdown(self.fd, libc::SHUT_RDWR) };
                        self.fail(st, io::Error::from(io::ErrorKind::TimedOut));
                    }
                }
                Progress::Failed(e) => self.fail(st, e),
            }
        }
    }

    /// No more replies will be pushed; the writer ends once the queue drains.
    pub fn close(&self) {
        let mut st = self.state.lock().expect("reply queue lock");
        st.closed = true;
        self.wake.notify_all();
    }

    fn fail(&self, st: &mut State, e: io::Error) {
        tracing::debug!(error = %e, "reply write failed; dropping the connection's replies");
        st.broken = true;
        st.sent_bytes = 0;
        for c in st.queue.drain(..) {
            self.budget.release(c.release_bytes);
        }
        self.wake.notify_all();
    }

    /// Sends as much of `queue` as the socket takes without blocking;
    /// `sent_bytes` of its first chunk are gone already.
    fn send_some(&self, queue: &mut VecDeque<Chunk>, sent_bytes: &mut usize) -> Progress {
        loop {
            if queue.is_empty() {
                return Progress::Empty;
            }
            let mut iov: SmallVec<[libc::iovec; 64]> = SmallVec::new();
            let mut skip = *sent_bytes;
            for c in queue.iter() {
                // A chunk has at most READ_SEGMENTS_MAX + 1 parts.
                if iov.len() + 1 + c.data.len() > IOV_MAX {
                    break;
                }
                let parts = std::iter::once(&c.head[..]).chain(c.data.iter().map(|b| &b[..]));
                for part in parts {
                    if skip >= part.len() {
                        skip -= part.len();
                        continue;
                    }
                    let rest = &part[skip..];
                    skip = 0;
                    iov.push(libc::iovec {
                        iov_base: rest.as_ptr() as *mut libc::c_void,
                        iov_len: rest.len(),
                    });
                }
            }
            // SAFETY: msghdr is plain data; the iovecs point into chunks the
            // queue owns and keeps unchanged until after the call.
            let sent = unsafe {
                let mut msg: libc::msghdr = std::mem::zeroed();
                msg.msg_iov = iov.as_mut_ptr();
                msg.msg_iovlen = iov.len() as _;
                libc::sendmsg(self.fd, &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
            };
            if sent < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Progress::Full,
                    io::ErrorKind::Interrupted => continue,
                    _ => return Progress::Failed(e),
                }
            }
            self.sent_bytes_total
                .fetch_add(sent as u64, Ordering::Relaxed);
            let mut sent = sent as usize;
            while sent > 0 {
                let c = queue.front().expect("sent bytes belong to queued chunks");
                let left =
                    c.head.len() + c.data.iter().map(Bytes::len).sum::<usize>() - *sent_bytes;
                if sent >= left {
                    sent -= left;
                    *sent_bytes = 0;
                    let c = queue.pop_front().expect("front exists");
                    self.budget.release(c.release_bytes);
                } else {
                    *sent_bytes += sent;
                    sent = 0;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    /// The story: `bench/serve.sh` hung at its final SIGTERM. A connection
    /// had seen its budget empty and closed its reply queue, and its writer
    /// thread waited forever. The last reply's budget is released inside
    /// `send_some`, while the pushing thread still counts as `sending`;
    /// the connection closed the queue in that window, the writer saw
    /// `sending` and went back to sleep, and the pusher then cleared
    /// `sending` without waking it. Ending a send on a closed queue must
    /// wake the writer.
    #[test]
    fn closing_while_the_last_reply_is_being_sent_ends_the_writer() {
        for round in 0..2000 {
            let (ours, mut theirs) = UnixStream::pair().unwrap();
            let budget = Arc::new(Budget::new(8, 1 << 20));
            let replies = Arc::new(Replies::new(
                ours.as_raw_fd(),
                Arc::clone(&budget),
                None,
                "test".into(),
            ));
            let writer = {
                let r = Arc::clone(&replies);
                std::thread::spawn(move || r.run_writer())
            };
            budget.acquire(0);
            let pusher = {
                let r = Arc::clone(&replies);
                std::thread::spawn(move || {
                    r.push(
                        Chunk {
                            head: SmallVec::from_slice(&[7u8; 16]),
                            data: SmallVec::new(),
                            release_bytes: 0,
                        },
                        false,
                    )
                })
            };
            budget.wait_empty();
            replies.close();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = writer.join();
                let _ = tx.send(());
            });
            assert!(
                rx.recv_timeout(Duration::from_secs(5)).is_ok(),
                "round {round}: the writer did not end after close"
            );
            pusher.join().unwrap();
            let mut got = [0u8; 16];
            std::io::Read::read_exact(&mut theirs, &mut got).unwrap();
            assert_eq!(got, [7u8; 16]);
        }
    }
}
