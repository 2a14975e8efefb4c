//! `platter volume convert` (vinum's way of changing a volume's
//! organisation: attach a plex of the new organisation, revive it, remove
//! the old): a plex of a volume of several plexes replaced by a new plex
//! of another level or interleave, on drives no plex of the volume uses,
//! while the volume serves.
//!
//! Order, so that a crash at any step leaves the volume's bytes whole on
//! its other plexes and the change taken up at the next start: one
//! configuration records the new plex (the volume's last) and the convert
//! (`convert plex V.pF into V.pN`); the mirror stops using the old plex;
//! the new plex's subdisks are labelled as a new array named as the old
//! plex, its data zeroed; the mirror takes it into the old plex's slot and
//! rebuilds it from the others; once it is in step one configuration puts
//! it at the old plex's place and drops the old plex, whose subdisks'
//! labels are then zeroed. A start finds which plex holds the slot by the
//! mirror's label on the new plex (docs/pools.md "Changing a volume's
//! organisation").

use clap::Args;
use platter_core::label::LABEL_BYTES;
use platter_core::pool::{Plex, PlexConvert, Pool, PoolVolume, VolumeCopy};
use platter_core::Level;
use platter_io::Member;
use serde_json::{json, Value};
use std::sync::Arc;

use super::drives::{labels_of, open_pool, plex_windows, OpenPool};
use super::make::{place, writable, VolumeCreateArgs};
use super::plexes::{label_plex_as, mirror_label_on, MirrorLabels};
use super::split::{revived, volume_and_plex};
use super::{ControlArgs, DeviceArgs};
use crate::error::{CliError, Result};
use crate::out::outln;
use platter_core::units::parse_size;
use platter_io::subdisk::SubdiskMember;

#[derive(Args)]
pub struct VolumeConvertArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    #[arg(value_name = "VOLUME")]
    volume: String,
    /// The plex to replace, as `list` names it (db.p0), or its number; a
    /// volume of one plex needs none.
    #[arg(long, value_name = "PLEX")]
    plex: Option<String>,
    /// The new plex's level.
    #[arg(long, value_name = "LEVEL", value_parser = crate::values::level(), required_unless_present = "abort")]
    level: Option<Level>,
    /// Give up the convert under way: the new plex is dropped (its
    /// subdisks freed, their labels zeroed) and the old plex serves again,
    /// revived with what the volume wrote since the convert began. For a
    /// new plex that cannot be made or revived (a drive of it failing).
    #[arg(long, conflicts_with_all = ["plex", "level", "layout", "subdisks", "drives"])]
    abort: bool,
    /// The new plex's interleave (any multiple of 512: 126s, 64k).
    #[arg(long, value_name = "SIZE", default_value = "64k", value_parser = parse_size)]
    interleave: u64,
    /// raid5/raid6 parity placement (left-symmetric by default).
    #[arg(long, value_name = "NAME", value_parser = crate::values::layout())]
    layout: Option<String>,
    /// The new plex's subdisks (default as `volume create`).
    #[arg(long, value_name = "N")]
    subdisks: Option<u32>,
    /// Only these drives (comma-separated names); never one a plex of the
    /// volume uses.
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    drives: Vec<String>,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

