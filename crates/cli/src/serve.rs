//! `platter serve`: assemble a volume from its members and serve it over NBD.

use crate::error::{CliError, Result};
use crate::members::{assemble_devices, open_reachable};
use crate::out::{err, errln, out};
use clap::Args;
use platter_core::label::printable;
use platter_core::units::{format_size, parse_size};
use platter_io::aio::layer::{Backend, BACKEND_ENV};
use platter_io::aio::Delay;
use platter_io::{FaultSpec, FaultyMember, Member, OpenOptions};
use platter_nbd::TlsPolicy;
use platter_server::manage::leftout::SupersededDevice;
use platter_server::{defaults, serve, Ready, ServeConfig};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

#[derive(Args)]
pub struct ServeArgs {
    /// Unix socket to serve on (created; a stale one is replaced). Under
    /// systemd socket activation (LISTEN_FDS) the sockets passed are served
    /// as well, and neither this nor --listen is needed: a socket named
    /// "control" (FileDescriptorName=) is the control socket, "metrics" the
    /// metrics port. READY=1 and STOPPING=1 go to NOTIFY_SOCKET when set
    /// (Type=notify); see contrib/systemd/.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Also serve over TCP on HOST:PORT (only when asked: NBD has no
    /// authentication here, so bind to a trusted address).
    #[arg(long, value_name = "HOST:PORT")]
    listen: Option<String>,
    /// Refuse writes; the members are opened read-only and labels are left alone.
    #[arg(long)]
    read_only: bool,
    /// Start without applying the partial parity log (`create --consistency-policy ppl`)
    /// that an unclean stop left, and empty it: for a log that cannot be applied
    /// (the start is refused, naming this option). What it risks: the write hole
    /// of that stop is open again: a member lost since, or before the resync
    /// ends, may be rebuilt wrong in the stripes that were being written, chunks
    /// nobody was writing included. For one start: not taken from a volumes file
    /// (docs/failures.md, "The partial parity log").
    #[arg(long, conflicts_with = "read_only")]
    discard_log: bool,
    /// Worker threads per connection (at least 1): each reads a request
    /// and starts it; member I/O runs on threads of its own (see
    /// --member-queue-depth).
    #[arg(long, value_name = "N", default_value_t = defaults::THREADS_PER_CONNECTION, value_parser = at_least_one)]
    threads: usize,
    /// Connections served at once (at least 1); more are refused, told
    /// why in the handshake.
    #[arg(long, value_name = "N", default_value_t = defaults::MAX_CONNECTIONS, value_parser = at_least_one)]
    max_connections: usize,
    /// Inject faults into a member, for testing: MEMBER is one of the
    /// members as given, SPEC is comma-separated keys, e.g.
    /// fail-nth=7,fail-from=100,fail-rate=0.001,latency=500us,tear-rate=0.01,seed=3.
    /// Keys: fail-nth=N, fail-from=N, fail-rate=P, latency=T,
    /// latency-jitter=T (0 to T more, uniform) or exp:T (mean T),
    /// latency-from=N (latency only from the Nth I/O on, counted from the
    /// open; served inside the member's calls, as a device that hangs),
    /// tear-rate=P,
    /// seed=N, undo-log=on|off, bad-range=OFFSET+LEN (bad sectors at member
    /// bytes, e.g. 2M+64k, whole 512-byte sectors: reads touching them fail,
    /// a write covering a sector whole heals it; give the key once per
    /// range), drop-writes=OFFSET+LEN (writes there are acknowledged and
    /// not kept: a device that lies; once per range). I/Os are counted
    /// from opening, label reads included.
    /// Repeatable, once per member.
    #[arg(long, value_name = "MEMBER=SPEC")]
    inject: Vec<String>,
    /// Control socket for `platter status|fail|remove|replace|add-spare|check|
    /// repair|rebuild-rate|read-policy --control PATH` (default: the --socket
    /// path plus ".ctl").
    #[arg(long, value_name = "PATH")]
    control: Option<PathBuf>,
    /// Serve the volume's statistics in the Prometheus text format at
    /// http://HOST:PORT/metrics (see docs/statistics.md), and a live page
    /// at http://HOST:PORT/ showing each member's busy share, throughput
    /// and latency over the last minutes, and rebuild, resync and scrub
    /// progress (plain HTML and SVG; reloads itself every 2 s).
    #[arg(long, value_name = "HOST:PORT")]
    metrics: Option<String>,
    /// Whether a member spins, for the `auto` read policy (proximity if any
    /// member may spin, load when none does). MEMBER is one of the members
    /// as given, or a slot number. Block devices say so themselves (sysfs
    /// queue/rotational), and a file the disk under it; NBD exports and
    /// files on RAM or network file systems cannot, and count as possibly
    /// spinning unless told. Repeatable.
    #[arg(long, value_name = "MEMBER=yes|no")]
    rotational: Vec<String>,
    /// Read from MEMBER only when no other copy can serve the read (md's
    /// write-mostly): a mirror's copy on a slow link or a far host still
    /// gets every write. MEMBER is one of the members as given, or a slot
    /// number. Repeatable. Without it the read policies already weigh each
    /// member's measured latency (docs/tuning.md).
    #[arg(long, value_name = "MEMBER")]
    write_mostly: Vec<String>,
    /// RAID-5/6: stripes of partial-stripe writes held in memory until
    /// later writes complete them (at most 16 MiB; 0 turns the cache off).
    /// Held data is written out within about 50 ms of the last write to
    /// it, and by every FLUSH; like a disk's write cache, it is lost in a
    /// crash unless flushed (docs/failures.md).
    #[arg(long, value_name = "STRIPES", default_value_t = defaults::STRIPE_CACHE_STRIPES)]
    stripe_cache: u64,
    /// Use members the labels mark faulty, or whose own label is older than
    /// the volume's, as if they were in sync (md's `--assemble --force`):
    /// for members failed by a passing condition (a full file system, a
    /// cable) whose data is still current. The volume is resynced, parity
    /// from the data. RISK: a member that missed writes while it was out of
    /// use now serves the old bytes of those writes, and the resync makes
    /// parity agree with them (docs/failures.md).
    #[arg(long)]
    force: bool,
    /// Start even though members the labels expect were not given (or
    /// not found by --scan): the volume is served degraded without them,
    /// as mdadm's --run. Without it such a start is refused, naming each
    /// missing member and where it was last seen. Members the labels
    /// already record as faulty, removed or missing need no --run.
    #[arg(long)]
    run: bool,
    /// Request payloads and replies not yet sent, across every connection
    /// (each also holds at most 64 MiB); when reached, clients are not read
    /// from until replies leave. At least 32M (docs/nbd.md).
    #[arg(long, value_name = "SIZE", default_value = defaults::BUFFER_LIMIT, value_parser = parse_size)]
    buffer_limit: u64,
    /// Close a connection that has had no request in flight and sent
    /// nothing for SECS seconds, once another client has been turned away
    /// over --max-connections (0: never). Quiet clients keep their
    /// connection while no one else waits for a slot. A client that takes
    /// none of its replies for SECS is closed too, and, while another
    /// client is turned away, one that has left them unread for 30 s (when
    /// SECS is longer).
    #[arg(long, value_name = "SECS", default_value_t = defaults::IDLE_TIMEOUT_SECS)]
    idle_timeout: u64,
    /// A client must finish the handshake (reach transmission) within SECS
    /// seconds of connecting (1 to 3600), or it is disconnected.
    #[arg(long, value_name = "SECS", default_value_t = defaults::HANDSHAKE_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    handshake_timeout: u64,
    /// Member I/Os each member has in flight at once, at most (1 to
    /// 4096): every member I/O a request needs is started at once, and a
    /// member's queue holds those beyond this until one ends.
    #[arg(long, value_name = "N", default_value_t = defaults::MEMBER_QUEUE_DEPTH as u64,
          value_parser = clap::value_parser!(u64).range(1..=4096))]
    member_queue_depth: u64,
    /// How long a member may be away before it is failed for good (1 to
    /// 3600 s): a member I/O not completed within SECS fails its member
    /// like an I/O error (docs/failures.md), whatever it answers later is
    /// ignored; a remote member that is disconnected (its connection broke,
    /// or a request went unanswered for --remote-timeout) is failed once it
    /// has been away SECS, and a spare then takes its place
    /// (docs/remote.md).
    #[arg(long, value_name = "SECS", default_value_t = defaults::MEMBER_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    member_timeout: u64,
    /// A remote member's request unanswered for SECS seconds (1 to 3600;
    /// at most --member-timeout) drops its connection: the member is
    /// disconnected, the volume serves on without it, and it is tried
    /// again in the background.
    #[arg(long, value_name = "SECS", default_value_t = defaults::REMOTE_TIMEOUT_SECS,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    remote_timeout: u64,
    /// TLS for clients: `off`, `on` (offered; plaintext clients still
    /// served) or `require` (nothing is served without TLS: every option
    /// before STARTTLS is refused). Default: `on` when --tls-certificates
    /// or --tls-psk is given, else `off`.
    #[arg(long, value_name = "off|on|require", value_parser = parse_tls)]
    tls: Option<TlsPolicy>,
    /// X.509 credentials for TLS, in nbdkit's layout: DIR/server-cert.pem,
    /// DIR/server-key.pem (and DIR/ca-cert.pem).
    #[arg(long, value_name = "DIR", conflicts_with = "tls_psk")]
    tls_certificates: Option<PathBuf>,
    /// Pre-shared keys for TLS: USERNAME:HEXKEY lines (GnuTLS psktool's
    /// format, as nbdkit and qemu read it).
    #[arg(long, value_name = "FILE")]
    tls_psk: Option<PathBuf>,
    /// Connections to each remote member whose server offers multi-conn
    /// (1 to 16; requests take them in turn); one to a server that does
    /// not. Default: 4 over TCP, 2 over a Unix socket (the server is on
    /// this host: each connection adds wake-ups on its CPUs).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=16))]
    member_connections: Option<u64>,
    /// Leave remote members whose connection broke out of use until
    /// `platter re-add`; by default they are disconnected, tried again with
    /// backoff (1 s, doubling to 30 s) and brought back once their host
    /// answers, rebuilding only what they missed (docs/remote.md).
    #[arg(long)]
    no_reconnect: bool,
    /// What performs member I/O: `auto` (io_uring where the kernel allows
    /// it, else a pool of threads per member, the reason logged at start),
    /// `io-uring` (refuse to start without it) or `threads`. Default: the
    /// PLATTER_IO_BACKEND environment variable, else auto.
    #[arg(long, value_name = "BACKEND")]
    io_backend: Option<String>,
    /// Open file members with O_DIRECT as well (block devices use it by
    /// default): the page cache is bypassed, a flush has only the device's
    /// cache to empty, and memory holds no second copy of member data.
    /// Needs a file system that supports it (not every FUSE or network
    /// file system does).
    #[arg(long, conflicts_with = "no_direct")]
    direct: bool,
    /// Open block devices through the page cache too (no O_DIRECT at all).
    #[arg(long)]
    no_direct: bool,
    /// Check the whole volume every INTERVAL (units s, m, h, d, w: 7d,
    /// 12h; 0: never, the default), a few stripes at a time at
    /// --scrub-rate, as md's raid-check cron does. A pass resumes where it
    /// was after a restart; the first comes one INTERVAL after the volume
    /// was created. It only reports (log, `platter status`, `stats`,
    /// /metrics); `platter repair` mends (docs/failures.md).
    #[arg(long, value_name = "INTERVAL", default_value = "0", value_parser = parse_interval)]
    scrub_every: Duration,
    /// Rebuilds (replace, a spare, re-add), the resync after a crash and
    /// reshapes move at most this fast: a size per second, or `unlimited`.
    /// `platter rebuild-rate` changes it while serving.
    #[arg(long, value_name = "RATE", default_value = defaults::REBUILD_RATE,
          value_parser = crate::control::parse_rebuild_rate)]
    rebuild_rate: u64,
    /// Where to link the control socket so that `platter status` with no
    /// argument lists this volume (default: $PLATTER_RUN_DIR, else
    /// /run/platter, made if missing). A directory that cannot be written
    /// is a warning in the log: the volume is served, not listed.
    #[arg(long, value_name = "DIR")]
    run_dir: Option<PathBuf>,
    /// The scheduled scrub's pace: a size per second (e.g. 32M).
    #[arg(long, value_name = "RATE", default_value = defaults::SCRUB_RATE,
          value_parser = crate::control::parse_rate)]
    scrub_rate: u64,
    /// Serve one client on standard input and output, which must be a
    /// socket, and stop (flushed, marked clean) when it leaves: for clients
    /// that start their server that way (libnbd's nbd_connect_command,
    /// nbdsh's h.connect_command). Nothing else is written to standard
    /// output. (`nbdinfo [ platter serve M... ]` and `nbdcopy -- [ platter
    /// serve M... ] out.img` start it with socket activation instead, which
    /// needs no option.)
    #[arg(long)]
    stdio: bool,
    /// Run PROGRAM for each event that needs a person, as `mdadm --monitor
    /// --program` does: PROGRAM EVENT VOLUME [MEMBER], with PLATTER_EVENT,
    /// PLATTER_VOLUME, PLATTER_VOLUME_UUID, PLATTER_SLOT, PLATTER_MEMBER,
    /// PLATTER_DETAIL and PLATTER_TIME set. Events: member-failed,
    /// member-disconnected, member-reconnected, member-removed,
    /// spare-active, rebuild-done, resync-done, mismatches-found,
    /// read-error-corrected, no-space, started-degraded, forced-assembly,
    /// reshape-done, reshape-stuck.
    /// One run at a time, each killed after 60 s; every event is also
    /// logged (event=NAME). See docs/failures.md.
    #[arg(long, value_name = "PROGRAM")]
    on_event: Option<PathBuf>,
    /// Record the clients' requests from the start in FILE (fio's iolog
    /// version 3, timestamps in microseconds), for `platter sim --workload
    /// fio:FILE` and `platter sweep` to replay. `platter record --control`
    /// starts and stops one while serving. See docs/simulator.md.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// The most FILE may grow to (default 1G): the recording stops there,
    /// says so, and the volume serves on.
    #[arg(long, value_name = "SIZE", value_parser = parse_size, requires = "record")]
    record_limit: Option<u64>,
    /// Find the members by their labels instead of naming them: look in
    /// these directories, files or devices, as `platter scan` does (with no
    /// PATH, every block device in /dev), for the volume --name or --uuid
    /// names.
    #[arg(long, value_name = "PATH", num_args = 0.., conflicts_with = "members")]
    scan: Option<Vec<String>>,
    /// With --scan: the volume to serve, by the name given at create.
    #[arg(long, value_name = "NAME", requires = "scan")]
    name: Option<String>,
    /// With --scan: the volume to serve, by its uuid (as `platter scan`
    /// prints it); needed when two volumes carry the same name.
    #[arg(long, value_name = "UUID", requires = "scan")]
    uuid: Option<String>,
    /// Serve the volume NAME as the volumes file FILE describes it (its
    /// members or where to scan for them, its socket, its options; see
    /// docs/config.md, conventionally /etc/platter/volumes.toml); options
    /// also given here win. NAME takes the members' place.
    #[arg(long, value_name = "FILE", conflicts_with = "scan")]
    pub config: Option<PathBuf>,
    /// The volume's members, in any order: files, block devices or NBD
    /// exports (nbd:// and nbd+unix:// URIs). With --config, the volume's
    /// name in the file instead.
    #[arg(value_name = "MEMBER", required_unless_present_any = ["scan", "pool"])]
    members: Vec<String>,
    /// Serve every volume of this pool (`platter pool create`), each as
    /// the NBD export of its name, through one socket and one control
    /// socket (`--volume NAME` picks one for the control commands). The
    /// MEMBERs are then the pool's drives, or directories holding them;
    /// without any, every block device in /dev.
    #[arg(long, value_name = "POOL", conflicts_with_all = ["scan", "rotational", "write_mostly"])]
    pool: Option<String>,
}

