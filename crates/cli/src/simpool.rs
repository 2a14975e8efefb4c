//! `platter sim pool`: a pool's volumes on modelled drives, each with a
//! load of its own, alone and all at once: what each costs the others
//! (vinum's experiment of plexes side by side on the same drives).

use crate::error::{CliError, Result};
use crate::out::outln;
use clap::Args;
use platter_core::geometry::GeometrySpec;
use platter_core::pool::text::{self, Strictness};
use platter_core::pool::{Pool, PoolVolume};
use platter_core::units::SECTOR_BYTES;
use platter_core::Level;
use platter_sim::disk::{DiskModel, HostModel};
use platter_sim::shared::{run_pool, Contention, VolumeRun, Window};
use platter_sim::sweep::DATA_OFFSET_BYTES;
use platter_sim::workload::WorkloadSpec;
use serde_json::json;
use std::path::PathBuf;

#[derive(Args)]
pub struct PoolSimArgs {
    /// The pool's configuration: what `platter printconfig` prints, or a
    /// file `pool create --config` takes. Its drives are modelled drives
    /// (--drive), each subdisk where the configuration puts it.
    #[arg(value_name = "FILE")]
    config: PathBuf,
    /// What every drive of the pool is (as `sweep --drive`: a .parv file,
    /// a DiskSim validation drive's name, or parametric-7200).
    #[arg(long, value_name = "DRIVE", default_value = "parametric-7200")]
    drive: String,
    /// A volume's load, VOLUME=WORKLOAD (NAME[:key=value,...], as `sweep
    /// --workload`); repeat for each volume that works. The others stay
    /// idle.
    #[arg(long = "workload", value_name = "VOLUME=WORKLOAD", required_unless_present_any = ["moves", "revives"])]
    workloads: Vec<String>,
    /// A subdisk move to model beside the loads, SUBDISK=DRIVE[:OFFSET]
    /// (as `subdisk move --to`; repeat for an evacuation's moves): its
    /// copy reads the subdisk's extent and writes the new one, 1 MiB at a
    /// time, each side one I/O in flight, unthrottled (`--rate
    /// unlimited`); the table gains its read and write sides, and a line
    /// says how long it takes alone and beside the loads.
    #[arg(long = "move", value_name = "SUBDISK=DRIVE[:OFFSET]")]
    moves: Vec<String>,
    /// A plex's revive to model beside the loads, VOLUME.pN (`plex attach`
    /// of a plex written elsewhere, or a convert's new plex: the whole
    /// plex): the volume's bytes read through another of its plexes (a
    /// volume of one plex being converted: its plex) and written through
    /// this one's layout, 1 MiB at a time, unthrottled; a line says how
    /// long it takes alone and beside the loads.
    #[arg(long = "revive", value_name = "PLEX")]
    revives: Vec<String>,
    /// The seed: the same seed gives the same numbers.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print a JSON line per volume instead of a table.
    #[arg(long)]
    json: bool,
}

pub fn run(a: PoolSimArgs) -> Result<()> {
    let text = std::fs::read_to_string(&a.config)
        .map_err(|e| CliError(format!("{}: {e}", a.config.display())))?;
    let pool = text::parse(&text, Strictness::Template)
        .and_then(|p| p.check().map(|()| p))
        .map_err(|e| CliError(format!("{}: {e}", a.config.display())))?;
    let Some(spec) = crate::sweep::resolve_drive(&a.drive)? else {
        return Err(CliError(
            "sim pool models the heads the volumes share: --drive names a modelled drive, not \
             simple"
                .into(),
        ));
    };
    let disk_bytes = spec.layout.blocks * SECTOR_BYTES;
    let mut runs = Vec::new();
    for w in &a.workloads {
        let (name, spec_text) = w.split_once('=').ok_or_else(|| {
            CliError(format!(
                "--workload {w}: expected VOLUME=WORKLOAD (db=raidtest:p=8)"
            ))
        })?;
        let v = pool.volume(name).ok_or_else(|| {
            CliError(format!(
                "--workload {w}: pool {} has no volume {name}",
                pool.name
            ))
        })?;
        let workload =
            WorkloadSpec::parse(spec_text).map_err(|e| format!("--workload {w}: {e}"))?;
        runs.push(volume_run(&pool, v, workload, disk_bytes)?);
    }
    let mut moved = Vec::new();
    for m in &a.moves {
        let (read, write, len) = move_runs(&pool, m, disk_bytes)?;
        moved.push((format!("move {m}"), runs.len(), len));
        runs.push(read);
        runs.push(write);
    }
    for r in &a.revives {
        let (read, write, len) = revive_runs(&pool, r, disk_bytes)?;
        moved.push((format!("revive {r}"), runs.len(), len));
        runs.push(read);
        runs.push(write);
    }
    let n = pool.drives.len() as u32;
    let drives = || -> Box<dyn platter_sim::members::ServiceModel> {
        Box::new(DiskModel::new(&spec, n, HostModel::default()))
    };
    let results = run_pool(&drives, &runs, a.seed).map_err(CliError)?;
    print(&results, &runs, a.json);
    for (what, at, len) in moved {
        let took = |r: &platter_sim::bench::BenchReport| r.elapsed_ns as f64 / 1e9;
        let (read, write) = (&results[at], &results[at + 1]);
        let alone = took(&read.alone).max(took(&write.alone));
        let together = took(&read.together).max(took(&write.together));
        if a.json {
            let (kind, name) = what.split_once(' ').expect("kind and name");
            let j = json!({ kind: name, "bytes": len, "alone_s": alone, "together_s": together });
            outln!("{j}");
            continue;
        }
        outln!(
            "{what}: {} copied in {alone:.2} s alone, {together:.2} s beside the loads \
             (their cost to the volumes: the together columns)",
            platter_core::units::format_size(len)
        );
    }
    Ok(())
}

