//! `platter list` (vinum's `list`, LVM's `lvs`): pools, their drives,
//! volumes, plexes and subdisks with states and sizes, read from the
//! drives; `platter printconfig`: a pool's configuration as text.

use clap::Args;
use platter_core::pool::alloc::free_by_drive;
use platter_core::pool::area::{gather_uuid, pools_in, Gathered};
use platter_core::pool::{text, uuid_text, DriveState, Pool, PoolVolume};
use platter_core::units::format_size;
use platter_core::volume::Health;
use serde::Serialize;

use super::drives::{look, plex_window};
use super::DeviceArgs;
use crate::error::{CliError, Result};
use crate::out::{out, outln};

type Handle = std::sync::Arc<dyn platter_io::Member>;
/// A plex's array as its labels assemble it, and its size.
type Assembled = (u64, platter_io::assembly::OpenVolume);

#[derive(Args)]
pub struct ListArgs {
    /// Print JSON for programs instead of text for people.
    #[arg(long)]
    json: bool,
    /// The pool's server's control socket: the states shown are the
    /// server's (a subdisk faulty or rebuilding, a volume degraded) for
    /// the volumes it serves, instead of what the labels on the drives say.
    #[arg(long, value_name = "PATH")]
    control: Option<std::path::PathBuf>,
    #[command(flatten)]
    devices: DeviceArgs,
}

#[derive(Args)]
pub struct PrintconfigArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    #[command(flatten)]
    devices: DeviceArgs,
}

#[derive(Serialize)]
struct PoolJson {
    name: String,
    uuid: String,
    generation: u64,
    drives: Vec<DriveJson>,
    volumes: Vec<VolumeJson>,
    /// Devices with a pool slot that none of whose is valid, and why.
    damaged: Vec<(String, String)>,
}

#[derive(Serialize)]
struct DriveJson {
    name: String,
    uuid: String,
    /// Where it was found now, or null when missing.
    device: Option<String>,
    size_bytes: u64,
    free_bytes: u64,
    state: String,
}

#[derive(Serialize)]
struct VolumeJson {
    name: String,
    state: String,
    size_bytes: u64,
    plexes: Vec<PlexJson>,
}

#[derive(Serialize)]
struct PlexJson {
    name: String,
    state: String,
    org: String,
    interleave_bytes: u64,
    layout: String,
    copies: u32,
    subdisks: Vec<SubdiskJson>,
}

#[derive(Serialize)]
struct SubdiskJson {
    name: String,
    drive: String,
    offset_bytes: u64,
    len_bytes: u64,
    state: String,
    /// Where it is being copied (`subdisk move`), and how far the last
    /// checkpoint the configuration holds says the copy came.
    #[serde(skip_serializing_if = "Option::is_none")]
    moving: Option<MoveJson>,
}

#[derive(Serialize)]
struct MoveJson {
    drive: String,
    offset_bytes: u64,
    copied_bytes: u64,
}

pub fn list(args: ListArgs) -> Result<()> {
    let seen = look(&args.devices.devices)?;
    let mut pools = Vec::new();
    for uuid in pools_in(&seen) {
        let g = gather_uuid(&seen, uuid).map_err(CliError)?;
        pools.push(describe(&g, &seen)?);
    }
    if let Some(control) = &args.control {
        live_states(&mut pools, control)?;
    }
    if args.json {
        let text = serde_json::to_string_pretty(&pools).expect("plain data");
        outln!("{text}");
        return Ok(());
    }
    if pools.is_empty() {
        outln!("no pool drive found");
    }
    for p in &pools {
        out!("{}", render(p));
    }
    Ok(())
}

