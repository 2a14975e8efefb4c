//! `platter sim calibrate`: measures a drive (a block device or file, or
//! a modelled drive in virtual time) and writes a DiskSim model the
//! simulator, `sweep` and `advise` load (issue 19, point 2).

use crate::error::{CliError, Result};
use crate::out::{errln, outln};
use crate::scan::read_label_area;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use platter_core::label::Label;
use platter_io::member::Member;
use platter_io::{open_member, MemberError, OpenOptions};
use platter_sim::calibrate::{calibrate, Measured, ModelProbe, Options, Phase, Probe, ProbeError};
use platter_sim::disksim::write::{seek_path, write_parv};
use platter_sim::members::parse_time_ns;
use serde_json::json;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Args)]
#[command(
    long_about = "Measure a hard disk from outside, as DIXtrac and Skippy do, and write a \
                  drive model (DiskSim 4.0 parameters, FILE.parv and FILE.seek) that `platter \
                  sweep --drive`, `platter advise --drive` and `platter sim validate --drive` \
                  load.\n\n\
                  Everything comes from the times of single reads at queue depth 1: cache hits \
                  (command overhead, bus rate), the spread of misses at one distance (the \
                  revolution), sequential rates across the disk (zones), misses at distances \
                  from one track to the full stroke (the seek curve), and how far read-ahead \
                  runs, how many cache segments there are and how large. It reads only, unless \
                  --allow-write lets it rewrite sectors with their own contents to see whether \
                  the drive caches writes. Run it on an idle disk: other I/O is measured too.",
    after_help = "TARGET: a block device or file (read with O_DIRECT), or model:DRIVE for a \
                  modelled drive in virtual time (DRIVE as for `platter sweep --drive`: \
                  parametric-7200, a DiskSim .parv, or a name under $PLATTER_DISKSIM_DIR).\n\n\
                  Example: platter sim calibrate /dev/sdb --out sdb.parv\n         \
                  platter advise --trace home.iolog --drive sdb.parv --volume d/m0,d/m1"
)]
pub struct CalibrateArgs {
    /// The drive to measure: a block device or file, or model:DRIVE.
    #[arg(value_name = "TARGET")]
    target: String,
    /// The model to write (FILE.parv; the seek curve goes to FILE.seek).
    #[arg(long, value_name = "FILE.parv")]
    out: PathBuf,
    /// Give up, writing nothing, after this long on the target (for a
    /// model: its virtual time).
    #[arg(long, value_name = "TIME", default_value = "600s")]
    budget: String,
    /// Samples per measured point: fewer is faster and less precise.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(8..=1024))]
    samples: u32,
    /// Rewrite sectors with what they hold to see whether the drive
    /// acknowledges writes from its cache (never on a platter member).
    #[arg(long)]
    allow_write: bool,
    /// Seed of the random positions.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the measured figures as JSON.
    #[arg(long)]
    json: bool,
}

/// A block device or file opened as a member is (`O_DIRECT` where the
/// file system allows it, any alignment; a FIFO or a mounted device
/// refused; a device or file claimed for writing), timed by the wall
/// clock.
struct DeviceProbe {
    member: Box<dyn Member>,
    blocks: u64,
    buf: Vec<u8>,
    /// Data read by `keep`, with its byte offset, for `write_kept`.
    kept: Option<(u64, Vec<u8>)>,
    started: Instant,
}

/// Any probe, stopped by Ctrl-C between two commands.
struct Stoppable {
    inner: Box<dyn Probe>,
    stop: Arc<AtomicBool>,
}

impl Stoppable {
    fn check(&self) -> std::result::Result<(), ProbeError> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(ProbeError::Interrupted);
        }
        Ok(())
    }
}

impl Probe for Stoppable {
    fn blocks(&self) -> u64 {
        self.inner.blocks()
    }

    fn read(&mut self, lbn: u64, count: u32, idle_ms: f64) -> std::result::Result<f64, ProbeError> {
        self.check()?;
        self.inner.read(lbn, count, idle_ms)
    }

    fn keep(&mut self, lbn: u64, count: u32) -> std::result::Result<(), ProbeError> {
        self.check()?;
        self.inner.keep(lbn, count)
    }

    fn write_kept(&mut self, idle_ms: f64) -> std::result::Result<f64, ProbeError> {
        self.check()?;
        self.inner.write_kept(idle_ms)
    }

    fn elapsed_ms(&self) -> f64 {
        self.inner.elapsed_ms()
    }
}

