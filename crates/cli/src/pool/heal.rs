//! `platter pool heal`: a redundant volume's failed subdisk placed again,
//! blank, on a spare drive or in free space on another drive, for the
//! volume to rebuild there (md's hot spare; LVM's `lvconvert --repair`,
//! which takes the volume group's free space).
//!
//! Order on the devices, so that a crash at any step leaves the old place
//! or the new one in the configuration, never a subdisk naming what is
//! not there: the new extent's label area is zeroed and flushed first
//! (a stale label there would be taken for a member), then one
//! configuration moves every subdisk placed, makes each spare it used up
//! and marks each drive left failed. A volume served then takes its blank
//! subdisk into the slot and rebuilds it; a server started later finds it
//! blank and takes it as the volume's spare.

use std::collections::BTreeSet;

use clap::Args;
use platter_core::label::LABEL_BYTES;
use platter_core::pool::alloc::free_extents;
use platter_core::pool::{DriveState, Pool, Subdisk};
use platter_core::Level;
use serde_json::{json, Value};

use super::drives::{open_pool, OpenPool};
use super::make::{drive_index, writable};
use super::{ControlArgs, DeviceArgs};
use crate::error::{CliError, Result};
use crate::out::outln;

#[derive(Args)]
pub struct HealArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    /// Only spare drives (`pool add-drive --spare`) take the failed
    /// subdisks, as the server does by itself; without it, free space
    /// on the other drives too once the spares are used.
    #[arg(long)]
    spares_only: bool,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

/// Where failed subdisks may go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Room {
    /// Spare drives only: what a server does without being asked.
    Spares,
    /// Spare drives first, then the free space of drives up.
    FreeSpace,
}

/// A failed subdisk placed again.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    pub volume: String,
    pub slot: usize,
    /// The drive it was on.
    pub from: String,
    pub to: Subdisk,
}

/// What a heal did: the subdisks placed, and why each other was not.
#[derive(Debug, Default)]
pub struct Healed {
    pub placed: Vec<Placed>,
    pub unplaced: Vec<String>,
}

pub fn heal(args: HealArgs) -> Result<()> {
    let room = if args.spares_only {
        Room::Spares
    } else {
        Room::FreeSpace
    };
    if let Some(control) = &args.control.control {
        let req = json!({
            "cmd": "pool-heal",
            "pool": args.pool,
            "free_space": room == Room::FreeSpace,
        });
        let done = crate::control::ask(control, req)?;
        let healed = &done["healed"];
        say_healed(&args.pool, healed);
        let count = |k: &str| healed[k].as_array().map_or(0, Vec::len);
        return match (count("placed"), count("unplaced")) {
            (0, 0) => {
                outln!("pool {}: no failed subdisk to place", args.pool);
                Ok(())
            }
            (0, _) => Err(CliError(format!(
                "pool {}: no failed subdisk could be placed",
                args.pool
            ))),
            _ => Ok(()),
        };
    }
    let mut open = open_pool(Some(&args.pool), &args.devices.devices, writable())?;
    let lost = on_missing_drives(&open);
    if lost.is_empty() {
        outln!(
            "pool {}: no subdisk of a redundant volume is on a missing drive",
            args.pool
        );
        return Ok(());
    }
    let healed = heal_in(&mut open, &lost, room)?;
    for p in &healed.placed {
        outln!(
            "{}: on {} at {} (was on {}); rebuilt when the pool is next served (generation {})",
            subdisk_name(open.pool(), &p.volume, p.slot),
            p.to.drive,
            p.to.offset_bytes,
            p.from,
            open.pool().generation
        );
    }
    for why in &healed.unplaced {
        crate::out::errln!("{why}");
    }
    if healed.placed.is_empty() {
        return Err(CliError(format!(
            "pool {}: no failed subdisk could be placed",
            args.pool
        )));
    }
    Ok(())
}

