//! Making and changing pools: `pool create`, `pool add-drive`, `volume
//! create`, `volume remove`.
//!
//! Order on the devices, so that a crash at any step leaves the pool as it
//! was or as it is meant to be, never a configuration naming what is not
//! there: a new volume's subdisks are labelled before the configuration
//! that gives them out is written; a removed volume leaves the
//! configuration before its subdisks' labels are erased.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use platter_core::label::LABEL_BYTES;
use platter_core::pool::alloc::{place_concat, place_spread, ALIGN_BYTES};
use platter_core::pool::area::{self, HEADER_BYTES};
use platter_core::pool::text::{self, Strictness};
use platter_core::pool::{check_name, Drive, DriveState, Plex, Pool, PoolVolume};
use platter_core::units::{format_size, parse_size};
use platter_core::{Level, ParityLayout};
use platter_io::assembly::foreign_label;
use platter_io::{open_member, Member, OpenOptions};

use super::drives::{self, open_pool, OpenPool};
use super::{ControlArgs, DeviceArgs};
use crate::create::{label_subdisks, subdisk_reserve_bytes, ArraySpec};
use crate::error::{CliError, Result};
use crate::out::outln;
use serde_json::{json, Value};

#[derive(Args)]
pub struct PoolCreateArgs {
    /// The pool's name (letters, digits, '-', '_', '.').
    #[arg(value_name = "POOL")]
    pool: String,
    /// Devices to make its drives, named d0, d1, ... in order, or
    /// NAME=DEVICE. With --config, the configuration's drives in its
    /// order (without any, the devices the configuration names).
    #[arg(value_name = "DEVICE")]
    drives: Vec<String>,
    /// Make the pool and its volumes from a configuration file (what
    /// `platter printconfig` prints; uuids, drive sizes and the generation
    /// may be left out). Its pool name must be POOL.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    taking: NewDrives,
}

/// How new drives are taken.
#[derive(Args)]
pub struct NewDrives {
    /// Create drive files that do not exist, of this size (sparse).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    drive_size: Option<u64>,
    /// Take devices that hold a platter label or another pool's drive.
    #[arg(long)]
    force: bool,
}

impl NewDrives {
    pub(super) fn new(drive_size: Option<u64>, force: bool) -> NewDrives {
        NewDrives { drive_size, force }
    }
}

#[derive(Args)]
pub struct AddDriveArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    /// The new drives, NAME=DEVICE (or DEVICE: named after the last
    /// drive's number).
    #[arg(long = "drive", value_name = "[NAME=]DEVICE", required = true)]
    new: Vec<String>,
    /// Keep the new drives as spares (md's hot spares): no volume is
    /// placed on them; when a subdisk of a redundant volume fails, its
    /// server puts it on a spare and the volume rebuilds it there
    /// (`pool heal`). Through --control, subdisks failed already are put
    /// on them at once.
    #[arg(long)]
    spare: bool,
    #[command(flatten)]
    taking: NewDrives,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Args)]
pub struct ReplaceDriveArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    /// The drive lost (its name in the pool: d1).
    #[arg(value_name = "DRIVE")]
    old: String,
    /// The device that takes its place: its subdisks are put at the same
    /// offsets, blank, and each volume rebuilds its subdisk there when
    /// next served (`serve --pool`).
    #[arg(value_name = "NEW")]
    new: String,
    #[command(flatten)]
    taking: NewDrives,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

#[derive(Args, Clone)]
pub struct VolumeCreateArgs {
    #[arg(value_name = "POOL")]
    pub(super) pool: String,
    /// The volume's name: its NBD export's name.
    #[arg(value_name = "NAME")]
    pub(super) name: String,
    /// How its plex organises the subdisks: concat, stripe, mirror,
    /// raid10, raid5, raid6 (md-exact, as `platter create`).
    #[arg(
        long,
        value_name = "LEVEL",
        value_parser = crate::values::level(),
        required_unless_present = "plexes"
    )]
    pub(super) level: Option<Level>,
    /// Make the volume a mirror of plexes that need not be alike (vinum's
    /// volume of plexes): one plex per --plex, LEVEL or LEVEL:SUBDISKS
    /// (`--plex stripe:2 --plex concat`; a concat's N is at most, as few
    /// as fit, as `--subdisks` says), each an md-exact array of its
    /// own on drives the others do not use, the volume an md-exact RAID-1
    /// over them; reads are balanced over the plexes.
    #[arg(
        long = "plex",
        value_name = "LEVEL[:N]",
        conflicts_with_all = ["level", "subdisks"]
    )]
    pub(super) plexes: Vec<String>,
    /// The volume's size (at least; whole interleaves of every subdisk).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub(super) size: u64,
    /// Bytes on one subdisk before the next: any multiple of 512.
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = parse_size)]
    pub(super) interleave: u64,
    /// raid5/raid6 parity placement (left-symmetric by default).
    #[arg(long, value_name = "NAME", value_parser = crate::values::layout())]
    pub(super) layout: Option<String>,
    /// raid10: copies of each chunk.
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub(super) copies: u32,
    /// Subdisks of the plex (default: a mirror 2, a concat as few as fit,
    /// the others one on every drive allowed).
    #[arg(long, value_name = "N")]
    pub(super) subdisks: Option<u32>,
    /// Only these drives (comma-separated names).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    pub(super) drives: Vec<String>,
    #[command(flatten)]
    pub(super) devices: DeviceArgs,
    #[command(flatten)]
    pub(super) control: ControlArgs,
}