pub fn volume_convert(args: VolumeConvertArgs) -> Result<()> {
    if args.abort {
        return abort(&args);
    }
    let req = json!({
        "cmd": "volume-convert",
        "pool": args.pool,
        "volume": args.volume,
        "plex": args.plex,
        "level": args.level.map(|l| l.to_string()),
        "interleave_bytes": args.interleave,
        "layout": args.layout,
        "subdisks": args.subdisks,
        "drives": args.drives,
    });
    let Some(control) = &args.control.control else {
        return convert_offline(&args, &req);
    };
    let done = crate::control::ask(control, req)?;
    outln!(
        "volume {}: plex {} is being replaced by a {} plex on {}; `platter status --control` \
         follows its revive, and `platter list` shows the old plex gone once it is done",
        done["volume"].as_str().unwrap_or("?"),
        done["plex"].as_str().unwrap_or("?"),
        done["level"].as_str().unwrap_or("?"),
        done["drives"]
            .as_array()
            .map(|d| d
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_default(),
    );
    Ok(())
}

/// Offline, the convert is recorded and its new plex placed; the next
/// `serve --pool` swaps it in and revives it (as it takes up a convert a
/// crash cut short). Refused unless every plex of the volume is in step.
fn convert_offline(args: &VolumeConvertArgs, req: &Value) -> Result<()> {
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    if open
        .pool()
        .volume(&args.volume)
        .is_some_and(|v| !v.has_plexes())
    {
        let copy = copy_in(&mut open, req)?;
        let drives: Vec<&str> = copy
            .plex
            .subdisks
            .iter()
            .map(|sd| sd.drive.as_str())
            .collect();
        outln!(
            "volume {}: its plex is to be replaced by a {} plex on {} (generation {}); the next \
             `serve --pool` copies the volume onto it while serving, then frees the old plex",
            copy.volume,
            copy.plex.org,
            drives.join(", "),
            open.pool().generation
        );
        return Ok(());
    }
    let c = convert_in(&mut open, req)?;
    let v = open.pool().volume(&c.volume).cloned().expect("converting");
    let drives: Vec<String> = v.plexes[c.into]
        .subdisks
        .iter()
        .map(|sd| sd.drive.clone())
        .collect();
    outln!(
        "volume {}: plex {} is to be replaced by a {} plex on {} (generation {}); the next \
         `serve --pool` revives it while serving and then frees the old plex",
        v.name,
        v.plex_name(c.from),
        args.level.expect("clap asks for --level"),
        drives.join(", "),
        open.pool().generation
    );
    Ok(())
}

/// Offline, the convert `req` asks of a volume of one plex recorded: its
/// new plex placed for the size its labels say.
pub(super) fn copy_in(open: &mut OpenPool, req: &Value) -> Result<VolumeCopy> {
    let volume = need(req, "volume")?;
    let v = open
        .pool()
        .volume(volume)
        .cloned()
        .ok_or_else(|| no_convert(open.pool(), volume))?;
    let members = open.subdisks(&v)?;
    let assembled = platter_io::assembly::assemble_devices(members)
        .map_err(|e| CliError(format!("volume {volume}: {e}")))?;
    let volume_bytes = assembled.assembly.label.volume_size_bytes;
    let (next, copy) = plan_copy(open, req, volume_bytes)?;
    open.write(next)?;
    Ok(copy)
}

/// Offline, the convert `req` asks checked against the mirror's labels
/// (every plex in step), its new plex placed and the convert recorded.
pub(super) fn convert_in(open: &mut OpenPool, req: &Value) -> Result<PlexConvert> {
    let plex = req["plex"].as_str().unwrap_or_default();
    let volume = req["volume"].as_str().unwrap_or_default();
    let (v, _) = volume_and_plex(open.pool(), volume, plex)?;
    let labels = MirrorLabels::read(open, &v)?;
    if let Some(p) = (0..v.plexes.len()).find(|&p| !labels.in_step(p)) {
        return Err(CliError(format!(
            "volume {} is not whole (plex {} is out of step): let it rebuild first; a convert \
             revives the new plex from the others",
            v.name,
            v.plex_name(p)
        )));
    }
    let newest = &labels.newest;
    let slot_bytes = newest
        .slots
        .iter()
        .map(|e| e.data_size_bytes)
        .max()
        .unwrap_or(0);
    let plex_bytes = newest
        .data_offset_bytes
        .checked_add(slot_bytes)
        .ok_or_else(|| CliError("the volume's size overflows".into()))?;
    let (next, c) = plan_convert(open, req, plex_bytes)?;
    open.write(next)?;
    Ok(c)
}

/// The configuration with the convert `req` asks recorded and its new
/// plex placed (at least `plex_bytes` of array data), or why not.
pub fn plan_convert(open: &OpenPool, req: &Value, plex_bytes: u64) -> Result<(Pool, PlexConvert)> {
    let pool = open.pool();
    let volume = need(req, "volume")?;
    let Some(plex) = req.get("plex").and_then(Value::as_str) else {
        return Err(CliError(format!(
            "volume {volume} has several plexes: name the one to replace (--plex)"
        )));
    };
    let (v, from) = volume_and_plex(pool, volume, plex)?;
    if let Some(c) = pool.convert_of(&v.name) {
        return Err(CliError(format!(
            "volume {}: plex {} is being converted already",
            v.name,
            v.plex_name(c.from)
        )));
    }
    pool.none_detached(&v.name, "convert it")
        .map_err(CliError)?;
    let plex = place_new_plex(open, &v, req, plex_bytes)?;
    let mut next = pool.clone();
    let into = v.plexes.len();
    let nv = next
        .volumes
        .iter_mut()
        .find(|x| x.name == v.name)
        .expect("found above");
    nv.plexes.push(plex);
    let c = PlexConvert {
        volume: v.name.clone(),
        from,
        into,
    };
    next.converts.push(c.clone());
    next.check().map_err(CliError)?;
    Ok((next, c))
}

/// The configuration with the convert `req` asks of a volume of one plex
/// recorded (a copy into a new plex of at least `volume_bytes` of array
/// data, the volume's size), or why not.
pub fn plan_copy(open: &OpenPool, req: &Value, volume_bytes: u64) -> Result<(Pool, VolumeCopy)> {
    let pool = open.pool();
    let volume = need(req, "volume")?;
    let v = pool
        .volume(volume)
        .cloned()
        .ok_or_else(|| CliError(format!("pool {} has no volume {volume}", pool.name)))?;
    assert!(!v.has_plexes(), "a copy is of a volume of one plex");
    if let Some(plex) = req.get("plex").and_then(Value::as_str) {
        let p0 = v.plex_name(0);
        if ![p0.as_str(), "p0", "0"].contains(&plex) {
            return Err(CliError(format!(
                "volume {volume} has one plex, {p0}: it is the one a convert replaces"
            )));
        }
    }
    if pool.copy_of(volume).is_some() {
        return Err(CliError(format!(
            "volume {volume} is being converted already; one at a time"
        )));
    }
    let plex = place_new_plex(open, &v, req, volume_bytes)?;
    let copy = VolumeCopy {
        volume: v.name.clone(),
        plex,
        copied_bytes: 0,
    };
    let mut next = pool.clone();
    next.copies.push(copy.clone());
    next.check().map_err(CliError)?;
    Ok((next, copy))
}

fn need<'a>(req: &'a Value, key: &str) -> Result<&'a str> {
    req.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| CliError(format!("missing \"{key}\"")))
}

