//! The TLS session handed on as a plain socket.
//!
//! platter's connection code reads on one thread and writes on others,
//! each on its own clone of the socket; a TLS session is one state that
//! reads and writes alike, and OpenSSL's objects cannot be shared that
//! way. So after the handshake one thread owns the session and moves
//! bytes between it and one end of a Unix socket pair; the connection
//! gets the other end and is none the wiser. It costs a copy each way and
//! a thread per TLS connection; kernel TLS would save both, where the
//! kernel has its `tls` module.
//!
//! The thread polls both sockets (non-blocking) and holds at most one
//! buffer each way ([`CHUNK_BYTES`]): a slow reader on either side stops
//! it reading the other. It ends when either side closes: the client's
//! close is passed on (a close_notify, then the socket shut down), and so
//! is the connection's.

use crate::{Socket, TlsError};
use openssl::ssl::{ErrorCode, SslStream};
use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// The most bytes in flight each way inside the pump.
const CHUNK_BYTES: usize = 64 * 1024;

/// Starts the thread; returns the connection's end.
pub(crate) fn start<S: Socket>(ssl: SslStream<S>) -> Result<UnixStream, TlsError> {
    let (ours, theirs) = UnixStream::pair()?;
    ssl.get_ref().set_timeouts(None)?;
    ssl.get_ref().set_nonblocking(true)?;
    ours.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("tls pump".into())
        .spawn(move || {
            if let Err(e) = run(ssl, ours) {
                tracing::debug!(error = %e, "TLS connection ended");
            }
        })?;
    Ok(theirs)
}

/// Bytes read from one side and not yet written to the other:
/// `data[at..]`.
struct Pending {
    data: Vec<u8>,
    at: usize,
}

impl Pending {
    fn new() -> Pending {
        Pending {
            data: Vec::with_capacity(CHUNK_BYTES),
            at: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.at == self.data.len()
    }

    /// Reads into the (empty) buffer with `read`; `Ok(None)` at the end.
    fn fill(
        &mut self,
        read: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<Option<usize>> {
        self.data.resize(CHUNK_BYTES, 0);
        self.at = 0;
        let r = read(&mut self.data);
        let n = *r.as_ref().unwrap_or(&0);
        self.data.truncate(n);
        match r {
            Ok(0) => Ok(None),
            Ok(n) => Ok(Some(n)),
            Err(e) => Err(e),
        }
    }
}

fn ssl_err(e: openssl::ssl::Error) -> io::Error {
    match e.code() {
        ErrorCode::WANT_READ | ErrorCode::WANT_WRITE => {
            io::Error::new(io::ErrorKind::WouldBlock, e.to_string())
        }
        _ => io::Error::other(e.to_string()),
    }
}

fn run<S: Socket>(mut ssl: SslStream<S>, mut plain: UnixStream) -> io::Result<()> {
    let mut out = Pending::new(); // plain → TLS
    let mut inn = Pending::new(); // TLS → plain
    let (mut plain_eof, mut net_eof) = (false, false);
    // The session wants the socket readable (or writable) before a write
    // (or read) can go on.
    let (mut write_wants_read, mut read_wants_write) = (false, false);
    loop {
        let mut moved = false;
        if out.is_empty() && !plain_eof {
            match out.fill(|b| plain.read(b)) {
                Ok(None) => plain_eof = true,
                Ok(Some(_)) => moved = true,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if !out.is_empty() {
            write_wants_read = false;
            match ssl.ssl_write(&out.data[out.at..]) {
                Ok(n) => {
                    out.at += n;
                    moved = true;
                }
                Err(e) if e.code() == ErrorCode::WANT_WRITE => {}
                Err(e) if e.code() == ErrorCode::WANT_READ => write_wants_read = true,
                Err(e) => return Err(ssl_err(e)),
            }
        }
        if inn.is_empty() && !net_eof {
            read_wants_write = false;
            let mut code = None;
            let r = inn.fill(|b| {
                ssl.ssl_read(b).map_err(|e| {
                    code = Some(e.code());
                    ssl_err(e)
                })
            });
            match (r, code) {
                (Ok(None), _) => net_eof = true,
                (Ok(Some(_)), _) => moved = true,
                (Err(_), Some(ErrorCode::ZERO_RETURN | ErrorCode::SYSCALL)) => net_eof = true,
                (Err(_), Some(ErrorCode::WANT_READ)) => {}
                (Err(_), Some(ErrorCode::WANT_WRITE)) => read_wants_write = true,
                (Err(e), _) => return Err(e),
            }
        }
        if !inn.is_empty() {
            match plain.write(&inn.data[inn.at..]) {
                Ok(n) => {
                    inn.at += n;
                    moved = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        if plain_eof && out.is_empty() {
            // The connection is done: say so to the peer, then close.
            let _ = ssl.shutdown();
            ssl.get_ref().shutdown_both();
            return Ok(());
        }
        if net_eof && inn.is_empty() {
            let _ = plain.shutdown(std::net::Shutdown::Both);
            ssl.get_ref().shutdown_both();
            return Ok(());
        }
        if moved {
            continue;
        }
        let mut net_events = 0;
        if (inn.is_empty() && !net_eof) || write_wants_read {
            net_events |= libc::POLLIN;
        }
        if (!out.is_empty() && !write_wants_read) || read_wants_write {
            net_events |= libc::POLLOUT;
        }
        let mut plain_events = 0;
        if out.is_empty() && !plain_eof {
            plain_events |= libc::POLLIN;
        }
        if !inn.is_empty() {
            plain_events |= libc::POLLOUT;
        }
        let mut fds = [
            libc::pollfd {
                fd: ssl.get_ref().as_raw_fd(),
                events: net_events,
                revents: 0,
            },
            libc::pollfd {
                fd: plain.as_raw_fd(),
                events: plain_events,
                revents: 0,
            },
        ];
        // SAFETY: `fds` is a valid array of two pollfd for the length
        // given, alive across the call; both descriptors are owned here.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, 1000) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}