/// What a server's answer says was healed, a line each.
pub fn say_healed(pool: &str, healed: &Value) {
    let list = |k: &str| healed[k].as_array().cloned().unwrap_or_default();
    for p in list("placed") {
        if p["remade"] == json!(false) {
            outln!(
                "pool {pool}: plex {} has its subdisk {} on {} (it was on {}); it is made anew \
                 and rebuilt once its other lost subdisks are placed too",
                p["volume"].as_str().unwrap_or("?"),
                p["slot"],
                p["drive"].as_str().unwrap_or("?"),
                p["from"].as_str().unwrap_or("?"),
            );
            continue;
        }
        outln!(
            "pool {pool}: volume {} rebuilds its subdisk {} on {} (it was on {})",
            p["volume"].as_str().unwrap_or("?"),
            p["slot"],
            p["drive"].as_str().unwrap_or("?"),
            p["from"].as_str().unwrap_or("?"),
        );
    }
    for why in list("unplaced") {
        crate::out::errln!("{}", why.as_str().unwrap_or("?"));
    }
}

/// Subdisk `slot` of array `array` (a volume of one plex, or a plex of a
/// volume of several, `v.p1`), as vinum names it.
fn subdisk_name(pool: &Pool, array: &str, slot: usize) -> String {
    match pool.array(array) {
        Some((v, p)) => v.subdisk_name(p, slot),
        None => format!("{array}.s{slot}"),
    }
}

/// Offline, a failed subdisk is one on a drive not found: each array's,
/// in slot order.
fn on_missing_drives(open: &OpenPool) -> Vec<(String, usize)> {
    let pool = open.pool();
    let missing: BTreeSet<&str> = open.gathered.missing.iter().map(String::as_str).collect();
    let mut lost = Vec::new();
    for v in &pool.volumes {
        for (p, plex) in v.plexes.iter().enumerate() {
            for (s, sd) in plex.subdisks.iter().enumerate() {
                if missing.contains(sd.drive.as_str()) {
                    lost.push((v.array_name(p), s));
                }
            }
        }
    }
    lost
}

/// Places each of `lost` (array, slot) again, as [`Room`] allows, and
/// writes the configuration that says so; the new extents' labels are
/// zeroed first. A subdisk that finds no room, or whose array has no
/// redundancy to rebuild it from (nor other plexes to make it anew
/// from), is named in `unplaced`.
pub fn heal_in(open: &mut OpenPool, lost: &[(String, usize)], room: Room) -> Result<Healed> {
    let mut pool = open.pool().clone();
    let present: Vec<String> = open
        .present_names()
        .into_iter()
        .filter(|n| !open.failing.contains(n))
        .collect();
    // A spare stays one to this heal after it takes its first subdisk.
    let spares: BTreeSet<String> = pool
        .drives
        .iter()
        .filter(|d| d.state == DriveState::Spare)
        .map(|d| d.name.clone())
        .collect();
    let mut healed = Healed::default();
    for (volume, slot) in lost {
        let room = (room, &spares);
        match place_one(&pool, &present, volume, *slot, room) {
            Ok(placed) => {
                moved(&mut pool, &placed);
                healed.placed.push(placed);
            }
            Err(why) => healed.unplaced.push(why),
        }
    }
    if healed.placed.is_empty() {
        return Ok(healed);
    }
    for p in &healed.placed {
        let d = drive_index(open, &p.to.drive)?;
        let m = open.drives[d].as_ref().expect("placed on a drive present");
        m.write_at(p.to.offset_bytes, &[0u8; LABEL_BYTES])?;
        m.flush()?;
    }
    open.write(pool)?;
    Ok(healed)
}

