//! The server's life: mark the volume in use, listen, serve, and on SIGINT
//! or SIGTERM finish what was started, flush, and mark the volume clean.

use crate::defaults;
use crate::engine::meta::Meta;
use crate::engine::upkeep::{self, Upkeep};
use crate::engine::Engine;
use crate::manage::scrub::Scrubber;
use crate::manage::{self, Manager};
use crate::network::conn::Shared;
use crate::network::flow::{self, Budget};
use crate::network::listen::{self, Conns};
use crate::startup;
use platter_core::label::VolumeState;
use platter_core::volume::Health;
use platter_core::volume::Request;
use platter_io::assembly::OpenVolume;
use platter_io::OpenOptions;
use platter_nbd::{HandshakeConfig, TlsPolicy};
use std::collections::BTreeMap;
use std::io;
use std::net::Shutdown;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Start without applying the partial parity log an unclean stop left
    /// (`serve --discard-log`): it is emptied, and the write hole of that
    /// stop is open again.
    pub discard_log: bool,
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
    /// Slots read only when no other copy can be (`--write-mostly`).
    pub write_mostly: std::collections::BTreeSet<u32>,
    /// Whether clients may (`On`) or must (`Require`) use TLS.
    pub tls: TlsPolicy,
    /// What TLS proves the server with (`--tls-certificates`, `--tls-psk`).
    pub tls_credentials: Option<platter_tls::Credentials>,
    /// Remote members whose host did not answer at start: served without,
    /// tried in the background (`reconnect.rs`).
    pub unreachable: Vec<String>,
    /// Bring back remote members whose connection broke on their own, once
    /// their host answers (`readd.rs`); off, `platter re-add` does it.
    pub reconnect: bool,
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
    /// its member (`--member-timeout`); a remote member is failed once it
    /// has been disconnected this long.
    pub member_timeout: Duration,
    /// A remote member's request unanswered this long drops its connection
    /// (`--remote-timeout`); at most `member_timeout`.
    pub remote_timeout: Duration,
    /// Connections per remote member offering multi-conn
    /// (`--member-connections`; 0: the default).
    pub member_connections: u32,
    /// What performs member I/O (`--io-backend`).
    pub io_backend: platter_io::aio::layer::Backend,
    /// Latency injected into members' I/O by the I/O layer, by member as
    /// its device describes itself (`--inject latency=`).
    pub member_delays: std::collections::HashMap<String, platter_io::aio::Delay>,
    /// A pool's drive of each subdisk, by the member's name as its device
    /// describes itself: what the counters per drive sum (`serve --pool`).
    pub member_drives: Arc<std::collections::HashMap<String, String>>,
    /// A scheduled scrub every this long (`--scrub-every`; `scrub.rs`).
    pub scrub_every: Option<Duration>,
    /// Its pace (`--scrub-rate`).
    pub scrub_rate_bytes_per_sec: u64,
    /// Serve one client on standard input and output (a socket), and stop
    /// when it leaves (`--stdio`).
    pub stdio: bool,
    /// Run this program for each event that needs a person
    /// (`--on-event`, `alerts.rs`).
    pub on_event: Option<PathBuf>,
    /// Slots `serve --force` put into use against their labels: an event
    /// at start.
    pub forced_slots: Vec<u32>,
    /// `--record FILE` and its bound in bytes: the clients' requests from
    /// the start (`record.rs`).
    pub record: Option<(PathBuf, u64)>,
    /// Where to link the control socket for `platter status` with no
    /// argument (`registry.rs`); `None`: nowhere.
    pub run_dir: Option<PathBuf>,
    /// Rebuilds, resyncs and reshapes move at most this many bytes a
    /// second (`--rebuild-rate`; [`crate::engine::upkeep::UNLIMITED`]: no limit).
    pub rebuild_rate_bytes_per_sec: u64,
    /// Listening sockets systemd passed (socket activation), served as
    /// well as `socket` and `listen`; taken once, at bind.
    pub inherited: crate::network::systemd::Inherited,
    /// Where members not given were found by a scan, by slot: the log and
    /// `status` name them in the command that brings each back.
    pub last_seen: BTreeMap<u32, String>,
    /// Devices `--scan` found whose label was superseded, left unopened:
    /// logged at start and shown by `status` with those given and set
    /// aside.
    pub superseded: Vec<crate::manage::leftout::SupersededDevice>,
}

impl ServeConfig {
    /// This configuration, read-only also when `read_only`.
    pub fn or_read_only(&self, read_only: bool) -> ServeConfig {
        let mut config = self.clone();
        config.read_only |= read_only;
        config
    }