impl DeviceProbe {
    /// The probe, and whether reads bypass the page cache.
    fn open(path: &str, write: bool) -> Result<(DeviceProbe, bool)> {
        let opts = |direct| OpenOptions {
            direct,
            read_only: !write,
            ..OpenOptions::default()
        };
        // tmpfs and some FUSE file systems refuse O_DIRECT.
        let (member, direct) = match open_member(path, opts(true)) {
            Ok(m) => (m, true),
            Err(refused) => match open_member(path, opts(false)) {
                Ok(m) => (m, false),
                Err(_) => return Err(refused.into()),
            },
        };
        let probe = DeviceProbe {
            blocks: member.size_bytes() / 512,
            member,
            buf: Vec::new(),
            kept: None,
            started: Instant::now(),
        };
        Ok((probe, direct))
    }

    /// The bytes of `count` sectors from `lbn`.
    fn span(&self, lbn: u64, count: u32) -> (u64, usize) {
        let start = lbn * 512;
        let end = ((lbn + u64::from(count)) * 512).min(self.blocks * 512);
        (start, (end - start) as usize)
    }

    fn idle(&self, idle_ms: f64) {
        if idle_ms > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(idle_ms / 1e3));
        }
    }

    fn io_error(e: MemberError) -> ProbeError {
        ProbeError::Io(e.to_string())
    }
}

impl Probe for DeviceProbe {
    fn blocks(&self) -> u64 {
        self.blocks
    }

