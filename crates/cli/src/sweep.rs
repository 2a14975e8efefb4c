//! `platter sweep`: one workload over levels, member counts, interleaves
//! and read policies on modelled drives; a table, an SVG plot, progress.

use crate::error::Result;
use crate::out::{errln, out, outln};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use platter_core::balance::ReadPolicy;
use platter_core::units::parse_size;
use platter_core::volume::CacheLimits;
use platter_core::{Level, ParityLayout};
use platter_io::aio::layer::QUEUE_DEPTH_DEFAULT;
use platter_sim::disk::drive::{DriveSpec, Scheduler};
use platter_sim::disk::parametric::Parametric;
use platter_sim::disk::HostModel;
use platter_sim::members::parse_time_ns;
use platter_sim::sweep::{
    default_interleaves, parse_interleaves, png, svg, table, Beside, Members, Row, Sweep,
};
use platter_sim::workload::WorkloadSpec;
use platter_sim::{Jitter, Link, SimpleLatency};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

#[derive(Args)]
#[command(after_help = "\
Drives: a DiskSim 4.0 parameter file (FILE.parv), a name of DiskSim's validation set \
(cheetah9LP, barracuda, hp_c2247a: looked up in $PLATTER_DISKSIM_DIR, in share/platter/disksim \
beside the binary's bin/, where scripts/setup installs them, and in the data/disksim of the \
source tree it was built from), parametric-7200 (a built-in 7200 rpm drive), or simple \
(SimpleLatency members, which need --member-size; with --latency they are the members \
`platter serve --inject mN=latency=T` makes: every I/O takes T plus --latency-jitter, at most \
--queue-depth at once per member).

Workloads: dd[:rw=read|write,bs=64k,qd=1,total=64M], raidtest[:p=8,n=10000,read=50,min=1k,max=128k,align=512], \
bonnie[:size=100M,phase=all|write|rewrite|read|seeks,seeks=4000], \
news[:readers=30,files=1000,dirs=390,per-dir=100,run=10], untar[:files=2000,p=1,dir-files=20,cluster=64k], \
fio:PATH[,qd=N,timed=0|1], blkparse:PATH[,qd=N,timed=0|1,action=D|Q] (see docs/simulator.md).