/// A move's two sides as runs on the shared drives: a sequential read of
/// the subdisk's extent and a sequential write of the new one, each a
/// concat of one window; and the bytes it copies.
fn move_runs(pool: &Pool, text: &str, disk_bytes: u64) -> Result<(VolumeRun, VolumeRun, u64)> {
    let (name, to) = text
        .split_once('=')
        .ok_or_else(|| CliError(format!("--move {text}: expected SUBDISK=DRIVE[:OFFSET]")))?;
    let (volume, plex, slot) = crate::pool::relocate::parse_subdisk_name(pool, name)?;
    let m = crate::pool::relocate::plan_move(pool, &volume, plex, slot, to)
        .map_err(|e| CliError(format!("--move {text}: {}", e.0)))?;
    let sd = pool.moving(&m).expect("planned").clone();
    let to = m.target(sd.len_bytes);
    let side = |sd: &platter_core::pool::Subdisk, write: bool| -> Result<VolumeRun> {
        if sd.end_bytes() > disk_bytes {
            return Err(CliError(format!(
                "--move {text}: {} ends past the modelled drive's {disk_bytes} bytes",
                sd.drive
            )));
        }
        let drive = pool
            .drives
            .iter()
            .position(|d| d.name == sd.drive)
            .expect("checked");
        let data = sd.len_bytes.saturating_sub(DATA_OFFSET_BYTES) / (1 << 20) * (1 << 20);
        Ok(VolumeRun {
            name: format!("{name}>{}", if write { "write" } else { "read" }),
            geometry: GeometrySpec {
                level: Level::Concat,
                parity_layout: platter_core::ParityLayout::DEFAULT,
                copies: 1,
                interleave_bytes: 1 << 20,
                data_offset_bytes: DATA_OFFSET_BYTES,
                member_data_bytes: vec![data],
            },
            windows: vec![Window {
                drive: drive as u32,
                offset_bytes: sd.offset_bytes,
                len_bytes: sd.len_bytes,
            }],
            workload: WorkloadSpec::Dd(platter_sim::workload::dd::Dd {
                write,
                block_bytes: 1 << 20,
                queue_depth: 1,
                total_bytes: data,
            }),
        })
    };
    Ok((side(&sd, false)?, side(&to, true)?, sd.len_bytes))
}

/// Volume `v` of `pool` as the simulator runs it: its plex's layout over
/// its subdisks' windows of the drives (in the pool's drive order).
fn volume_run(
    pool: &Pool,
    v: &PoolVolume,
    workload: WorkloadSpec,
    disk_bytes: u64,
) -> Result<VolumeRun> {
    v.one_plex_only("sim pool --workload").map_err(CliError)?;
    plex_run(pool, v, 0, workload, disk_bytes)
}