    /// How members that join while serving are opened (spares, replacements,
    /// returning members); the command line opens those it starts with.
    pub fn member_open_options(&self) -> OpenOptions {
        OpenOptions {
            request_timeout: Some(self.remote_timeout.min(self.member_timeout)),
            connections: self.member_connections,
            ..OpenOptions::default()
        }
    }
}

impl Default for ServeConfig {
    /// `platter serve`'s defaults ([`crate::defaults`]), listening nowhere.
    fn default() -> ServeConfig {
        ServeConfig {
            socket: None,
            listen: None,
            read_only: false,
            discard_log: false,
            threads: defaults::THREADS_PER_CONNECTION,
            max_connections: defaults::MAX_CONNECTIONS,
            control: None,
            metrics: None,
            rotational: BTreeMap::new(),
            write_mostly: Default::default(),
            unreachable: Vec::new(),
            tls: TlsPolicy::Off,
            tls_credentials: None,
            reconnect: true,
            stripe_cache_stripes: defaults::STRIPE_CACHE_STRIPES,
            buffer_limit_bytes: defaults::BUFFER_LIMIT_BYTES,
            handshake_timeout: Duration::from_secs(defaults::HANDSHAKE_TIMEOUT_SECS),
            idle_timeout: Some(Duration::from_secs(defaults::IDLE_TIMEOUT_SECS)),
            member_queue_depth: defaults::MEMBER_QUEUE_DEPTH,
            member_timeout: defaults::MEMBER_TIMEOUT,
            remote_timeout: Duration::from_secs(defaults::REMOTE_TIMEOUT_SECS),
            member_connections: 0,
            io_backend: platter_io::aio::layer::Backend::default(),
            member_delays: std::collections::HashMap::new(),
            member_drives: Arc::default(),
            scrub_every: None,
            scrub_rate_bytes_per_sec: defaults::SCRUB_BYTES_PER_SEC,
            stdio: false,
            on_event: None,
            forced_slots: Vec::new(),
            record: None,
            run_dir: None,
            rebuild_rate_bytes_per_sec: defaults::REBUILD_BYTES_PER_SEC,
            inherited: Default::default(),
            last_seen: BTreeMap::new(),
            superseded: Vec::new(),
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
    /// dirty. The message says what the next start will do.
    #[error("final flush failed: {0}")]
    FinalFlush(String),
    /// The server stopped and flushed, but the label of some member could
    /// not be written: at the next start that member is stale.
    #[error("final label write failed: {0}")]
    FinalLabel(String),
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Io { what, source }
}

/// What the server prints once it listens, for the operator to connect.
pub struct Ready {
    /// The first volume's export; empty when a pool's server starts with
    /// no volume.
    pub export_name: String,
    pub size_bytes: u64,
    /// A pool's other volumes, each an export of its name: (name, size).
    pub others: Vec<(String, u64)>,
    pub uris: Vec<String>,
    /// `http://HOST:PORT/metrics` when serving metrics.
    pub metrics: Option<String>,
    /// The pool served, for `serve --pool`.
    pub pool: Option<String>,
    /// The control socket's path, if it has one.
    pub control: Option<String>,
}

/// How long a stop waits for connection threads once their sockets are
/// closed: they end within milliseconds, except one caught in a member
/// that stopped answering (see `serve`).
const CONN_END_WAIT: Duration = Duration::from_secs(2);

/// Serves `volume` until SIGINT or SIGTERM, then finishes what was
/// started, flushes, and marks the volume clean. `on_ready` runs once every
/// socket listens and the volume is marked in use.
pub fn serve(
    volume: OpenVolume,
    config: ServeConfig,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), ServeError> {
    serve_volumes(vec![(volume, Vec::new())], config, on_ready)
}

/// What a volume has before the sockets are bound.
pub(crate) struct Starting {
    opened: startup::Opened,
    /// Devices that take a missing or failed member's place as soon as
    /// the volume serves (a pool's blank subdisks on a replaced drive).
    spares: Vec<Arc<dyn platter_io::Member>>,
    pub(crate) export: platter_nbd::ExportInfo,
    engine: Arc<Engine>,
    resync_regions: u64,
    /// A volume of several plexes: each plex's array, served under it.
    plexes: Vec<Arc<crate::served::Served>>,
    /// Kept read-only though the server is not (`PoolStart::Plexes`).
    read_only: bool,
    /// The recording of the clients' requests it takes over (a convert by
    /// copy's new array, which serves its volume's export once the copy
    /// ends); a new one else.
    pub(crate) recorder: Option<Arc<crate::manage::record::Recorder>>,
}

/// A members' list and the spares a volume starts with.
pub type Members = Vec<Arc<dyn platter_io::Member>>;

/// Assembles a volume of plexes over its plexes as members (the host's
/// rules: which are blank and become spares, what a missing one needs).
pub type AssemblePlexes = Box<dyn FnOnce(Members) -> Result<(OpenVolume, Members), String> + Send>;

/// A volume a pool's server starts.
pub enum PoolStart {
    /// An array over its subdisks, and its spares.
    Array(Box<OpenVolume>, Members),
    /// A mirror of plexes (`plex::PlexMember`): each plex's array is
    /// started first, by the name given, then the mirror assembled over
    /// them by `assemble`.
    Plexes {
        plexes: Vec<(String, OpenVolume, Members)>,
        assemble: AssemblePlexes,
        /// Served read-only whatever the server's setting (a detached
        /// plex served as a volume of its own: its labels and data stay
        /// as they were at the split).
        read_only: bool,
    },
}

/// Serves every volume in `volumes` as an NBD export of its name (a
/// pool's volumes; one volume for `platter serve`), through one set of
/// sockets and one control socket, until SIGINT or SIGTERM; then each is
/// finished, flushed and marked clean. Each volume comes with the spares
/// it starts with.
pub fn serve_volumes(
    volumes: Vec<(OpenVolume, Vec<Arc<dyn platter_io::Member>>)>,
    config: ServeConfig,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), ServeError> {
    let volumes = volumes
        .into_iter()
        .map(|(v, spares)| PoolStart::Array(Box::new(v), spares))
        .collect();
    serve_pool(volumes, config, None, on_ready)
}

/// [`serve_volumes`] for a pool's volumes: `host` writes the pool's
/// configuration when the control socket creates, extends or removes a
/// volume, which the server starts, grows or stops as it runs.
pub fn serve_pool(
    volumes: Vec<PoolStart>,
    config: ServeConfig,
    host: Option<Arc<dyn crate::manage::pool::PoolHost>>,
    on_ready: impl FnOnce(&Ready),
) -> Result<(), ServeError> {
    // A pool's server may start with none, to make them as it runs.
    assert!(
        !volumes.is_empty() || host.is_some(),
        "a server serves a volume"
    );
    let server_tls = server_tls(&config)?;
    let starting = start_volumes(volumes, &config)?;
    let first = starting.first().map_or("", |s| s.export.name.as_str());
    let bound = listen::bind(&config, first)?;
    let control_path = bound
        .control
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .and_then(|a| a.as_pathname().map(|p| p.display().to_string()));
    let stop = Arc::new(AtomicBool::new(false));
    let signals = Signals::watch(Arc::clone(&stop))?;
    let served = Arc::new(crate::served::Volumes::default());
    for s in starting {
        let v = keep_volume(s, &config, control_path.clone())?;
        served.add(v).map_err(ServeError::Refused)?;
    }
    let shared = connection_shared(&config, &served, server_tls);
    let conns = Arc::new(Conns::new());
    let pool_name = host.as_ref().map(|h| h.pool_name());
    let ready = ready(
        &bound,
        &served.all(),
        (pool_name.clone(), control_path.clone()),
    );
    let ours = bound.ours.clone();
    // An empty pool's server is listed by the pool's name.
    let listed_as = match (&pool_name, ready.export_name.as_str()) {
        (Some(pool), "") => pool.as_str(),
        _ => ready.export_name.as_str(),
    };
    let registration = register(&config, bound.control_path.as_deref(), listed_as);
    let pool = host.map(|host| {
        let parts = (config.clone(), control_path.clone(), Arc::clone(&served));
        let pool = Arc::new(crate::manage::pool::PoolServer::new(parts, host));
        pool.note_detached_at_start();
        pool
    });
    let threads = Threads::start(bound, &config, &shared, &conns, pool, &stop);
    if config.stdio {
        listen::stdio_connection(&shared, &conns)?;
    }
    on_ready(&ready);
    let notifier = crate::network::systemd::Notifier::from_env();
    notifier.notify(&format!(
        "READY=1\nSTATUS=serving '{}' ({} bytes)",
        ready.export_name, ready.size_bytes
    ));
    serve_until_stopped(&config, &stop, &conns, &shared);
    let own = Own {
        notifier,
        registration,
        threads,
        ours,
        signals,
    };
    shut_down(own, &served, &conns)
}

/// Every volume's members opened and its engine made, their export
/// names apart.
fn start_volumes(
    volumes: Vec<PoolStart>,
    config: &ServeConfig,
) -> Result<Vec<Starting>, ServeError> {
    let mut starting = Vec::new();
    for start in volumes {
        starting.push(match start {
            PoolStart::Array(volume, spares) => start_volume(*volume, spares, config)?,
            PoolStart::Plexes {
                plexes,
                assemble,
                read_only,
            } => start_plexes(plexes, assemble, &config.or_read_only(read_only))?,
        });
    }
    check_export_names(&starting)?;
    Ok(starting)
}

/// A volume of plexes: each plex's array started and kept (not an export
/// of its own), then the mirror over them.
pub(crate) fn start_plexes(
    plexes: Vec<(String, OpenVolume, Members)>,
    assemble: AssemblePlexes,
    config: &ServeConfig,
) -> Result<Starting, ServeError> {
    let mut kept = Vec::new();
    let mut members: Members = Vec::new();
    // A recording asked for is of the clients' requests: the volume's.
    let mut inner = config.clone();
    inner.record = None;
    let config_of_plexes = &inner;
    for (name, volume, spares) in plexes {
        // A plex that cannot start is one the mirror serves without.
        let plex = match start_volume(volume, spares, config_of_plexes)
            .and_then(|s| keep_volume(s, config_of_plexes, None))
        {
            Ok(plex) => plex,
            Err(e) => {
                tracing::warn!(plex = %name, error = %e, "plex not served: the volume serves without it");
                continue;
            }
        };
        let member = crate::plex::PlexMember::new(Arc::clone(&plex.manager.engine), name);
        members.push(Arc::new(member));
        kept.push(plex);
    }
    let (volume, spares) = assemble(members).map_err(ServeError::Refused)?;
    let mut starting = start_volume(volume, spares, config)?;
    starting.plexes = kept;
    Ok(starting)
}

/// A volume's members opened, its export and its engine.
pub(crate) fn start_volume(
    volume: OpenVolume,
    spares: Vec<Arc<dyn platter_io::Member>>,
    config: &ServeConfig,
) -> Result<Starting, ServeError> {
    let mut opened = startup::open(volume, config)?;
    let export = startup::export_info(&opened, config.read_only, &config.rotational);
    let (engine, resync_regions) = startup::engine(&mut opened, config)?;
    Ok(Starting {
        opened,
        spares,
        export,
        engine,
        resync_regions,
        plexes: Vec::new(),
        read_only: config.read_only,
        recorder: None,
    })
}

/// Export names pick the volume a client gets: two alike would hide one.
fn check_export_names(starting: &[Starting]) -> Result<(), ServeError> {
    let mut names = std::collections::BTreeSet::new();
    for s in starting {
        if !names.insert(s.export.name.as_str()) {
            return Err(ServeError::Refused(format!(
                "two volumes are named '{}': an export name must pick one",
                s.export.name
            )));
        }
    }
    Ok(())
}

/// From a volume's engine to a volume kept: labels follow it, alerts are
/// raised, rebuilds resume, the resync owed starts, its manager answers,
/// its upkeep thread runs.
pub(crate) fn keep_volume(
    s: Starting,
    config: &ServeConfig,
    control_path: Option<String>,
) -> Result<Arc<crate::served::Served>, ServeError> {
    let Starting {
        mut opened,
        spares,
        export,
        engine,
        resync_regions,
        plexes,
        read_only,
        recorder,
    } = s;
    let config = &config.or_read_only(read_only);
    crate::manage::leftout::log_at_start(
        &opened.left_out,
        opened.assembly.label.event_counter,
        control_path.as_deref(),
    );
    // Labels follow the volume from here on: failures, rebuilds, checkpoints.
    let (meta, alerts) = watch_events(config, &opened, &export.name, &engine)?;
    startup::alert_start(&engine, &config.forced_slots, &opened);
    startup::resume_rebuilds(&opened.assembly, &engine);
    startup::mark_in_use(&meta, &engine);
    let upkeep = start_upkeep(config, &meta);
    startup::start_resync(&opened, &engine, &upkeep, resync_regions, config.read_only);
    let taken_over = recorder.is_some();
    let recorder = recorder.unwrap_or_default();
    if let Some((path, limit_bytes)) = config.record.as_ref().filter(|_| !taken_over) {
        recorder
            .start(path, *limit_bytes)
            .map_err(ServeError::Refused)?;
    }
    let parts = (&engine, &recorder, &meta, &upkeep);
    let manager = manager(config, &mut opened, parts, control_path);
    manager.await_unreachable(&config.unreachable);
    if !spares.is_empty() && !config.read_only {
        tracing::info!(volume = %export.name, spares = spares.len(), "spares ready to take the members' places");
        manager.spares.lock().expect("spares").extend(spares);
    }
    let name = export.name.clone();
    let describe = Box::new(move |engine: &Engine| {
        // A pool's volume grows while served: its layout is the engine's.
        let geometry = engine.with_volume(|v| v.geometry().clone());
        startup::describe_export(&geometry, &name, &engine.health())
    });
    let io = crate::network::conn::ExportVolume::new(export, engine, recorder, describe);
    let (e, m, u) = (
        Arc::clone(&manager.engine),
        Arc::clone(&manager.meta),
        Arc::clone(&manager.upkeep),
    );
    let upkeep_thread = std::thread::Builder::new()
        .name("platter-upkeep".into())
        .spawn(move || upkeep::run(e, m, u))
        .map_err(io_err("cannot start the upkeep thread"))?;
    let served = Arc::new(crate::served::Served {
        io: Arc::new(io),
        manager,
        alerts,
        upkeep_thread: Mutex::new(Some(upkeep_thread)),
        plexes: std::sync::RwLock::new(plexes),
    });
    if !config.read_only {
        crate::manage::pool::split::rejoin_at_start(&served);
    }
    Ok(served)
}

/// What the banner says: the first export, and the others after it.
fn ready(
    bound: &listen::Bound,
    served: &[Arc<crate::served::Served>],
    (pool, control): (Option<String>, Option<String>),
) -> Ready {
    let first = served.first();
    Ready {
        export_name: first.map_or_else(String::new, |s| s.io.export.name.clone()),
        size_bytes: first.map_or(0, |s| s.io.export.size_bytes),
        others: served
            .iter()
            .skip(1)
            .map(|s| (s.io.export.name.clone(), s.io.export.size_bytes))
            .collect(),
        pool,
        control,
        uris: bound.uris.clone(),
        metrics: bound
            .metrics
            .as_ref()
            .map(|(_, local)| format!("http://{local}/metrics")),
    }
}

/// The TLS the server offers, from its credentials; `--tls on` or
/// `require` without them is refused.
fn server_tls(config: &ServeConfig) -> Result<Option<platter_tls::ServerTls>, ServeError> {
    match (&config.tls_credentials, config.tls) {
        (_, TlsPolicy::Off) => Ok(None),
        (Some(creds), _) => Ok(Some(
            platter_tls::ServerTls::new(creds).map_err(|e| ServeError::Refused(e.to_string()))?,
        )),
        (None, _) => Err(ServeError::Refused(
            "--tls on or require needs --tls-certificates DIR or --tls-psk FILE".into(),
        )),
    }
}

/// What every connection shares: the volumes, the server's byte budget,
/// the handshake's limits.
fn connection_shared(
    config: &ServeConfig,
    volumes: &Arc<crate::served::Volumes>,
    tls: Option<platter_tls::ServerTls>,
) -> Arc<Shared> {
    let buffered = Arc::new(Budget::new(flow::REQUESTS_MAX, config.buffer_limit_bytes));
    Arc::new(Shared {
        volumes: Arc::clone(volumes),
        buffered,
        handshake: HandshakeConfig {
            exports: Vec::new(),
            max_options: 64,
            max_option_bytes: 64 * 1024,
            tls: config.tls,
        },
        tls,
        threads: config.threads.max(1),
        handshake_timeout: config.handshake_timeout,
        idle_timeout: config.idle_timeout,
        turned_away_at: Mutex::new(None),
    })
}

/// The engine's events go to the labels first (`Meta`), then to the
/// alerts.
fn watch_events(
    config: &ServeConfig,
    opened: &startup::Opened,
    name: &str,
    engine: &Arc<Engine>,
) -> Result<(Arc<Meta>, Arc<crate::observe::alerts::Alerts>), ServeError> {
    let meta = Arc::new(Meta::new(
        opened.assembly.label.clone(),
        Arc::clone(engine),
        config.read_only,
    ));
    let alerts = Arc::new(
        crate::observe::alerts::Alerts::new(
            name,
            &platter_core::assemble::uuid_string(&opened.assembly.label.volume_uuid),
            config.on_event.clone(),
        )
        .map_err(ServeError::Refused)?,
    );
    engine.set_alerts(Arc::clone(&alerts));
    let m = Arc::clone(&meta);
    let weak = Arc::downgrade(engine);
    engine.on_event(Box::new(move |e| {
        let recorded = m.on_event(e);
        if let Some(engine) = weak.upgrade() {
            crate::observe::alerts::raise_engine_event(&engine, e);
        }
        recorded
    }));
    Ok((meta, alerts))
}

/// The upkeep's schedule: the rebuild rate and the scheduled scrub,
/// resumed from the labels' record.
fn start_upkeep(config: &ServeConfig, meta: &Meta) -> Arc<Upkeep> {
    let upkeep = Arc::new(Upkeep::with_scrubber(Scrubber::new(
        config.scrub_every.filter(|_| !config.read_only),
        config.scrub_rate_bytes_per_sec,
        meta.label().scrub,
    )));
    upkeep
        .rate_bytes_per_sec
        .store(config.rebuild_rate_bytes_per_sec, Ordering::Relaxed);
    upkeep
}

/// The control socket's manager of one volume, taking from `opened` what
/// the start learnt of removed, left-out and superseded members.
fn manager(
    config: &ServeConfig,
    opened: &mut startup::Opened,
    (engine, recorder, meta, upkeep): (
        &Arc<Engine>,
        &Arc<crate::manage::record::Recorder>,
        &Arc<Meta>,
        &Arc<Upkeep>,
    ),
    control_path: Option<String>,
) -> Arc<Manager> {
    Arc::new(Manager {
        engine: Arc::clone(engine),
        meta: Arc::clone(meta),
        upkeep: Arc::clone(upkeep),
        spares: Mutex::new(Vec::new()),
        removed: Mutex::new(std::mem::take(&mut opened.removed)),
        slot_changes: Mutex::new(()),
        rotational: config.rotational.clone(),
        away: Mutex::new(Default::default()),
        reconnect: config.reconnect,
        member_timeout: config.member_timeout,
        open_options: config.member_open_options(),
        reconnecting: Mutex::new(None),
        stopping: AtomicBool::new(false),
        recorder: Arc::clone(recorder),
        left_out: Mutex::new(
            std::mem::take(&mut opened.left_out)
                .into_iter()
                .map(|m| (m.slot, m))
                .collect(),
        ),
        detached: Mutex::new(BTreeMap::new()),
        control_path,
        superseded: std::mem::take(&mut opened.superseded),
        member_drives: Mutex::new(Arc::clone(&config.member_drives)),
    })
}

/// The main loop, until the stop flag: connections reaped, idle memory
/// returned, lost members failed or reconnected, spares taken in.
fn serve_until_stopped(config: &ServeConfig, stop: &AtomicBool, conns: &Conns, shared: &Shared) {
    let mut trimmer = crate::engine::memory::Trimmer::default();
    let mut unread = listen::UnreadWatch::default();
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(100));
        let ended = listen::reap(conns);
        unread.tick(conns, shared);
        // Under --stdio the server lives as long as its one client.
        if config.stdio && conns.open.lock().expect("connections lock").is_empty() {
            tracing::info!("the client on standard input left; stopping");
            stop.store(true, Ordering::SeqCst);
            break;
        }
        trimmer.tick(ended > 0 || shared.buffered.in_flight() != (0, 0));
        for manager in shared.volumes.managers_with_plexes() {
            manager.fail_quietly_lost();
            manager.close_failed_members();
            if config.reconnect {
                manager.reconnect_lost();
            }
            manager.engine.refresh_read_latencies();
            manager.replace_from_spares();
        }
    }
}