#[cfg(test)]
impl VolumeCreateArgs {
    /// `volume create POOL NAME --level LEVEL --size SIZE`, the rest left
    /// at their defaults.
    pub(super) fn new(pool: &str, name: &str, level: Level, size: u64) -> VolumeCreateArgs {
        VolumeCreateArgs {
            pool: pool.into(),
            name: name.into(),
            level: Some(level),
            plexes: Vec::new(),
            size,
            interleave: 64 << 10,
            layout: None,
            copies: 2,
            subdisks: None,
            drives: Vec::new(),
            devices: DeviceArgs {
                devices: Vec::new(),
            },
            control: ControlArgs { control: None },
        }
    }
}

impl VolumeCreateArgs {
    /// The request `volume create --control` sends the pool's server.
    fn to_request(&self) -> Value {
        json!({
            "cmd": "volume-create",
            "pool": self.pool,
            "name": self.name,
            "level": self.level.map(Level::name),
            "size_bytes": self.size,
            "interleave_bytes": self.interleave,
            "layout": self.layout,
            "copies": self.copies,
            "subdisks": self.subdisks,
            "plexes": self.plexes,
            "drives": self.drives,
        })
    }

    /// The server's reading of [`Self::to_request`], for pool `pool`.
    pub(super) fn from_request(pool: &str, req: &Value) -> std::result::Result<Self, String> {
        let text = |k: &str| req.get(k).and_then(Value::as_str);
        let number = |k: &str| req.get(k).and_then(Value::as_u64);
        if let Some(asked) = text("pool").filter(|p| *p != pool) {
            return Err(format!("this server serves pool {pool}, not {asked}"));
        }
        let name = text("name").ok_or("missing \"name\"")?;
        check_name("volume", name)?;
        let plexes = strings(req, "plexes");
        if text("level").is_some() && !plexes.is_empty() {
            return Err("\"level\" and \"plexes\" both given: a volume is one or the other".into());
        }
        let level: Option<Level> = match text("level") {
            Some(l) => Some(l.parse()?),
            None if !plexes.is_empty() => None,
            None => return Err("missing \"level\"".into()),
        };
        let size = number("size_bytes").ok_or("missing \"size_bytes\"")?;
        if size == 0 {
            return Err("--size 0: a volume holds at least one sector".into());
        }
        let small = |n: u64| u32::try_from(n).map_err(|_| format!("{n} is too large"));
        Ok(VolumeCreateArgs {
            pool: pool.into(),
            name: name.into(),
            level,
            plexes,
            size,
            interleave: number("interleave_bytes").unwrap_or(64 << 10),
            layout: text("layout").map(str::to_string),
            copies: small(number("copies").unwrap_or(2))?,
            subdisks: number("subdisks").map(small).transpose()?,
            drives: strings(req, "drives"),
            devices: DeviceArgs {
                devices: Vec::new(),
            },
            control: ControlArgs { control: None },
        })
    }
}

