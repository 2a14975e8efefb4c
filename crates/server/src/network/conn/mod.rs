//! One client connection, served the way nbdkit serves one: a few worker
//! threads per connection, each of which takes the reader lock, reads one
//! request (and its payload), and starts the request in the engine. The
//! lock goes to the next worker before a submission that takes a while
//! or may wait (a large write's sends, fast members' I/O performed on this
//! thread, a send to a remote member); after one that only handed its
//! I/Os to local members' queues, the same worker reads on. The reply is
//! queued by whichever thread completes the request (a member I/O or NBD
//! reader thread, or the worker itself when no member I/O was needed). A
//! slow or stalled client only ever holds up its own workers.

use crate::engine::{Engine, InlineIos};
use crate::network::flow::Budget;
use crate::network::replies::Replies;
use crate::network::stream::Stream;
use platter_core::volume::{Reply, Request, VolumeError};
use platter_nbd::consts::*;
use platter_nbd::{HandshakeConfig, HandshakeState, Negotiated, ServerHandshake, Session};
use reader::{next_request, Reader};
use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

mod reader;
mod reply;

/// The most a refused client is given to hear why (see [`refuse`]).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a reader waiting for a request looks up (to notice shutdown).
const READ_TICK: Duration = Duration::from_secs(1);
/// A request (header or payload) that stalls this long mid-way ends the
/// connection: its buffer and budget are not held hostage.
const STALL_TICKS: u32 = 30;
/// How long a client turned away over `--max-connections` counts as
/// waiting for a slot (clients retry on their own schedule).
pub(crate) const SLOT_WANTED_WINDOW: Duration = Duration::from_secs(60);
/// Requests one connection may have in flight, replies included.
pub const CONN_MAX_REQUESTS: u64 = 64;
/// Request and reply bytes one connection may hold: one maximum-size
/// request and room beside it.
pub const CONN_MAX_BYTES: u64 = 64 << 20;

/// What every connection shares.
pub struct Shared {
    /// The volumes served: each handshake offers them as they are then.
    pub volumes: Arc<crate::served::Volumes>,
    /// Request and reply bytes across every connection (`--buffer-limit`):
    /// each connection's budget is part of it.
    pub buffered: Arc<Budget>,
    /// The handshake's limits and TLS; its exports are the volumes'
    /// (`volumes`), described as they stand, for each handshake.
    pub handshake: HandshakeConfig,
    /// Workers per connection.
    pub threads: usize,
    /// The whole handshake must end within this (`--handshake-timeout`).
    pub handshake_timeout: Duration,
    /// A connection with nothing in flight that receives nothing for this
    /// long is closed (`--idle-timeout`) once another client has been
    /// turned away for want of a slot; `None`: never.
    pub idle_timeout: Option<Duration>,
    /// When a client was last turned away over `--max-connections`.
    pub turned_away_at: Mutex<Option<Instant>>,
    /// What TLS the server offers (`--tls`); with `handshake.tls` not off.
    pub tls: Option<platter_tls::ServerTls>,
}

/// What a connection to one export uses: its volume's engine.
pub struct ExportVolume {
    /// The export as offered at the start; its description, size and
    /// hints are the engine's at each handshake.
    pub export: platter_nbd::ExportInfo,
    /// What serves the export: the volume's engine, or, while a volume of
    /// one plex is converted by copy, an engine in front of its old and
    /// new arrays. A submission holds it read for as long as it hands a
    /// request in, so that none lands on an engine after it was swapped
    /// out ([`ExportVolume::swap_engine`]).
    engine: std::sync::RwLock<Arc<Engine>>,
    /// The export's size when its engine holds more (an array made for a
    /// volume by a convert, in whole stripes of its own): u64::MAX when
    /// the engine's size is the export's.
    size_cap_bytes: AtomicU64,
    /// Notes each request while a recording runs (`record.rs`).
    pub recorder: Arc<crate::manage::record::Recorder>,
    /// The export's description as things stand (members online, whether
    /// the volume still holds all of its data): a client connecting after
    /// a failure must not read the description of the start.
    pub describe: Box<dyn Fn(&Engine) -> String + Send + Sync>,
    /// The connections in transmission on this volume, by connection: a
    /// volume removed with `--force` shuts them.
    pub clients: Mutex<std::collections::BTreeMap<u64, Stream>>,
    /// Set (under the `clients` lock) when the volume is being removed: a
    /// connection whose handshake chose it before then is turned away.
    closed: AtomicBool,
}

