//! One connection to an NBD server: the socket, the handshake, and many
//! requests in flight on it.
//!
//! Callers on any thread send a request and wait for its reply; one reader
//! thread per connection owns the socket's read side, feeds every byte to
//! the sans-I/O [`ClientSession`] and hands each completion to the caller
//! waiting for its cookie. A request's header and payload go out whole
//! under the writer's lock, so requests from several threads never
//! interleave on the wire.
//!
//! A connection that breaks (the server closed it, a socket error, a reply
//! the protocol forbids, no reply within the deadline) is dead for good:
//! every request waiting on it and every later one fails with the reason,
//! and the socket is shut down so that nothing more is read from a server
//! that cannot be trusted with the stream.

use crate::socket::recv_into_when_readable;
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream, ToSocketAddrs};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use platter_nbd::{
    ClientConfig, ClientError, ClientHandshake, ClientRequest, ClientSession, ClientState,
    Endpoint, Export, ReplyError, RequestError,
};

/// Why a connection we closed ourselves is dead.
const CLOSED: &str = "closed";
/// Bytes the reader asks the socket for at once.
const READ_CHUNK_BYTES: usize = 256 * 1024;
/// Parts a started write's payload may have: a bound on the slices built
/// for it (more take the blocking path, which gathers them).
pub(crate) const MAX_PAYLOAD_PARTS: usize = 4096;
/// Messages a handshake may take (each option and its replies): a bound on
/// its loop, far above what a server sends.
const MAX_HANDSHAKE_STEPS: usize = 1024;

/// The socket, TCP or Unix.
#[derive(Debug)]
pub(crate) enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Stream {
    fn try_clone(&self) -> io::Result<Stream> {
        Ok(match self {
            Stream::Tcp(s) => Stream::Tcp(s.try_clone()?),
            Stream::Unix(s) => Stream::Unix(s.try_clone()?),
        })
    }

    fn shutdown(&self) {
        // Already shut down or reset: nothing left to stop.
        let _ = match self {
            Stream::Tcp(s) => s.shutdown(Shutdown::Both),
            Stream::Unix(s) => s.shutdown(Shutdown::Both),
        };
    }

    /// Reads what has arrived, waiting at most `wait` for the first byte
    /// (see [`recv_when_readable`](crate::socket::recv_when_readable): why
    /// not a blocking `recv`).
    fn read_when_readable(&self, buf: &mut [u8], wait: Duration) -> io::Result<usize> {
        let fd = match self {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        };
        recv_into_when_readable(fd, buf, wait)
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }

    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_write_timeout(t),
            Stream::Unix(s) => s.set_write_timeout(t),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write_vectored(bufs),
            Stream::Unix(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Why a connection could not be made.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    #[error("cannot connect: {0}")]
    Dial(io::Error),
    #[error("{0}")]
    Handshake(ClientError),
    #[error("the handshake failed: {0}")]
    Io(io::Error),
    #[error("{0}")]
    Tls(platter_tls::TlsError),
}

/// TLS for a member's connection: the client's credentials and the name
/// the server's certificate must carry.
pub(crate) struct Tls {
    pub client: platter_tls::ClientTls,
    pub host: String,
}

/// Opens the socket to `endpoint`, giving up after `timeout`.
pub(crate) fn dial(endpoint: &Endpoint, timeout: Duration) -> Result<Stream, ConnectError> {
    match endpoint {
        Endpoint::Tcp { host, port } => {
            let addrs: Vec<_> = (host.as_str(), *port)
                .to_socket_addrs()
                .map_err(ConnectError::Dial)?
                .collect();
            let mut last =
                io::Error::new(io::ErrorKind::NotFound, format!("{host} has no address"));
            for a in addrs {
                match TcpStream::connect_timeout(&a, timeout) {
                    Ok(s) => {
                        // Requests are small and latency is the cost that
                        // matters: no Nagle delay.
                        s.set_nodelay(true).map_err(ConnectError::Dial)?;
                        return Ok(Stream::Tcp(s));
                    }
                    Err(e) => last = e,
                }
            }
            Err(ConnectError::Dial(last))
        }
        Endpoint::Unix { socket } => {
            let s = match socket.strip_prefix('\0') {
                Some(name) => {
                    use std::os::linux::net::SocketAddrExt;
                    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)
                        .map_err(ConnectError::Dial)?;
                    UnixStream::connect_addr(&addr)
                }
                None => UnixStream::connect(socket),
            }
            .map_err(ConnectError::Dial)?;
            Ok(Stream::Unix(s))
        }
    }
}