/// `--on-event PROGRAM` must be runnable now: a typo found at the first
/// failure, hours later, would lose that alert.
fn check_program(program: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let found = if program.components().count() > 1 {
        Some(program.to_path_buf())
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
    };
    let runnable = found
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .is_some_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if !runnable {
        return Err(CliError(format!(
            "--on-event {}: not an executable file{}",
            program.display(),
            if found.is_none() { " (not found)" } else { "" }
        )));
    }
    Ok(())
}

/// The members `--scan` finds for the volume named: every device carrying
/// its label (stale ones too: assembly judges them as if named), and apart
/// the superseded ones, which are never opened (nor claimed).
fn members_by_scan(
    paths: &[String],
    uuid: Option<&str>,
    name: Option<&str>,
) -> Result<(Vec<String>, Vec<SupersededDevice>)> {
    let found = crate::scan::discover(paths)?;
    let v = crate::scan::select(&found, uuid, name)?;
    let a = v.assembly.as_ref().map_err(|e| {
        CliError(format!(
            "volume '{}': the members found cannot be assembled: {e}",
            platter_core::label::printable(&v.name)
        ))
    })?;
    let superseded = platter_server::manage::leftout::superseded(a, &v.paths);
    let members: Vec<String> = (0..v.paths.len())
        .filter(|&i| !a.superseded.iter().any(|s| s.device == i))
        .map(|i| v.paths[i].clone())
        .collect();
    tracing::info!(
        volume = %platter_core::label::printable(&v.name),
        members = %members.join(" "),
        "members found by --scan"
    );
    Ok((members, superseded))
}

