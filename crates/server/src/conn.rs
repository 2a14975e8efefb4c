//! One client connection: the handshake, then a reader that parses requests
//! and hands them to the workers; replies are written by whichever worker
//! finishes a request, under the connection's write lock.

use crate::engine::Engine;
use crate::flow::Budget;
use crate::stream::Stream;
use crate::workers::Job;
use bytes::Bytes;
use platter_core::volume::{ErrorKind, Reply, Request, VolumeError};
use platter_nbd::consts::*;
use platter_nbd::{
    judge, parse_request_header, Command, HandshakeConfig, HandshakeState, Negotiated,
    RequestHeader, ServerHandshake, Session, Verdict, REQUEST_HEADER_BYTES,
};
use std::io::{self, Read};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A handshake that takes longer than this is abandoned.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Requests one connection may have in flight.
const CONN_MAX_REQUESTS: u64 = 128;

/// What every connection shares.
pub struct Shared {
    pub engine: Arc<Engine>,
    pub handshake: HandshakeConfig,
    pub budget: Budget,
    pub shutting_down: AtomicBool,
    pub workers: Mutex<Option<SyncSender<Job>>>,
}

struct Writer {
    stream: Mutex<Stream>,
    structured: bool,
    broken: AtomicBool,
}

impl Writer {
    fn send(&self, parts: &[&[u8]]) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let mut s = self.stream.lock().expect("writer lock");
        if let Err(e) = s.write_parts(parts) {
            // The client went away; its remaining replies have nowhere to go.
            tracing::debug!(error = %e, "reply write failed; dropping connection");
            self.broken.store(true, Ordering::Relaxed);
            s.shutdown(Shutdown::Both);
        }
    }

    fn error(&self, cookie: u64, errno: u32, message: &str) {
        if self.structured {
            self.send(&[&platter_nbd::structured_error(cookie, errno, message)]);
        } else {
            self.send(&[&platter_nbd::simple_reply(cookie, errno)]);
        }
    }

    fn ok(&self, cookie: u64) {
        if self.structured {
            self.send(&[&platter_nbd::structured_none(cookie)]);
        } else {
            self.send(&[&platter_nbd::simple_reply(cookie, 0)]);
        }
    }

    fn data(&self, cookie: u64, offset_bytes: u64, data: &Bytes) {
        if self.structured {
            let h = platter_nbd::structured_offset_data_header(
                cookie,
                offset_bytes,
                data.len() as u32,
                true,
            );
            self.send(&[&h, data]);
        } else {
            self.send(&[&platter_nbd::simple_reply(cookie, 0), data]);
        }
    }
}

fn errno_of(e: &VolumeError) -> u32 {
    match e.kind {
        ErrorKind::Io => NBD_EIO,
        ErrorKind::OutOfRange => NBD_EINVAL,
        ErrorKind::Busy => NBD_ENOMEM,
    }
}