/// Runs the client's side of the handshake on `stream`; the export as
/// negotiated.
pub(crate) fn handshake(
    stream: &mut Stream,
    config: ClientConfig,
    timeout: Duration,
    tls: Option<&Tls>,
) -> Result<Export, ConnectError> {
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(ConnectError::Io)?;
    let mut hs = ClientHandshake::new(config);
    let mut buf = Vec::new();
    for _ in 0..MAX_HANDSHAKE_STEPS {
        let out = hs.take_output();
        if !out.is_empty() {
            stream.write_all(&out).map_err(ConnectError::Io)?;
        }
        match hs.state() {
            ClientState::Negotiating => {}
            ClientState::Ready(export) => {
                let export = export.clone();
                stream
                    .set_read_timeout(None)
                    .and_then(|()| stream.set_write_timeout(None))
                    .map_err(ConnectError::Io)?;
                return Ok(export);
            }
            ClientState::StartTls => {
                let tls = tls.ok_or_else(|| {
                    ConnectError::Io(io::Error::other("STARTTLS without TLS credentials"))
                })?;
                // The raw socket goes to the TLS session; the handshake
                // and the connection go on over its plain end.
                let placeholder = Stream::Unix(
                    std::os::unix::net::UnixStream::pair()
                        .map_err(ConnectError::Io)?
                        .0,
                );
                let raw = std::mem::replace(stream, placeholder);
                let plain = match raw {
                    Stream::Tcp(t) => tls.client.connect(&tls.host, t, timeout),
                    Stream::Unix(u) => tls.client.connect(&tls.host, u, timeout),
                }
                .map_err(ConnectError::Tls)?;
                plain
                    .set_read_timeout(Some(timeout))
                    .and_then(|()| plain.set_write_timeout(Some(timeout)))
                    .map_err(ConnectError::Io)?;
                *stream = Stream::Unix(plain);
                hs.tls_started();
                continue;
            }
            ClientState::Failed(e) => return Err(ConnectError::Handshake(e.clone())),
        }
        let want = hs.wanted_bytes();
        buf.resize(want, 0);
        stream.read_exact(&mut buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                ConnectError::Io(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection during the handshake",
                ))
            } else {
                ConnectError::Io(e)
            }
        })?;
        hs.feed(&buf);
    }
    Err(ConnectError::Handshake(ClientError::Protocol(format!(
        "no end to the handshake after {MAX_HANDSHAKE_STEPS} messages"
    ))))
}

/// Why a request got no answer from the server.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum CallError {
    /// The server answered with an error.
    #[error("{0}")]
    Reply(ReplyError),
    /// The session would not send it (never reaches the server).
    #[error("{0}")]
    Refused(RequestError),
    /// The connection is dead; why.
    #[error("the connection is lost: {0}")]
    Lost(String),
}

/// A request's answer from the server.
type Answer = Result<Option<Vec<u8>>, ReplyError>;

/// Called once, on the reader's thread, with a started request's outcome
/// ([`Connection::start_request`]).
pub(crate) type Callback = Box<dyn FnOnce(Result<Option<Vec<u8>>, CallError>) + Send + 'static>;

/// Where a request's answer goes.
enum Waiter {
    /// A caller blocked in [`Connection::call_all`].
    Caller(SyncSender<Answer>),
    /// A callback, and when the request was sent (the reader enforces the
    /// reply deadline for these: no caller waits with a timeout).
    Callback { done: Callback, sent: Instant },
}

/// Callbacks taken out of the state, to be called once its lock is gone
/// (a callback may start the next request on this connection).
#[must_use]
struct Orphans(Vec<Callback>, String);

impl Orphans {
    fn call(self) {
        for done in self.0 {
            done(Err(CallError::Lost(self.1.clone())));
        }
    }
}