/// The new plex `req` asks for volume `v`, at least `plex_bytes` of array
/// data, placed on drives up that no plex of `v` uses (of those `req`
/// names, if it names any).
fn place_new_plex(open: &OpenPool, v: &PoolVolume, req: &Value, plex_bytes: u64) -> Result<Plex> {
    let pool = open.pool();
    pool.not_moving(&v.name, "convert it").map_err(CliError)?;
    let level: Level = need(req, "level")?.parse().map_err(CliError)?;
    let used: Vec<&String> = v
        .plexes
        .iter()
        .flat_map(|p| p.subdisks.iter().map(|sd| &sd.drive))
        .collect();
    let asked: Vec<String> = req
        .get("drives")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if let Some(d) = asked.iter().find(|d| used.contains(d)) {
        return Err(CliError(format!(
            "drive {d} holds a plex of volume {}: the new plex goes on drives none of its plexes \
             use",
            v.name
        )));
    }
    let allowed: Vec<String> = pool
        .drives
        .iter()
        .filter(|d| d.state.takes_new_subdisks() && !used.contains(&&d.name))
        .filter(|d| asked.is_empty() || asked.contains(&d.name))
        .filter(|d| open.present_names().contains(&d.name))
        .map(|d| d.name.clone())
        .collect();
    let args = VolumeCreateArgs::for_plex(
        &pool.name,
        &v.plex_name(v.plexes.len()),
        level,
        req,
        plex_bytes,
    )
    .map_err(CliError)?;
    place(open, &args, &allowed)
}

/// The configuration that ends convert `c`: the new plex in the old
/// one's place, the old one gone.
pub fn finished(pool: &Pool, c: &PlexConvert) -> Pool {
    ended(pool, c, |plexes| {
        let new = plexes.remove(c.into);
        plexes[c.from] = new;
    })
}

/// Whether convert `c`'s new plex holds its slot of the volume's mirror:
/// its subdisks assemble and its data begins with the mirror's label (the
/// mirror wrote it there when it took the plex).
pub fn new_in_slot(open: &OpenPool, v: &PoolVolume, c: &PlexConvert) -> bool {
    // Every subdisk of it present: a part of a plex is not taken for it.
    let whole = plex_windows(open.pool(), v, c.into, &open.drives)
        .is_ok_and(|w| w.len() == v.plexes[c.into].subdisks.len());
    let Some(new) = mirror_label_on(open, v, c.into).filter(|_| whole) else {
        return false;
    };
    (0..v.plexes.len())
        .filter(|&p| p != c.from && p != c.into)
        .find_map(|p| mirror_label_on(open, v, p))
        .is_some_and(|other| other.volume_uuid == new.volume_uuid)
}