/// `--io-backend`, else the environment's choice, else auto.
fn io_backend(given: Option<&str>) -> Result<Backend> {
    if let Some(text) = given {
        return Backend::parse(text).map_err(|e| CliError(format!("--io-backend: {e}")));
    }
    match std::env::var(BACKEND_ENV) {
        Ok(text) if !text.is_empty() => {
            Backend::parse(&text).map_err(|e| CliError(format!("{BACKEND_ENV}: {e}")))
        }
        _ => Ok(Backend::Auto),
    }
}

/// A count that must be at least 1: 0 connections would refuse every
/// client, 0 threads serve nothing.
fn at_least_one(text: &str) -> std::result::Result<usize, String> {
    match text.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a count: {e}")),
    }
}

pub fn run(mut args: ServeArgs) -> Result<()> {
    // Before any thread starts: taking them edits the environment.
    let activated = platter_server::network::systemd::take_listen_fds().map_err(CliError)?;
    if args.socket.is_none() && args.listen.is_none() && activated.is_none() && !args.stdio {
        return Err(CliError(
            "give --socket PATH (or --listen HOST:PORT) to serve on, --stdio, or start under \
             systemd socket activation"
                .into(),
        ));
    }
    if let Some(p) = &args.on_event {
        check_program(p)?;
    }
    // Before any member is opened or label written.
    if args.stdio {
        platter_server::check_stdio().map_err(CliError)?;
    }
    if let Some(pool) = args.pool.clone() {
        return serve_pool(args, &pool, activated);
    }
    let mut superseded = Vec::new();
    if let Some(paths) = &args.scan {
        (args.members, superseded) =
            members_by_scan(paths, args.uuid.as_deref(), args.name.as_deref())?;
    }
    let io_backend = io_backend(args.io_backend.as_deref())?;
    let (volume, found) = open_volume(&args, superseded)?;
    let config = serve_config(args, found, activated, io_backend)?;
    // Under --stdio standard output is the client's socket: not a byte
    // of banner may go there. Started by socket activation (systemd, or a
    // client such as `nbdinfo [ CMD ]` whose output the banner would join)
    // the banner goes to stderr.
    let stdio = config.stdio;
    let banner_to_stderr = config.inherited.is_some();
    serve(volume, config, move |r| {
        if banner_to_stderr {
            err!("{}", ready_text(r));
        } else if stdio {
            tracing::info!(volume = %printable(&r.export_name), "serving the client on standard input and output");
        } else {
            print_ready(r);
        }
    })
    .map_err(|e| CliError(e.to_string()))
}