thread_local! {
    /// Set on reader threads: a callback running there must not send on a
    /// connection (see [`on_reader_thread`]).
    static READER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is an NBD reader. Requests started from a
/// completion (which runs here) must go out from another thread: a reader
/// blocked sending to a server whose replies fill our receive buffer would
/// wait for itself until the send deadline.
pub(crate) fn on_reader_thread() -> bool {
    READER.with(std::cell::Cell::get)
}

/// What the reader and the callers share.
struct Shared {
    session: ClientSession,
    /// Per request in flight, where its answer goes: the reader wakes the
    /// one caller waiting for it, not every caller.
    waiting: HashMap<u64, Waiter>,
    /// Set once: why the connection is dead.
    dead: Option<String>,
}

struct Inner {
    state: Mutex<Shared>,
    writer: Mutex<Stream>,
    /// A handle that only shuts the socket down (from any thread).
    control: Stream,
}

impl Inner {
    /// Marks the connection dead: callers waiting wake to a closed
    /// channel; the callbacks waiting are returned, to be called with the
    /// reason once the lock is let go.
    fn kill(&self, shared: &mut Shared, why: String) -> Orphans {
        if shared.dead.is_none() {
            tracing::warn!("NBD connection lost: {why}");
            shared.dead = Some(why);
        }
        self.control.shutdown();
        let callbacks = shared
            .waiting
            .drain()
            .filter_map(|(_, w)| match w {
                Waiter::Caller(_) => None,
                Waiter::Callback { done, .. } => Some(done),
            })
            .collect();
        Orphans(callbacks, shared.dead.clone().unwrap_or_default())
    }

    /// [`Inner::kill`] from a thread holding no lock, failing the
    /// callbacks here; why the connection is dead.
    fn die(&self, why: String) -> String {
        let orphans = self.kill(
            &mut self.state.lock().unwrap_or_else(|e| e.into_inner()),
            why,
        );
        let lost = orphans.1.clone();
        orphans.call();
        lost
    }

    /// Writes a request whole (its payload's parts where they lie), under
    /// the writer's lock.
    fn write(&self, header: &[u8], payload: &[&[u8]]) -> io::Result<()> {
        let mut w = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        write_all_vectored(&mut w, header, payload)
    }

    /// Whether a started request has waited past `deadline` (false once
    /// the connection is dead: its callbacks are failed already).
    fn started_request_late(&self, deadline: Duration) -> bool {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.dead.is_none()
            && s.waiting.values().any(|w| match w {
                Waiter::Callback { sent, .. } => sent.elapsed() >= deadline,
                Waiter::Caller(_) => false,
            })
    }
}

/// Drops a connection from anywhere ([`Connection::killer`]).
pub(crate) struct Killer(Arc<Inner>);

impl Killer {
    pub(crate) fn abandon(&self, why: String) {
        self.0.die(why);
    }
}

/// A live connection, past its handshake.
pub(crate) struct Connection {
    inner: Arc<Inner>,
    reader: Option<JoinHandle<()>>,
    /// How long a request waits for its reply before the connection is
    /// declared dead.
    deadline: Duration,
}

impl Connection {
    /// Takes over `stream`, whose handshake produced `export`.
    pub(crate) fn start(
        stream: Stream,
        export: Export,
        deadline: Duration,
        name: &str,
    ) -> io::Result<Connection> {
        // A server that stops reading (stalled, its buffers full) must not
        // hold a sender, and every sender queued behind it, forever: only
        // callers waiting for a reply have a deadline of their own.
        stream.set_write_timeout(Some(deadline))?;
        let reader_stream = stream.try_clone()?;
        let control = stream.try_clone()?;
        let inner = Arc::new(Inner {
            state: Mutex::new(Shared {
                session: ClientSession::new(export),
                waiting: HashMap::new(),
                dead: None,
            }),
            writer: Mutex::new(stream),
            control,
        });
        let for_reader = Arc::clone(&inner);
        let reader = std::thread::Builder::new()
            .name(format!("nbd-reader {name}"))
            .spawn(move || read_replies(&for_reader, reader_stream, deadline))?;
        Ok(Connection {
            inner,
            reader: Some(reader),
            deadline,
        })
    }

    /// Whether the connection broke (not closed by us).
    pub(crate) fn lost(&self) -> bool {
        self.lock().dead.as_deref().is_some_and(|why| why != CLOSED)
    }

    /// A handle that can only drop this connection, for callbacks that
    /// outlive a borrow of it.
    pub(crate) fn killer(&self) -> Killer {
        Killer(Arc::clone(&self.inner))
    }

    /// Drops the connection because its user gave up waiting (`why`):
    /// every caller waiting wakes to a lost connection, and it counts as
    /// lost.
    pub(crate) fn abandon(&self, why: String) {
        self.inner.die(why);
    }

    /// Closes the connection for good (its member is out of use): a
    /// goodbye (`NBD_CMD_DISC`) if it is alive and idle, the socket shut
    /// down, anyone still waiting woken to a lost request. It counts as
    /// lost afterwards only if it was before. Never waits for the server:
    /// the goodbye is sent only when nothing is in flight and no sender
    /// holds the socket (its send buffer is empty then), else the socket
    /// is only shut down, which the protocol allows.
    pub(crate) fn close(&self) {
        let goodbye = {
            let mut s = self.lock();
            if s.dead.is_some() {
                // Shut down already (when it died, or closed before).
                return;
            }
            s.dead = Some(CLOSED.to_owned());
            s.waiting.is_empty().then(|| s.session.disconnect())
        };
        if let (Some(header), Ok(mut w)) = (goodbye, self.inner.writer.try_lock()) {
            let _ = w.write_all(&header);
        }
        self.inner.die(CLOSED.to_owned());
    }

    pub(crate) fn max_payload_bytes(&self) -> u32 {
        self.lock().session.max_payload_bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        // A panic while holding the lock leaves the session as it was
        // between two whole steps: still usable.
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sends `reqs` (each write's payload with it), then waits for all their
    /// replies; each one's result in order. Sending them all before waiting
    /// keeps them in flight together.
    pub(crate) fn call_all(
        &self,
        reqs: &[(ClientRequest, &[u8])],
    ) -> Vec<Result<Option<Vec<u8>>, CallError>> {
        let sent: Vec<Result<Receiver<Answer>, CallError>> = reqs
            .iter()
            .map(|&(req, payload)| self.send(req, &[payload]))
            .collect();
        sent.into_iter()
            .map(|r| r.and_then(|answer| self.wait(&answer)))
            .collect()
    }

    /// Sends one request whose payload is `parts` back to back, and waits
    /// for its reply.
    pub(crate) fn call_parts(&self, req: ClientRequest, parts: &[&[u8]]) -> Result<(), CallError> {
        self.send(req, parts).and_then(|a| self.wait(&a)).map(drop)
    }

    fn send(&self, req: ClientRequest, payload: &[&[u8]]) -> Result<Receiver<Answer>, CallError> {
        let (header, answer) = {
            let mut s = self.lock();
            if let Some(why) = &s.dead {
                return Err(CallError::Lost(why.clone()));
            }
            let (cookie, header) = s.session.request(req).map_err(CallError::Refused)?;
            // One answer, sent once: the reader never blocks on it.
            let (tx, rx) = sync_channel(1);
            s.waiting.insert(cookie, Waiter::Caller(tx));
            (header, rx)
        };
        self.write_request(&header, payload)
            .map_err(CallError::Lost)?;
        Ok(answer)
    }

    /// Sends `req` (a write's payload as `payload`'s parts, back to back)
    /// and returns; the callback `make` builds gets its
    /// outcome later, never on this thread (the caller may hold locks):
    /// on the reader's, or on a thread of its own if the connection dies
    /// while sending. `Err(())` when the request cannot be sent at all
    /// (the connection is dead, the session refuses it): `make` is not
    /// called, and the caller performs the I/O another way. Must not be
    /// called on a reader thread.
    pub(crate) fn start_request(
        &self,
        req: ClientRequest,
        payload: &[&[u8]],
        make: impl FnOnce() -> Callback,
    ) -> Result<(), ()> {
        assert!(!on_reader_thread(), "a request sent from a reader thread");
        let header = {
            let mut s = self.lock();
            if s.dead.is_some() {
                return Err(());
            }
            let Ok((cookie, header)) = s.session.request(req) else {
                return Err(());
            };
            s.waiting.insert(
                cookie,
                Waiter::Callback {
                    done: make(),
                    sent: Instant::now(),
                },
            );
            header
        };
        if let Err(e) = self.inner.write(&header, payload) {
            let orphans = self
                .inner
                .kill(&mut self.lock(), format!("sending a request failed: {e}"));
            // Not here: this thread is inside its caller's submission.
            let spawned = std::thread::Builder::new()
                .name("nbd-lost".into())
                .spawn(move || orphans.call());
            if let Err(e) = spawned {
                tracing::error!(error = %e, "cannot start a thread to fail the lost requests");
            }
        }
        Ok(())
    }

    /// Writes a request whole; on failure the connection is dead (and its
    /// callbacks called), and the reason is returned.
    fn write_request(&self, header: &[u8], payload: &[&[u8]]) -> Result<(), String> {
        self.inner
            .write(header, payload)
            .map_err(|e| self.inner.die(format!("sending a request failed: {e}")))
    }

    fn wait(&self, answer: &Receiver<Answer>) -> Result<Option<Vec<u8>>, CallError> {
        match answer.recv_timeout(self.deadline) {
            Ok(r) => r.map_err(CallError::Reply),
            Err(RecvTimeoutError::Timeout) => Err(CallError::Lost(
                self.inner
                    .die(format!("no reply within {} s", self.deadline.as_secs_f64())),
            )),
            // The connection died: `kill` dropped every sender.
            Err(RecvTimeoutError::Disconnected) => Err(CallError::Lost(
                self.lock().dead.clone().unwrap_or_default(),
            )),
        }
    }

    /// Says goodbye (`NBD_CMD_DISC`) if the connection is alive.
    fn disconnect(&self) {
        let header = {
            let mut s = self.lock();
            if s.dead.is_some() {
                return;
            }
            s.dead = Some(CLOSED.to_owned());
            s.session.disconnect()
        };
        let mut w = self.inner.writer.lock().unwrap_or_else(|e| e.into_inner());
        // Best effort: the socket is shut down next either way.
        let _ = w.write_all(&header);
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.disconnect();
        self.inner.control.shutdown();
        if let Some(r) = self.reader.take() {
            // The reader ends on the shutdown; a panic in it has been
            // reported on its thread already. The last reference to a
            // member can go in a started request's callback, on this
            // very reader: it cannot wait for itself, and ends on its
            // next read of the shut socket.
            if r.thread().id() != std::thread::current().id() {
                let _ = r.join();
            }
        }
    }
}

fn write_all_vectored(w: &mut Stream, header: &[u8], payload: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<io::IoSlice<'_>> = std::iter::once(header)
        .chain(payload.iter().copied())
        .filter(|s| !s.is_empty())
        .map(io::IoSlice::new)
        .collect();
    let mut left = &mut slices[..];
    while !left.is_empty() {
        // The standard library hands the kernel at most IOV_MAX slices a
        // call; the rest go in the next.
        let n = w.write_vectored(left)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the socket took no bytes",
            ));
        }
        io::IoSlice::advance_slices(&mut left, n);
    }
    Ok(())
}