Example: platter sweep --drive parametric-7200 --workload raidtest:p=30,read=100 \
--levels stripe,raid5 --members 4 --interleaves 8s..32768s,126s --out sweep.svg")]
#[derive(Default)]
pub struct SweepArgs {
    /// The drive behind every member.
    #[arg(long, value_name = "DRIVE", default_value = "parametric-7200")]
    pub(crate) drive: String,
    /// The workload (NAME[:key=value,...]).
    #[arg(long, default_value = "raidtest")]
    pub(crate) workload: String,
    /// Levels, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "stripe")]
    pub(crate) levels: Vec<Level>,
    /// Member counts, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "4")]
    pub(crate) members: Vec<u32>,
    /// Interleaves: sizes (126s, 64k) and A..B for A, 2A, 4A ... B
    /// [default: 8s..32768s,126s].
    #[arg(long)]
    pub(crate) interleaves: Option<String>,
    /// Read policies for mirror and raid10, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "auto")]
    pub(crate) policies: Vec<ReadPolicy>,
    /// The seed: the same seed gives the same numbers.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Largest command the host sends a drive (MAXPHYS).
    #[arg(long, default_value = "128k")]
    pub(crate) max_transfer: String,
    /// Commands outstanding at each drive (default 1); for `simple`, I/Os
    /// each member serves at once, the rest waiting in order (default 32,
    /// as `serve --member-queue-depth`).
    #[arg(long)]
    pub(crate) queue_depth: Option<u32>,
    /// `simple` members: every member I/O (flushes too) takes this long,
    /// whatever its size (2ms, 500us) [default: 100us + 5us per KiB,
    /// flushes 500us, plus up to 100us].
    #[arg(long, value_name = "TIME")]
    pub(crate) latency: Option<String>,
    /// `simple` members with --latency: a random extra time per I/O, T
    /// (uniform, 0 to T) or exp:T (exponential, mean T, cut at 20 T), as
    /// `serve --inject mN=latency-jitter=` adds it.
    #[arg(long, value_name = "T|exp:T")]
    pub(crate) latency_jitter: Option<String>,
    /// `simple` members with --latency: this much more per MiB an I/O
    /// moves (a member's copy; default 0).
    #[arg(long, value_name = "TIME")]
    pub(crate) latency_per_mib: Option<String>,
    /// Gather RAID-5/6 partial-stripe writes in a stripe cache of this many
    /// stripes (at most 16 MiB), destaged every 20 ms, as `platter serve
    /// --stripe-cache` does (its default is 64); 0 or absent: none.
    #[arg(long, value_name = "STRIPES")]
    pub(crate) stripe_cache: Option<u64>,
    /// The client's connection to a served volume:
    /// request=T,read=T,write=T (per request, per MiB read, per MiB
    /// written; one request at a time each way); absent: none.
    #[arg(long, value_name = "SPEC")]
    pub(crate) link: Option<String>,
    /// Drive scheduling of queued commands: fcfs or sptf (default: the
    /// drive's own).
    #[arg(long)]
    pub(crate) scheduler: Option<String>,
    /// Use at most this much of each member (required for `simple`).
    #[arg(long)]
    pub(crate) member_size: Option<String>,
    /// Threads (default: every core).
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Write a plot of throughput against interleave here: SVG, or PNG
    /// when the name ends in .png.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub(crate) out: Option<PathBuf>,
    /// A second volume on the same drives, with its own load, at once:
    /// LEVEL:INTERLEAVE:WORKLOAD (stripe:128k:dd:total=64M). Each drive's
    /// first half holds the swept volume's subdisk, its second half this
    /// one's (as a pool carves two volumes from its drives); the table adds
    /// the swept volume's mean latency with it running, how many times its
    /// latency alone that is, and this volume's MB/s. Modelled drives only.
    #[arg(long, value_name = "LEVEL:INTERLEAVE:WORKLOAD")]
    pub(crate) beside: Option<String>,
    /// Print the results as JSON lines instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// A volume's members (comma separated, or repeated): its level,
    /// member count and interleave join the lists above, so that the
    /// table compares the layout it has with those asked for (what
    /// `platter reshape` would move it to). Reads the labels only.
    #[arg(long, value_name = "MEMBER", value_delimiter = ',')]
    pub(crate) volume: Vec<String>,
    /// A volume's layout given as such (`advise --control`: a running
    /// server's), in place of `volume`'s labels.
    #[arg(skip)]
    pub(crate) volume_geometry: Option<platter_core::geometry::Geometry>,
}

/// The layout of the volume whose members are `specs`, from their labels.
pub(crate) fn volume_layout(specs: &[String]) -> Result<platter_core::geometry::Geometry> {
    Ok(volume_layout_and_policy(specs)?.0)
}

/// A volume's layout and the read policy its labels hold (read-only).
pub(crate) fn volume_layout_and_policy(
    specs: &[String],
) -> Result<(platter_core::geometry::Geometry, Option<ReadPolicy>)> {
    let opts = platter_io::OpenOptions {
        read_only: true,
        ..platter_io::OpenOptions::default()
    };
    let members = crate::members::open_all(specs, opts).map_err(crate::error::CliError::from)?;
    let volume = crate::members::assemble_devices(members)?;
    let l = &volume.assembly.label;
    let policy = ReadPolicy::from_label(l.read_policy, l.read_policy_arg).ok();
    Ok((volume.assembly.geometry, policy))
}