/// `serve --pool`: every volume of the pool through one server, which
/// makes, extends and removes volumes as the control socket asks. A
/// volume with subdisks on missing drives needs --run, as a volume with
/// missing members does; one that cannot serve at all is then left out,
/// said why.
fn serve_pool(
    args: ServeArgs,
    pool: &str,
    activated: Option<platter_server::network::systemd::Activated>,
) -> Result<()> {
    let io_backend = io_backend(args.io_backend.as_deref())?;
    let mut open =
        crate::pool::drives::open_pool(Some(pool), &args.members, member_options(&args))?;
    let drive_names: Vec<String> = open.pool().drives.iter().map(|d| d.name.clone()).collect();
    let latency = inject_drive_faults(&args.inject, &drive_names, &mut open.drives)?;
    let missing = !open.gathered.missing.is_empty();
    let host = crate::pool::host::ServedPool::new(open, latency);
    let (volumes, member_delays, member_drives) = pool_volumes(&host, &args, missing)?;
    // A pool with no volume yet is served, to make them through the
    // server; one whose volumes all failed to assemble is not.
    if volumes.is_empty() && !host.pool().volumes.is_empty() {
        return Err(CliError(format!(
            "pool {pool}: none of its volumes can be served (each said why above)"
        )));
    }
    let found = Found {
        unreachable: Vec::new(),
        member_delays,
        last_seen: BTreeMap::new(),
        forced_slots: Vec::new(),
        rotational: BTreeMap::new(),
        write_mostly: BTreeSet::new(),
        superseded: Vec::new(),
    };
    let mut config = serve_config(args, found, activated, io_backend)?;
    config.member_drives = Arc::new(member_drives);
    let stdio = config.stdio;
    platter_server::serve_pool(volumes, config, Some(Arc::new(host)), move |r| {
        if !stdio {
            print_ready(r);
        }
    })
    .map_err(|e| CliError(e.to_string()))
}