fn describe(g: &Gathered, seen: &[platter_core::pool::area::Seen]) -> Result<PoolJson> {
    let pool = &g.pool;
    let free = free_by_drive(pool);
    let opts = platter_io::OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let mut open = vec![None; pool.drives.len()];
    let mut drives = Vec::new();
    for (d, drive) in pool.drives.iter().enumerate() {
        let found = g.present.iter().find(|(_, n)| *n == drive.name);
        let device = found.map(|(i, _)| seen[*i].device.clone());
        if let Some(dev) = &device {
            open[d] = platter_io::open_member(dev, opts)
                .ok()
                .map(std::sync::Arc::from);
        }
        let behind = g.behind.iter().find(|(n, _)| *n == drive.name);
        drives.push(DriveJson {
            name: drive.name.clone(),
            uuid: uuid_text(&drive.uuid),
            state: drive_state(drive.state, device.is_some(), behind.map(|(_, g)| *g)),
            device,
            size_bytes: drive.size_bytes,
            free_bytes: free[&drive.name],
        });
    }
    let volumes = pool
        .volumes
        .iter()
        .map(|v| volume_json(pool, v, &open))
        .collect::<Result<_>>()?;
    Ok(PoolJson {
        name: pool.name.clone(),
        uuid: uuid_text(&pool.uuid),
        generation: pool.generation,
        drives,
        volumes,
        damaged: g.damaged.clone(),
    })
}

/// A drive's state as `list` says it: what the configuration made it (up,
/// spare, failed), and whether it is found and current.
fn drive_state(state: DriveState, found: bool, behind: Option<u64>) -> String {
    match (state, found, behind) {
        (DriveState::Up, false, _) => "missing".into(),
        (_, false, _) => format!("{}, missing", state.name()),
        (_, true, Some(gen)) => {
            format!("{} (configuration behind: generation {gen})", state.name())
        }
        (_, true, None) => state.name().into(),
    }
}

/// A volume's state from its subdisks' labels: up, degraded (serves on
/// its redundancy), or down with the reason. A volume of several plexes
/// is up when every plex is, degraded while one serves, and its size is
/// what its own label, at the start of a plex's data, says.
fn volume_json(pool: &Pool, v: &PoolVolume, open: &[Option<Handle>]) -> Result<VolumeJson> {
    let mut plexes = Vec::new();
    let mut states = Vec::new();
    let mut size_bytes = 0;
    for p in 0..v.plexes.len() {
        let (json, state, assembled) = plex_json(pool, v, p, open)?;
        if let Some((size, a)) = &assembled {
            size_bytes = if v.has_plexes() {
                size_bytes.max(volume_label_size(a).unwrap_or(0))
            } else {
                *size
            };
        }
        plexes.push(json);
        states.push(state);
    }
    // The plex a convert by copy fills: the volume's no more than a
    // spare is, until the copy ends.
    if let Some(c) = pool.copy_of(&v.name) {
        let both = c.with_new_plex(v);
        let (mut json, _, _) = plex_json(pool, &both, 1, open)?;
        json.state = match c.copied_bytes {
            0 => format!("converting: replaces {}", v.plex_name(0)),
            n => format!(
                "converting: replaces {}, {} copied",
                v.plex_name(0),
                format_size(n)
            ),
        };
        plexes.push(json);
    }
    let state = if !v.has_plexes() {
        states.pop().expect("a plex")
    } else if states.iter().all(|s| s == "up") {
        "up".to_string()
    } else if states.iter().any(|s| s == "up" || s == "degraded") {
        "degraded".to_string()
    } else {
        format!("down: no plex serves ({})", states.join("; "))
    };
    Ok(VolumeJson {
        name: v.name.clone(),
        state,
        size_bytes,
        plexes,
    })
}