/// How often the reader looks for started requests past `deadline`.
fn reader_tick(deadline: Duration) -> Duration {
    deadline.clamp(Duration::from_millis(100), Duration::from_secs(1))
}

/// The reader thread: every byte from the server through the session;
/// each answer to its caller or callback, callbacks called with no lock
/// held. Once a tick it fails the connection if a started request waited
/// past the deadline: also while the server keeps answering the others.
fn read_replies(inner: &Inner, stream: Stream, deadline: Duration) {
    READER.with(|r| r.set(true));
    let tick = reader_tick(deadline);
    let mut next_look = Instant::now() + tick;
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    loop {
        if Instant::now() >= next_look {
            if inner.started_request_late(deadline) {
                inner.die(format!("no reply within {} s", deadline.as_secs_f64()));
                return;
            }
            next_look = Instant::now() + tick;
        }
        let n = match stream.read_when_readable(&mut buf, tick) {
            Ok(0) => {
                inner.die("the server closed the connection".to_owned());
                return;
            }
            Ok(n) => n,
            // No byte within the tick: look at the deadline above.
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::Interrupted
                        | io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => {
                inner.die(format!("reading from the server failed: {e}"));
                return;
            }
        };
        let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.dead.is_some() {
            return;
        }
        if let Err(e) = s.session.feed(&buf[..n]) {
            drop(s);
            inner.die(e.to_string());
            return;
        }
        let mut answered = Vec::new();
        while let Some(c) = s.session.next_completion() {
            let w = s
                .waiting
                .remove(&c.cookie)
                .expect("the session completes only requests it sent");
            match w {
                // A caller gone (it timed out, killing the connection) is fine.
                Waiter::Caller(tx) => {
                    let _ = tx.send(c.result);
                }
                Waiter::Callback { done, .. } => answered.push((done, c.result)),
            }
        }
        drop(s);
        for (done, result) in answered {
            done(result.map_err(CallError::Reply));
        }
    }
}