impl ExportVolume {
    pub fn new(
        export: platter_nbd::ExportInfo,
        engine: Arc<Engine>,
        recorder: Arc<crate::manage::record::Recorder>,
        describe: Box<dyn Fn(&Engine) -> String + Send + Sync>,
    ) -> ExportVolume {
        // Told less than its engine holds at the start: the volume's size
        // as its labels record it (`startup::export_info`). A reshape's
        // old size is not a cap: the new one is served once it ends.
        let reshaping = engine.reshape_progress().is_some();
        let cap = if export.size_bytes < engine.size_bytes() && !reshaping {
            export.size_bytes
        } else {
            u64::MAX
        };
        ExportVolume {
            export,
            size_cap_bytes: AtomicU64::new(cap),
            engine: std::sync::RwLock::new(engine),
            recorder,
            describe,
            clients: Mutex::new(Default::default()),
            closed: AtomicBool::new(false),
        }
    }

    /// The engine serving the export now.
    pub fn engine(&self) -> Arc<Engine> {
        Arc::clone(&self.engine.read().expect("export engine"))
    }

    /// `engine` serves the export from now on; returns the engine it
    /// replaces. No submission is under way to the old engine when this
    /// returns, and its requests in flight have ended: the caller keeps
    /// both engines' members in step (each write acknowledged so far is
    /// on the members the new engine reads).
    /// The export keeps the size it had: a larger engine's bytes past it
    /// are not offered.
    pub fn swap_engine(&self, engine: Arc<Engine>) -> Arc<Engine> {
        let mut serving = self.engine.write().expect("export engine");
        serving.wait_idle();
        let told = self.size_bytes_of(&serving);
        if engine.size_bytes() > told {
            self.size_cap_bytes.store(told, Ordering::SeqCst);
        }
        std::mem::replace(&mut *serving, engine)
    }

    /// The export's size now.
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes_of(&self.engine())
    }

    fn size_bytes_of(&self, engine: &Engine) -> u64 {
        engine
            .size_bytes()
            .min(self.size_cap_bytes.load(Ordering::SeqCst))
    }

    /// The export's size follows its engine's again (the volume was
    /// extended: its labels say the new size).
    pub fn clear_size_cap(&self) {
        self.size_cap_bytes.store(u64::MAX, Ordering::SeqCst);
    }

    /// Takes no more clients; returns how many it has.
    pub fn close_to_new_clients(&self) -> usize {
        let clients = self.clients.lock().expect("clients lock");
        self.closed.store(true, Ordering::SeqCst);
        clients.len()
    }

    /// Takes clients again (a remove refused after all).
    pub fn reopen_to_clients(&self) {
        let _clients = self.clients.lock().expect("clients lock");
        self.closed.store(false, Ordering::SeqCst);
    }

    /// Counts `stream` as a client, unless the volume is being removed.
    fn attach(&self, id: u64, stream: &Stream) -> io::Result<()> {
        let mut clients = self.clients.lock().expect("clients lock");
        if self.closed.load(Ordering::SeqCst) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the volume chosen was removed during the handshake",
            ));
        }
        clients.insert(id, stream.try_clone()?);
        Ok(())
    }

    /// How many clients use the volume now.
    pub fn client_count(&self) -> usize {
        self.clients.lock().expect("clients lock").len()
    }

    /// Shuts every client's socket: their connections end at their next
    /// read.
    pub fn disconnect_clients(&self) {
        for stream in self.clients.lock().expect("clients lock").values() {
            stream.shutdown(Shutdown::Both);
        }
    }

    /// The export as it stands: the size now (a reshape or an extend
    /// since the start has grown it; a connection made before keeps the
    /// size it was told, NBD has no resize notice), its members' health.
    fn export_now(&self) -> platter_nbd::ExportInfo {
        let mut export = self.export.clone();
        let engine = self.engine();
        export.description = (self.describe)(&engine);
        export.size_bytes = self.size_bytes_of(&engine);
        let (stripe_bytes, spins) = engine.shape();
        crate::startup::export_hints(&mut export, stripe_bytes, &spins);
        export
    }
}

/// A connection's place in its volume's client list, while it lasts.
struct Client<'a> {
    volume: &'a ExportVolume,
    id: u64,
}

impl Drop for Client<'_> {
    fn drop(&mut self) {
        self.volume
            .clients
            .lock()
            .expect("clients lock")
            .remove(&self.id);
    }
}