/// A plex's revive (`plex attach`, `volume convert`) as two runs on the
/// shared drives: the volume's bytes read front to back through another
/// plex of it (the first one else), 1 MiB at a time, and written through
/// the revived plex's layout; and the bytes it copies.
fn revive_runs(pool: &Pool, text: &str, disk_bytes: u64) -> Result<(VolumeRun, VolumeRun, u64)> {
    let (volume, p) = platter_core::pool::split_plex_name(text)
        .ok_or_else(|| CliError(format!("--revive {text}: expected a plex, VOLUME.pN")))?;
    // A convert by copy's new plex is filled from the volume's one plex.
    let copy = pool
        .copy_of(volume)
        .filter(|_| p == 1)
        .zip(pool.volume(volume))
        .map(|(c, v)| c.with_new_plex(v));
    let v = copy
        .or_else(|| {
            pool.volume(volume)
                .filter(|v| v.has_plexes() && p < v.plexes.len())
                .cloned()
        })
        .ok_or_else(|| {
            CliError(format!(
                "--revive {text}: pool {} has no plex {text} of a volume of several plexes, nor \
                 a convert's new plex",
                pool.name
            ))
        })?;
    let from = (0..v.plexes.len())
        .find(|&q| q != p && pool.convert_of(volume).is_none_or(|c| c.into != q))
        .expect("a volume of several plexes");
    let capacity = |q: usize| -> u64 {
        let plex = &v.plexes[q];
        let n = plex.subdisks.len() as u64;
        let each = plex
            .subdisks
            .iter()
            .map(|sd| sd.len_bytes.saturating_sub(DATA_OFFSET_BYTES))
            .min()
            .unwrap_or(0);
        match plex.org {
            Level::Concat => plex
                .subdisks
                .iter()
                .map(|sd| sd.len_bytes.saturating_sub(DATA_OFFSET_BYTES))
                .sum(),
            Level::Mirror => each,
            Level::Raid10 => each * n / u64::from(plex.copies.max(1)),
            Level::Raid5 | Level::Raid6 => each * (n - u64::from(plex.org.parity_members())),
            Level::Stripe => each * n,
        }
    };
    let bytes = capacity(from).min(capacity(p)) / (1 << 20) * (1 << 20);
    let dd = |write: bool| {
        WorkloadSpec::Dd(platter_sim::workload::dd::Dd {
            write,
            block_bytes: 1 << 20,
            queue_depth: 1,
            total_bytes: bytes,
        })
    };
    let mut read = plex_run(pool, &v, from, dd(false), disk_bytes)?;
    read.name = format!("{text}<{}", v.plex_name(from));
    let mut write = plex_run(pool, &v, p, dd(true), disk_bytes)?;
    write.name = format!("{text}>write");
    Ok((read, write, bytes))
}

/// Plex `p` of volume `v` as the simulator runs it: its layout over its
/// subdisks' windows of the drives (in the pool's drive order).
fn plex_run(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    workload: WorkloadSpec,
    disk_bytes: u64,
) -> Result<VolumeRun> {
    let plex = &v.plexes[p];
    let mut windows = Vec::new();
    for sd in &plex.subdisks {
        let drive = pool
            .drives
            .iter()
            .position(|d| d.name == sd.drive)
            .expect("checked pool");
        if sd.end_bytes() > disk_bytes {
            return Err(CliError(format!(
                "volume {}: its subdisk on {} ends at byte {}, past the modelled drive's {}",
                v.name,
                sd.drive,
                sd.end_bytes(),
                disk_bytes
            )));
        }
        windows.push(Window {
            drive: drive as u32,
            offset_bytes: sd.offset_bytes,
            len_bytes: sd.len_bytes,
        });
    }
    let il = plex.interleave_bytes;
    let data = |len: u64| len.saturating_sub(DATA_OFFSET_BYTES) / il * il;
    let member_data_bytes: Vec<u64> = if plex.org == Level::Concat {
        plex.subdisks.iter().map(|sd| data(sd.len_bytes)).collect()
    } else {
        let least = plex
            .subdisks
            .iter()
            .map(|sd| data(sd.len_bytes))
            .min()
            .unwrap_or(0);
        vec![least; plex.subdisks.len()]
    };
    Ok(VolumeRun {
        name: v.name.clone(),
        geometry: GeometrySpec {
            level: plex.org,
            parity_layout: plex.parity_layout,
            copies: plex.copies,
            interleave_bytes: il,
            data_offset_bytes: DATA_OFFSET_BYTES,
            member_data_bytes,
        },
        windows,
        workload,
    })
}

fn print(results: &[Contention], runs: &[VolumeRun], json_out: bool) {
    let ms = |ns: u64| ns as f64 / 1e6;
    if json_out {
        for c in results {
            outln!(
                "{}",
                json!({
                    "volume": c.name,
                    "alone": { "mb_per_s": c.alone.mb_per_s(), "mean_latency_ms": ms(c.alone.mean_latency_ns), "p99_latency_ms": ms(c.alone.p99_latency_ns) },
                    "together": { "mb_per_s": c.together.mb_per_s(), "mean_latency_ms": ms(c.together.mean_latency_ns), "p99_latency_ms": ms(c.together.p99_latency_ns) },
                })
            );
        }
        return;
    }
    outln!(
        "{:<16} {:<7} {:>10} {:>11} {:>9} {:>14} {:>12} {:>8}",
        "volume",
        "level",
        "interleave",
        "alone MB/s",
        "alone ms",
        "together MB/s",
        "together ms",
        "slower"
    );
    for (c, r) in results.iter().zip(runs) {
        outln!(
            "{:<16} {:<7} {:>10} {:>11.2} {:>9.2} {:>14.2} {:>12.2} {:>7.2}x",
            c.name,
            r.geometry.level.to_string(),
            platter_sim::sweep::format_interleave(r.geometry.interleave_bytes),
            c.alone.mb_per_s(),
            ms(c.alone.mean_latency_ns),
            c.together.mb_per_s(),
            ms(c.together.mean_latency_ns),
            c.together.mean_latency_ns as f64 / c.alone.mean_latency_ns.max(1) as f64
        );
    }
}
