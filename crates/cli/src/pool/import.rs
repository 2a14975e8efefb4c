//! `platter pool import`: a volume made by `platter create` becomes a pool
//! of one volume, its data where it is.
//!
//! A pool's drive starts with its pool area (the first MiB); a member
//! made by `create` starts with its label and bitmap, and its data begins
//! at the label's data offset, 1 MiB or more in. Import moves the label
//! and the bitmap up by the pool area's size ([`SHIFT_BYTES`]) into the
//! room the member keeps before its data, with every offset in the label
//! lowered by as much, and then writes the pool area over the first MiB.
//! The member becomes one subdisk from 1 MiB to its end, whose label gives
//! the same data area at the same drive bytes: no byte of data moves.
//! It needs that room: 1 MiB + 4 KiB + the bitmap before the data (and
//! before the checksum area and the log), which members of 1 GiB and more
//! have by `create`'s rule, and smaller ones made with `--reserve 2M`.
//!
//! Order, so that a crash at any write leaves something whole: every
//! member's moved bitmap and label are written and flushed (the old label
//! at byte 0 still rules; the bytes written were unused room), then each
//! drive's pool area over the old label. Until a drive's pool area is
//! written it is the old array's member; after, the pool's drive. Running
//! the import again with the same devices finishes what a crash left: the
//! pool's configuration is a function of the labels (its uuid and the
//! drives' are the volume's and the members' own, turned by
//! [`UUID_TURN`]), or is read back from a drive already imported.

use std::sync::Arc;

use clap::Args;
use platter_core::assemble::{assemble, Assembly, Found};
use platter_core::intent::{IntentLayout, INTENT_OFFSET_BYTES};
use platter_core::label::{Label, VolumeState};
use platter_core::pool::area::{self, HEADER_BYTES};
use platter_core::pool::{check_name, Drive, Plex, Pool, PoolVolume, Subdisk, POOL_AREA_BYTES};
use platter_core::units::format_size;
use platter_core::volume::Health;
use platter_core::{Level, ParityLayout};
use platter_io::{open_member, Member, OpenOptions};

use super::drives;
use crate::error::{CliError, Result};
use crate::out::outln;

/// How far each member's label and bitmap move up: the pool area's size.
pub const SHIFT_BYTES: u64 = POOL_AREA_BYTES;

/// XOR-ed into the volume's uuid to make the pool's, and into each
/// member's to make its drive's: a second run of an import cut short
/// makes the same configuration.
pub const UUID_TURN: u8 = 0x5a;

#[derive(Args)]
pub struct ImportArgs {
    /// The new pool's name.
    #[arg(value_name = "POOL")]
    pool: String,
    /// Every member of the volume (made by `platter create`), in any
    /// order; they become drives d0, d1, ... in the volume's slot order.
    #[arg(value_name = "MEMBER", required = true)]
    members: Vec<String>,
    /// The volume's name in the pool (default: its label's name).
    #[arg(long, value_name = "NAME")]
    volume: Option<String>,
}

/// How far a device has come.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// The member as `create` left it: its label at byte 0.
    Array,
    /// Its label and bitmap moved; the old label still at byte 0.
    Moved,
    /// Its pool area written: a drive of the pool.
    Imported,
}

/// One device: its stage and its label in the member's own terms (as it
/// was at byte 0).
struct Seen {
    stage: Stage,
    label: Label,
}

pub fn import(args: ImportArgs) -> Result<()> {
    check_name("pool", &args.pool).map_err(CliError)?;
    let opts = OpenOptions {
        claim: true,
        ..OpenOptions::default()
    };
    let mut devices: Vec<Arc<dyn Member>> = Vec::new();
    for path in &args.members {
        let m = open_member(path, opts).map_err(|e| {
            CliError(format!(
                "{path}: {e}; is the volume being served? Stop its server first"
            ))
        })?;
        devices.push(m.into());
    }
    let pool = import_devices(&args.pool, args.volume.as_deref(), &devices)?;
    let v = &pool.volumes[0];
    outln!(
        "pool {} made from volume {}: {} drives, the volume's {} plex of {} subdisks in place \
         (generation {}); serve it with `platter serve --pool {}`",
        pool.name,
        v.name,
        pool.drives.len(),
        v.plex().org,
        v.plex().subdisks.len(),
        pool.generation,
        pool.name
    );
    Ok(())
}