static NEXT_CLIENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl Shared {
    /// Whether a client was turned away for want of a slot within `window`:
    /// only then is an idle connection worth closing. NBD has no keep-alive,
    /// and a quiet client (a mounted kernel `nbd` device, a VM's disk) that
    /// loses its connection sees I/O errors, so no one is cut off for
    /// idleness alone.
    pub(crate) fn slot_wanted_within(&self, window: Duration) -> bool {
        self.turned_away_at
            .lock()
            .expect("turned-away time")
            .is_some_and(|at| at.elapsed() <= window)
    }

    /// Notes that a client was turned away over `--max-connections`.
    pub fn note_turned_away(&self) {
        *self.turned_away_at.lock().expect("turned-away time") = Some(Instant::now());
    }
}

struct Conn {
    shared: Arc<Shared>,
    /// The volume the client chose in the handshake.
    volume: Arc<ExportVolume>,
    peer: String,
    session: Session,
    structured: bool,
    reader: Mutex<Reader>,
    replies: Replies,
    budget: Arc<Budget>,
    /// The client left, sent DISC, or broke the protocol: stop reading.
    stop: AtomicBool,
}

impl Conn {
    /// The volume of the export this connection chose.
    pub(super) fn volume(&self) -> &ExportVolume {
        &self.volume
    }

    /// Whether this thread is one of this connection's workers running a
    /// request with more requests buffered behind it: its replies can wait
    /// for theirs and leave in one `sendmsg`.
    fn corked_here(&self) -> bool {
        CORKED.with(|c| c.get()) == self as *const Conn as usize
    }
}