type StartingVolumes = Vec<platter_server::PoolStart>;
type ByMember<T> = std::collections::HashMap<String, T>;

/// Every volume of the served pool assembled from its subdisks, with the
/// latency and the drive of each subdisk. A volume with subdisks on
/// missing drives needs --run, as a volume with missing members does; one
/// that cannot serve at all is then left out, said why.
fn pool_volumes(
    host: &crate::pool::host::ServedPool,
    args: &ServeArgs,
    missing: bool,
) -> Result<(StartingVolumes, ByMember<Delay>, ByMember<String>)> {
    let pool = host.pool();
    let (mut member_delays, mut member_drives) = (ByMember::new(), ByMember::new());
    let mut volumes = Vec::new();
    for v in &pool.volumes {
        if v.has_plexes() {
            let maps = (&mut member_drives, &mut member_delays);
            volumes.push(host.start_of_plexes(v, (args.read_only, args.run), maps)?);
            continue;
        }
        let (members, blank) = host.open_volume(v, args.read_only)?;
        let all: Vec<String> = members
            .iter()
            .chain(&blank)
            .map(|m| m.describe().to_string())
            .collect();
        host.places(v, &all, &mut member_drives, &mut member_delays);
        let names = &all[..members.len()];
        // A blank subdisk (its drive replaced) stands for a missing one:
        // it becomes the volume's spare and is rebuilt.
        let given = crate::partial::Given::Named(names);
        let checked = assemble_devices(members)
            .map_err(CliError::from)
            .and_then(|vol| {
                crate::partial::check(&vol.assembly, given, blank.len(), args.run).map(|_| vol)
            });
        match checked {
            Ok(vol) => volumes.push(platter_server::PoolStart::Array(Box::new(vol), blank)),
            Err(e) if args.run && missing => {
                tracing::warn!(volume = %v.name, error = %e.0, "not served: it cannot be assembled without the missing drives");
            }
            Err(e) => {
                return Err(CliError(format!(
                    "volume {} of pool {}: {}",
                    v.name, pool.name, e.0
                )))
            }
        }
    }
    // A detached plex served as a volume of its own (`plex detach --as`).
    for name in pool.detached.iter().filter_map(|d| d.as_volume.as_deref()) {
        let maps = (&mut member_drives, &mut member_delays);
        match host.start_of_detached(name, (args.read_only, true), maps) {
            Ok(start) => volumes.push(start),
            Err(e) => {
                tracing::warn!(volume = %name, error = %e.0, "detached plex not served");
            }
        }
    }
    Ok((volumes, member_delays, member_drives))
}

/// `serve --pool --inject DRIVE=SPEC`: faults wrap the drive, so that
/// every volume with a subdisk there meets them; latency is returned by
/// the drive's name in the pool, for its subdisks.
fn inject_drive_faults(
    injects: &[String],
    drive_names: &[String],
    drives: &mut [Option<Arc<dyn Member>>],
) -> Result<std::collections::HashMap<String, Delay>> {
    let present: Vec<usize> = (0..drives.len()).filter(|&d| drives[d].is_some()).collect();
    let paths: Vec<String> = present
        .iter()
        .map(|&d| drives[d].as_ref().expect("present").describe().to_string())
        .collect();
    let mut handles: Vec<Arc<dyn Member>> = present
        .iter()
        .map(|&d| Arc::clone(drives[d].as_ref().expect("present")))
        .collect();
    let delays = inject_faults(injects, &paths, &mut handles)?;
    let mut by_drive = std::collections::HashMap::new();
    for (i, &d) in present.iter().enumerate() {
        if let Some(delay) = delays.get(&paths[i]) {
            by_drive.insert(drive_names[d].clone(), delay.clone());
        }
        drives[d] = Some(Arc::clone(&handles[i]));
    }
    Ok(by_drive)
}

/// A stalled remote member is disconnected before it could be failed.
fn remote_timeout(args: &ServeArgs) -> Duration {
    Duration::from_secs(args.remote_timeout.min(args.member_timeout))
}

/// What the start found out about the members, for the server.
struct Found {
    unreachable: Vec<String>,
    member_delays: std::collections::HashMap<String, Delay>,
    last_seen: BTreeMap<u32, String>,
    forced_slots: Vec<u32>,
    rotational: BTreeMap<u32, bool>,
    write_mostly: BTreeSet<u32>,
    superseded: Vec<SupersededDevice>,
}

/// How `serve` opens the members (or a pool's drives) it starts with.
fn member_options(args: &ServeArgs) -> OpenOptions {
    OpenOptions {
        read_only: args.read_only,
        claim: true,
        direct: args.direct,
        direct_block_devices: !args.no_direct,
        request_timeout: Some(remote_timeout(args)),
        // At most 16 (the parser's range); 0: the member's default.
        connections: args.member_connections.unwrap_or(0) as u32,
        ..OpenOptions::default()
    }
}

