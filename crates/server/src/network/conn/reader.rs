//! The receiving side of a connection: the socket read through a buffer,
//! each request's header judged, its payload read (or discarded), and the
//! engine's request made from it. Requests that need no engine (cache,
//! block status, disconnect, refusals) are answered here.

use super::reply::block_status;
use super::{acquire, Conn, Job, READ_TICK, SLOT_WANTED_WINDOW, STALL_TICKS};
use crate::network::stream::Stream;
use bytes::Bytes;
use platter_core::buf::AlignedBuf;
use platter_core::volume::{Reply, Request};
use platter_nbd::{
    judge, parse_request_header, Command, RequestHeader, Verdict, REQUEST_HEADER_BYTES,
};
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Bytes of requests fetched from the socket at once.
const READ_BUFFER_BYTES: usize = 32 << 10;

/// The receiving side of a connection, read through a buffer: a client at
/// queue depth 32 sends its requests back to back, and one `recv` fetches
/// as many of them (headers and small payloads) as the socket holds instead
/// of two system calls per request. Payloads at least half the buffer's size
/// are read straight into their own buffer once the buffered bytes are used.
pub(super) struct Reader {
    stream: Stream,
    buf: Box<[u8]>,
    /// `buf[at..end]` is received and not yet consumed.
    at: usize,
    end: usize,
}

impl Reader {
    pub(super) fn new(stream: Stream) -> Reader {
        Reader {
            stream,
            buf: vec![0u8; READ_BUFFER_BYTES].into_boxed_slice(),
            at: 0,
            end: 0,
        }
    }

    fn buffered(&self) -> &[u8] {
        &self.buf[self.at..self.end]
    }

    fn consume(&mut self, n: usize) {
        debug_assert!(n <= self.end - self.at);
        self.at += n;
        if self.at == self.end {
            self.at = 0;
            self.end = 0;
        }
    }

    /// One `recv` into the buffer's free room, waiting at most a tick;
    /// `Ok(0)` at the end of stream.
    fn fill(&mut self) -> io::Result<usize> {
        if self.end == self.buf.len() {
            self.buf.copy_within(self.at..self.end, 0);
            self.end -= self.at;
            self.at = 0;
        }
        let n = self
            .stream
            .recv_into_waiting(&mut self.buf[self.end..], READ_TICK)?;
        self.end += n;
        Ok(n)
    }
}

/// Reads exactly `buf`, waiting through idle ticks while nothing has
/// arrived (unless the connection stops), but only `STALL_TICKS` once a
/// message has begun. `Ok(false)`: the client closed between messages.
fn read_full(conn: &Conn, r: &mut Reader, buf: &mut [u8], idle_ok: bool) -> io::Result<bool> {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and `read_into`
    // writes only initialised bytes through it.
    let raw = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
    read_into(conn, r, raw, idle_ok)
}