/// The configuration that gives convert `c` up: the new plex gone, the
/// old one the volume's again.
pub fn aborted(pool: &Pool, c: &PlexConvert) -> Pool {
    ended(pool, c, |plexes| {
        plexes.remove(c.into);
    })
}

/// The configuration without convert `c`'s line, its volume's plexes as
/// `keep` leaves them.
fn ended(pool: &Pool, c: &PlexConvert, keep: impl FnOnce(&mut Vec<Plex>)) -> Pool {
    let mut next = pool.clone();
    next.converts.retain(|x| x.volume != c.volume);
    let v = next
        .volumes
        .iter_mut()
        .find(|x| x.name == c.volume)
        .expect("a convert's volume");
    keep(&mut v.plexes);
    next
}

/// Plex `p`'s subdisks, gone from the configuration (`open` still reads
/// them from `v`), lose their labels: a scan must not find an array that
/// is no more.
pub fn erase_plex(open: &OpenPool, v: &PoolVolume, p: usize) -> Result<()> {
    for w in plex_windows(open.pool(), v, p, &open.drives)? {
        w.write_at(0, &[0u8; LABEL_BYTES])?;
        w.flush()?;
    }
    Ok(())
}

/// `volume convert --abort`: through the server, the new plex out of the
/// mirror and the old one back in; offline, the configuration without the
/// convert (the next start takes the old plex back as an attach does).
fn abort(args: &VolumeConvertArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        let req = json!({
            "cmd": "volume-convert",
            "pool": args.pool,
            "volume": args.volume,
            "abort": true,
        });
        let done = crate::control::ask(control, req)?;
        if done["copy"] == true {
            outln!(
                "volume {}: the convert is given up; its plex serves it as before, the new \
                 plex's subdisks are free",
                done["volume"].as_str().unwrap_or("?"),
            );
            return Ok(());
        }
        let how = revived(&done, "the convert began");
        outln!(
            "volume {}: the convert is given up; plex {} serves again, reviving {how}",
            done["volume"].as_str().unwrap_or("?"),
            done["plex"].as_str().unwrap_or("?"),
        );
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    if open.pool().copy_of(&args.volume).is_some() {
        abort_copy_in(&mut open, &args.volume)?;
        outln!(
            "volume {}: the convert is given up (generation {}); its plex serves it as before",
            args.volume,
            open.pool().generation
        );
        return Ok(());
    }
    let (v, c) = abort_in(&mut open, &args.volume)?;
    outln!(
        "volume {}: the convert of plex {} is given up (generation {}); the next `serve --pool` \
         takes the plex back, reviving on it what the volume wrote since the convert began",
        v.name,
        v.plex_name(c.from),
        open.pool().generation
    );
    Ok(())
}

/// Offline, the convert of `volume` given up: the configuration without
/// it, then the dropped plex's labels zeroed. Refused unless a plex
/// other than the convert's two holds the volume's bytes.
pub(super) fn abort_in(open: &mut OpenPool, volume: &str) -> Result<(PoolVolume, PlexConvert)> {
    let c = open
        .pool()
        .convert_of(volume)
        .cloned()
        .ok_or_else(|| no_convert(open.pool(), volume))?;
    let v = open
        .pool()
        .volume(&c.volume)
        .cloned()
        .expect("a convert's volume");
    let labels = MirrorLabels::read(open, &v)?;
    if !(0..v.plexes.len()).any(|p| p != c.from && p != c.into && labels.in_step(p)) {
        return Err(CliError(format!(
            "no plex of volume {} but the convert's holds all of its bytes now: giving the \
             convert up would lose them",
            v.name
        )));
    }
    open.write(aborted(open.pool(), &c))?;
    if let Err(e) = erase_plex(open, &v, c.into) {
        crate::out::errln!(
            "platter: the dropped plex's labels could not be zeroed: {}",
            e.0
        );
    }
    Ok((v, c))
}

/// The copy of volume `volume` (of one plex) given up: the configuration
/// without it, then the new plex's labels zeroed. The volume's own plex
/// held every byte throughout.
pub(super) fn abort_copy_in(open: &mut OpenPool, volume: &str) -> Result<()> {
    let pool = open.pool();
    let copy = pool
        .copy_of(volume)
        .cloned()
        .ok_or_else(|| no_convert(pool, volume))?;
    let both = copy.with_new_plex(pool.volume(volume).expect("a copy's volume"));
    open.write(copy_dropped(open.pool(), volume))?;
    if let Err(e) = erase_plex(open, &both, 1) {
        crate::out::errln!(
            "platter: the dropped plex's labels could not be zeroed: {}",
            e.0
        );
    }
    Ok(())
}