thread_local! {
    /// The connection (its address) whose replies this thread corks, or 0.
    static CORKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Serves one connection until the client leaves or the server shuts down.
pub fn serve(stream: Stream, shared: Arc<Shared>, peer: String) {
    let mut config = shared.handshake.clone();
    let volumes = shared.volumes.exports();
    config.exports = volumes.iter().map(|v| v.export_now()).collect();
    let exports = config.exports.clone();
    let hs = ServerHandshake::new(config);
    let mut stream = stream;
    let negotiated = match handshake(
        &mut stream,
        hs,
        shared.handshake_timeout,
        shared.tls.as_ref(),
    ) {
        Ok(Some(n)) => n,
        Ok(None) => {
            // The accept loop keeps a clone of the socket until it reaps
            // this thread; close now so the client sees the end at once.
            stream.shutdown(Shutdown::Both);
            return;
        }
        Err(e) if e.kind() == io::ErrorKind::TimedOut => {
            tracing::info!(%peer, timeout_s = shared.handshake_timeout.as_secs_f64(), "handshake not finished in time; closing the connection");
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
    let chosen = (
        Arc::clone(&volumes[negotiated.export_index]),
        &exports[negotiated.export_index],
    );
    if let Err(e) = transmission(&stream, &shared, negotiated, chosen, &peer) {
        tracing::debug!(%peer, error = %e, "connection ended");
    }
    stream.shutdown(Shutdown::Both);
    tracing::debug!(%peer, "client disconnected");
}

/// Tells a client the server cannot take it, in the handshake (`message`
/// goes with an error reply to each option it sends), then closes.
pub fn refuse(stream: Stream, shared: &Shared, peer: &str, message: String) {
    let mut config = shared.handshake.clone();
    config.exports = shared
        .volumes
        .exports()
        .iter()
        .map(|v| v.export_now())
        .collect();
    let hs = ServerHandshake::refusing(config, message);
    let timeout = shared.handshake_timeout.min(REFUSAL_TIMEOUT);
    let mut stream = stream;
    if let Err(e) = handshake(&mut stream, hs, timeout, None) {
        tracing::debug!(%peer, error = %e, "refused client's handshake ended");
    }
    stream.shutdown(Shutdown::Both);
}

/// Runs `hs` to its end, which must come within `timeout` of the start: a
/// client sending a byte now and then does not keep its slot. After an
/// acknowledged STARTTLS the TLS handshake runs (within the same time) and
/// `stream` becomes the plain end of its session.
fn handshake(
    stream: &mut Stream,
    mut hs: ServerHandshake,
    timeout: Duration,
    tls: Option<&platter_tls::ServerTls>,
) -> io::Result<Option<Negotiated>> {
    let mut s = stream.try_clone()?;
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "handshake deadline passed"))
    };
    let mut buf = vec![0u8; 64 * 1024];
    // Every round either reads at least one byte or ends the handshake, and
    // the handshake bounds options and their sizes.
    loop {
        let out = hs.take_output();
        if !out.is_empty() {
            s.set_write_timeout(Some(left()?))?;
            s.write_parts(&[&out])?;
        }
        match hs.state() {
            HandshakeState::Negotiating => {}
            HandshakeState::StartTls => {
                let tls = tls.ok_or_else(|| {
                    io::Error::other("STARTTLS acknowledged without TLS credentials")
                })?;
                let raw = std::mem::replace(stream, s);
                let plain = match raw {
                    Stream::Unix(u) => tls.accept(u, left()?),
                    Stream::Tcp(t) => tls.accept(t, left()?),
                }
                .map_err(|e| {
                    tracing::info!(error = %e, "a client's TLS handshake failed");
                    io::Error::new(io::ErrorKind::PermissionDenied, e.to_string())
                })?;
                *stream = Stream::Unix(plain);
                s = stream.try_clone()?;
                hs.tls_started();
                continue;
            }
            HandshakeState::Transmission(n) => {
                let n = n.clone();
                s.set_write_timeout(None)?;
                return Ok(Some(n));
            }
            HandshakeState::Closed(reason) => {
                tracing::debug!(?reason, "handshake closed");
                return Ok(None);
            }
        }
        let want = hs.wanted_bytes().clamp(1, buf.len());
        s.set_read_timeout(Some(left()?))?;
        let got = match s.read(&mut buf[..want]) {
            // A read timeout is reported as WouldBlock on Unix.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::Error::new(io::ErrorKind::TimedOut, e))
            }
            r => r?,
        };
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

fn transmission(
    stream: &Stream,
    shared: &Arc<Shared>,
    n: Negotiated,
    (volume, export): (Arc<ExportVolume>, &platter_nbd::ExportInfo),
    peer: &str,
) -> io::Result<()> {
    let session = n.session(export);
    stream.set_read_timeout(Some(READ_TICK))?;
    let id = NEXT_CLIENT.fetch_add(1, Ordering::Relaxed);
    volume.attach(id, stream)?;
    let _client = Client {
        volume: &volume,
        id,
    };
    let budget = Arc::new(Budget::within(
        CONN_MAX_REQUESTS,
        CONN_MAX_BYTES,
        Arc::clone(&shared.buffered),
    ));
    let conn = Arc::new(Conn {
        shared: Arc::clone(shared),
        volume: Arc::clone(&volume),
        peer: peer.to_string(),
        session,
        structured: n.structured_replies,
        reader: Mutex::new(Reader::new(stream.try_clone()?)),
        replies: Replies::new(
            stream.as_raw_fd(),
            Arc::clone(&budget),
            shared.idle_timeout,
            peer.to_string(),
        ),
        budget,
        stop: AtomicBool::new(false),
    });
    let writer = {
        let conn = Arc::clone(&conn);
        std::thread::Builder::new()
            .name("platter-replies".into())
            .spawn(move || conn.replies.run_writer())?
    };
    let workers: Vec<_> = (1..shared.threads.max(1))
        .map(|_| {
            let conn = Arc::clone(&conn);
            std::thread::Builder::new()
                .name("platter-worker".into())
                .spawn(move || work(&conn))
        })
        .collect::<io::Result<_>>()?;
    let result = work(&conn);
    for w in workers {
        let _ = w.join();
    }
    // Every request read gets its reply before the socket closes (or the
    // socket breaks, which drops them).
    conn.budget.wait_empty();
    conn.replies.close();
    let _ = writer.join();
    result
}

/// One worker: read a request, run it, repeat until the connection stops.
fn work(conn: &Arc<Conn>) -> io::Result<()> {
    let result = (|| {
        // Requests in a row whose replies this worker corked.
        let mut corked_run = 0;
        // The reader lock, when this worker kept it from the last request.
        let mut kept = None;
        loop {
            let mut reader = match kept.take() {
                Some(reader) => reader,
                None => take_reader(conn),
            };
            let Some(job) = next_request(conn, &mut reader)? else {
                break;
            };
            let engine = conn.volume().engine();
            let fast_members = engine.member_io_ns_avg() < CORK_MEMBER_IO_NS_MAX;
            let cork = job.more_buffered && corked_run < CORK_REQUESTS_MAX && fast_members;
            let corked_run_before = corked_run;
            corked_run = if cork { corked_run + 1 } else { 0 };
            if cork {
                CORKED.with(|c| c.set(Arc::as_ptr(conn) as usize));
            }
            // With slow local members (disks) this worker keeps the socket
            // through the submission: it takes microseconds and leaves
            // every I/O with its member's queue, so handing the socket on
            // would only cost a wake-up (and a thread switch) per request.
            // It goes to the next worker first when the members are fast
            // (their I/Os are likely performed here), when the request
            // carries much data, when a submission may send to a remote
            // member's socket (a server slow to read would hold it there,
            // and every request on this connection behind it), and before
            // any I/O the engine did leave for this thread.
            let keep = !fast_members
                && job.payload_bytes() <= KEEP_READER_PAYLOAD_BYTES_MAX
                && !engine.sends_on_submit();
            let mut reader = keep.then_some(reader);
            if !cork && corked_run_before > 0 {
                // Replies corked for earlier requests leave before this
                // submission, which may wait (a paused engine, a label
                // write).
                conn.replies.flush();
            }
            let serving = conn.volume().engine.read().expect("export engine");
            let engine = Arc::clone(&serving);
            if let Some(work) = run(conn, job, &engine, serving) {
                if !work.is_empty() {
                    reader = None;
                }
                work.run();
            }
            kept = reader;
            CORKED.with(|c| c.set(0));
            if !cork {
                // This request's reply may not be pushed yet (it waits on a
                // range lock, another thread finishes it): replies corked
                // before it must not wait for that.
                conn.replies.flush();
            }
        }
        Ok(())
    })();
    conn.replies.flush();
    conn.stop.store(true, Ordering::SeqCst);
    result
}

/// The largest write payload whose submission a worker makes while still
/// holding the socket ([`work`]): sending it to a member or two is a few
/// microseconds.
const KEEP_READER_PAYLOAD_BYTES_MAX: usize = 64 << 10;

/// Replies one worker holds back, at most, for the requests buffered
/// behind theirs (see [`work`]).
const CORK_REQUESTS_MAX: u32 = 16;
/// Replies are held back only while member I/O takes less than this on
/// average: then the next request is a few microseconds away, and sending
/// its reply with this one saves a `sendmsg` and the client a wake-up. On
/// disks a reply must not wait for another request's seek.
const CORK_MEMBER_IO_NS_MAX: u64 = 30_000;

impl Job {
    /// Bytes the request brings for the members (a write's payload).
    fn payload_bytes(&self) -> usize {
        match &self.req {
            Request::Write { data, .. } => data.len(),
            _ => 0,
        }
    }
}

/// A request read and judged, ready for the engine.
struct Job {
    cookie: u64,
    offset_bytes: u64,
    req: Request,
    then_flush: bool,
    release_bytes: u64,
    /// Another request's header was already received behind this one.
    more_buffered: bool,
}

/// The reader lock, for this thread's turn at the socket.
fn take_reader(conn: &Conn) -> MutexGuard<'_, Reader> {
    match conn.reader.try_lock() {
        Ok(s) => s,
        Err(std::sync::TryLockError::WouldBlock) => {
            // Replies corked by this thread go out before it waits.
            conn.replies.flush();
            conn.reader.lock().expect("reader lock")
        }
        Err(std::sync::TryLockError::Poisoned(_)) => panic!("reader lock poisoned"),
    }
}