/// What the server holds of its own that the stop takes down.
struct Own {
    notifier: crate::network::systemd::Notifier,
    registration: Option<crate::observe::registry::Registration>,
    threads: Threads,
    /// Sockets the server made (not passed by systemd).
    ours: Vec<PathBuf>,
    signals: Signals,
}

/// The stop: new requests get ESHUTDOWN, started ones finish; then each
/// volume is flushed and marked clean. The first failure is the answer,
/// after every volume has had its turn.
fn shut_down(own: Own, volumes: &crate::served::Volumes, conns: &Conns) -> Result<(), ServeError> {
    own.notifier
        .notify("STOPPING=1\nSTATUS=finishing requests, flushing, marking the volume clean");
    // A stopping volume is no longer listed as served.
    drop(own.registration);
    // No volume is added or taken away from here on.
    own.threads.join();
    let served = volumes.all();
    for s in &served {
        s.manager.stop_reconnecting();
        s.manager.engine.close_to_clients();
    }
    for s in &served {
        stop_upkeep(s);
    }
    let mut result = Ok(());
    // A volume of plexes first, then its plexes: its last flush goes
    // through them.
    let plexes: Vec<Arc<crate::served::Served>> = served.iter().flat_map(|s| s.plexes()).collect();
    for s in &plexes {
        s.manager.engine.close_to_clients();
    }
    for s in served.iter().chain(&plexes) {
        if plexes.iter().any(|p| Arc::ptr_eq(p, s)) {
            stop_upkeep(s);
        }
        if let Err(e) = finish_volume(s) {
            if result.is_ok() {
                result = Err(e);
            } else {
                tracing::error!(volume = %s.name(), error = %e, "stop");
            }
        }
    }
    close_connections(conns);
    // Sockets systemd passed are its own to remove.
    for path in &own.ours {
        listen::remove_socket(path);
    }
    own.signals.close();
    for s in served.iter().chain(&plexes) {
        s.alerts.close();
    }
    result
}