/// The members opened (faults injected where asked) and assembled, with
/// the refusals that come before the server: too few members without
/// --run, `--rotational` and `--write-mostly` naming no member.
fn open_volume(
    args: &ServeArgs,
    superseded: Vec<SupersededDevice>,
) -> Result<(platter_io::assembly::OpenVolume, Found)> {
    let opts = member_options(args);
    // A remote member whose host does not answer is left out (the volume
    // starts degraded if it can) and tried in the background.
    let (mut devices, unreachable) = open_reachable(&args.members, opts)?;
    let members: Vec<String> = args
        .members
        .iter()
        .filter(|m| !unreachable.contains(m))
        .cloned()
        .collect();
    let member_delays = inject_faults(&args.inject, &members, &mut devices)?;
    if !args.read_only {
        for (device, slot) in crate::reshape::added::finish_added_labels(&devices)? {
            tracing::warn!(
                member = %device,
                slot,
                "added member of a reshape that had not begun was blank (its label write cut \
                 off): labelled as the reshape would have"
            );
        }
    }
    let mut volume = assemble_devices(devices)?;
    let given = match &args.scan {
        Some(paths) => crate::partial::Given::Scanned(paths),
        None => crate::partial::Given::Named(&members),
    };
    let last_seen = crate::partial::check(&volume.assembly, given, unreachable.len(), args.run)?;
    let forced_slots = if args.force && !args.read_only {
        force_members_into_use(&mut volume)
    } else {
        Vec::new()
    };
    let rotational = parse_rotational(&args.rotational, &members, &volume)?;
    let write_mostly = parse_write_mostly(&args.write_mostly, &members, &volume)?;
    let found = Found {
        unreachable,
        member_delays,
        last_seen,
        forced_slots,
        rotational,
        write_mostly,
        superseded,
    };
    Ok((volume, found))
}

/// `--inject`: each member's faults checked against its size; latency
/// returned as the I/O layer's delay, by the member's description, and
/// the other faults wrapped around the member.
fn inject_faults(
    injects: &[String],
    members: &[String],
    devices: &mut [Arc<dyn Member>],
) -> Result<std::collections::HashMap<String, Delay>> {
    let injections = parse_injections(injects, members)?;
    let mut member_delays = std::collections::HashMap::new();
    for (i, spec) in injections {
        let size = devices[i].size_bytes();
        let ranges = [
            ("bad-range", &spec.bad_ranges),
            ("drop-writes", &spec.drop_ranges),
        ];
        for (key, list) in ranges {
            if let Some(r) = list.iter().find(|r| r.end_bytes() > size) {
                return Err(CliError(format!(
                    "--inject {}: {key} {}+{} ends past the member's end ({size} bytes)",
                    members[i], r.offset_bytes, r.len_bytes
                )));
            }
        }
        tracing::warn!(member = %members[i], faults = %spec, "injecting faults");
        // Latency is a timer on the I/O layer (no thread sleeps through
        // it); the other faults need to see each I/O, so they wrap the
        // member, which then does not offer its descriptor to io_uring.
        let (faults, latency) = spec.split_latency();
        if let Some(delay) = Delay::of_spec(&latency) {
            member_delays.insert(devices[i].describe().to_string(), delay);
        }
        if faults.is_active() {
            let inner = Arc::clone(&devices[i]);
            devices[i] = Arc::new(FaultyMember::new(inner, faults));
        }
    }
    Ok(member_delays)
}

/// `--tls`, on by default when credentials are given; on or require
/// without them is refused.
fn tls_of(args: &ServeArgs) -> Result<(TlsPolicy, Option<platter_tls::Credentials>)> {
    let tls_credentials = match (&args.tls_certificates, &args.tls_psk) {
        (Some(dir), _) => Some(platter_tls::Credentials::X509 { dir: dir.clone() }),
        (None, Some(file)) => Some(platter_tls::Credentials::Psk(
            platter_tls::PskKeys::load(file).map_err(|e| CliError(format!("--tls-psk: {e}")))?,
        )),
        (None, None) => None,
    };
    let tls = args.tls.unwrap_or(if tls_credentials.is_some() {
        TlsPolicy::On
    } else {
        TlsPolicy::Off
    });
    if tls != TlsPolicy::Off && tls_credentials.is_none() {
        return Err(CliError(
            "--tls on or require needs --tls-certificates DIR or --tls-psk FILE".into(),
        ));
    }
    Ok((tls, tls_credentials))
}

fn serve_config(
    args: ServeArgs,
    found: Found,
    activated: Option<platter_server::network::systemd::Activated>,
    io_backend: Backend,
) -> Result<ServeConfig> {
    let (tls, tls_credentials) = tls_of(&args)?;
    Ok(ServeConfig {
        remote_timeout: remote_timeout(&args),
        socket: args.socket,
        listen: args.listen,
        read_only: args.read_only,
        discard_log: args.discard_log,
        threads: args.threads,
        max_connections: args.max_connections,
        control: args.control,
        metrics: args.metrics,
        rotational: found.rotational,
        write_mostly: found.write_mostly,
        unreachable: found.unreachable,
        tls,
        tls_credentials,
        stripe_cache_stripes: args.stripe_cache,
        buffer_limit_bytes: args.buffer_limit,
        handshake_timeout: Duration::from_secs(args.handshake_timeout),
        idle_timeout: (args.idle_timeout > 0).then(|| Duration::from_secs(args.idle_timeout)),
        // At most 4096 (the parser's range): fits any usize.
        member_queue_depth: args.member_queue_depth as usize,
        member_timeout: Duration::from_secs(args.member_timeout),
        member_connections: args.member_connections.unwrap_or(0) as u32,
        reconnect: !args.no_reconnect,
        io_backend,
        member_delays: found.member_delays,
        // `serve_pool` sets it: an array's members are no pool's subdisks.
        member_drives: Arc::default(),
        scrub_every: (!args.scrub_every.is_zero()).then_some(args.scrub_every),
        scrub_rate_bytes_per_sec: args.scrub_rate,
        inherited: platter_server::network::systemd::Inherited::new(activated),
        on_event: args.on_event,
        record: args.record.map(|path| {
            (
                path,
                args.record_limit
                    .unwrap_or(platter_server::manage::record::DEFAULT_LIMIT_BYTES),
            )
        }),
        stdio: args.stdio,
        forced_slots: found.forced_slots,
        run_dir: Some(crate::served::run_dir(args.run_dir)),
        rebuild_rate_bytes_per_sec: args.rebuild_rate,
        last_seen: found.last_seen,
        superseded: found.superseded,
    })
}