/// Where DiskSim's validation drives may be: named by the environment,
/// installed beside the binary (`PREFIX/bin/platter`,
/// `PREFIX/share/platter/disksim`), or in the repository it was built from.
fn disksim_dirs() -> Vec<PathBuf> {
    let mut v = Vec::new();
    if let Some(d) = std::env::var_os("PLATTER_DISKSIM_DIR") {
        v.push(PathBuf::from(d));
    }
    let exe = std::env::current_exe().ok();
    if let Some(prefix) = exe.as_deref().and_then(Path::parent).and_then(Path::parent) {
        v.push(prefix.join("share/platter/disksim"));
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    if let Some(repo) = crate_dir.parent().and_then(Path::parent) {
        v.push(repo.join("data/disksim"));
    }
    v
}

pub(crate) fn resolve_drive(name: &str) -> Result<Option<DriveSpec>> {
    match name {
        "simple" => return Ok(None),
        "parametric-7200" | "7200" => return Ok(Some(Parametric::drive_7200().spec())),
        _ => {}
    }
    let path = Path::new(name);
    let file =
        if path.extension().is_some_and(|e| e == "parv") || path.exists() {
            path.to_path_buf()
        } else {
            let dirs = disksim_dirs();
            let found = dirs
                .iter()
                .map(|d| d.join(format!("{name}.parv")))
                .find(|p| p.exists());
            found.ok_or_else(|| {
                let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
                let env = std::env::var_os("PLATTER_DISKSIM_DIR").is_some();
                format!(
                "drive `{name}`: not a file, not parametric-7200 or simple, and no {name}.parv in \
                 {}{}",
                looked.join(", "),
                if env { "" } else { " (or a directory $PLATTER_DISKSIM_DIR names)" }
            )
            })?
        };
    let spec = platter_sim::disksim::load_drive(&file).map_err(|e| e.to_string())?;
    Ok(Some(spec))
}

/// Whether the plot goes out as PNG (else SVG); other names are refused
/// before the sweep runs.
fn plot_is_png(out: &Path) -> Result<bool> {
    match out.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("png") => Ok(true),
        Some(e) if e.eq_ignore_ascii_case("svg") => Ok(false),
        _ => Err(format!(
            "{}: plots are written as SVG or PNG; name the file .svg or .png",
            out.display()
        )
        .into()),
    }
}

pub fn run(mut a: SweepArgs) -> Result<()> {
    if let Some(out) = &a.out {
        plot_is_png(out)?;
    }
    let (sweep, drive_name) = prepare(&mut a)?;
    let rows = execute(&sweep, &a, &drive_name)?;
    if a.json {
        for r in &rows {
            outln!("{}", row_json(r));
        }
    } else {
        out!("{}", table(&rows));
    }
    if let Some(out) = &a.out {
        let png_out = plot_is_png(out)?;
        let title = format!(
            "{} on {drive_name}, seed {}",
            sweep.workload.describe(),
            a.seed
        );
        let bytes = if png_out {
            png(&rows, &title)
        } else {
            svg(&rows, &title).into_bytes()
        };
        std::fs::write(out, bytes).map_err(|e| format!("{}: {e}", out.display()))?;
        errln!("sweep: plot written to {}", out.display());
    }
    if rows
        .iter()
        .any(|r| r.result.is_err() || matches!(r.together, Some(Err(_))))
    {
        return Err("some configurations failed (see the table)".into());
    }
    Ok(())
}