/// Stops a volume's upkeep thread (the rebuild or scrub step it runs
/// ends first).
pub(crate) fn stop_upkeep(s: &crate::served::Served) {
    s.manager.upkeep.stop.store(true, Ordering::SeqCst);
    let thread = s.upkeep_thread.lock().expect("upkeep thread").take();
    if let Some(t) = thread {
        let _ = t.join();
    }
}

/// A stopped volume's last flush, and its labels marked clean if it held.
pub(crate) fn finish_volume(s: &crate::served::Served) -> Result<(), ServeError> {
    let m = &s.manager;
    // The recording ends with its closing line written out.
    m.recorder.stop();
    flush_and_mark(&m.engine, &m.meta, &m.upkeep)?;
    tracing::info!(volume = %s.name(), "volume flushed and marked {}", m.meta.label().state);
    Ok(())
}

/// Links the control socket into the run directory, so that `platter
/// status` with no argument lists the volume; a directory that cannot be
/// written is a warning, not a refusal (an unprivileged user's server
/// under /run/platter).
fn register(
    config: &ServeConfig,
    control: Option<&std::path::Path>,
    name: &str,
) -> Option<crate::observe::registry::Registration> {
    let (dir, control) = (config.run_dir.as_ref()?, control?);
    match crate::observe::registry::register(dir, control, name) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(
                run_dir = %dir.display(),
                error = %e,
                "cannot register the control socket: `platter status` with no argument will \
                 not list this volume (--run-dir or {} names another directory)",
                crate::observe::registry::RUN_DIR_ENV
            );
            None
        }
    }
}