/// The new plex of a copy (plex 1 of `both`, its volume with the new
/// plex second) labelled as a new array named as the volume, its data
/// zeroed, its labels saying the volume's size `volume_bytes`: its array
/// holds whole stripes of its own, which may be more, and the volume's
/// clients are told what they were told before (`startup::export_info`
/// in the server). Returns its subdisks.
pub fn label_copy_plex(
    pool: &Pool,
    both: &PoolVolume,
    drives: &[Option<Arc<dyn Member>>],
    volume_bytes: u64,
) -> Result<Vec<Arc<SubdiskMember>>> {
    let windows = label_plex_as(pool, both, 1, drives, &both.name)?;
    for w in &windows {
        let Some(mut label) = labels_of(&[Arc::clone(w) as Arc<dyn Member>])?.remove(0) else {
            return Err(CliError(format!(
                "{}: its new label does not read back",
                w.describe()
            )));
        };
        if volume_bytes > label.volume_size_bytes {
            return Err(CliError(format!(
                "the new plex holds {} bytes, fewer than the volume's {volume_bytes}",
                label.volume_size_bytes
            )));
        }
        label.volume_size_bytes = volume_bytes;
        w.write_at(0, &label.encode())?;
        w.flush()?;
    }
    Ok(windows)
}

/// The configuration with volume `volume`'s copy recorded `copied_bytes`
/// far (its new plex flushed that far).
pub fn copy_recorded(pool: &Pool, volume: &str, copied_bytes: u64) -> Pool {
    let mut next = pool.clone();
    for c in next.copies.iter_mut().filter(|c| c.volume == volume) {
        c.copied_bytes = copied_bytes;
    }
    next
}

/// The configuration without volume `volume`'s copy.
pub fn copy_dropped(pool: &Pool, volume: &str) -> Pool {
    let mut next = pool.clone();
    next.copies.retain(|c| c.volume != volume);
    next
}

/// The configuration that ends volume `volume`'s copy: its new plex the
/// volume's only one.
pub fn copy_finished(pool: &Pool, volume: &str) -> Pool {
    let mut next = copy_dropped(pool, volume);
    let copy = pool.copy_of(volume).expect("a copy under way");
    let v = next
        .volumes
        .iter_mut()
        .find(|v| v.name == volume)
        .expect("a copy's volume");
    v.plexes = vec![copy.plex.clone()];
    next
}

