//! `platter sim`: the simulator's commands.

use crate::error::Result;
use crate::out::{errln, outln};
use clap::{Args, Subcommand};
use platter_core::units::{format_size, parse_size};
use platter_sim::disksim::trace::{read_trace, replay, summarize};
use platter_sim::workload::iolog::{counts, fio_iolog_v2, fio_iolog_v3, per_process};
use platter_sim::workload::WorkloadSpec;
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum SimCommand {
    /// Replay a DiskSim validation trace against a modelled drive and print
    /// the demerit (RMS horizontal distance between the measured and the
    /// simulated response-time distributions, as DiskSim's `rms` computes
    /// it).
    #[command(
        after_help = "Example (from the repository's root): platter sim validate \
                      --drive data/disksim/cheetah9LP.parv --trace data/disksim/cheetah9LP.trace\n\
                      DiskSim 4.0's own demerits: cheetah9LP 0.107, hp_c2247a 0.090, barracuda 0.349 ms."
    )]
    Validate(ValidateArgs),
    /// Write a workload's requests as fio iologs (version 2, or 3 with
    /// timestamps when it has think or arrival times), one per process, and
    /// print the fio command that replays them against a served volume
    /// through fio's nbd engine.
    #[command(
        long_about = "Write a workload's requests as fio iologs, one per process \
                      (DIR/proc-N.iolog), and print the fio command that replays them against a \
                      served volume through fio's nbd engine, one job per process.\n\n\
                      The generator runs as in the simulator's closed loop, with requests \
                      completing in the order they were issued; each iolog holds one process's \
                      requests in the order it issued them. A workload with think times or \
                      arrival times (trace replays) is written as fio's version 3, each request \
                      after its time in microseconds (its arrival, or its process's think times \
                      so far), which fio waits out between requests; others as version 2, every \
                      job as fast as the volume allows. Jobs do not wait for each other. Flushes \
                      become `sync`. fio writes its own data.",
        after_help = "Workloads: dd[:rw=read|write,bs=64k,qd=1,total=64M], \
raidtest[:p=8,n=10000,read=50,min=1k,max=128k,align=512], \
bonnie[:size=100M,phase=all|write|rewrite|read|seeks,seeks=4000], \
news[:readers=30,files=1000,dirs=390,per-dir=100,run=10], untar[:files=2000,p=1,dir-files=20,cluster=64k], \
fio:PATH[,qd=N,timed=0|1], blkparse:PATH[,qd=N,timed=0|1,action=D|Q] (see docs/simulator.md).

Example: platter sim iolog --workload raidtest:p=4,n=500 --size 192M --out /tmp/rt \
--uri 'nbd+unix:///home?socket=/run/home.sock'"
    )]
    Iolog(IologArgs),
    /// Measure a hard disk (or a modelled drive) and write a drive model
    /// the simulator loads (DiskSim parameters).
    Calibrate(crate::calibrate::CalibrateArgs),
    /// Run a pool's volumes on modelled drives, each with its own load,
    /// alone and then all at once, and say how much slower each is for
    /// the others (their subdisks share the drives' heads).
    #[command(
        after_help = "Example: platter printconfig tank /dev/disk/by-id > tank.conf; \
platter sim pool tank.conf --workload db=raidtest:p=8,n=2000 --workload bulk=dd:total=256M,qd=2"
    )]
    Pool(crate::simpool::PoolSimArgs),
}

#[derive(Args)]
pub struct IologArgs {
    /// The workload (NAME[:key=value,...]).
    #[arg(long)]
    workload: String,
    /// The volume's size (the generators keep their requests inside it):
    /// `platter status` shows it.
    #[arg(long)]
    size: String,
    /// The seed: the same seed gives the same iologs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The folder for the iologs (created if missing).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// The NBD URI to put in the printed fio command (default: `$NBD_URI`,
    /// left for the shell).
    #[arg(long)]
    uri: Option<String>,
}

#[derive(Args)]
pub struct ValidateArgs {
    /// DiskSim 4.0 parameter file (.parv); the files it sources are read
    /// from its folder.
    #[arg(long, value_name = "FILE.parv")]
    drive: PathBuf,
    /// DiskSim validate trace: R|W, hit/miss, block, sectors, measured
    /// service time (µs), next inter-arrival (µs).
    #[arg(long, value_name = "FILE.trace")]
    trace: PathBuf,
    /// Print the figures as JSON.
    #[arg(long)]
    json: bool,
    /// Also write each request's measured and simulated times, one line
    /// each (`index R|W lbn sectors measured_ms simulated_ms hit`), to
    /// set beside another simulator's per-request output.
    #[arg(long, value_name = "FILE")]
    requests: Option<PathBuf>,
}

pub fn run(c: SimCommand) -> Result<()> {
    match c {
        SimCommand::Validate(a) => run_validate(a),
        SimCommand::Iolog(a) => run_iolog(a),
        SimCommand::Calibrate(a) => crate::calibrate::run(a),
        SimCommand::Pool(a) => crate::simpool::run(a),
    }
}

