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

fn run<S: Socket>(ssl: SslStream<S>, plain: UnixStream) -> io::Result<()> {
    let mut p = Pump {
        ssl,
        plain,
        out: Pending::new(),
        inn: Pending::new(),
        plain_eof: false,
        net_eof: false,
        write_wants_read: false,
        read_wants_write: false,
    };
    loop {
        // An interrupted read or write of the plain socket starts the
        // round again.
        let moved = match p.move_bytes() {
            Ok(moved) => moved,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if p.close_if_done() {
            return Ok(());
        }
        if !moved {
            p.wait()?;
        }
    }
}

/// The session, the connection's socket, and what is in flight each way.
struct Pump<S: Socket> {
    ssl: SslStream<S>,
    plain: UnixStream,
    /// plain → TLS
    out: Pending,
    /// TLS → plain
    inn: Pending,
    plain_eof: bool,
    net_eof: bool,
    // The session wants the socket readable (or writable) before a write
    // (or read) can go on.
    write_wants_read: bool,
    read_wants_write: bool,
}

impl<S: Socket> Pump<S> {
    /// One round each way; whether any byte moved.
    fn move_bytes(&mut self) -> io::Result<bool> {
        let mut moved = self.read_plain()?;
        moved |= self.write_tls()?;
        moved |= self.read_tls()?;
        moved |= self.write_plain()?;
        Ok(moved)
    }

    fn read_plain(&mut self) -> io::Result<bool> {
        if !self.out.is_empty() || self.plain_eof {
            return Ok(false);
        }
        let plain = &mut self.plain;
        match self.out.fill(|b| plain.read(b)) {
            Ok(None) => self.plain_eof = true,
            Ok(Some(_)) => return Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
        Ok(false)
    }

    fn write_tls(&mut self) -> io::Result<bool> {
        if self.out.is_empty() {
            return Ok(false);
        }
        self.write_wants_read = false;
        match self.ssl.ssl_write(&self.out.data[self.out.at..]) {
            Ok(n) => {
                self.out.at += n;
                return Ok(true);
            }
            Err(e) if e.code() == ErrorCode::WANT_WRITE => {}
            Err(e) if e.code() == ErrorCode::WANT_READ => self.write_wants_read = true,
            Err(e) => return Err(ssl_err(e)),
        }
        Ok(false)
    }

    fn read_tls(&mut self) -> io::Result<bool> {
        if !self.inn.is_empty() || self.net_eof {
            return Ok(false);
        }
        self.read_wants_write = false;
        let mut code = None;
        let ssl = &mut self.ssl;
        let r = self.inn.fill(|b| {
            ssl.ssl_read(b).map_err(|e| {
                code = Some(e.code());
                ssl_err(e)
            })
        });
        match (r, code) {
            (Ok(None), _) => self.net_eof = true,
            (Ok(Some(_)), _) => return Ok(true),
            (Err(_), Some(ErrorCode::ZERO_RETURN | ErrorCode::SYSCALL)) => self.net_eof = true,
            (Err(_), Some(ErrorCode::WANT_READ)) => {}
            (Err(_), Some(ErrorCode::WANT_WRITE)) => self.read_wants_write = true,
            (Err(e), _) => return Err(e),
        }
        Ok(false)
    }

    fn write_plain(&mut self) -> io::Result<bool> {
        if self.inn.is_empty() {
            return Ok(false);
        }
        match self.plain.write(&self.inn.data[self.inn.at..]) {
            Ok(n) => {
                self.inn.at += n;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Once a side has closed and everything it sent is passed on, the
    /// close is passed on too; true then.
    fn close_if_done(&mut self) -> bool {
        if self.plain_eof && self.out.is_empty() {
            // The connection is done: say so to the peer, then close.
            let _ = self.ssl.shutdown();
            self.ssl.get_ref().shutdown_both();
            return true;
        }
        if self.net_eof && self.inn.is_empty() {
            let _ = self.plain.shutdown(std::net::Shutdown::Both);
            self.ssl.get_ref().shutdown_both();
            return true;
        }
        false
    }

    /// Waits (up to a second) for either socket to be ready for what the
    /// pump wants of it next.
    fn wait(&self) -> io::Result<()> {
        let (out, inn) = (&self.out, &self.inn);
        let mut net_events = 0;
        if (inn.is_empty() && !self.net_eof) || self.write_wants_read {
            net_events |= libc::POLLIN;
        }
        if (!out.is_empty() && !self.write_wants_read) || self.read_wants_write {
            net_events |= libc::POLLOUT;
        }
        let mut plain_events = 0;
        if out.is_empty() && !self.plain_eof {
            plain_events |= libc::POLLIN;
        }
        if !inn.is_empty() {
            plain_events |= libc::POLLOUT;
        }
        let mut fds = [
            libc::pollfd {
                fd: self.ssl.get_ref().as_raw_fd(),
                events: net_events,
                revents: 0,
            },
            libc::pollfd {
                fd: self.plain.as_raw_fd(),
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
        Ok(())
    }
}