/// Imports the volume whose members are `devices`; returns the pool.
pub fn import_devices(
    pool_name: &str,
    volume_name: Option<&str>,
    devices: &[Arc<dyn Member>],
) -> Result<Pool> {
    let seen = devices
        .iter()
        .map(|m| seen(m.as_ref(), pool_name))
        .collect::<Result<Vec<_>>>()?;
    let assembly = assemble_seen(devices, &seen)?;
    importable(&assembly)?;
    let by_slot = slot_order(&assembly);
    let pool = match already_imported(devices, &seen, pool_name)? {
        Some(p) => p,
        None => pool_of(pool_name, volume_name, &assembly, devices, &by_slot)?,
    };
    pool.check().map_err(CliError)?;
    area::fits(&pool).map_err(CliError)?;
    let moved = moved_label(&assembly, &pool.volumes[0].name)?;
    let bitmap_bytes = bitmap_bytes(&assembly)?;
    for (slot, &i) in by_slot.iter().enumerate() {
        if seen[i].stage == Stage::Array {
            move_label(
                devices[i].as_ref(),
                &moved.for_slot(slot as u32),
                bitmap_bytes,
            )?;
        }
    }
    for (d, &i) in by_slot.iter().enumerate() {
        if seen[i].stage != Stage::Imported {
            write_area(devices[i].as_ref(), &pool, d)?;
        }
    }
    Ok(pool)
}

/// Where device `m` stands, with its label as the member's.
fn seen(m: &dyn Member, pool_name: &str) -> Result<Seen> {
    let name = m.describe();
    let slots = drives::read_slots(m).map_err(|e| CliError(format!("{name}: {e}")))?;
    let moved = drives::read_label_at(m, SHIFT_BYTES)?.map(|l| unmoved(&l));
    if let Some((_, _, p)) = slots.newest() {
        if p.name != pool_name {
            return Err(CliError(format!(
                "{name} is a drive of pool {}, not a member to import",
                p.name
            )));
        }
        let Some(label) = moved else {
            return Err(CliError(format!(
                "{name} is a drive of pool {pool_name} already, with no label at 1 MiB: not \
                 an import of this volume"
            )));
        };
        return Ok(Seen {
            stage: Stage::Imported,
            label,
        });
    }
    let Some(at_zero) = drives::read_label_at(m, 0)? else {
        // The pool area's write over the old label was cut short: the
        // moved label, flushed before it began, is the member's.
        if let Some(label) = moved {
            return Ok(Seen {
                stage: Stage::Moved,
                label,
            });
        }
        return Err(CliError(format!(
            "{name}: no platter label at its start; `pool import` takes the members of a \
             volume made by `platter create`"
        )));
    };
    match moved {
        Some(l)
            if Label {
                name: at_zero.name.clone(),
                ..l.clone()
            } == at_zero =>
        {
            Ok(Seen {
                stage: Stage::Moved,
                label: l,
            })
        }
        _ => Ok(Seen {
            stage: Stage::Array,
            label: at_zero,
        }),
    }
}

/// The member's labels assembled as the volume they describe.
fn assemble_seen(devices: &[Arc<dyn Member>], seen: &[Seen]) -> Result<Assembly> {
    let found: Vec<Found> = devices
        .iter()
        .zip(seen)
        .map(|(m, s)| Found {
            name: m.describe().to_string(),
            size_bytes: m.size_bytes(),
            label: Ok(s.label.clone()),
        })
        .collect();
    assemble(&found).map_err(|e| CliError(e.to_string()))
}