/// Plex `p` of `v` from its subdisks' labels: its JSON, its state, and
/// its array's size and assembly when it assembles.
fn plex_json(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    open: &[Option<Handle>],
) -> Result<(PlexJson, String, Option<Assembled>)> {
    let plex = &v.plexes[p];
    let (members, blank) = labelled_and_blank(pool, v, p, open)?;
    let assembled = platter_io::assembly::assemble_devices(members);
    let (state, health) = match &assembled {
        Ok(a) => {
            let online = a.assembly.health.iter().filter(|h| **h == Health::Online);
            let state = if online.count() == plex.subdisks.len() {
                "up"
            } else {
                "degraded"
            };
            (state.to_string(), a.assembly.health.clone())
        }
        Err(e) => (format!("down: {e}"), Vec::new()),
    };
    // Split off its volume: its own array's state is the volume's no more.
    let state = match pool.detached_plex(&v.name, p) {
        Some(d) => match (&d.as_volume, d.writable) {
            (Some(name), true) => format!("detached (served as {name}, writable)"),
            (Some(name), false) => format!("detached (served as {name}, read-only)"),
            (None, _) => "detached".to_string(),
        },
        None => match pool.convert_of(&v.name) {
            Some(c) if c.into == p => format!("converting: replaces {}", v.plex_name(c.from)),
            Some(c) if c.from == p => format!("{state}, being replaced by {}", v.plex_name(c.into)),
            _ => state,
        },
    };
    let subdisks = plex
        .subdisks
        .iter()
        .enumerate()
        .map(|(s, sd)| SubdiskJson {
            name: v.subdisk_name(p, s),
            drive: sd.drive.clone(),
            offset_bytes: sd.offset_bytes,
            len_bytes: sd.len_bytes,
            state: match health.get(s) {
                _ if blank.contains(&s) => "blank".into(),
                Some(Health::Online) => "up".into(),
                Some(h) => format!("{h:?}").to_lowercase(),
                None => "down".into(),
            },
            moving: pool.move_of(&v.name, p, s).map(|m| MoveJson {
                drive: m.drive.clone(),
                offset_bytes: m.offset_bytes,
                copied_bytes: m.copied_bytes,
            }),
        })
        .collect();
    let json = PlexJson {
        name: v.plex_name(p),
        state: state.clone(),
        org: plex.org.to_string(),
        interleave_bytes: plex.interleave_bytes,
        layout: plex.parity_layout.to_string(),
        copies: plex.copies,
        subdisks,
    };
    let assembled = assembled.ok().map(|a| {
        // A convert's array may hold more than the volume's size, which
        // its labels say (the export's, `startup::export_info`).
        let holds = a.assembly.geometry.volume_size_bytes();
        (a.assembly.label.told_bytes(holds), a)
    });
    Ok((json, state, assembled))
}

/// The size a volume of plexes' own label says, read where it lies: the
/// first bytes of the plex's array (its first chunk's first copy).
fn volume_label_size(a: &platter_io::assembly::OpenVolume) -> Option<u64> {
    let g = &a.assembly.geometry;
    let (stripe, index) = g.chunk_position(0);
    let at = g.data_locations(stripe, index).next()?;
    let device = a
        .assembly
        .slot_device
        .get(at.member as usize)
        .copied()
        .flatten()?;
    let m = &a.devices[device];
    let label =
        super::drives::read_label_at(m.as_ref(), g.member_offset_bytes(at.row, 0)).ok()??;
    Some(label.volume_size_bytes)
}

/// `v`'s subdisks on the drives present: those labelled, and the slots
/// of the blank ones (laid out again by `pool replace-drive` or `pool
/// heal`), which its server takes as spares and rebuilds.
fn labelled_and_blank(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    open: &[Option<Handle>],
) -> Result<(Vec<Handle>, Vec<usize>)> {
    let (mut labelled, mut blank) = (Vec::new(), Vec::new());
    for (s, sd) in v.plexes[p].subdisks.iter().enumerate() {
        let d = pool.drives.iter().position(|d| d.name == sd.drive);
        let Some(drive) = d.and_then(|d| open[d].as_ref()) else {
            continue;
        };
        let m = plex_window(pool, v, p, s, drive)?;
        if super::drives::is_blank(m.as_ref())? {
            blank.push(s);
        } else {
            labelled.push(m as Handle);
        }
    }
    Ok((labelled, blank))
}