/// SIGINT and SIGTERM set the stop flag, on a thread of their own.
struct Signals {
    handle: signal_hook::iterator::Handle,
    thread: JoinHandle<()>,
}

impl Signals {
    fn watch(stop: Arc<AtomicBool>) -> Result<Signals, ServeError> {
        let mut signals = signal_hook::iterator::Signals::new([
            signal_hook::consts::SIGINT,
            signal_hook::consts::SIGTERM,
        ])
        .map_err(io_err("cannot handle signals"))?;
        let handle = signals.handle();
        let thread = std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                tracing::info!(signal = sig, "shutting down");
                stop.store(true, Ordering::SeqCst);
            }
        });
        Ok(Signals { handle, thread })
    }

    fn close(self) {
        self.handle.close();
        let _ = self.thread.join();
    }
}

/// The server's own threads besides the connections' and the volumes'
/// upkeep: accept loops, control, metrics.
struct Threads {
    accept: Vec<JoinHandle<()>>,
    control: Option<JoinHandle<()>>,
    metrics: Option<JoinHandle<()>>,
    /// A pool's changes, closed at the stop.
    pool: Option<Arc<crate::manage::pool::PoolServer>>,
    /// A pool's spares taking failed subdisks (`PoolServer::heal_onto_spares`).
    heal: Option<JoinHandle<()>>,
}