/// Only a whole, clean volume is imported: its members must agree on
/// everything, since their labels are rewritten from one of them.
fn importable(a: &Assembly) -> Result<()> {
    let name = &a.label.name;
    if let Some(slot) = a.health.iter().position(|h| *h != Health::Online) {
        return Err(CliError(format!(
            "volume {name}: slot {slot} is {:?}; import takes every member, in sync (give the \
             missing one, or let the volume rebuild first)",
            a.health[slot]
        )));
    }
    if a.label.state != VolumeState::Clean {
        return Err(CliError(format!(
            "volume {name} is {}: serve it and stop it cleanly first",
            a.label.state.name()
        )));
    }
    if a.label.reshape.is_some() || a.old_geometry.is_some() {
        return Err(CliError(format!(
            "volume {name} is being reshaped: let the reshape finish first"
        )));
    }
    Ok(())
}

/// The volume's label with every member offset lowered by the shift, as
/// the subdisk from 1 MiB sees it, and named as the pool names the
/// volume (its export's name); refused when the room is not there.
fn moved_label(a: &Assembly, volume_name: &str) -> Result<Label> {
    let l = &a.label;
    let bitmap = bitmap_bytes(a)?;
    if INTENT_OFFSET_BYTES + bitmap > SHIFT_BYTES {
        return Err(CliError(format!(
            "volume {}: its bitmap of {} would overlap its own new place; import takes \
             bitmaps up to 1020 KiB",
            l.name,
            format_size(bitmap)
        )));
    }
    let room_needed = SHIFT_BYTES + INTENT_OFFSET_BYTES + bitmap;
    let mut first_area = l.data_offset_bytes;
    if let Some(c) = &l.checksums {
        first_area = first_area.min(c.area_offset_bytes);
    }
    if let Some(p) = &l.ppl {
        first_area = first_area.min(p.offset_bytes);
    }
    if first_area < room_needed {
        return Err(CliError(format!(
            "volume {}: its members keep {} before their data, and import needs {} (the 1 MiB \
             pool area, then the label and bitmap moved there); members of 1 GiB and more have \
             it, smaller ones when made with `platter create --reserve 2M`",
            l.name,
            format_size(first_area),
            format_size(room_needed)
        )));
    }
    let mut m = l.clone();
    m.name = volume_name.to_string();
    m.data_offset_bytes -= SHIFT_BYTES;
    if let Some(c) = &mut m.checksums {
        c.area_offset_bytes -= SHIFT_BYTES;
    }
    if let Some(p) = &mut m.ppl {
        p.offset_bytes -= SHIFT_BYTES;
    }
    m.validate()
        .map_err(|e| CliError(format!("volume {}: the moved label: {e}", l.name)))?;
    Ok(m)
}

/// A moved label back in the member's terms.
fn unmoved(l: &Label) -> Label {
    let mut m = l.clone();
    m.data_offset_bytes += SHIFT_BYTES;
    if let Some(c) = &mut m.checksums {
        c.area_offset_bytes += SHIFT_BYTES;
    }
    if let Some(p) = &mut m.ppl {
        p.offset_bytes += SHIFT_BYTES;
    }
    m
}

/// Bytes of the bitmap after the label (0 without one).
fn bitmap_bytes(a: &Assembly) -> Result<u64> {
    let layout = IntentLayout::new(&a.geometry, a.label.intent_region_stripes)
        .map_err(|e| CliError(format!("volume {}: {e}", a.label.name)))?;
    Ok(layout.map(|l| l.area_bytes()).unwrap_or(0))
}

/// The input index of the device in each slot.
fn slot_order(a: &Assembly) -> Vec<usize> {
    a.slot_device
        .iter()
        .map(|d| d.expect("every slot online"))
        .collect()
}

