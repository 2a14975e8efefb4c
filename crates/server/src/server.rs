//! The server's life: mark the volume in use, listen, serve, and on SIGINT
//! or SIGTERM finish what was started, flush, and mark the volume clean.

use crate::conn::{self, Shared};
use crate::defaults;
use crate::engine::Engine;
use crate::flow::{self, Budget};
use crate::manage::{self, Manager};
use crate::meta::Meta;
use crate::stream::Stream;
use crate::upkeep::{self, Upkeep};
use platter_core::assemble::SlotNote;
use platter_core::geometry::Geometry;
use platter_core::label::{printable, Label, SlotState, VolumeState};
use platter_core::volume::{CacheLimits, Health, Limits, Request, Volume};
use platter_io::assembly::OpenVolume;
use platter_io::Member;
use platter_nbd::consts::*;
use platter_nbd::{ExportInfo, HandshakeConfig};
use std::collections::BTreeMap;
use std::io;
use std::net::{Shutdown, TcpListener};
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;
use thiserror::Error;

/// The largest request a client may send (NBD_INFO_BLOCK_SIZE maximum).
pub const MAX_BLOCK_BYTES: u32 = 32 << 20;

#[derive(Clone, Debug)]
pub struct ServeConfig {
    pub socket: Option<PathBuf>,
    pub listen: Option<String>,
    pub read_only: bool,
    /// Worker threads per connection (they read requests and start them;
    /// member I/O runs on the I/O layer's threads).
    pub threads: usize,
    pub max_connections: usize,
    /// The control socket; defaults to the NBD socket's path plus ".ctl".
    pub control: Option<PathBuf>,
    /// Serve the statistics at `GET /metrics` on this HOST:PORT.
    pub metrics: Option<String>,
    /// Slots whose rotation the operator states, for `auto` read balancing:
    /// files and NBD exports cannot tell, and a block device's own answer
    /// (sysfs) can be overridden.
    pub rotational: BTreeMap<u32, bool>,
    /// Stripes the RAID-5/6 stripe cache may hold (within 16 MiB); 0 turns
    /// it off. See `platter_core::volume::CacheLimits`.
    pub stripe_cache_stripes: u64,
    /// Request payloads and replies not yet sent, in bytes, across every
    /// connection; when they reach it, sockets are not read until replies
    /// leave. At least [`MAX_BLOCK_BYTES`].
    pub buffer_limit_bytes: u64,
    /// The whole handshake must end within this; a client that takes
    /// longer is disconnected.
    pub handshake_timeout: Duration,
    /// A connection with nothing in flight that receives nothing for this
    /// long is closed; `None`: never.
    pub idle_timeout: Option<Duration>,
    /// Member I/Os each member has in flight at most
    /// (`--member-queue-depth`).
    pub member_queue_depth: usize,
    /// A member I/O not completed this long after it was started fails
    /// its member (`--member-timeout`).
    pub member_timeout: Duration,
    /// What performs member I/O (`--io-backend`).
    pub io_backend: platter_io::aio::layer::Backend,
    /// Latency injected into members' I/O by the I/O layer, by member as
    /// its device describes itself (`--inject latency=`).
    pub member_delays: std::collections::HashMap<String, platter_io::aio::Delay>,
}

impl Default for ServeConfig {
    /// `platter serve`'s defaults ([`crate::defaults`]), listening nowhere.
    fn default() -> ServeConfig {
        ServeConfig {
            socket: None,
            listen: None,
            read_only: false,
            threads: defaults::THREADS_PER_CONNECTION,
            max_connections: defaults::MAX_CONNECTIONS,
            control: None,
            metrics: None,
            rotational: BTreeMap::new(),
            stripe_cache_stripes: defaults::STRIPE_CACHE_STRIPES,
            buffer_limit_bytes: defaults::BUFFER_LIMIT_BYTES,
            handshake_timeout: Duration::from_secs(defaults::HANDSHAKE_TIMEOUT_SECS),
            idle_timeout: Some(Duration::from_secs(defaults::IDLE_TIMEOUT_SECS)),
            member_queue_depth: defaults::MEMBER_QUEUE_DEPTH,
            member_timeout: defaults::MEMBER_TIMEOUT,
            io_backend: platter_io::aio::layer::Backend::default(),
            member_delays: std::collections::HashMap::new(),
        }
    }
}