impl VolumeCreateArgs {
    /// A plex named `name` of `level` holding `size_bytes` of array data,
    /// the rest from request `req` (`volume convert`'s new plex).
    pub(super) fn for_plex(
        pool: &str,
        name: &str,
        level: Level,
        req: &Value,
        size_bytes: u64,
    ) -> std::result::Result<Self, String> {
        let number = |k: &str| req.get(k).and_then(Value::as_u64);
        let small = |n: u64| u32::try_from(n).map_err(|_| format!("{n} is too large"));
        Ok(VolumeCreateArgs {
            pool: pool.into(),
            name: name.into(),
            level: Some(level),
            plexes: Vec::new(),
            size: size_bytes,
            interleave: number("interleave_bytes").unwrap_or(64 << 10),
            layout: req
                .get("layout")
                .and_then(Value::as_str)
                .map(str::to_string),
            copies: small(number("copies").unwrap_or(2))?,
            subdisks: number("subdisks").map(small).transpose()?,
            drives: Vec::new(),
            devices: DeviceArgs {
                devices: Vec::new(),
            },
            control: ControlArgs { control: None },
        })
    }
}

#[derive(Args)]
pub struct VolumeRemoveArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    #[arg(value_name = "NAME")]
    name: String,
    /// With --control: remove it even with clients connected, who are
    /// cut off (their requests from then on fail).
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