impl Threads {
    fn start(
        bound: listen::Bound,
        config: &ServeConfig,
        shared: &Arc<Shared>,
        conns: &Arc<Conns>,
        pool: Option<Arc<crate::manage::pool::PoolServer>>,
        stop: &Arc<AtomicBool>,
    ) -> Threads {
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .unwrap_or_else(|e| panic!("spawn {name} thread: {e}"))
        };
        let control = bound.control.map(|l| {
            let answers = manage::Control {
                volumes: Arc::clone(&shared.volumes),
                pool: pool.clone(),
            };
            let stop = Arc::clone(stop);
            spawn(
                "platter-control",
                Box::new(move || manage::serve_control(l, answers, stop)),
            )
        });
        let metrics = bound.metrics.map(|(l, _)| {
            let (v, stop) = (Arc::clone(&shared.volumes), Arc::clone(stop));
            spawn(
                "platter-metrics",
                Box::new(move || crate::observe::metrics::serve_metrics(l, v, stop)),
            )
        });
        let accept = bound
            .listeners
            .into_iter()
            .map(|l| {
                let (stop, shared, conns) =
                    (Arc::clone(stop), Arc::clone(shared), Arc::clone(conns));
                let max = config.max_connections;
                spawn(
                    "platter-accept",
                    Box::new(move || listen::accept_loop(l, &stop, &shared, &conns, max)),
                )
            })
            .collect();
        let heal = pool.clone().map(|p| {
            let stop = Arc::clone(stop);
            spawn("platter-heal", Box::new(move || heal_loop(&p, &stop)))
        });
        Threads {
            accept,
            control,
            metrics,
            pool,
            heal,
        }
    }

    /// Waits for every one of them, and for a pool change under way; the
    /// stop flag must be set.
    fn join(self) {
        for t in self.accept {
            let _ = t.join();
        }
        if let Some(t) = self.control {
            let _ = t.join();
        }
        if let Some(t) = self.metrics {
            let _ = t.join();
        }
        if let Some(t) = self.heal {
            let _ = t.join();
        }
        if let Some(p) = self.pool {
            p.close();
        }
    }
}