fn no_convert(pool: &Pool, volume: &str) -> CliError {
    match pool.volume(volume) {
        Some(_) => CliError(format!("volume {volume} has no convert under way")),
        None => CliError(format!("pool {} has no volume {volume}", pool.name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use platter_core::pool::text::{self, Strictness};

    const CONVERTING: &str = "\
pool tank
drive d0 size 64M device /dev/d0
drive d1 size 64M device /dev/d1
drive d2 size 64M device /dev/d2
drive d3 size 64M device /dev/d3
volume v
plex name v.p0 org concat vol v
sd name v.p0.s0 drive d0 driveoffset 1M len 22M plex v.p0
plex name v.p1 org concat vol v
sd name v.p1.s0 drive d1 driveoffset 1M len 22M plex v.p1
plex name v.p2 org stripe interleave 126s vol v
sd name v.p2.s0 drive d2 driveoffset 1M len 12M plex v.p2
sd name v.p2.s1 drive d3 driveoffset 1M len 12M plex v.p2
convert plex v.p0 into v.p2
";

    /// The configuration that ends a convert has the new plex where the
    /// old one was, the old one's extents free, no convert line; a
    /// template taken by `pool create --config` mid-convert makes the
    /// volume as it serves (the new plex left out).
    #[test]
    fn a_finished_convert_puts_the_new_plex_in_the_old_one_s_place() {
        let mut pool = text::parse(CONVERTING, Strictness::Template).unwrap();
        for (i, d) in pool.drives.iter_mut().enumerate() {
            d.uuid = [i as u8 + 1; 16];
        }
        pool.check().unwrap();
        let c = pool.converts[0].clone();
        let done = finished(&pool, &c);
        done.check().unwrap();
        let v = done.volume("v").unwrap();
        assert_eq!(v.plexes.len(), 2);
        assert_eq!(v.plexes[0].org, Level::Stripe);
        assert_eq!(v.plexes[0].interleave_bytes, 126 * 512);
        assert_eq!(v.plexes[1].subdisks[0].drive, "d1");
        assert!(done.converts.is_empty());
        assert!(done.subdisks().all(|(_, sd)| sd.drive != "d0"));
        let made = super::super::make::without_converts(pool);
        assert_eq!(made[0].plexes.len(), 2);
        assert_eq!(made[0].plexes[0].org, Level::Concat);
    }

    const COPYING: &str = "\
pool tank
drive d0 size 64M device /dev/d0
drive d1 size 64M device /dev/d1
drive d2 size 64M device /dev/d2
drive d3 size 64M device /dev/d3
volume c
plex name c.p0 org concat vol c
sd name c.p0.s0 drive d0 driveoffset 1M len 17M plex c.p0
plex name c.p1 org raid5 interleave 126s vol c
sd name c.p1.s0 drive d1 driveoffset 1M len 10M plex c.p1
sd name c.p1.s1 drive d2 driveoffset 1M len 10M plex c.p1
sd name c.p1.s2 drive d3 driveoffset 1M len 10M plex c.p1
convert plex c.p0 into c.p1
";

    fn copying() -> Pool {
        let mut pool = text::parse(COPYING, Strictness::Template).unwrap();
        for (i, d) in pool.drives.iter_mut().enumerate() {
            d.uuid = [i as u8 + 1; 16];
        }
        pool.check().unwrap();
        pool
    }

    /// A convert of a volume of one plex reads as a copy: the volume keeps
    /// its one plex (every command that handles a volume of one plex sees
    /// it so), the new plex holds its extents, and the text written back
    /// is the text read. Its end makes the new plex the volume's only one.
    #[test]
    fn a_convert_of_a_volume_of_one_plex_is_a_copy_into_a_plex_apart() {
        let pool = copying();
        let v = pool.volume("c").unwrap();
        assert_eq!(v.plexes.len(), 1, "the new plex is no plex of the volume");
        assert!(pool.converts.is_empty());
        let copy = pool.copy_of("c").unwrap();
        assert_eq!(copy.plex.org, Level::Raid5);
        assert_eq!(pool.subdisks().count(), 4, "its extents are held");
        let again = text::parse(&text::render(&pool), Strictness::Stored).unwrap();
        assert_eq!(again, pool);
        assert!(pool.not_converting("c", "extend it").is_err());
        let done = copy_finished(&pool, "c");
        done.check().unwrap();
        assert!(done.copies.is_empty());
        assert_eq!(done.volume("c").unwrap().plexes, vec![copy.plex.clone()]);
        assert!(done.subdisks().all(|(_, sd)| sd.drive != "d0"));
        let dropped = copy_dropped(&pool, "c");
        dropped.check().unwrap();
        assert_eq!(dropped.subdisks().count(), 1);
        let made = super::super::make::without_converts(pool);
        assert_eq!(made[0].plexes.len(), 1);
        assert_eq!(made[0].plexes[0].org, Level::Concat);
    }

    /// A copy's new plex keeps a plex's rules: not on its volume's drive,
    /// not over another subdisk; and a volume has one change at a time.
    #[test]
    fn a_copy_that_breaks_a_rule_is_refused_by_check() {
        let mut shared = copying();
        shared.copies[0].plex.subdisks[0].drive = "d0".into();
        shared.copies[0].plex.subdisks[0].offset_bytes = 40 << 20;
        assert!(shared.check().is_err(), "on the volume's own drive");
        // Another volume's subdisk at 1M-5M of d1, under the copy's 1M-11M.
        let mut other = copying();
        other.volumes.push(platter_core::pool::PoolVolume {
            name: "o".into(),
            size_bytes: None,
            plexes: vec![Plex {
                subdisks: vec![platter_core::pool::Subdisk {
                    drive: "d1".into(),
                    offset_bytes: 1 << 20,
                    len_bytes: 4 << 20,
                }],
                ..other.volume("c").unwrap().plexes[0].clone()
            }],
        });
        let e = other.check().unwrap_err();
        assert!(e.contains("overlap"), "{e}");
        let mut twice = copying();
        let again = twice.copies[0].clone();
        twice.copies.push(again);
        assert!(twice.check().is_err(), "converted twice at once");
    }
}