/// One row as a JSON object (`sweep --json`, `advise --json`).
pub(crate) fn row_json(r: &Row) -> serde_json::Value {
    let p = &r.point;
    let mut j = serde_json::json!({
        "level": p.level.to_string(),
        "members": p.members,
        "interleave_bytes": p.interleave_bytes,
        "policy": p.policy.map(|p| p.to_string()),
    });
    match &r.result {
        Ok(b) => {
            j["mb_per_s"] = b.mb_per_s().into();
            j["iops"] = b.iops().into();
            j["mean_latency_ms"] = (b.mean_latency_ns as f64 / 1e6).into();
            j["p99_latency_ms"] = (b.p99_latency_ns as f64 / 1e6).into();
            j["requests"] = b.requests.into();
            j["member_ios"] = b.member_ios.into();
            j["elapsed_ns"] = b.elapsed_ns.into();
        }
        Err(e) => j["error"] = e.clone().into(),
    }
    match &r.together {
        Some(Ok(t)) => {
            j["beside"] = serde_json::json!({
                "mean_latency_ms": t.volume.mean_latency_ns as f64 / 1e6,
                "mb_per_s": t.volume.mb_per_s(),
                "beside_mb_per_s": t.beside.mb_per_s(),
                "beside_mean_latency_ms": t.beside.mean_latency_ns as f64 / 1e6,
            })
        }
        Some(Err(e)) => j["beside"] = serde_json::json!({ "error": e }),
        None => {}
    }
    j
}

/// The sweep the arguments ask for (the volume's own layout among its
/// points, `--volume`), and the drive's name.
pub(crate) fn prepare(a: &mut SweepArgs) -> Result<(Sweep, String)> {
    let workload = WorkloadSpec::parse(&a.workload)?;
    let mut interleaves = match &a.interleaves {
        Some(t) => parse_interleaves(t)?,
        None => default_interleaves(),
    };
    add_volume_point(a, &mut interleaves)?;
    let member_bytes = a.member_size.as_deref().map(parse_size).transpose()?;
    let members_model = match resolve_drive(&a.drive)? {
        Some(spec) => disk_members(a, spec)?,
        None => simple_members(a, member_bytes)?,
    };
    let drive_name = match &members_model {
        Members::Disk { spec, .. } => spec.name.clone(),
        Members::Simple { .. } => "simple".into(),
    };
    let sweep = Sweep {
        members_model,
        workload,
        levels: a.levels.clone(),
        member_counts: a.members.clone(),
        interleaves,
        policies: a.policies.clone(),
        seed: a.seed,
        member_bytes,
        parity_layout: ParityLayout::LeftSymmetric,
        stripe_cache: match a.stripe_cache {
            None | Some(0) => None,
            Some(max_stripes) => Some(CacheLimits {
                max_stripes,
                ..CacheLimits::DEFAULT
            }),
        },
        link: match &a.link {
            Some(t) => Link::parse(t).map_err(|e| format!("--link: {e}"))?,
            None => Link::default(),
        },
        beside: a
            .beside
            .as_deref()
            .map(Beside::parse)
            .transpose()
            .map_err(|e| format!("--beside: {e}"))?,
    };
    if sweep.beside.is_some() && matches!(sweep.members_model, Members::Simple { .. }) {
        return Err(
            "--beside needs modelled drives (--drive), whose heads the volumes share".into(),
        );
    }
    Ok((sweep, drive_name))
}

/// The volume's level, member count and interleave among those swept, so
/// that its own layout is one of the points.
fn add_volume_point(a: &mut SweepArgs, interleaves: &mut Vec<u64>) -> Result<()> {
    let volume = match (&a.volume_geometry, a.volume.is_empty()) {
        (Some(g), _) => Some(g.clone()),
        (None, false) => Some(volume_layout(&a.volume)?),
        (None, true) => None,
    };
    if let Some(g) = volume {
        errln!(
            "sweep: the volume is {} of {} members, interleave {}: its row is among the results",
            g.level(),
            g.members(),
            platter_sim::sweep::format_interleave(g.interleave_bytes())
        );
        if !a.levels.contains(&g.level()) {
            a.levels.insert(0, g.level());
        }
        if !a.members.contains(&g.members()) {
            a.members.insert(0, g.members());
        }
        if !interleaves.contains(&g.interleave_bytes()) {
            interleaves.insert(0, g.interleave_bytes());
        }
    }
    Ok(())
}