/// How often a pool's server looks for failed subdisks a spare can take.
const HEAL_EVERY: Duration = Duration::from_secs(1);

/// The pool's spares take failed subdisks until the server stops.
fn heal_loop(pool: &crate::manage::pool::PoolServer, stop: &AtomicBool) {
    let tick = Duration::from_millis(100);
    let mut waited = Duration::ZERO;
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(tick);
        waited += tick;
        if waited >= HEAL_EVERY {
            waited = Duration::ZERO;
            pool.heal_onto_spares();
            pool.resume_moves();
            pool.tend_converts();
        }
    }
}

/// Once every request has ended: the last flush, the bitmap cleared, and
/// the labels marked clean if the flush held and nothing is owed.
fn flush_and_mark(engine: &Engine, meta: &Meta, upkeep: &Upkeep) -> Result<(), ServeError> {
    engine.wait_idle();
    let flushed = engine.run(Request::Flush).map(|_| ());
    // Flushed and idle: every bit can go, except regions still owed a resync.
    if let Err(e) = engine.run(Request::Sweep { all: true }) {
        tracing::warn!(error = %e, "cannot clear the write-intent bitmap");
    }
    // The checksum pages' write records that the flush above set go to
    // their members with this one (they are written by each member's next
    // flush): a member that dropped the pages is then caught at the start.
    let flushed = flushed.and(engine.run(Request::Flush).map(|_| ()));
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
    // No I/O follows to fail a member whose label write failed (as
    // `Meta::record` relies on while serving): it is stale at the next
    // start, and the stop must say so rather than report a clean stop.
    let scrub = upkeep.scrubber.record();
    let reshaped = engine.reshape_progress().is_some_and(|p| p.finished);
    let unlabelled = meta.record_on_members(|l| {
        startup::mark(l, &health, state);
        // A finished reshape's record goes only with a clean stop: until
        // then a crash restarts it at its end, with a resync of the whole
        // volume (the bitmap is not kept while the layout changes).
        if reshaped && state == VolumeState::Clean {
            l.reshape = None;
        }
        l.scrub = scrub;
        if let Some(p) = progress {
            l.rebuild_checkpoint_bytes = p.cursor_stripe * l.interleave_bytes;
        }
    });
    let lost: Vec<u32> = unlabelled.iter().map(|(m, _)| *m).collect();
    if !lost.is_empty() {
        // A member one label write behind the others is taken as in sync
        // at the next start (a kill between two members' writes leaves
        // that; `assemble`). One whose write failed is not: the others'
        // labels say so, a change later.
        meta.record(|l| {
            for &m in &lost {
                if let Some(entry) = l.slots.get_mut(m as usize) {
                    if entry.state == platter_core::label::SlotState::Active {
                        entry.state = platter_core::label::SlotState::Faulty;
                    }
                }
            }
        });
    }
    let geometry = engine.with_volume(|v| v.geometry().clone());
    let serves_all =
        geometry.serves_all(|m| health[m as usize] == Health::Online && !lost.contains(&m));
    let beyond_repair = || {
        format!(
            "{} cannot serve all of its data without the members lost: `platter status` names \
             them; if the cause has passed (a full file system, a cable), `platter serve --force` \
             uses them again (docs/failures.md)",
            geometry.level()
        )
    };
    if let Err(e) = flushed {
        let next = if serves_all {
            "the volume is marked dirty and will be resynced at the next start".to_string()
        } else {
            beyond_repair()
        };
        return Err(ServeError::FinalFlush(format!("{e}; {next}")));
    }
    if !unlabelled.is_empty() {
        let what: Vec<String> = unlabelled
            .iter()
            .map(|(m, why)| format!("member {m}: {why}"))
            .collect();
        let next = if serves_all {
            "the others' labels mark it faulty: the next start rebuilds it".to_string()
        } else {
            beyond_repair()
        };
        return Err(ServeError::FinalLabel(format!(
            "{}; {next}",
            what.join("; ")
        )));
    }
    if !serves_all {
        // The stop itself went well; the volume did not (its members were
        // reported as they failed). Said last, where an operator looks.
        tracing::warn!("{}", beyond_repair());
    }
    Ok(())
}

/// Closes every connection's socket and waits for its threads.
///
/// With its socket closed a connection's threads end at once, unless a
/// worker is inside a member I/O it performs itself (a fast member,
/// `Engine::perform_inline`) and the device stopped answering: the engine is
/// idle, so that I/O has been failed by --member-timeout already, and the
/// worker stays until the device answers, which may be never. The labels
/// are written: nothing is left for it to do, so it is not waited for
/// beyond CONN_END_WAIT.
fn close_connections(conns: &Conns) {
    let open = std::mem::take(&mut *conns.open.lock().expect("connections lock"));
    for (_, stream, _) in &open {
        stream.shutdown(Shutdown::Both);
    }
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
}