    fn read(&mut self, lbn: u64, count: u32, idle_ms: f64) -> std::result::Result<f64, ProbeError> {
        let (off, len) = self.span(lbn, count);
        self.buf.resize(len, 0);
        self.idle(idle_ms);
        let t = Instant::now();
        self.member
            .read_at(off, &mut self.buf[..len])
            .map_err(Self::io_error)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    fn keep(&mut self, lbn: u64, count: u32) -> std::result::Result<(), ProbeError> {
        let (off, len) = self.span(lbn, count);
        let mut data = vec![0u8; len];
        self.member
            .read_at(off, &mut data)
            .map_err(Self::io_error)?;
        self.kept = Some((off, data));
        Ok(())
    }

    fn write_kept(&mut self, idle_ms: f64) -> std::result::Result<f64, ProbeError> {
        let (off, data) = self.kept.take().expect("keep before write_kept");
        self.idle(idle_ms);
        let t = Instant::now();
        // The bytes written are the bytes read from there: the user
        // allowed writes to a target no volume uses (checked at the start).
        self.member.write_at(off, &data).map_err(Self::io_error)?;
        Ok(t.elapsed().as_secs_f64() * 1e3)
    }

    fn elapsed_ms(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1e3
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => false,
    }
}

fn figures_json(m: &Measured, out: &Path) -> serde_json::Value {
    json!({
        "model": out.display().to_string(),
        "blocks": m.blocks,
        "rpm": m.rpm(),
        "rotation_ms": m.rotation_ms,
        "hit_overhead_ms": m.hit_ms,
        "bus_ms_per_sector": m.bus_ms_per_sector,
        "mean_rate_bytes_per_s": m.mean_rate(),
        "zones": m.zones.iter().map(|z| json!({
            "first_lbn": z.first_lbn,
            "blocks_per_track": z.blocks_per_track,
        })).collect::<Vec<_>>(),
        "positioning_ms": m.positioning.iter().map(|&(d, ms)| json!([d, ms])).collect::<Vec<_>>(),
        "read_ahead_blocks": m.read_ahead_blocks,
        "segments": m.segments,
        "segment_blocks": m.segment_blocks,
        "write_back": m.write_back,
        "spent_s": m.spent_ms / 1e3,
        "commands": m.reads,
    })
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    let budget_ms = parse_time_ns(&a.budget)
        .ok()
        .filter(|&ns| ns > 0)
        .map(|ns| ns as f64 / 1e6)
        .ok_or_else(|| {
            CliError(format!(
                "--budget {}: a time with its unit (600s, 90s, 500ms)",
                a.budget
            ))
        })?;
    check_out(&a)?;
    let opts = Options {
        samples: a.samples,
        budget_ms,
        allow_write: a.allow_write,
        seed: a.seed,
    };
    let (inner, name) = open_probe(&a)?;
    let m = measure(&a, inner, &opts)?;
    let spec = m.spec(&name);
    write_parv(&spec, &a.out)?;
    if a.json {
        outln!("{}", figures_json(&m, &a.out));
        return Ok(());
    }
    print_figures(&a, &m);
    Ok(())
}

/// The model is never written onto the drive measured, and is a `.parv`.
fn check_out(a: &CalibrateArgs) -> Result<()> {
    let target = Path::new(&a.target);
    for out in [a.out.clone(), seek_path(&a.out)] {
        if out == target || same_file(&out, target) {
            return Err(CliError(format!(
                "--out {}: that is the drive being measured; calibrate never writes its \
                 model onto it",
                out.display()
            )));
        }
    }
    if a.out.extension().is_none_or(|e| e != "parv") {
        return Err(CliError(format!(
            "--out {}: the model is a DiskSim parameter file; name it FILE.parv",
            a.out.display()
        )));
    }
    Ok(())
}

/// The probe for `model:DRIVE` or a device, and the name its model gets.
/// A volume's member is refused with --allow-write.
fn open_probe(a: &CalibrateArgs) -> Result<(Box<dyn Probe>, String)> {
    if let Some(drive) = a.target.strip_prefix("model:") {
        let spec = crate::sweep::resolve_drive(drive)?.ok_or_else(|| {
            CliError("model:simple has no drive to measure; name a drive model".into())
        })?;
        let name = format!("{}_calibrated", spec.name);
        return Ok((Box::new(ModelProbe::new(spec)), name));
    }
    if a.allow_write {
        if let Ok(Some((_, area))) = read_label_area(&a.target) {
            if let Ok(l) = Label::decode(&area) {
                return Err(CliError(format!(
                    "{}: a member of volume '{}' (it holds a platter label); \
                     --allow-write would rewrite its sectors under the volume. \
                     Calibrate it without --allow-write",
                    a.target,
                    platter_core::label::printable(&l.name)
                )));
            }
        }
    }
    let (probe, direct) = DeviceProbe::open(&a.target, a.allow_write)?;
    if !direct {
        errln!(
            "warning: {} refuses O_DIRECT; the page cache answers reads, so the \
             figures are the cache's, not a disk's",
            a.target
        );
    }
    let name = Path::new(&a.target)
        .file_name()
        .map_or("disk".into(), |n| n.to_string_lossy().into_owned());
    Ok((Box::new(probe), name))
}

/// Runs the calibration, stoppable by Ctrl-C between commands, with a
/// progress bar on a terminal (else a line per phase).
fn measure(a: &CalibrateArgs, inner: Box<dyn Probe>, opts: &Options) -> Result<Measured> {
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())
        .map_err(|e| CliError(format!("cannot catch Ctrl-C: {e}")))?;
    let mut probe = Stoppable { inner, stop };
    let bar = if std::io::stderr().is_terminal() && !a.json {
        let b = ProgressBar::with_draw_target(Some(1000), ProgressDrawTarget::stderr());
        b.set_style(
            ProgressStyle::with_template("calibrate [{bar:40}] {msg}")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        Some(b)
    } else {
        None
    };
    let mut last_phase = None;
    let mut progress = |phase: Phase, done: f64| {
        if let Some(b) = &bar {
            b.set_position((done * 1000.0) as u64);
            b.set_message(format!("{phase}"));
        } else if last_phase != Some(phase) && done < 1.0 {
            errln!("calibrate: measuring {phase}");
        }
        last_phase = Some(phase);
    };
    let measured = calibrate(&mut probe, opts, &mut progress);
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    measured.map_err(|e| {
        CliError(match e {
            platter_sim::calibrate::CalibrateError::Probe(ProbeError::Interrupted) => {
                "stopped by Ctrl-C; no model written".to_string()
            }
            e => format!("{}: {e}", a.target),
        })
    })
}

/// The model's figures for people.
fn print_figures(a: &CalibrateArgs, m: &Measured) {
    let first = m.zones.first().map_or(0, |z| z.blocks_per_track);
    let last = m.zones.last().map_or(0, |z| z.blocks_per_track);
    let tracks = m.positioning.last().map_or(0, |p| p.0);
    outln!(
        "{}: {} sectors, {:.0} rpm, {} zones of {first}..{last} sectors per track \
         ({:.1} MB/s on average)",
        a.target,
        m.blocks,
        m.rpm(),
        m.zones.len(),
        m.mean_rate() / 1e6
    );
    outln!(
        "positioning (overhead and seek): one track {:.2} ms, a third of the stroke {:.2} ms, \
         full stroke {:.2} ms",
        m.positioning_ms(1),
        m.positioning_ms(tracks / 3),
        m.positioning_ms(tracks)
    );
    outln!(
        "cache: hit {:.3} ms, bus {:.1} MB/s, read-ahead {} sectors, {} segments of {} sectors, \
         write-back {}",
        m.hit_ms,
        if m.bus_ms_per_sector > 0.0 {
            512.0 / m.bus_ms_per_sector / 1e3
        } else {
            f64::INFINITY
        },
        m.read_ahead_blocks,
        m.segments,
        m.segment_blocks,
        match m.write_back {
            Some(true) => "yes",
            Some(false) => "no",
            None => "not measured (reads only; --allow-write)",
        }
    );
    outln!(
        "{} commands, {:.1} s on the drive; wrote {} and {}",
        m.reads,
        m.spent_ms / 1e3,
        a.out.display(),
        seek_path(&a.out).display()
    );
}