/// Members on a modelled drive, behind a host that sends commands of at
/// most --max-transfer, --queue-depth at a time.
fn disk_members(a: &SweepArgs, mut spec: DriveSpec) -> Result<Members> {
    match a.scheduler.as_deref() {
        None => {}
        Some("fcfs") => spec.scheduler = Scheduler::Fcfs,
        Some("sptf") => spec.scheduler = Scheduler::Sptf,
        Some(other) => return Err(format!("--scheduler {other}: fcfs or sptf").into()),
    }
    let queue_depth = a.queue_depth.unwrap_or(1);
    if queue_depth == 0 {
        return Err("--queue-depth must be at least 1".into());
    }
    if a.latency.is_some() || a.latency_jitter.is_some() || a.latency_per_mib.is_some() {
        return Err(
            "--latency, --latency-jitter and --latency-per-mib are for --drive simple".into(),
        );
    }
    let max_transfer_bytes = parse_size(&a.max_transfer)?;
    if max_transfer_bytes < 512 {
        return Err("--max-transfer must be at least 512 bytes".into());
    }
    Ok(Members::Disk {
        spec: Box::new(spec),
        host: HostModel {
            max_transfer_bytes,
            queue_depth,
        },
    })
}

/// `--drive simple`: members with a fixed latency (and jitter, and time
/// per MiB moved).
fn simple_members(a: &SweepArgs, member_bytes: Option<u64>) -> Result<Members> {
    if member_bytes.is_none() {
        return Err("--drive simple needs --member-size".into());
    }
    let queue_depth = a.queue_depth.unwrap_or(QUEUE_DEPTH_DEFAULT as u32);
    if queue_depth == 0 {
        return Err("--queue-depth must be at least 1".into());
    }
    let latency = match (&a.latency, &a.latency_jitter) {
        (None, None) if a.latency_per_mib.is_some() => {
            return Err("--latency-per-mib needs --latency".into())
        }
        (None, None) => SimpleLatency::default(),
        (None, Some(_)) => return Err("--latency-jitter needs --latency".into()),
        (Some(t), j) => {
            let latency_ns = parse_time_ns(t).map_err(|e| format!("--latency: {e}"))?;
            let jitter = match j {
                Some(j) => Jitter::parse(j).map_err(|e| format!("--latency-jitter: {e}"))?,
                None => Jitter::NONE,
            };
            let per_mib_ns = match &a.latency_per_mib {
                Some(t) => parse_time_ns(t).map_err(|e| format!("--latency-per-mib: {e}"))?,
                None => 0,
            };
            SimpleLatency::constant(latency_ns, jitter, (per_mib_ns + 512) / 1024)
        }
    };
    Ok(Members::Simple {
        latency,
        queue_depth: Some(queue_depth),
    })
}

/// Runs every point of `sweep`, with progress on stderr.
pub(crate) fn execute(sweep: &Sweep, a: &SweepArgs, drive_name: &str) -> Result<Vec<Row>> {
    let total = sweep.points().len();
    if total == 0 {
        return Err("nothing to run: no level has that many members".into());
    }
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let bar = std::io::stderr().is_terminal().then(|| {
        let b = ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("{bar:40} {pos}/{len} configurations, {elapsed} {msg}")
                .expect("a valid template"),
        );
        b
    });
    let print_lock = Mutex::new(());
    let done = |n: usize, total: usize, row: &Row| {
        let what = format!(
            "{} {}",
            row.point.series(),
            platter_sim::sweep::format_interleave(row.point.interleave_bytes)
        );
        match &bar {
            Some(b) => {
                b.set_position(n as u64);
                b.set_message(what);
            }
            None => {
                let _g = print_lock.lock();
                errln!("sweep: {n}/{total} done ({what})");
            }
        }
    };
    errln!(
        "sweep: {} on {} x {drive_name}, seed {}, {total} configurations on {threads} threads",
        sweep.workload.describe(),
        a.members
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join("/"),
        a.seed
    );
    let rows = sweep.run(threads, &done);
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    Ok(rows)
}