/// Takes budget for a request, sending corked replies first if it must
/// wait: they hold budget, and the client may be waiting for them.
fn acquire(conn: &Conn, bytes: u64) {
    if !conn.budget.try_acquire(bytes) {
        conn.replies.flush();
        conn.budget.acquire(bytes);
    }
}

/// Starts one request in the engine; the reply is queued when it ends.
/// What is left is the I/O of members fast enough for this thread to
/// perform ([`Engine::submit_client`]). `serving` (the export's engine,
/// `engine`, held read) is let go once the request is handed in.
fn run<'e>(
    conn: &Arc<Conn>,
    job: Job,
    engine: &'e Arc<Engine>,
    serving: std::sync::RwLockReadGuard<'_, Arc<Engine>>,
) -> Option<InlineIos<'e>> {
    debug_assert!(Arc::ptr_eq(engine, &serving));
    let Job {
        cookie,
        offset_bytes,
        req,
        then_flush,
        release_bytes,
        more_buffered: _,
    } = job;
    let c = Arc::clone(conn);
    let finish = move |result: Result<Reply, VolumeError>| {
        c.reply(cookie, offset_bytes, result, release_bytes)
    };
    let submitted = if then_flush {
        let e2 = Arc::clone(engine);
        engine.submit_client(
            req,
            Box::new(move |r| match r {
                Ok(_) => e2.submit(Request::Flush, Box::new(finish)),
                Err(e) => finish(Err(e)),
            }),
        )
    } else {
        engine.submit_client(req, Box::new(finish))
    };
    drop(serving);
    match submitted {
        Ok(work) => Some(work),
        Err(_) => {
            conn.reply_error(
                cookie,
                NBD_ESHUTDOWN,
                "server is shutting down",
                release_bytes,
            );
            None
        }
    }
}