/// The configuration a drive already imported holds, when one does.
fn already_imported(
    devices: &[Arc<dyn Member>],
    seen: &[Seen],
    pool_name: &str,
) -> Result<Option<Pool>> {
    for (m, s) in devices.iter().zip(seen) {
        if s.stage != Stage::Imported {
            continue;
        }
        let slots = drives::read_slots(m.as_ref()).map_err(CliError)?;
        let (_, _, p) = slots.newest().expect("an imported drive has a slot");
        if p.name == pool_name && p.generation == 1 && p.volumes.len() == 1 {
            return Ok(Some(p.clone()));
        }
        return Err(CliError(format!(
            "{}: pool {pool_name} there has changed since its import (generation {}); it is \
             no longer an import to finish",
            m.describe(),
            p.generation
        )));
    }
    Ok(None)
}

fn turned(u: &[u8; 16]) -> [u8; 16] {
    u.map(|b| b ^ UUID_TURN)
}

/// The pool of one volume the labels describe.
fn pool_of(
    pool_name: &str,
    volume_name: Option<&str>,
    a: &Assembly,
    devices: &[Arc<dyn Member>],
    by_slot: &[usize],
) -> Result<Pool> {
    let l = &a.label;
    let volume = volume_name.unwrap_or(&l.name).to_string();
    check_name("volume", &volume).map_err(|e| CliError(format!("{e}; name it with --volume")))?;
    let mut drives = Vec::new();
    let mut subdisks = Vec::new();
    for (slot, &i) in by_slot.iter().enumerate() {
        let m = &devices[i];
        let name = format!("d{slot}");
        drives.push(Drive {
            name: name.clone(),
            uuid: turned(&l.slots[slot].member_uuid),
            size_bytes: m.size_bytes(),
            device: m.describe().to_string(),
            state: platter_core::pool::DriveState::Up,
        });
        subdisks.push(Subdisk {
            drive: name,
            offset_bytes: SHIFT_BYTES,
            len_bytes: (m.size_bytes() - SHIFT_BYTES) / 512 * 512,
        });
    }
    let parity = matches!(l.level, Level::Raid5 | Level::Raid6);
    Ok(Pool {
        name: pool_name.to_string(),
        uuid: turned(&l.volume_uuid),
        generation: 1,
        drives,
        volumes: vec![PoolVolume {
            name: volume,
            size_bytes: None,
            plexes: vec![Plex {
                org: l.level,
                interleave_bytes: l.interleave_bytes,
                parity_layout: if parity {
                    l.parity_layout
                } else {
                    ParityLayout::DEFAULT
                },
                copies: l.copies,
                subdisks,
            }],
        }],
        moves: Vec::new(),
        detached: Vec::new(),
        converts: Vec::new(),
        copies: Vec::new(),
    })
}

/// Copies the bitmap and writes the moved label, then flushes: the old
/// label at byte 0 still rules until the pool area is written.
fn move_label(m: &dyn Member, moved: &Label, bitmap_bytes: u64) -> Result<()> {
    assert!(
        INTENT_OFFSET_BYTES + bitmap_bytes <= SHIFT_BYTES,
        "the room check keeps the bitmap's old and new places apart"
    );
    if bitmap_bytes > 0 {
        let mut bitmap = vec![0u8; bitmap_bytes as usize];
        m.read_at(INTENT_OFFSET_BYTES, &mut bitmap)?;
        m.write_at(SHIFT_BYTES + INTENT_OFFSET_BYTES, &bitmap)?;
        // Before the label that points at it is written.
        m.flush()?;
    }
    m.write_at(SHIFT_BYTES, &moved.encode())?;
    m.flush()?;
    Ok(())
}

/// The drive's pool area: slot 1 cleared first when it holds an old
/// pool's slot (which could outrank this one), then slot 0 over the old
/// label.
fn write_area(m: &dyn Member, pool: &Pool, d: usize) -> Result<()> {
    let slots = drives::read_slots(m).map_err(CliError)?;
    if slots.has_pool_slot() {
        m.write_at(area::slot_offset_bytes(1), &[0u8; HEADER_BYTES])?;
    }
    drives::write_slot(m, pool, d, 0)
}

#[cfg(test)]
mod tests;