/// The configuration with `p`'s subdisk on its new extent: the spare
/// that took it is up, the drive it left failed.
fn moved(pool: &mut Pool, p: &Placed) {
    let (v, plex) = pool
        .array(&p.volume)
        .expect("placed in an array of the pool");
    let (v, plex) = (v.name.clone(), plex);
    let v = pool
        .volumes
        .iter_mut()
        .find(|x| x.name == v)
        .expect("placed in a volume of the pool");
    v.plexes[plex].subdisks[p.slot] = p.to.clone();
    // A move of the subdisk, or onto the drive left, ends with it.
    let name = v.name.clone();
    pool.moves
        .retain(|m| !(m.volume == name && (m.plex, m.slot) == (plex, p.slot)) && m.drive != p.from);
    for d in pool.drives.iter_mut() {
        if d.name == p.to.drive {
            d.state = DriveState::Up;
        } else if d.name == p.from {
            d.state = DriveState::Failed;
        }
    }
}

/// Where subdisk `slot` of `volume` goes: the first spare present with a
/// free extent as long, then (`Room::FreeSpace`) the drive up with the
/// most free space that has one; never a drive the plex uses already,
/// whose loss would then cost it two subdisks.
fn place_one(
    pool: &Pool,
    present: &[String],
    volume: &str,
    slot: usize,
    (room, spares): (Room, &BTreeSet<String>),
) -> std::result::Result<Placed, String> {
    let name = subdisk_name(pool, volume, slot);
    let (v, p) = pool
        .array(volume)
        .ok_or_else(|| format!("{name}: the pool has no volume or plex {volume}"))?;
    let plex = &v.plexes[p];
    let redundant = matches!(
        plex.org,
        Level::Mirror | Level::Raid10 | Level::Raid5 | Level::Raid6
    );
    // A plex without redundancy is made anew from the volume's others.
    if !redundant && !v.has_plexes() {
        return Err(format!(
            "{name}: volume {volume} ({}) has no redundancy to rebuild it from; its data there \
             is lost",
            plex.org
        ));
    }
    let sd = plex
        .subdisks
        .get(slot)
        .ok_or_else(|| format!("{name}: {volume} has no subdisk {slot}"))?;
    // The volume's plexes keep to drives apart (`Pool::check`).
    let used: BTreeSet<&str> = v
        .plexes
        .iter()
        .flat_map(|x| &x.subdisks)
        .map(|s| s.drive.as_str())
        .collect();
    let fits = |d: &str| {
        free_extents(pool, d)
            .into_iter()
            .find(|&(_, len)| len >= sd.len_bytes)
            .map(|(offset, _)| offset)
    };
    let mut candidates: Vec<(&str, bool, u64)> = present
        .iter()
        .filter(|d| !used.contains(d.as_str()))
        .filter_map(|d| pool.drive(d))
        .filter(|d| !matches!(d.state, DriveState::Failed | DriveState::Leaving))
        .map(|d| (d, spares.contains(&d.name)))
        .filter(|&(d, spare)| spare || (room == Room::FreeSpace && d.state == DriveState::Up))
        .map(|(d, spare)| {
            let free = free_extents(pool, &d.name).iter().map(|(_, l)| l).sum();
            (d.name.as_str(), spare, free)
        })
        .collect();
    // Spares first, then the roomiest; by name where those tie.
    candidates.sort_by_key(|&(n, spare, free)| (!spare, std::cmp::Reverse(free), n));
    for (d, _, _) in candidates {
        if let Some(offset) = fits(d) {
            return Ok(Placed {
                volume: volume.to_string(),
                slot,
                from: sd.drive.clone(),
                to: Subdisk {
                    drive: d.to_string(),
                    offset_bytes: offset,
                    len_bytes: sd.len_bytes,
                },
            });
        }
    }
    let whence = match room {
        Room::Spares => "no spare drive present has",
        Room::FreeSpace => "no spare or other drive present, outside the volume's plexes, has",
    };
    Err(format!(
        "{name}: {whence} {} free in one piece (`platter pool add-drive {} --spare --drive ...` \
         adds one)",
        platter_core::units::format_size(sd.len_bytes),
        pool.name
    ))
}

#[cfg(test)]
mod tests;