/// [`read_full`] into memory that need not be initialised; on `Ok(true)`
/// every byte of `buf` has been written. `Ok(false)` (only with `idle_ok`,
/// before the first byte) means the client closed between messages, and
/// nothing was written.
fn read_into(
    conn: &Conn,
    r: &mut Reader,
    buf: &mut [MaybeUninit<u8>],
    idle_ok: bool,
) -> io::Result<bool> {
    let mut at = 0;
    let mut stalled = 0;
    // Since when nothing has been in flight, while waiting for a request.
    let mut idle_since: Option<Instant> = None;
    while at < buf.len() {
        let buffered = r.buffered();
        if !buffered.is_empty() {
            let n = buffered.len().min(buf.len() - at);
            // SAFETY: `n` bytes fit both the source and `buf[at..]`; the
            // reader's buffer and `buf` are distinct allocations.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    buffered.as_ptr(),
                    buf[at..].as_mut_ptr().cast::<u8>(),
                    n,
                )
            };
            r.consume(n);
            at += n;
            continue;
        }
        // The buffer is empty: a large remainder goes straight where it
        // belongs, anything else through the buffer.
        let direct = buf.len() - at >= READ_BUFFER_BYTES / 2;
        // The system call below may wait for the client, which may be
        // waiting for replies.
        conn.replies.flush();
        let got = if direct {
            r.stream.recv_waiting(&mut buf[at..], READ_TICK)
        } else {
            r.fill()
        };
        match got {
            Ok(0) if at == 0 && idle_ok => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                if direct {
                    at += n;
                }
                stalled = 0;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                if conn.stop.load(Ordering::SeqCst) {
                    return Err(io::Error::other("connection stopping"));
                }
                if at > 0 || !idle_ok {
                    stalled += 1;
                    if stalled >= STALL_TICKS {
                        return Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            "client stalled mid-request",
                        ));
                    }
                } else if let Some(limit) = conn.shared.idle_timeout {
                    // A reply not yet sent is work in flight: the client
                    // that does not take it is timed out by the reply
                    // writer (`Replies::run_writer`).
                    if conn.budget.in_flight().0 > 0 {
                        idle_since = None;
                    } else if idle_since.get_or_insert_with(Instant::now).elapsed() >= limit
                        && conn
                            .shared
                            .slot_wanted_within(limit.max(SLOT_WANTED_WINDOW))
                    {
                        tracing::info!(
                            peer = %conn.peer,
                            idle_timeout_s = limit.as_secs(),
                            "closing an idle connection: another client wants its slot"
                        );
                        return Ok(false);
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// Reads a write's payload. When it is all buffered already (small writes
/// at depth), it is copied out without zeroing a buffer first. Otherwise it
/// is received into a fresh 64-byte aligned buffer, not zeroed first
/// either: the parity kernels take aligned client data where it lies, so a
/// full stripe of it is not copied on RAID-5 and RAID-6. (A fresh buffer beats a
/// recycled one here: docs/performance.md, "Write payloads from the
/// buffer pool".)
fn read_payload(conn: &Conn, r: &mut Reader, len: usize) -> io::Result<Bytes> {
    if r.buffered().len() >= len {
        let data = Bytes::copy_from_slice(&r.buffered()[..len]);
        r.consume(len);
        return Ok(data);
    }
    // `Ok(false)` (nothing read, the client gone) is possible only where a
    // message may end, and a payload may not: it is an error here, so
    // `Ok(())` below always means every byte was written.
    let fill = |dst: &mut [MaybeUninit<u8>]| match read_into(conn, r, dst, false)? {
        true => Ok(()),
        false => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
    };
    // SAFETY: `fill` returns `Ok` only when `read_into` returned `Ok(true)`,
    // which it does only once every byte of `dst` is written.
    let buf = unsafe { AlignedBuf::filled(len, fill) }?;
    Ok(buf.into_bytes())
}

fn discard(conn: &Conn, r: &mut Reader, mut bytes: u64) -> io::Result<()> {
    let mut buf = [0u8; 64 * 1024];
    while bytes > 0 {
        let n = bytes.min(buf.len() as u64) as usize;
        read_full(conn, r, &mut buf[..n], false)?;
        bytes -= n as u64;
    }
    Ok(())
}

/// Reads requests under the reader lock until one needs the engine;
/// requests that do not are answered here. `None`: stop.
pub(super) fn next_request(conn: &Conn, s: &mut Reader) -> io::Result<Option<Job>> {
    let mut hbuf = [0u8; REQUEST_HEADER_BYTES];
    loop {
        if conn.stop.load(Ordering::SeqCst) {
            return Ok(None);
        }
        if !read_full(conn, s, &mut hbuf, true)? {
            return Ok(None);
        }
        let Ok(h) = parse_request_header(&hbuf) else {
            tracing::warn!("bad request magic; closing the connection");
            return Ok(None);
        };
        match take_request(conn, s, &h)? {
            Taken::Stop => return Ok(None),
            Taken::Answered => continue,
            Taken::Job(job) => return Ok(Some(job)),
        }
    }
}

/// What became of one request.
enum Taken {
    /// The connection ends.
    Stop,
    /// Refused or answered without the engine.
    Answered,
    Job(Job),
}

/// One request, its header read: judged, its payload read (or discarded),
/// its share of the budget taken.
fn take_request(conn: &Conn, s: &mut Reader, h: &RequestHeader) -> io::Result<Taken> {
    let len = u64::from(h.length_bytes);
    let cookie = h.cookie;
    let cmd = match judge(h, &conn.session) {
        Verdict::Disconnect { message } => {
            tracing::warn!(%message, "closing the connection");
            return Ok(Taken::Stop);
        }
        Verdict::Run(Command::Disconnect) => return Ok(Taken::Stop),
        Verdict::Reject {
            errno,
            discard_bytes,
            message,
        } => {
            discard(conn, s, u64::from(discard_bytes))?;
            tracing::debug!(%message, errno, "request refused");
            acquire(conn, 0);
            conn.reply_error(cookie, errno, &message, 0);
            return Ok(Taken::Answered);
        }
        Verdict::Run(cmd) => cmd,
    };
    let bytes = match cmd {
        Command::Read | Command::Write { .. } => len,
        _ => 0,
    };
    // Waits while this connection's replies are unsent: a client that
    // stops reading stops being read.
    acquire(conn, bytes);
    let offset_bytes = h.offset_bytes;
    let (req, then_flush) = match cmd {
        Command::Cache => {
            conn.reply(cookie, offset_bytes, Ok(Reply::Done), 0);
            return Ok(Taken::Answered);
        }
        Command::BlockStatus { .. } => {
            block_status(conn, cookie, offset_bytes, len);
            return Ok(Taken::Answered);
        }
        cmd => engine_request(conn, s, h, cmd, bytes)?,
    };
    conn.volume().recorder.note(&req);
    if then_flush {
        conn.volume().recorder.note(&Request::Flush);
    }
    Ok(Taken::Job(Job {
        cookie,
        offset_bytes,
        req,
        then_flush,
        release_bytes: bytes,
        more_buffered: s.buffered().len() >= REQUEST_HEADER_BYTES,
    }))
}

/// The engine's request for a command, a write's payload read from the
/// socket (its budget given back if that fails), and whether a flush must
/// follow it (a FUA trim).
fn engine_request(
    conn: &Conn,
    s: &mut Reader,
    h: &RequestHeader,
    cmd: Command,
    bytes: u64,
) -> io::Result<(Request, bool)> {
    let (offset_bytes, len) = (h.offset_bytes, u64::from(h.length_bytes));
    Ok(match cmd {
        Command::Read => (
            Request::Read {
                offset_bytes,
                len_bytes: len,
            },
            false,
        ),
        Command::Write { fua } => {
            let data = match read_payload(conn, s, len as usize) {
                Ok(data) => data,
                Err(e) => {
                    conn.budget.release(bytes);
                    return Err(e);
                }
            };
            (
                Request::Write {
                    offset_bytes,
                    data,
                    fua,
                },
                false,
            )
        }
        Command::Flush => (Request::Flush, false),
        Command::Trim { fua } => (
            Request::Trim {
                offset_bytes,
                len_bytes: len,
            },
            fua,
        ),
        Command::WriteZeroes { fua, .. } => (
            Request::WriteZeroes {
                offset_bytes,
                len_bytes: len,
                fua,
            },
            false,
        ),
        Command::Cache | Command::BlockStatus { .. } | Command::Disconnect => {
            unreachable!("answered without the engine")
        }
    })
}