/// `--force`: every present member that the freshest label marks faulty,
/// or whose own label is older, is taken as in sync; the volume is marked
/// dirty so that it is resynced. Says what it does, and what it risks, on
/// stderr and in the log.
fn force_members_into_use(volume: &mut platter_io::assembly::OpenVolume) -> Vec<u32> {
    use platter_core::assemble::SlotNote;
    use platter_core::label::{SlotState, VolumeState};
    use platter_core::volume::Health;
    let a = &mut volume.assembly;
    let mut forced = Vec::new();
    for slot in 0..a.notes.len() {
        let Some(device) = a.slot_device[slot] else {
            continue;
        };
        let why = match a.notes[slot] {
            SlotNote::Marked(SlotState::Faulty) => "the volume's labels mark it faulty".to_string(),
            SlotNote::Stale { event_counter } => format!(
                "its label is older than the volume's (event {event_counter} of {})",
                a.label.event_counter
            ),
            _ => continue,
        };
        let name = volume.devices[device].describe();
        errln!(
            "platter: warning: --force: using member {name} (slot {slot}) although {why}; \
             if it missed writes while out of use, reads of those bytes return old data \
             and the resync makes parity and copies agree with it"
        );
        tracing::warn!(member = %name, slot, reason = %why, "--force: member forced into use");
        a.notes[slot] = SlotNote::InUse;
        a.health[slot] = Health::Online;
        a.label.slots[slot].state = SlotState::Active;
        forced.push(slot as u32);
    }
    if !forced.is_empty() {
        // Parity and copies may disagree where writes were refused or lost:
        // serve as after a crash, resyncing what the bitmap marks (all of
        // it without one).
        a.label.state = VolumeState::Dirty;
    }
    forced
}

/// `--scrub-every`: a whole number with a unit (s, m, h, d, w), or 0.
fn parse_interval(text: &str) -> std::result::Result<Duration, String> {
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not an interval: a number and a unit (7d, 12h, 30m)"))?;
    let unit_secs: u64 = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        "w" => 7 * 86_400,
        "" => return Err(format!("{text:?} needs a unit: s, m, h, d or w (7d, 12h)")),
        _ => return Err(format!("{text:?}: unknown unit {unit:?} (s, m, h, d or w)")),
    };
    n.checked_mul(unit_secs)
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{text:?} is out of range"))
}

/// `--inject MEMBER=SPEC` options as (index into `members`, spec). MEMBER
/// is matched against the members as given (the longest that fits, so a
/// path may itself contain `=`).
fn parse_injections(injects: &[String], members: &[String]) -> Result<Vec<(usize, FaultSpec)>> {
    let mut out: Vec<(usize, FaultSpec)> = Vec::new();
    for arg in injects {
        let Some((i, text)) = members
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((i, arg.strip_prefix(m.as_str())?.strip_prefix('=')?)))
            .min_by_key(|(_, text)| text.len())
        else {
            let named = arg.split_once('=').map_or(arg.as_str(), |(m, _)| m);
            return Err(CliError(format!(
                "--inject {arg}: {named} is not one of the members given (want MEMBER=SPEC)"
            )));
        };
        let spec = FaultSpec::parse(text).map_err(|e| CliError(format!("--inject {arg}: {e}")))?;
        if out.iter().any(|(j, _)| *j == i) {
            return Err(CliError(format!(
                "--inject: member {} is named twice; give one spec with every fault",
                members[i]
            )));
        }
        out.push((i, spec));
    }
    Ok(out)
}

/// `--rotational MEMBER=yes|no` options as slot → spins. MEMBER is a
/// member as given (the longest that fits, as for --inject) or a slot.
fn parse_rotational(
    opts: &[String],
    members: &[String],
    volume: &platter_io::assembly::OpenVolume,
) -> Result<BTreeMap<u32, bool>> {
    let mut out = BTreeMap::new();
    for arg in opts {
        let bad = |why: String| CliError(format!("--rotational {arg}: {why}"));
        // The longest member name that fits: a path may hold a '='.
        let named = members
            .iter()
            .filter_map(|m| Some((m, arg.strip_prefix(m.as_str())?.strip_prefix('=')?)))
            .min_by_key(|(_, text)| text.len());
        let (member, value) = match named {
            Some((m, value)) => (m.as_str(), value),
            None => arg
                .split_once('=')
                .ok_or_else(|| bad("want MEMBER=yes|no".into()))?,
        };
        let slot = slot_named(member, members, volume).map_err(bad)?;
        let spins = match value.to_ascii_lowercase().as_str() {
            "yes" | "true" | "1" | "hdd" => true,
            "no" | "false" | "0" | "ssd" => false,
            other => return Err(bad(format!("'{other}' is not yes or no"))),
        };
        out.insert(slot, spins);
    }
    Ok(out)
}

/// `--write-mostly MEMBER` options as slots.
fn parse_write_mostly(
    opts: &[String],
    members: &[String],
    volume: &platter_io::assembly::OpenVolume,
) -> Result<BTreeSet<u32>> {
    opts.iter()
        .map(|arg| {
            slot_named(arg, members, volume)
                .map_err(|why| CliError(format!("--write-mostly {arg}: {why}")))
        })
        .collect()
}