/// Serves one connection until the client leaves or the server shuts down.
pub fn serve(stream: Stream, shared: Arc<Shared>, peer: String) {
    let negotiated = match handshake(&stream, &shared) {
        Ok(Some(n)) => n,
        Ok(None) => {
            // The accept loop holds a clone of the socket until it reaps
            // this thread: close it now so the client sees EOF at once.
            stream.shutdown(Shutdown::Both);
            return;
        }
        Err(e) => {
            tracing::debug!(%peer, error = %e, "handshake ended");
            stream.shutdown(Shutdown::Both);
            return;
        }
    };
    tracing::debug!(%peer, structured = negotiated.structured_replies, "client connected");
    if let Err(e) = transmission(stream, &shared, negotiated) {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
    tracing::debug!(%peer, "client disconnected");
}

fn handshake(stream: &Stream, shared: &Shared) -> io::Result<Option<Negotiated>> {
    let mut s = stream.try_clone()?;
    s.set_read_timeout(Some(HANDSHAKE_TIMEOUT))?;
    s.set_write_timeout(Some(HANDSHAKE_TIMEOUT))?;
    let mut hs = ServerHandshake::new(shared.handshake.clone());
    let mut buf = vec![0u8; 64 * 1024];
    // Every round either reads at least one byte or ends the handshake, and
    // the handshake bounds options and their sizes.
    loop {
        let out = hs.take_output();
        if !out.is_empty() {
            s.write_parts(&[&out])?;
        }
        match hs.state() {
            HandshakeState::Negotiating => {}
            HandshakeState::Transmission(n) => {
                let n = n.clone();
                s.set_read_timeout(None)?;
                s.set_write_timeout(None)?;
                return Ok(Some(n));
            }
            HandshakeState::Closed(reason) => {
                tracing::debug!(?reason, "handshake closed");
                return Ok(None);
            }
        }
        let want = hs.wanted_bytes().clamp(1, buf.len());
        let got = s.read(&mut buf[..want])?;
        if got == 0 {
            return Ok(None);
        }
        let mut fed = 0;
        while fed < got {
            let used = hs.feed(&buf[fed..got]);
            if used == 0 {
                break;
            }
            fed += used;
        }
    }
}

fn read_exact_or_eof(s: &mut Stream, buf: &mut [u8]) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match s.read(&mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn discard(s: &mut Stream, mut bytes: u64) -> io::Result<()> {
    let mut buf = [0u8; 64 * 1024];
    while bytes > 0 {
        let n = bytes.min(buf.len() as u64) as usize;
        if !read_exact_or_eof(s, &mut buf[..n])? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        bytes -= n as u64;
    }
    Ok(())
}

fn transmission(stream: Stream, shared: &Arc<Shared>, n: Negotiated) -> io::Result<()> {
    let export = &shared.handshake.exports[n.export_index];
    let session = n.session(export);
    let writer = Arc::new(Writer {
        stream: Mutex::new(stream.try_clone()?),
        structured: n.structured_replies,
        broken: AtomicBool::new(false),
    });
    let conn = Arc::new(Budget::new(CONN_MAX_REQUESTS, u64::MAX));
    let mut reader = stream;
    let result = read_requests(&mut reader, shared, &session, &writer, &conn);
    // Every request read gets its reply before the socket closes.
    conn.wait_empty();
    reader.shutdown(Shutdown::Both);
    result
}

fn read_requests(
    s: &mut Stream,
    shared: &Arc<Shared>,
    session: &Session,
    writer: &Arc<Writer>,
    conn: &Arc<Budget>,
) -> io::Result<()> {
    let mut hbuf = [0u8; REQUEST_HEADER_BYTES];
    loop {
        if !read_exact_or_eof(s, &mut hbuf)? {
            return Ok(());
        }
        let h = match parse_request_header(&hbuf) {
            Ok(h) => h,
            Err(_) => {
                tracing::warn!("bad request magic; closing the connection");
                return Ok(());
            }
        };
        let verdict = judge(&h, session);
        if shared.shutting_down.load(Ordering::Relaxed) {
            match verdict {
                Verdict::Run(Command::Disconnect) | Verdict::Disconnect { .. } => return Ok(()),
                Verdict::Run(Command::Write { .. }) => discard(s, u64::from(h.length_bytes))?,
                Verdict::Reject { discard_bytes, .. } => discard(s, u64::from(discard_bytes))?,
                Verdict::Run(_) => {}
            }
            writer.error(h.cookie, NBD_ESHUTDOWN, "server is shutting down");
            continue;
        }
        match verdict {
            Verdict::Disconnect { message } => {
                tracing::warn!(%message, "closing the connection");
                return Ok(());
            }
            Verdict::Reject {
                errno,
                discard_bytes,
                message,
            } => {
                discard(s, u64::from(discard_bytes))?;
                tracing::debug!(%message, errno, "request refused");
                writer.error(h.cookie, errno, &message);
            }
            Verdict::Run(cmd) => {
                if !run(s, shared, session, writer, conn, &h, cmd)? {
                    return Ok(());
                }
            }
        }
    }
}

/// Starts one valid request; false when the client asked to disconnect.
fn run(
    s: &mut Stream,
    shared: &Arc<Shared>,
    session: &Session,
    writer: &Arc<Writer>,
    conn: &Arc<Budget>,
    h: &RequestHeader,
    cmd: Command,
) -> io::Result<bool> {
    let (cookie, offset_bytes, len) = (h.cookie, h.offset_bytes, u64::from(h.length_bytes));
    match cmd {
        Command::Disconnect => return Ok(false),
        Command::Cache => {
            writer.ok(cookie);
            return Ok(true);
        }
        Command::BlockStatus { .. } => {
            // Everything reads back as data: no allocation map is kept.
            let len = len.min(session.size_bytes - offset_bytes) as u32;
            for (id, _) in &session.meta_contexts {
                let last = *id == session.meta_contexts.last().map(|c| c.0).unwrap_or(*id);
                writer.send(&[&platter_nbd::structured_block_status(
                    cookie,
                    *id,
                    &[(len, 0)],
                    last,
                )]);
            }
            return Ok(true);
        }
        Command::Read
        | Command::Write { .. }
        | Command::Flush
        | Command::Trim { .. }
        | Command::WriteZeroes { .. } => {}
    };
    let bytes = match cmd {
        Command::Read | Command::Write { .. } => len,
        _ => 0,
    };
    conn.acquire(0);
    shared.budget.acquire(bytes);
    // Checked again under the budget: the shutdown waits for the budget to
    // empty, so a request either counts there or sees the flag.
    if shared.shutting_down.load(Ordering::SeqCst) {
        shared.budget.release(bytes);
        conn.release(0);
        if let Command::Write { .. } = cmd {
            discard(s, len)?;
        }
        writer.error(cookie, NBD_ESHUTDOWN, "server is shutting down");
        return Ok(true);
    }
    let (req, then_flush) = match cmd {
        Command::Read => (
            Request::Read {
                offset_bytes,
                len_bytes: len,
            },
            false,
        ),
        Command::Write { fua } => {
            let mut data = vec![0u8; len as usize];
            let read = read_exact_or_eof(s, &mut data);
            if !matches!(read, Ok(true)) {
                shared.budget.release(bytes);
                conn.release(0);
                read?;
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            (
                Request::Write {
                    offset_bytes,
                    data: Bytes::from(data),
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
        Command::Disconnect | Command::Cache | Command::BlockStatus { .. } => {
            unreachable!("answered above")
        }
    };
    let engine = Arc::clone(&shared.engine);
    let writer = Arc::clone(writer);
    let conn = Arc::clone(conn);
    let shared2 = Arc::clone(shared);
    let job: Job = Box::new(move || {
        let finish = move |result: Result<Reply, VolumeError>| {
            match result {
                Ok(Reply::Data(d)) => writer.data(cookie, offset_bytes, &d),
                Ok(Reply::Done) => writer.ok(cookie),
                Err(e) => writer.error(cookie, errno_of(&e), &e.message),
            }
            shared2.budget.release(bytes);
            conn.release(0);
        };
        if then_flush {
            let e2 = Arc::clone(&engine);
            engine.submit(
                req,
                Box::new(move |r| match r {
                    Ok(_) => e2.submit(Request::Flush, Box::new(finish)),
                    Err(e) => finish(Err(e)),
                }),
            );
        } else {
            engine.submit(req, Box::new(finish));
        }
    });
    let tx = shared
        .workers
        .lock()
        .expect("workers lock")
        .clone()
        .expect("workers run while connections do");
    tx.send(job).expect("workers outlive connections");
    Ok(true)
}