/// A request's list of strings at `key` (none when absent).
pub(super) fn strings(req: &Value, key: &str) -> Vec<String> {
    req.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The largest volume a pool makes: far beyond any drive, and far enough
/// below 2^64 that no sum of sizes on the way overflows.
const MAX_VOLUME_BYTES: u64 = 1 << 60;

fn random_uuid() -> [u8; 16] {
    *uuid::Uuid::new_v4().as_bytes()
}

pub(super) fn writable() -> OpenOptions {
    OpenOptions {
        claim: true,
        ..OpenOptions::default()
    }
}

/// `NAME=DEVICE` or `DEVICE` (named `d{index}`).
fn drive_spec(spec: &str, index: usize) -> (String, String) {
    match spec.split_once('=') {
        Some((n, d)) if !n.contains('/') => (n.to_string(), d.to_string()),
        _ => (format!("d{index}"), spec.to_string()),
    }
}

/// Opens a device to become a drive: refused when it holds a platter
/// label or a pool's slot, unless `force`.
fn open_new_drive(device: &str, taking: &NewDrives) -> Result<Arc<dyn Member>> {
    let opts = OpenOptions {
        create_size_bytes: taking.drive_size,
        ..writable()
    };
    let m: Arc<dyn Member> = open_member(device, opts)?.into();
    if m.size_bytes() <= platter_core::pool::POOL_AREA_BYTES + ALIGN_BYTES {
        return Err(CliError(format!(
            "{device}: {} is too small for a drive (its pool area is 1 MiB, then whole MiBs)",
            format_size(m.size_bytes())
        )));
    }
    if taking.force {
        return Ok(m);
    }
    let slots = drives::read_slots(m.as_ref()).map_err(|e| CliError(format!("{device}: {e}")))?;
    if let Some((_, h, p)) = slots.newest() {
        let d = p
            .drive_by_uuid(&h.drive_uuid)
            .map(|d| d.name.as_str())
            .unwrap_or("?");
        return Err(CliError(format!(
            "{device} is drive {d} of pool {} (generation {}); use --force to take it",
            p.name, h.generation
        )));
    }
    if let Some(what) = foreign_label(m.as_ref(), None)? {
        return Err(CliError(format!(
            "{device}: {what}; use --force to overwrite it"
        )));
    }
    Ok(m)
}

/// A new drive's pool area: slot 0 this configuration, slot 1 cleared (an
/// older pool's slot there would otherwise outrank it).
fn first_write(m: &dyn Member, pool: &Pool, d: usize) -> Result<()> {
    m.write_at(area::slot_offset_bytes(1), &[0u8; HEADER_BYTES])?;
    drives::write_slot(m, pool, d, 0)
}

pub fn pool_create(args: PoolCreateArgs) -> Result<()> {
    check_name("pool", &args.pool).map_err(CliError)?;
    let template = match &args.config {
        Some(path) => Some(read_template(path, &args.pool)?),
        None => None,
    };
    let specs = drive_specs(&args, template.as_ref())?;
    // Files this command creates are removed again if it fails.
    let created: Vec<String> = specs
        .iter()
        .map(|(_, d)| d.clone())
        .filter(|d| !d.contains("://") && std::fs::symlink_metadata(d).is_err())
        .collect();
    let result = make_pool(&args, template, &specs);
    if result.is_err() {
        for path in created {
            let _ = std::fs::remove_file(path);
        }
    }
    result
}

/// A template's volumes as they serve: a convert's new plex (the state
/// of a change under way, as a move is) is left out.
pub(super) fn without_converts(mut template: Pool) -> Vec<PoolVolume> {
    template.copies.clear();
    for c in std::mem::take(&mut template.converts) {
        if let Some(v) = template.volumes.iter_mut().find(|v| v.name == c.volume) {
            if c.into < v.plexes.len() {
                v.plexes.remove(c.into);
            }
        }
    }
    template.volumes
}

fn make_pool(
    args: &PoolCreateArgs,
    template: Option<Pool>,
    specs: &[(String, String)],
) -> Result<()> {
    let mut devices = Vec::new();
    for (_, device) in specs {
        devices.push(open_new_drive(device, &args.taking)?);
    }
    // A spare stays one; a new device is not failed.
    let states: Vec<DriveState> = specs
        .iter()
        .map(|(name, _)| {
            let listed = template
                .as_ref()
                .and_then(|t| t.drive(name))
                .map(|d| d.state);
            match listed {
                Some(DriveState::Spare) => DriveState::Spare,
                _ => DriveState::Up,
            }
        })
        .collect();
    let mut pool = Pool {
        name: args.pool.clone(),
        uuid: random_uuid(),
        generation: 1,
        drives: Vec::new(),
        // Labels made now say each volume's size: an extend's record of
        // it is not carried over.
        volumes: template
            .map(without_converts)
            .unwrap_or_default()
            .into_iter()
            .map(|v| PoolVolume {
                size_bytes: None,
                ..v
            })
            .collect(),
        // A move is the state of a pool's copying, not its layout: the
        // new pool has each subdisk where its `sd` line puts it.
        moves: Vec::new(),
        detached: Vec::new(),
        converts: Vec::new(),
        copies: Vec::new(),
    };
    for (((name, _), m), state) in specs.iter().zip(&devices).zip(states) {
        pool.drives.push(Drive {
            name: name.clone(),
            uuid: random_uuid(),
            size_bytes: m.size_bytes(),
            device: m.describe().to_string(),
            state,
        });
    }
    pool.check().map_err(CliError)?;
    area::fits(&pool).map_err(CliError)?;
    let open: Vec<Option<Arc<dyn Member>>> = devices.iter().cloned().map(Some).collect();
    for v in &pool.volumes {
        if v.has_plexes() {
            super::plexes::label_plexes(&pool, v, &open)?;
        } else {
            label_volume(&pool, v, &open)?;
        }
    }
    for (d, m) in devices.iter().enumerate() {
        first_write(m.as_ref(), &pool, d)?;
    }
    outln!(
        "pool {} made: {} drives, {} volumes (generation 1)",
        pool.name,
        pool.drives.len(),
        pool.volumes.len()
    );
    Ok(())
}

fn read_template(path: &PathBuf, name: &str) -> Result<Pool> {
    let text =
        std::fs::read_to_string(path).map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    let t = text::parse(&text, Strictness::Template)
        .map_err(|e| CliError(format!("{}: {e}", path.display())))?;
    if t.name != name {
        return Err(CliError(format!(
            "{}: the configuration is of pool {}, not {name}",
            path.display(),
            t.name
        )));
    }
    Ok(t)
}

/// The drives to make: (name, device).
fn drive_specs(args: &PoolCreateArgs, template: Option<&Pool>) -> Result<Vec<(String, String)>> {
    let Some(t) = template else {
        if args.drives.is_empty() {
            return Err(CliError(
                "name the devices to make the pool's drives".into(),
            ));
        }
        return Ok(args
            .drives
            .iter()
            .enumerate()
            .map(|(i, s)| drive_spec(s, i))
            .collect());
    };
    if args.drives.is_empty() {
        if let Some(d) = t.drives.iter().find(|d| d.device.is_empty()) {
            return Err(CliError(format!(
                "drive {} of the configuration names no device; give the devices in its order",
                d.name
            )));
        }
        return Ok(t
            .drives
            .iter()
            .map(|d| (d.name.clone(), d.device.clone()))
            .collect());
    }
    if args.drives.len() != t.drives.len() {
        return Err(CliError(format!(
            "the configuration has {} drives, {} devices given",
            t.drives.len(),
            args.drives.len()
        )));
    }
    Ok(t.drives
        .iter()
        .zip(&args.drives)
        .map(|(d, dev)| (d.name.clone(), dev.clone()))
        .collect())
}

/// Labels volume `v`'s subdisks as a new array.
fn label_volume(pool: &Pool, v: &PoolVolume, open: &[Option<Arc<dyn Member>>]) -> Result<()> {
    let plex = v.plex();
    let members = drives::subdisk_members(pool, v, open)?;
    if members.len() != plex.subdisks.len() {
        return Err(CliError(format!(
            "volume {}: a drive of its subdisks is missing; it cannot be made now",
            v.name
        )));
    }
    let smallest = plex.subdisks.iter().map(|s| s.len_bytes).min().unwrap_or(0);
    label_subdisks(&spec_of(v, plex), members, subdisk_reserve_bytes(smallest))
        .map_err(|e| CliError(format!("volume {}: {}", v.name, e.0)))
}

pub(super) fn spec_of(v: &PoolVolume, plex: &Plex) -> ArraySpec {
    ArraySpec {
        level: plex.org,
        interleave_bytes: plex.interleave_bytes,
        layout: matches!(plex.org, Level::Raid5 | Level::Raid6)
            .then(|| plex.parity_layout.to_string()),
        copies: plex.copies,
        name: v.name.clone(),
    }
}

pub fn add_drive(args: AddDriveArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        let req = json!({
            "cmd": "pool-add-drive",
            "pool": args.pool,
            "drives": args.new,
            "spare": args.spare,
            "size_bytes": args.taking.drive_size,
            "force": args.taking.force,
        });
        let done = crate::control::ask(control, req)?;
        outln!(
            "pool {}: {} drives (generation {}), through its server",
            args.pool,
            done["drives"],
            done["generation"]
        );
        super::heal::say_healed(&args.pool, &done["healed"]);
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let state = if args.spare {
        DriveState::Spare
    } else {
        DriveState::Up
    };
    add_in(&mut open, &args.new, &args.taking, state)?;
    outln!(
        "pool {}: {} drives (generation {})",
        open.pool().name,
        open.pool().drives.len(),
        open.pool().generation
    );
    Ok(())
}

/// Adds the drives `specs` name ([NAME=]DEVICE) to the open pool: each
/// opened (created when `taking` says a size) and its second slot
/// blanked, then the next configuration, which names them, written to
/// every drive.
pub(super) fn add_in(
    open: &mut OpenPool,
    specs: &[String],
    taking: &NewDrives,
    state: DriveState,
) -> Result<()> {
    let mut pool = open.pool().clone();
    // Every new drive opened before any joins: one that cannot be leaves
    // the open pool as it was.
    let mut opened = Vec::new();
    for spec in specs {
        let (name, device) = drive_spec(spec, pool.drives.len() + opened.len());
        if pool.drive(&name).is_some() || opened.iter().any(|(n, _, _)| *n == name) {
            return Err(CliError(format!(
                "pool {} has a drive {name} already",
                pool.name
            )));
        }
        let m = open_new_drive(&device, taking)?;
        opened.push((name, device, m));
    }
    let keep = open.drives.len();
    let joined = (|| {
        for (name, device, m) in opened {
            m.write_at(area::slot_offset_bytes(1), &[0u8; HEADER_BYTES])?;
            open.add(&name, Arc::clone(&m));
            pool.drives.push(Drive {
                name,
                uuid: random_uuid(),
                size_bytes: m.size_bytes(),
                device,
                state,
            });
        }
        open.write(pool)
    })();
    if joined.is_err() {
        open.forget_added(keep);
    }
    joined
}

pub fn volume_create(args: VolumeCreateArgs) -> Result<()> {
    check_name("volume", &args.name).map_err(CliError)?;
    if args.size == 0 {
        return Err(CliError(
            "--size 0: a volume holds at least one sector".into(),
        ));
    }
    if let Some(control) = &args.control.control {
        let done = crate::control::ask(control, args.to_request())?;
        let size_bytes = done["size_bytes"].as_u64().unwrap_or(0);
        outln!(
            "volume {} of pool {}: {} ({size_bytes} bytes), served now as export '{}'",
            args.name,
            args.pool,
            format_size(size_bytes),
            args.name
        );
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let v = create_in(&mut open, &args)?;
    say_missing(&open);
    let plexes: Vec<String> = v
        .plexes
        .iter()
        .map(|p| format!("{} of {} subdisks", p.org, p.subdisks.len()))
        .collect();
    outln!(
        "volume {} of pool {}: {} (generation {})",
        v.name,
        open.pool().name,
        plexes.join(" mirrored by "),
        open.pool().generation
    );
    Ok(())
}

/// Makes volume `args.name` in the open pool: placed, labelled, then
/// given out by the next configuration.
pub(super) fn create_in(open: &mut OpenPool, args: &VolumeCreateArgs) -> Result<PoolVolume> {
    if args.size > MAX_VOLUME_BYTES {
        return Err(CliError(format!(
            "--size {}: a volume holds at most {}",
            args.size,
            format_size(MAX_VOLUME_BYTES)
        )));
    }
    if open.pool().volume(&args.name).is_some() {
        return Err(CliError(format!(
            "pool {} already has a volume {}",
            open.pool().name,
            args.name
        )));
    }
    let allowed = allowed_drives(open, &args.drives)?;
    let plexes = if args.plexes.is_empty() {
        vec![place(open, args, &allowed)?]
    } else {
        super::plexes::place_plexes(open, args, &allowed)?
    };
    let v = PoolVolume {
        name: args.name.clone(),
        size_bytes: None,
        plexes,
    };
    let mut pool = open.pool().clone();
    pool.volumes.push(v.clone());
    pool.check().map_err(CliError)?;
    area::fits(&pool).map_err(CliError)?;
    if v.has_plexes() {
        super::plexes::label_plexes(&pool, &v, &open.drives)?;
    } else {
        label_volume(&pool, &v, &open.drives)?;
    }
    open.write(pool)?;
    Ok(v)
}

fn say_missing(open: &OpenPool) {
    for d in &open.gathered.missing {
        tracing::warn!(drive = %d, "drive missing: it keeps the configuration before this change until it is back");
    }
}

/// The drives a new volume may use: those named (each present and up),
/// or every drive present and up.
fn allowed_drives(open: &OpenPool, named: &[String]) -> Result<Vec<String>> {
    let present = open.present_names();
    if named.is_empty() {
        return Ok(open.placeable_names());
    }
    for n in named {
        let Some(d) = open.pool().drive(n) else {
            return Err(CliError(format!(
                "pool {} has no drive {n}",
                open.pool().name
            )));
        };
        if !present.contains(n) {
            return Err(CliError(format!(
                "drive {n} is missing: its device was not found"
            )));
        }
        match d.state {
            DriveState::Up => {}
            DriveState::Spare => {
                return Err(CliError(format!(
                    "drive {n} is a spare, kept for the subdisks of a drive that fails"
                )))
            }
            DriveState::Failed => {
                return Err(CliError(format!(
                    "drive {n} has failed (its subdisks were placed elsewhere); `pool \
                     replace-drive` puts a new device in its place"
                )))
            }
            DriveState::Leaving => {
                return Err(CliError(format!(
                    "drive {n} is being emptied (`pool evacuate`): nothing new is placed on it"
                )))
            }
        }
    }
    Ok(named.to_vec())
}

/// The new volume's plex: its subdisks placed.
pub(super) fn place(open: &OpenPool, args: &VolumeCreateArgs, allowed: &[String]) -> Result<Plex> {
    let level = args.level.expect("a level or plexes");
    let count = match (args.subdisks, level) {
        (Some(n), _) => n,
        (None, Level::Mirror) => 2,
        (None, Level::Concat) => 64,
        (None, _) => allowed.len() as u32,
    };
    if level != Level::Concat && count < level.min_members() {
        return Err(CliError(format!(
            "{level} needs at least {} subdisks on distinct drives; {count} {}",
            level.min_members(),
            if args.subdisks.is_some() {
                "asked"
            } else {
                "drives allowed"
            }
        )));
    }
    let spec = ArraySpec {
        level,
        interleave_bytes: args.interleave,
        layout: args.layout.clone(),
        copies: args.copies,
        name: args.name.clone(),
    };
    let (parity_layout, copies) = if level == Level::Concat {
        (ParityLayout::DEFAULT, 1)
    } else {
        spec.settle(count)?
    };
    let short = |e: String| {
        CliError(format!(
            "volume {} of {}: {e}",
            args.name,
            format_size(args.size)
        ))
    };
    let subdisks = if level == Level::Concat {
        // The room each subdisk keeps goes by its own size (md's rule,
        // which only grows with it); no subdisk is larger than this.
        let largest = args.size.saturating_add(subdisk_reserve_bytes(args.size)) + ALIGN_BYTES;
        let reserve = subdisk_reserve_bytes(largest);
        place_concat(
            open.pool(),
            allowed,
            (args.size, args.interleave),
            reserve,
            count,
        )
        .map_err(short)?
    } else {
        let data = data_per_subdisk(level, count, copies, args.interleave, args.size)?;
        place_spread(open.pool(), allowed, count, subdisk_bytes(data)).map_err(short)?
    };
    Ok(Plex {
        org: level,
        interleave_bytes: args.interleave,
        parity_layout,
        copies,
        subdisks,
    })
}

/// Each subdisk's data for a volume of at least `size` bytes.
pub(super) fn data_per_subdisk(
    level: Level,
    n: u32,
    copies: u32,
    il: u64,
    size: u64,
) -> Result<u64> {
    if il == 0 || !il.is_multiple_of(512) {
        return Err(CliError(format!(
            "--interleave {il}: give a positive multiple of 512 bytes"
        )));
    }
    let n = u64::from(n);
    let data = match level {
        Level::Mirror => size,
        Level::Stripe | Level::Concat => size.div_ceil(n),
        Level::Raid10 => size.saturating_mul(u64::from(copies)).div_ceil(n),
        Level::Raid5 | Level::Raid6 => size.div_ceil(n - u64::from(level.parity_members())),
    };
    // Whole interleaves, and one more for raid10's rows that wrap.
    let chunks = data.div_ceil(il) + u64::from(level == Level::Raid10);
    chunks
        .checked_mul(il)
        .ok_or_else(|| CliError(format!("--size {size} is too large")))
}

/// A subdisk holding `data` bytes after the room `create` keeps before
/// it (md's rule for the subdisk's own size, which the subdisk's size
/// decides): settled in a few rounds, whole MiBs.
fn subdisk_bytes(data: u64) -> u64 {
    let mut len = data
        .saturating_add(ALIGN_BYTES)
        .next_multiple_of(ALIGN_BYTES);
    for _ in 0..8 {
        let want = data
            .saturating_add(subdisk_reserve_bytes(len))
            .next_multiple_of(ALIGN_BYTES);
        if want <= len {
            break;
        }
        len = want;
    }
    len
}

pub fn volume_remove(args: VolumeRemoveArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        let req = json!({
            "cmd": "volume-remove",
            "pool": args.pool,
            "name": args.name,
            "force": args.force,
        });
        let done = crate::control::ask(control, req)?;
        outln!(
            "volume {} removed from pool {} and no longer served ({} client(s) cut off); its \
             subdisks are free",
            args.name,
            args.pool,
            done["clients_cut"]
        );
        return Ok(());
    }
    if args.force {
        return Err(CliError(
            "--force goes with --control: offline, no client is connected".into(),
        ));
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let v = remove_in(&mut open, &args.name)?;
    say_missing(&open);
    outln!(
        "volume {} removed from pool {}; its {} subdisks are free (generation {})",
        v.name,
        args.pool,
        v.plex().subdisks.len(),
        open.pool().generation
    );
    Ok(())
}

/// Takes volume `name` out of the open pool's configuration, then erases
/// its subdisks' labels.
pub(super) fn remove_in(open: &mut OpenPool, name: &str) -> Result<PoolVolume> {
    let Some(v) = open.pool().volume(name).cloned() else {
        return Err(CliError(format!(
            "pool {} has no volume {name}",
            open.pool().name
        )));
    };
    if let Some(d) = open
        .pool()
        .detached
        .iter()
        .find(|d| d.volume == name && d.as_volume.is_some())
    {
        return Err(CliError(format!(
            "volume {name}: its plex {} is served as volume {}; attach it first (`platter plex \
             attach`), or copy what you need from it",
            d.plex_name(),
            d.as_volume.as_deref().unwrap_or_default()
        )));
    }
    if open.pool().copy_of(name).is_some() {
        return Err(CliError(format!(
            "volume {name} is being converted; give the convert up first (`platter volume \
             convert {} {name} --abort`), then remove it",
            open.pool().name
        )));
    }
    let mut members = Vec::new();
    for p in 0..v.plexes.len() {
        let windows = drives::plex_windows(open.pool(), &v, p, &open.drives)?;
        members.extend(windows.into_iter().map(|w| w as Arc<dyn Member>));
    }
    let mut pool = open.pool().clone();
    pool.volumes.retain(|x| x.name != name);
    pool.moves.retain(|m| m.volume != name);
    pool.detached.retain(|d| d.volume != name);
    pool.converts.retain(|c| c.volume != name);
    open.write(pool)?;
    // The configuration no longer gives the extents out; their labels
    // would only make `scan` find a volume that is gone.
    for m in &members {
        m.write_at(0, &[0u8; LABEL_BYTES])?;
        m.flush()?;
    }
    Ok(v)
}

pub fn replace_drive(args: ReplaceDriveArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        return replace_served(&args, control);
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let d = drive_index(&open, &args.old)?;
    if open.drives[d].is_some() {
        return Err(CliError(format!(
            "drive {} of pool {} is present; a drive is replaced once it is gone (take its \
             device away first)",
            args.old,
            open.pool().name
        )));
    }
    let subdisks = replace_in(&mut open, d, &args.new, &args.taking)?;
    outln!(
        "drive {} of pool {} is now {}: {} subdisks there, rebuilt by their volumes when served \
         (generation {})",
        args.old,
        args.pool,
        args.new,
        subdisks,
        open.pool().generation
    );
    Ok(())
}

/// `pool replace-drive --control`: the pool's server puts the device in
/// place and each volume served rebuilds its subdisk there at once.
fn replace_served(args: &ReplaceDriveArgs, control: &std::path::PathBuf) -> Result<()> {
    let req = json!({
        "cmd": "pool-replace-drive",
        "pool": args.pool,
        "drive": args.old,
        "device": args.new,
        "size_bytes": args.taking.drive_size,
        "force": args.taking.force,
    });
    let done = crate::control::ask(control, req)?;
    let names = |k: &str| strings(&done, k);
    outln!(
        "drive {} of pool {} is now {}; rebuilding: {}",
        args.old,
        args.pool,
        args.new,
        none_if_empty(&names("rebuilding"))
    );
    for v in names("lost") {
        outln!(
            "volume {v} has no redundancy: its data on {} is gone (`platter volume remove {} \
             {v} --control ...`)",
            args.old,
            args.pool
        );
    }
    for plex in names("remade") {
        outln!(
            "plex {plex} cannot rebuild inside: it is made anew, and its volume rebuilds it from \
             its other plexes"
        );
    }
    for plex in names("waiting") {
        outln!(
            "plex {plex} cannot rebuild inside and has another subdisk lost: it is made anew once \
             that one is placed again (`platter pool heal` or `pool replace-drive`)"
        );
    }
    for e in names("failed") {
        crate::out::errln!("{e}");
    }
    Ok(())
}

fn none_if_empty(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Where drive `name` is in the open pool's order.
pub(super) fn drive_index(open: &OpenPool, name: &str) -> Result<usize> {
    let pool = open.pool();
    pool.drives
        .iter()
        .position(|x| x.name == name)
        .ok_or_else(|| CliError(format!("pool {} has no drive {name}", pool.name)))
}

/// Puts device `new` in drive `d`'s place: its subdisks laid out again at
/// the same offsets, blank, for their volumes to rebuild; returns how many
/// there are.
pub(super) fn replace_in(
    open: &mut OpenPool,
    d: usize,
    new: &str,
    taking: &NewDrives,
) -> Result<usize> {
    let pool = open.pool().clone();
    let old = pool.drives[d].name.clone();
    let m = open_new_drive(new, taking)?;
    let on_it: Vec<(u64, u64)> = pool
        .subdisks()
        .filter(|(_, sd)| sd.drive == old)
        .map(|(_, sd)| (sd.offset_bytes, sd.len_bytes))
        .collect();
    let end = on_it.iter().map(|(o, l)| o + l).max().unwrap_or(0);
    if m.size_bytes() < end {
        return Err(CliError(format!(
            "{new}: {} is smaller than the {} its subdisks reach on {old}",
            format_size(m.size_bytes()),
            format_size(end),
        )));
    }
    // Blank where each subdisk's label goes: a stale one would be taken
    // for a member.
    for (offset, _) in &on_it {
        m.write_at(*offset, &[0u8; LABEL_BYTES])?;
    }
    m.write_at(area::slot_offset_bytes(1), &[0u8; HEADER_BYTES])?;
    let mut new_pool = pool.clone();
    // A move from or onto the drive replaced ends: its places are blank.
    let from_it: Vec<String> = pool
        .moves
        .iter()
        .filter(|m| pool.moving(m).is_some_and(|sd| sd.drive == old) || m.drive == old)
        .map(|m| m.subdisk_name())
        .collect();
    new_pool
        .moves
        .retain(|m| !from_it.contains(&m.subdisk_name()));
    new_pool.drives[d] = Drive {
        name: old,
        uuid: random_uuid(),
        size_bytes: m.size_bytes(),
        device: new.to_string(),
        state: DriveState::Up,
    };
    open.put(d, m);
    open.write(new_pool)?;
    Ok(on_it.len())
}