/// Quotes `s` for a POSIX shell when it needs it.
fn shell_quote(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_=./,:@%+".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn run_iolog(a: IologArgs) -> Result<()> {
    let spec = WorkloadSpec::parse(&a.workload)?;
    let size = parse_size(&a.size).map_err(|e| format!("--size {}: {e}", a.size))?;
    if size < 512 {
        return Err(format!("--size {}: at least one sector", a.size).into());
    }
    let size = size / 512 * 512;
    let export = per_process(spec.build(size, a.seed).as_mut());
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let procs = export.processes.len();
    errln!(
        "{} on {} (seed {}): {procs} process{}",
        spec.describe(),
        format_size(size),
        a.seed,
        if procs == 1 { "" } else { "es" }
    );
    let mut jobs = Vec::new();
    for (p, ops) in export.processes.iter().enumerate() {
        let name = format!("proc-{p}");
        if ops.is_empty() {
            errln!("  {name}: no requests, no iolog");
            continue;
        }
        let path = a.out.join(format!("{name}.iolog"));
        let text = if export.timed {
            fio_iolog_v3(ops, &export.times_ns[p])
        } else {
            fio_iolog_v2(ops)
        };
        write_file(&path, &text)?;
        let c = counts(ops);
        errln!(
            "  {}: {} reads ({}), {} writes ({}), {} syncs",
            path.display(),
            c.reads,
            format_size(c.read_bytes),
            c.writes,
            format_size(c.write_bytes),
            c.syncs
        );
        jobs.push((name, path));
    }
    if jobs.is_empty() {
        return Err(format!("{}: no requests on a volume of {}", a.workload, a.size).into());
    }
    if export.timed {
        errln!(
            "  note: think times and arrival times are fio v3 timestamps: fio waits between \
             requests as the workload did (add --replay_no_stall=1 to replay as fast as it can)"
        );
    }
    let uri = match &a.uri {
        Some(u) => shell_quote(&format!("--uri={u}")),
        None => "\"--uri=$NBD_URI\"".to_string(),
    };
    let mut cmd = format!("fio --ioengine=nbd {uri}");
    for (name, path) in &jobs {
        let iolog = shell_quote(&format!("--read_iolog={}", path.display()));
        cmd.push_str(&format!(" \\\n  --name={name} {iolog}"));
    }
    outln!("{cmd}");
    Ok(())
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()).into())
}

fn run_validate(a: ValidateArgs) -> Result<()> {
    let spec = platter_sim::disksim::load_drive(&a.drive).map_err(|e| e.to_string())?;
    let trace = read_trace(&a.trace)?;
    if trace.is_empty() {
        return Err(format!("{}: no requests", a.trace.display()).into());
    }
    let replayed = replay(&spec, &trace);
    let v = summarize(&trace, &replayed);
    if let Some(path) = &a.requests {
        let mut text = String::from("# index rw lbn sectors measured_ms simulated_ms hit\n");
        for (i, (r, s)) in trace.iter().zip(&replayed).enumerate() {
            let rw = if r.write { 'W' } else { 'R' };
            text += &format!(
                "{i} {rw} {} {} {:.6} {:.6} {}\n",
                r.lbn,
                r.sectors,
                r.measured_ms,
                s.simulated_ms,
                s.hit.name()
            );
        }
        write_file(path, &text)?;
    }
    if a.json {
        let j = serde_json::json!({
            "drive": spec.name,
            "requests": v.requests,
            "demerit_ms": v.demerit_ms,
            "demerit_exact_ms": v.demerit_exact_ms,
            "mean_measured_ms": v.mean_measured_ms,
            "mean_simulated_ms": v.mean_simulated_ms,
            "measured_read_hit_ratio": v.measured_read_hit_ratio,
            "simulated_read_hit_ratio": v.simulated_read_hit_ratio,
        });
        outln!("{j}");
        return Ok(());
    }
    outln!(
        "drive     {} ({} blocks, {} rpm)",
        spec.name,
        spec.layout.blocks,
        spec.rpm
    );
    outln!("requests  {}", v.requests);
    outln!("demerit   {:.3} ms (rms, DiskSim buckets)", v.demerit_ms);
    outln!("          {:.3} ms (exact quantiles)", v.demerit_exact_ms);
    outln!(
        "mean      {:.3} ms measured, {:.3} ms simulated",
        v.mean_measured_ms,
        v.mean_simulated_ms
    );
    match v.measured_read_hit_ratio {
        Some(m) => outln!(
            "read hits {:.1}% measured, {:.1}% simulated",
            100.0 * m,
            100.0 * v.simulated_read_hit_ratio
        ),
        None => outln!(
            "read hits {:.1}% simulated (the trace does not tell hits from misses)",
            100.0 * v.simulated_read_hit_ratio
        ),
    }
    Ok(())
}