/// Why `serve` did not start, or did not end cleanly.
#[derive(Debug, Error)]
pub enum ServeError {
    /// The volume cannot be served as asked (members missing, an option
    /// out of range, nothing to listen on); nothing was changed.
    #[error("{0}")]
    Refused(String),
    /// `--io-backend io-uring` was asked for and the kernel refused it.
    #[error("--io-backend io-uring: {0}")]
    IoBackend(String),
    #[error("{what}: {source}")]
    Io { what: String, source: io::Error },
    #[error("{0}")]
    Member(#[from] platter_io::MemberError),
    /// The server stopped, but its last flush failed: the labels say
    /// dirty, and the next start resyncs.
    #[error("final flush failed: {0}; the volume is marked dirty and will be resynced at the next start")]
    FinalFlush(String),
}

fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// What the server prints once it listens, for the operator to connect.
pub struct Ready {
    pub export_name: String,
    pub size_bytes: u64,
    pub uris: Vec<String>,
    /// `http://HOST:PORT/metrics` when serving metrics.
    pub metrics: Option<String>,
}

struct Conns {
    next: AtomicU64,
    open: Mutex<Vec<(u64, Stream, JoinHandle<()>)>>,
    /// Clients over the limit being told so (see [`conn::refuse`]).
    refusing: Arc<AtomicUsize>,
}

/// How long a stop waits for connection threads once their sockets are
/// closed: they end within milliseconds, except one caught in a member
/// that stopped answering (see `serve`).
const CONN_END_WAIT: Duration = Duration::from_secs(2);

/// Clients over the connection limit told why at once; more than this are
/// just closed, so a flood of them cannot take a thread each.
const REFUSING_MAX: usize = 8;

pub fn serve(
    volume: OpenVolume,
    config: ServeConfig,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), ServeError> {
    // The bitmap is only written by writes: a read-only server leaves it
    // (and any resync it asks for) to the next writable start.
    let intent = if config.read_only {
        None
    } else {
        volume
            .intent()
            .map_err(|e| ServeError::Refused(e.to_string()))?
    };
    let mut members = volume.members_by_slot();
    let OpenVolume { assembly, devices } = volume;
    // The engine holds the devices from here on: one that leaves it (a
    // removed member) is closed when the engine lets it go.
    drop(devices);
    let assembly = &assembly;
    let mut removed = BTreeMap::new();
    for (slot, device) in members.iter_mut().enumerate() {
        if assembly.label.slots[slot].state != SlotState::Removed {
            continue;
        }
        if let Some(d) = device.take() {
            let name = d.describe().to_string();
            tracing::warn!(
                "member {name}: slot {slot} was removed from the volume; not used \
                 (platter replace puts a device back in the slot)"
            );
            removed.insert(slot as u32, name);
        }
    }
    if intent.is_some() {
        reserve_bitmap_areas(&members, &assembly.health, assembly.label.data_offset_bytes)?;
    }
    let geometry = assembly.geometry.clone();
    let lost = assembly
        .health
        .iter()
        .filter(|h| **h != Health::Online)
        .count() as u32;
    let level = geometry.level();
    if !geometry.serves_all(|m| assembly.health[m as usize] == Health::Online) {
        return Err(ServeError::Refused(format!(
            "volume '{}' cannot be served: {lost} of {} members unavailable, and {level} \
             cannot serve all of its data without them",
            printable(&assembly.label.name),
            geometry.members(),
        )));
    }
    if lost > 0 {
        tracing::warn!(lost, "serving degraded: {lost} member(s) unavailable");
    }
    let unclean = matches!(assembly.label.state, VolumeState::Dirty);

    let label = assembly.label.clone();

    let size_bytes = geometry.volume_size_bytes();
    let block_min = members
        .iter()
        .flatten()
        .map(|m| m.logical_block_bytes())
        .max()
        .unwrap_or(512)
        .max(512);
    let preferred =
        (geometry.stripe_data_bytes().next_power_of_two() as u32).clamp(block_min, MAX_BLOCK_BYTES);
    let mut flags = NBD_FLAG_HAS_FLAGS
        | NBD_FLAG_SEND_FLUSH
        | NBD_FLAG_SEND_FUA
        | NBD_FLAG_CAN_MULTI_CONN
        | NBD_FLAG_SEND_DF;
    if config.read_only {
        flags |= NBD_FLAG_READ_ONLY;
    } else {
        flags |= NBD_FLAG_SEND_TRIM | NBD_FLAG_SEND_WRITE_ZEROES | NBD_FLAG_SEND_FAST_ZERO;
    }
    let export = ExportInfo {
        name: label.name.clone(),
        description: describe_export(&geometry, &label.name, &assembly.health),
        size_bytes,
        transmission_flags: flags,
        block_min_bytes: block_min,
        block_preferred_bytes: preferred,
        block_max_bytes: MAX_BLOCK_BYTES,
    };
    // Each connection holds at most CONN_MAX_REQUESTS; the margin is for
    // flushes chained behind FUA trims and the server's own final flush.
    let max_requests = config.max_connections * 2 * conn::CONN_MAX_REQUESTS as usize + 16;
    let mut vol = Volume::new(
        geometry.clone(),
        assembly.health.clone(),
        Limits { max_requests },
    );
    let mut resync_regions = 0;
    if let Some((layout, bits)) = intent {
        let resync = unclean && geometry.redundancy() > 0;
        if resync {
            resync_regions = bits.len();
        }
        vol.enable_intent(layout, bits, resync);
    }
    crate::balancing::configure(&mut vol, &label, &members, &config.rotational);
    if !config.read_only && config.stripe_cache_stripes > 0 {
        // Partial-stripe writes gathered into full stripes; the upkeep
        // thread's destage ticks and every FLUSH write them out.
        vol.enable_stripe_cache(CacheLimits {
            max_stripes: config.stripe_cache_stripes,
            ..CacheLimits::DEFAULT
        });
    }
    // Moved, not cloned: the engine is the only holder of the devices, so a
    // removed member's device closes when the engine lets it go.
    let io = platter_io::aio::layer::Layer::new(platter_io::aio::layer::LayerConfig {
        queue_depth: config.member_queue_depth.max(1),
        timeout: config.member_timeout,
        backend: config.io_backend,
        delays: config.member_delays.clone(),
    })
    .map_err(|e| ServeError::IoBackend(e.to_string()))?;
    if let Some(why) = io.fallback_reason() {
        tracing::warn!(reason = why, "member I/O does not use io_uring");
    }
    let engine = Engine::new(vol, members, Arc::new(io));
    if config.buffer_limit_bytes < u64::from(MAX_BLOCK_BYTES) {
        return Err(ServeError::Refused(format!(
            "a buffer limit of {} bytes cannot hold one request of the maximum size ({MAX_BLOCK_BYTES} bytes)",
            config.buffer_limit_bytes
        )));
    }
    let buffered = Arc::new(Budget::new(flow::REQUESTS_MAX, config.buffer_limit_bytes));
    let shared = Arc::new(Shared {
        engine: Arc::clone(&engine),
        buffered: Arc::clone(&buffered),
        handshake: HandshakeConfig {
            exports: vec![export.clone()],
            max_options: 64,
            max_option_bytes: 64 * 1024,
        },
        threads: config.threads.max(1),
        handshake_timeout: config.handshake_timeout,
        idle_timeout: config.idle_timeout,
        turned_away_at: Mutex::new(None),
        describe: {
            let (geometry, name) = (geometry.clone(), label.name.clone());
            Box::new(move |engine: &Engine| describe_export(&geometry, &name, &engine.health()))
        },
    });

    // Listeners.
    let mut listeners: Vec<Listener> = Vec::new();
    let mut uris = Vec::new();
    if let Some(path) = &config.socket {
        listeners.push(Listener::Unix(bind_unix(path, "socket")?));
        uris.push(format!(
            "nbd+unix:///{}?socket={}",
            export.name,
            path.display()
        ));
    }
    if let Some(addr) = &config.listen {
        let l = TcpListener::bind(addr).map_err(io_err(format!("cannot listen on {addr}")))?;
        let local = l.local_addr().map_err(io_err("local address"))?;
        listeners.push(Listener::Tcp(l));
        uris.push(format!("nbd://{local}/{}", export.name));
    }
    if listeners.is_empty() {
        return Err(ServeError::Refused(
            "nothing to listen on: give --socket or --listen".into(),
        ));
    }
    // The control socket: given, or beside the NBD socket.
    let control_path = config.control.clone().or_else(|| {
        config.socket.as_ref().map(|p| {
            let mut s = p.as_os_str().to_owned();
            s.push(".ctl");
            PathBuf::from(s)
        })
    });
    let control = match &control_path {
        Some(p) => Some(bind_unix(p, "control socket")?),
        None => None,
    };

    let metrics = match &config.metrics {
        Some(addr) => {
            let l = TcpListener::bind(addr)
                .map_err(io_err(format!("cannot serve metrics on {addr}")))?;
            let local = l.local_addr().map_err(io_err("local address"))?;
            Some((l, local))
        }
        None => None,
    };

    let stop = Arc::new(AtomicBool::new(false));
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(io_err("cannot handle signals"))?;
    let signal_handle = signals.handle();
    let stop2 = Arc::clone(&stop);
    let signal_thread = std::thread::spawn(move || {
        if let Some(sig) = signals.forever().next() {
            tracing::info!(signal = sig, "shutting down");
            stop2.store(true, Ordering::SeqCst);
        }
    });

    // Labels follow the volume from here on: failures, rebuilds, checkpoints.
    let meta = Arc::new(Meta::new(
        assembly.label.clone(),
        Arc::clone(&engine),
        config.read_only,
    ));
    {
        let m = Arc::clone(&meta);
        engine.on_event(Box::new(move |e| m.on_event(e)));
    }
    // A rebuild cut short by a restart resumes at its checkpoint.
    for (slot, note) in assembly.notes.iter().enumerate() {
        if *note == SlotNote::Marked(SlotState::Rebuilding) && assembly.slot_device[slot].is_some()
        {
            let from = assembly.label.rebuild_checkpoint_bytes / assembly.label.interleave_bytes;
            match engine.with_volume(|v| v.start_rebuild(slot as u32, from)) {
                Ok(()) => tracing::info!(slot, from_stripe = from, "resuming the rebuild"),
                Err(e) => tracing::error!(slot, error = %e, "cannot resume the rebuild"),
            }
        }
    }
    // Marked in use only now that nothing can fail before serving: a
    // refused socket or a busy TCP port must not leave the volume "dirty".
    let health = engine.health();
    meta.record(|l| mark(l, &health, VolumeState::Dirty));

    let upkeep = Arc::new(Upkeep::new());
    let bitmap = engine.with_volume(|v| v.intent_status());
    if unclean && !config.read_only && geometry.redundancy() > 0 {
        // A crash can leave a stripe's parity (or a chunk's copies) half
        // updated: make them agree again, in the background. With a
        // bitmap, only in the regions that were being written.
        match bitmap {
            Some(b) => {
                tracing::warn!(
                    regions = resync_regions,
                    of = b.layout.regions,
                    "volume was not shut down cleanly; resyncing the regions the write-intent bitmap marks"
                );
                upkeep.start_region_resync(resync_regions, b.layout.region_stripes);
            }
            None => {
                tracing::warn!("volume was not shut down cleanly and keeps no write-intent bitmap; resyncing every stripe");
                upkeep.start_resync(geometry.stripes());
            }
        }
    } else if unclean {
        tracing::warn!("volume was not shut down cleanly");
    }
    let manager = Arc::new(Manager {
        engine: Arc::clone(&engine),
        meta: Arc::clone(&meta),
        upkeep: Arc::clone(&upkeep),
        spares: Mutex::new(Vec::new()),
        removed: Mutex::new(removed),
        slot_changes: Mutex::new(()),
        rotational: config.rotational.clone(),
    });
    let upkeep_thread = {
        let (e, m, u) = (Arc::clone(&engine), Arc::clone(&meta), Arc::clone(&upkeep));
        std::thread::Builder::new()
            .name("platter-upkeep".into())
            .spawn(move || upkeep::run(e, m, u))
            .expect("spawn upkeep thread")
    };
    let control_thread = control.map(|l| {
        let (m, stop) = (Arc::clone(&manager), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("platter-control".into())
            .spawn(move || manage::serve_control(l, m, stop))
            .expect("spawn control thread")
    });

    let metrics_url = metrics
        .as_ref()
        .map(|(_, local)| format!("http://{local}/metrics"));
    let metrics_thread = metrics.map(|(l, _)| {
        let (e, m, stop) = (Arc::clone(&engine), Arc::clone(&meta), Arc::clone(&stop));
        std::thread::Builder::new()
            .name("platter-metrics".into())
            .spawn(move || crate::metrics::serve_metrics(l, e, m, stop))
            .expect("spawn metrics thread")
    });

    let conns = Arc::new(Conns {
        next: AtomicU64::new(0),
        open: Mutex::new(Vec::new()),
        refusing: Arc::new(AtomicUsize::new(0)),
    });
    let accept_threads: Vec<JoinHandle<()>> = listeners
        .into_iter()
        .map(|l| {
            let (stop, shared, conns) =
                (Arc::clone(&stop), Arc::clone(&shared), Arc::clone(&conns));
            let max = config.max_connections;
            std::thread::Builder::new()
                .name("platter-accept".into())
                .spawn(move || accept_loop(l, &stop, &shared, &conns, max))
                .expect("spawn accept thread")
        })
        .collect();

    on_ready(&Ready {
        export_name: export.name.clone(),
        size_bytes,
        uris,
        metrics: metrics_url,
    });

    let mut trimmer = crate::memory::Trimmer::default();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        let ended = reap(&conns);
        trimmer.tick(ended > 0 || buffered.in_flight() != (0, 0));
        manager.replace_from_spares();
    }

    // Shutdown: new requests get ESHUTDOWN, started ones finish.
    engine.close_to_clients();
    for t in accept_threads {
        let _ = t.join();
    }
    upkeep.stop.store(true, Ordering::SeqCst);
    let _ = upkeep_thread.join();
    if let Some(t) = control_thread {
        let _ = t.join();
    }
    if let Some(t) = metrics_thread {
        let _ = t.join();
    }
    engine.wait_idle();
    let flushed = engine.run(Request::Flush);
    // Flushed and idle: every bit can go, except regions still owed a resync.
    if let Err(e) = engine.run(Request::Sweep { all: true }) {
        tracing::warn!(error = %e, "cannot clear the write-intent bitmap");
    }
    let health = engine.health();
    let progress = engine.with_volume(|v| v.rebuild_progress());
    // An unfinished resync leaves stripes unverified, and so do writes
    // refused for space: the next start must resync, so the label keeps
    // saying dirty.
    let resync_owed = engine.with_volume(|v| v.resync_owed());
    let state = if flushed.is_ok() && upkeep.resync_progress().is_none() && !resync_owed {
        VolumeState::Clean
    } else {
        VolumeState::Dirty
    };
    meta.record(|l| {
        mark(l, &health, state);
        if let Some(p) = progress {
            l.rebuild_checkpoint_bytes = p.cursor_stripe * l.interleave_bytes;
        }
    });
    let label = meta.label();
    let open = std::mem::take(&mut *conns.open.lock().expect("connections lock"));
    for (_, stream, _) in &open {
        stream.shutdown(Shutdown::Both);
    }
    // With its socket closed a connection's threads end at once, unless a
    // worker is inside a member I/O it performs itself (a fast member,
    // `Engine::work_here`) and the device stopped answering: the engine is
    // idle, so that I/O has been failed by --member-timeout already, and
    // the worker stays until the device answers, which may be never. The
    // labels are written: nothing is left for it to do, so it is not
    // waited for beyond CONN_END_WAIT.
    let deadline = std::time::Instant::now() + CONN_END_WAIT;
    let mut stuck = 0;
    for (_, _, handle) in open {
        while !handle.is_finished() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        if handle.is_finished() {
            let _ = handle.join();
        } else {
            stuck += 1;
        }
    }
    if stuck > 0 {
        tracing::warn!(
            connections = stuck,
            "connections still inside a member I/O that timed out (the device has not \
             answered); exiting without them"
        );
    }
    if let Some(path) = &config.socket {
        remove_socket(path);
    }
    if let Some(path) = &control_path {
        remove_socket(path);
    }
    signal_handle.close();
    let _ = signal_thread.join();
    if let Err(e) = flushed {
        return Err(ServeError::FinalFlush(e.to_string()));
    }
    tracing::info!("volume flushed and marked {}", label.state);
    Ok(())
}

/// Allocates the label and bitmap area of every member in use: a bitmap
/// write refused for space would fail each member it went to, so a volume
/// copied sparsely onto a full file system lost every member at its first
/// write to a quiet region. Refused here, the operator can make room.
fn reserve_bitmap_areas(
    members: &[Option<Arc<dyn Member>>],
    health: &[Health],
    data_offset_bytes: u64,
) -> Result<(), ServeError> {
    for (device, health) in members.iter().zip(health) {
        let Some(device) = device.as_ref().filter(|_| *health == Health::Online) else {
            continue;
        };
        device.reserve(0, data_offset_bytes).map_err(|e| {
            ServeError::Refused(format!(
                "cannot allocate the label and write-intent bitmap area of member {} \
                 ({data_offset_bytes} bytes; a sparse copy leaves it unallocated): {e}; \
                 make room on its file system, or serve --read-only",
                device.describe()
            ))
        })?;
    }
    Ok(())
}

/// The export's description: level, name, members online, and whether
/// the volume can still serve all of its data.
fn describe_export(geometry: &Geometry, name: &str, health: &[Health]) -> String {
    let online = health.iter().filter(|h| **h == Health::Online).count();
    let state = match manage::live_state(geometry, health) {
        "failed" => ", failed: some data cannot be read",
        "clean" => "",
        _ => ", degraded",
    };
    format!(
        "platter {} volume '{}' ({online} of {} members online{state})",
        geometry.level(),
        printable(name),
        geometry.members()
    )
}

/// Updates the volume-wide state and the slot table from the members' health.
fn mark(label: &mut Label, health: &[Health], state: VolumeState) {
    label.state = Meta::state_for(health, state);
    for (slot, h) in health.iter().enumerate() {
        if *h == Health::Faulty && label.slots[slot].state != SlotState::Removed {
            label.slots[slot].state = SlotState::Faulty;
        }
    }
}

enum Listener {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// Binds the NBD or the control socket (`what` names which, for errors).
fn bind_unix(path: &Path, what: &str) -> Result<UnixListener, ServeError> {
    if std::fs::symlink_metadata(path).is_ok() {
        // Only a socket is ever replaced: anything else at PATH (a typo
        // naming a member file, say) is the user's, not a stale socket.
        if !is_socket(path) {
            return Err(ServeError::Refused(format!(
                "{} exists and is not a socket; not replacing it ({what})",
                path.display()
            )));
        }
        // A socket nobody answers on is left over from a crash; one that
        // answers belongs to a running server.
        if UnixStream::connect(path).is_ok() {
            return Err(ServeError::Refused(format!(
                "{what} {} is in use by a running server",
                path.display()
            )));
        }
        std::fs::remove_file(path).map_err(io_err(format!(
            "cannot remove stale {what} {}",
            path.display()
        )))?;
    }
    UnixListener::bind(path).map_err(io_err(format!("cannot listen on {}", path.display())))
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
}

/// Removes a socket the server made; whatever has taken its path since
/// (a file put there while the server ran) is left alone.
fn remove_socket(path: &Path) {
    if is_socket(path) {
        let _ = std::fs::remove_file(path);
    }
}

fn accept_loop(
    l: Listener,
    stop: &AtomicBool,
    shared: &Arc<Shared>,
    conns: &Arc<Conns>,
    max: usize,
) {
    let fd = match &l {
        Listener::Unix(u) => u.as_raw_fd(),
        Listener::Tcp(t) => t.as_raw_fd(),
    };
    while !stop.load(Ordering::SeqCst) {
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd that lives across the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, 200) };
        if ready <= 0 {
            continue;
        }
        let accepted = match &l {
            Listener::Unix(u) => u
                .accept()
                .map(|(s, _)| (Stream::Unix(s), "unix".to_string())),
            Listener::Tcp(t) => t.accept().map(|(s, a)| {
                let _ = s.set_nodelay(true);
                (Stream::Tcp(s), a.to_string())
            }),
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        // Connections that ended since the main loop last reaped must not
        // count against the limit.
        reap(conns);
        let mut open = conns.open.lock().expect("connections lock");
        if open.len() >= max {
            drop(open);
            refuse(stream, peer, shared, conns, max);
            continue;
        }
        let Ok(keep) = stream.try_clone() else {
            continue;
        };
        let id = conns.next.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::clone(shared);
        let handle = std::thread::Builder::new()
            .name(format!("platter-conn-{id}"))
            .spawn(move || conn::serve(stream, shared, peer))
            .expect("spawn connection thread");
        open.push((id, keep, handle));
    }
}

/// Answers a client over the connection limit, on a thread of its own
/// (bounded in number and time), with the reason in the handshake.
fn refuse(stream: Stream, peer: String, shared: &Arc<Shared>, conns: &Conns, max: usize) {
    tracing::warn!(%peer, max, "too many connections; refusing");
    shared.note_turned_away();
    let refusing = Arc::clone(&conns.refusing);
    if refusing.fetch_add(1, Ordering::SeqCst) >= REFUSING_MAX {
        refusing.fetch_sub(1, Ordering::SeqCst);
        stream.shutdown(Shutdown::Both);
        return;
    }
    let shared = Arc::clone(shared);
    let message = format!(
        "too many connections: this server serves {max} at once (--max-connections); try again later"
    );
    let spawned = std::thread::Builder::new()
        .name("platter-refuse".into())
        .spawn(move || {
            conn::refuse(stream, &shared, &peer, message);
            refusing.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        // The closure, the stream in it and the count's share are gone.
        tracing::warn!(error = %e, "cannot start a thread to refuse a client");
        conns.refusing.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Forgets connections whose threads have ended; returns how many.
fn reap(conns: &Conns) -> usize {
    let mut open = conns.open.lock().expect("connections lock");
    let mut i = 0;
    let mut ended = 0;
    while i < open.len() {
        if open[i].2.is_finished() {
            let (_, _, h) = open.swap_remove(i);
            let _ = h.join();
            ended += 1;
        } else {
            i += 1;
        }
    }
    ended
}