/// The slot of `member`: one of the members as given, or a slot number.
fn slot_named(
    member: &str,
    members: &[String],
    volume: &platter_io::assembly::OpenVolume,
) -> std::result::Result<u32, String> {
    let slots = volume.assembly.slot_device.len();
    if let Some(i) = members.iter().position(|m| m == member) {
        return volume
            .assembly
            .slot_device
            .iter()
            .position(|d| *d == Some(i))
            .map(|slot| slot as u32)
            .ok_or_else(|| format!("{member} is not in use in the volume"));
    }
    let slot: u32 = member
        .parse()
        .map_err(|_| format!("{member} is neither one of the members given nor a slot number"))?;
    if slot as usize >= slots {
        return Err(format!(
            "there is no slot {slot} ({})",
            platter_core::balance::slots_are(slots as u32)
        ));
    }
    Ok(slot)
}

fn parse_tls(text: &str) -> std::result::Result<TlsPolicy, String> {
    match text {
        "off" => Ok(TlsPolicy::Off),
        "on" => Ok(TlsPolicy::On),
        "require" => Ok(TlsPolicy::Require),
        other => Err(format!("'{other}': want off, on or require")),
    }
}

fn print_ready(r: &Ready) {
    // Flushed (out.rs): scripts wait for this line. A closed stdout
    // loses the banner, not the server.
    out!("{}", ready_text(r));
}

/// The banner: what is served, where, and how to reach it.
fn ready_text(r: &Ready) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    if let (Some(pool), "") = (&r.pool, r.export_name.as_str()) {
        return empty_pool_text(pool, r);
    }
    let _ = writeln!(
        s,
        "serving '{}' ({}, {} bytes); stop with Ctrl-C or SIGTERM",
        printable(&r.export_name),
        format_size(r.size_bytes),
        r.size_bytes
    );
    for uri in &r.uris {
        let _ = writeln!(s, "  {}", printable(uri));
    }
    for (name, size_bytes) in &r.others {
        let _ = writeln!(
            s,
            "and '{}' ({}, {size_bytes} bytes), the export of that name at the same place",
            printable(name),
            format_size(*size_bytes)
        );
    }
    if let Some(m) = &r.metrics {
        let _ = writeln!(s, "metrics: {m}");
    }
    if let Some(uri) = r.uris.first().map(|u| printable(u)) {
        let _ = writeln!(s, "try:");
        let _ = writeln!(s, "  nbdinfo '{uri}'");
        let _ = writeln!(
            s,
            "  qemu-io -f raw -c 'write -P 0xab 0 1M' -c 'read -P 0xab 0 1M' '{uri}'"
        );
        let _ = writeln!(
            s,
            "  mkdir -p /tmp/platter-fuse && nbdfuse /tmp/platter-fuse/disk '{uri}' &"
        );
    }
    s
}

/// The banner of a pool's server with no volume yet: where it listens,
/// and how to make the first.
fn empty_pool_text(pool: &str, r: &Ready) -> String {
    use std::fmt::Write;
    let mut s = format!(
        "serving pool '{}', no volume yet; stop with Ctrl-C or SIGTERM\n",
        printable(pool)
    );
    for uri in &r.uris {
        let _ = writeln!(s, "  {}", printable(uri));
    }
    if let Some(m) = &r.metrics {
        let _ = writeln!(s, "metrics: {m}");
    }
    let control = r.control.as_deref().unwrap_or("CONTROL-SOCKET");
    let _ = writeln!(
        s,
        "make one: platter volume create {} NAME --level LEVEL --size SIZE --control {}",
        printable(pool),
        printable(control)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    /// `--help`'s defaults are the server's: the buffer limit is written
    /// for people ("1G") and must say the same number of bytes.
    #[test]
    fn the_options_default_to_the_servers_defaults() {
        assert_eq!(
            parse_size(defaults::BUFFER_LIMIT).unwrap(),
            defaults::BUFFER_LIMIT_BYTES
        );
        let a = Cli::parse_from(["serve", "--socket", "/s", "/m0"]).serve;
        let d = ServeConfig::default();
        assert_eq!(a.threads, d.threads);
        assert_eq!(a.max_connections, d.max_connections);
        assert_eq!(a.stripe_cache, d.stripe_cache_stripes);
        assert_eq!(a.buffer_limit, d.buffer_limit_bytes);
        assert_eq!(Some(Duration::from_secs(a.idle_timeout)), d.idle_timeout);
        assert_eq!(
            Duration::from_secs(a.handshake_timeout),
            d.handshake_timeout
        );
        assert_eq!(a.member_queue_depth as usize, d.member_queue_depth);
        assert_eq!(Duration::from_secs(a.member_timeout), d.member_timeout);
        assert_eq!(Duration::from_secs(a.remote_timeout), d.remote_timeout);
        assert_eq!(!a.no_reconnect, d.reconnect);
        assert_eq!(a.scrub_rate, d.scrub_rate_bytes_per_sec);
        assert_eq!(a.rebuild_rate, d.rebuild_rate_bytes_per_sec);
        assert_eq!(
            parse_size(defaults::REBUILD_RATE).unwrap(),
            defaults::REBUILD_BYTES_PER_SEC
        );
        assert!(a.scrub_every.is_zero() && d.scrub_every.is_none());
    }

    #[test]
    fn scrub_intervals_need_a_unit_and_fit() {
        assert_eq!(parse_interval("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_interval("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_interval("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(parse_interval("0"), Ok(Duration::ZERO));
        for bad in ["7", "d", "7x", "-1d", "1.5d", "99999999999999999999w", "0d"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }
}