/// The states of the volumes the server at `control` serves, as it sees
/// them, over what the drives' labels say: in the pool holding them all.
fn live_states(pools: &mut [PoolJson], control: &std::path::PathBuf) -> Result<()> {
    let served = crate::control::ask(control, serde_json::json!({ "cmd": "volumes" }))?;
    let served: Vec<&str> = served
        .as_array()
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let holds_all = |p: &PoolJson| {
        served
            .iter()
            .all(|n| p.volumes.iter().any(|v| v.name == *n))
    };
    let Some(pool) = pools.iter_mut().find(|p| holds_all(p)) else {
        return Err(CliError(format!(
            "{}: the server serves {}, which no pool found here holds (give the pool's drives)",
            control.display(),
            served.join(", ")
        )));
    };
    for v in &mut pool.volumes {
        if !served.contains(&v.name.as_str()) {
            v.state = format!("{} (not served)", v.state);
            continue;
        }
        let req = serde_json::json!({ "cmd": "status", "volume": v.name });
        let st = crate::control::ask(control, req)?;
        v.state = match st["state"].as_str() {
            Some("clean") => "up".into(),
            Some(s) => s.to_string(),
            None => "?".into(),
        };
        v.size_bytes = st["size_bytes"].as_u64().unwrap_or(v.size_bytes);
        let members = st["members"].as_array().cloned().unwrap_or_default();
        for (sd, m) in v.plexes[0].subdisks.iter_mut().zip(&members) {
            sd.state = match m["state"].as_str() {
                Some("active") => "up".into(),
                Some(s) => s.to_string(),
                None => "?".into(),
            };
        }
    }
    Ok(())
}

/// vinum's `list` shape: a line per object, its kind's letter first.
fn render(p: &PoolJson) -> String {
    let mut s = format!(
        "pool {} ({}), generation {}: {} drives, {} volumes\n",
        p.name,
        p.uuid,
        p.generation,
        p.drives.len(),
        p.volumes.len()
    );
    for d in &p.drives {
        s += &format!(
            "D {:<12} State: {:<15} Device: {:<28} Size: {:>8} Free: {:>8}\n",
            d.name,
            d.state,
            d.device.as_deref().unwrap_or("-"),
            format_size(d.size_bytes),
            format_size(d.free_bytes)
        );
    }
    for v in &p.volumes {
        s += &format!(
            "V {:<12} State: {:<10} Plexes: {:<3} Size: {:>8}\n",
            v.name,
            v.state,
            v.plexes.len(),
            format_size(v.size_bytes)
        );
        for pl in &v.plexes {
            s += &format!(
                "P {:<12} {:<8} Interleave: {:<6} Subdisks: {:<3} State: {}\n",
                pl.name,
                pl.org,
                format_size(pl.interleave_bytes),
                pl.subdisks.len(),
                pl.state
            );
            for sd in &pl.subdisks {
                s += &format!(
                    "S {:<12} State: {:<10} Drive: {:<8} Offset: {:>8} Size: {:>8}\n",
                    sd.name,
                    sd.state,
                    sd.drive,
                    format_size(sd.offset_bytes),
                    format_size(sd.len_bytes)
                );
                if let Some(m) = &sd.moving {
                    s += &format!(
                        "  moving to {} at {}: {}% copied (last checkpoint)\n",
                        m.drive,
                        format_size(m.offset_bytes),
                        m.copied_bytes * 100 / sd.len_bytes.max(1)
                    );
                }
            }
        }
    }
    for (dev, why) in &p.damaged {
        s += &format!("! {dev}: pool slots unusable ({why}); left out\n");
    }
    s
}

pub fn printconfig(args: PrintconfigArgs) -> Result<()> {
    let seen = look(&args.devices.devices)?;
    let g = platter_core::pool::area::gather(&seen, Some(&args.pool)).map_err(CliError)?;
    out!("{}", text::render(&g.pool));
    Ok(())
}
