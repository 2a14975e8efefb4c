//! `platter subdisk move` (vinum's `move`, LVM's `pvmove`): a subdisk
//! copied to free space on another drive, then its volume's configuration
//! points at the copy.
//!
//! Order on the devices, so that a crash at any step leaves the old place
//! or the new one authoritative, never a mix: one configuration records
//! the move (`move sd ...`, copied 0); the copy runs front to back, every
//! write of the volume landing on both places meanwhile
//! ([`MovingMember`]); every [`copy::checkpoint_bytes`] the new place is flushed
//! and a configuration records how far it came; once all is copied both
//! places are flushed and one configuration puts the subdisk at its new
//! place and drops the move. A move taken up again (by this command or by
//! `serve --pool`) first compares what lies below its checkpoint and
//! copies again what differs: a crash can leave a write on one place and
//! not the other, which no checkpoint saw. Then the old place's label is
//! zeroed, so that nothing takes the stale copy for a member.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use clap::Args;
use platter_core::label::LABEL_BYTES;
use platter_core::pool::alloc::{free_extents, ALIGN_BYTES};
use platter_core::pool::{move_shares_a_drive, DriveState, Pool, PoolVolume, Subdisk, SubdiskMove};
use platter_io::moving::MovingMember;
use platter_io::Member;
use serde_json::{json, Value};

use super::drives::{open_pool, plex_window, OpenPool};
use super::make::writable;
use super::{ControlArgs, DeviceArgs};
use crate::error::{CliError, Result};
use crate::out::outln;

mod copy;
pub use copy::{copy_from, copy_move, Checkpoint, Copy};

#[derive(Args)]
pub struct SubdiskMoveArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    /// The subdisk, as `list` names it: VOLUME.pN.sM (db.p0.s1).
    #[arg(value_name = "SUBDISK")]
    subdisk: String,
    /// Where it goes: a drive of the pool, and optionally the byte offset
    /// there (d4 or d4:64M; default: the lowest free extent that fits).
    /// A drive that holds another subdisk of its plex, or a subdisk of
    /// another plex of its volume, is refused. Leave it out to take up a
    /// move a crash or a stop cut short.
    #[arg(long, value_name = "DRIVE[:OFFSET]")]
    to: Option<String>,
    #[command(flatten)]
    copy: CopyArgs,
}

/// How a move's copy runs, and where: what `subdisk move` and `pool
/// evacuate` share.
#[derive(Args)]
pub struct CopyArgs {
    /// The most bytes a second each copy moves (as `serve --rebuild-rate`;
    /// unlimited: no limit), so that clients keep a share of the drives.
    #[arg(long, default_value = platter_server::defaults::REBUILD_RATE,
          value_parser = crate::control::parse_rebuild_rate)]
    rate: u64,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

pub fn subdisk_move(args: SubdiskMoveArgs) -> Result<()> {
    if let Some(control) = &args.copy.control.control {
        let req = json!({
            "cmd": "subdisk-move",
            "pool": args.pool,
            "subdisk": args.subdisk,
            "to": args.to,
            "rate": args.copy.rate,
        });
        let done = crate::control::ask(control, req)?;
        say_begun(&args.subdisk, &done);
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.copy.devices.devices, writable())?;
    let m = plan_or_resume(&open, &args.subdisk, args.to.as_deref())?;
    let moved = move_in(&mut open, m, args.copy.rate, &AtomicBool::new(false))?;
    outln!(
        "{}: on {} at {} now (was on {} at {}; generation {})",
        args.subdisk,
        moved.to.drive,
        moved.to.offset_bytes,
        moved.from.drive,
        moved.from.offset_bytes,
        open.pool().generation
    );
    Ok(())
}

fn say_begun(subdisk: &str, done: &Value) {
    outln!(
        "{subdisk}: moving to {} at {} through the pool's server, from {} copied; `platter \
         list --control` follows it",
        done["drive"].as_str().unwrap_or("?"),
        done["offset_bytes"],
        done["copied_bytes"]
    );
}

/// The move of `name` the pool records, or a new one to `to`.
pub fn plan_or_resume(open: &OpenPool, name: &str, to: Option<&str>) -> Result<SubdiskMove> {
    let pool = open.pool();
    let (volume, plex, slot) = parse_subdisk_name(pool, name)?;
    if let Some(m) = pool.move_of(&volume, plex, slot) {
        let same =
            to.is_none_or(|t| t == m.drive || t == format!("{}:{}", m.drive, m.offset_bytes));
        if !same {
            return Err(CliError(format!(
                "{name} is already moving to {} at {}: run `subdisk move` without --to to \
                 finish that move first",
                m.drive, m.offset_bytes
            )));
        }
        return Ok(m.clone());
    }
    let to = to.ok_or_else(|| {
        CliError(format!(
            "{name} is not moving: say where it goes with --to DRIVE[:OFFSET]"
        ))
    })?;
    let m = plan_move(pool, &volume, plex, slot, to)?;
    for d in [&pool.moving(&m).expect("planned").drive, &m.drive] {
        if !open.present_names().contains(d) {
            return Err(CliError(format!(
                "drive {d} of pool {} is not present",
                pool.name
            )));
        }
    }
    Ok(m)
}

/// `v.pN.sM` as (volume, plex, slot) of a subdisk `pool` has.
pub fn parse_subdisk_name(pool: &Pool, name: &str) -> Result<(String, usize, usize)> {
    let bad = || {
        CliError(format!(
            "pool {} has no subdisk {name} (`platter list` names them VOLUME.pN.sM)",
            pool.name
        ))
    };
    let (plex_name, slot) = name.rsplit_once(".s").ok_or_else(bad)?;
    let slot: usize = slot.parse().map_err(|_| bad())?;
    let (volume, plex) = platter_core::pool::split_plex_name(plex_name).ok_or_else(bad)?;
    let exists = pool
        .volume(volume)
        .and_then(|v| v.plexes.get(plex))
        .is_some_and(|p| slot < p.subdisks.len());
    if !exists {
        return Err(bad());
    }
    Ok((volume.to_string(), plex, slot))
}

/// A new move of subdisk (volume, plex, slot) to `to` (DRIVE[:OFFSET]),
/// checked against every rule of the pool; nothing written.
pub fn plan_move(
    pool: &Pool,
    volume: &str,
    plex: usize,
    slot: usize,
    to: &str,
) -> Result<SubdiskMove> {
    let v = pool.volume(volume).expect("parsed");
    let sd = &v.plexes[plex].subdisks[slot];
    let name = v.subdisk_name(plex, slot);
    let (drive, offset) = match to.split_once(':') {
        Some((d, o)) => (
            d,
            Some(
                platter_core::units::parse_size(o)
                    .map_err(|e| CliError(format!("--to {to}: the offset: {e}")))?,
            ),
        ),
        None => (to, None),
    };
    if pool.drive(drive).is_none() {
        return Err(CliError(format!("pool {} has no drive {drive}", pool.name)));
    }
    let mut m = SubdiskMove {
        volume: volume.to_string(),
        plex,
        slot,
        drive: drive.to_string(),
        offset_bytes: 0,
        copied_bytes: 0,
    };
    if let Some(why) = move_shares_a_drive(v, &m) {
        return Err(CliError(format!(
            "{name} cannot move to drive {drive}: {why}, and one drive's loss would cost the \
             volume what its layout does not cover"
        )));
    }
    m.offset_bytes = match offset {
        Some(o) => o,
        None => room_on(pool, drive, sd.len_bytes).ok_or_else(|| {
            let largest = free_extents(pool, drive)
                .iter()
                .map(|e| e.1)
                .max()
                .unwrap_or(0);
            CliError(format!(
                "{name} cannot move to drive {drive}: it needs {} bytes free in one extent, the \
                 largest there is {largest}",
                sd.len_bytes
            ))
        })?,
    };
    let mut planned = pool.clone();
    planned.moves.push(m.clone());
    planned
        .check()
        .map_err(|e| CliError(format!("{name} cannot move to {to}: {e}")))?;
    Ok(m)
}

/// The lowest free offset of `drive` where `len_bytes` fit.
fn room_on(pool: &Pool, drive: &str, len_bytes: u64) -> Option<u64> {
    free_extents(pool, drive)
        .into_iter()
        .find(|&(_, len)| len >= len_bytes.next_multiple_of(ALIGN_BYTES))
        .map(|(offset, _)| offset)
}

#[derive(Args)]
pub struct EvacuateArgs {
    #[arg(value_name = "POOL")]
    pool: String,
    /// The drive to empty (its name in the pool: d1).
    #[arg(value_name = "DRIVE")]
    drive: String,
    #[command(flatten)]
    copy: CopyArgs,
}

pub fn evacuate(args: EvacuateArgs) -> Result<()> {
    if let Some(control) = &args.copy.control.control {
        let req = json!({
            "cmd": "pool-evacuate",
            "pool": args.pool,
            "drive": args.drive,
            "rate": args.copy.rate,
        });
        let done = crate::control::ask(control, req)?;
        for m in done["moves"].as_array().into_iter().flatten() {
            say_begun(m["subdisk"].as_str().unwrap_or("?"), m);
        }
        return Ok(());
    }
    let mut open = open_pool(Some(&args.pool), &args.copy.devices.devices, writable())?;
    let moves = plan_evacuation(&open, &args.drive)?;
    record_moves(&mut open, &moves, Some(&args.drive))?;
    // With any a crash left recorded before.
    let pool = open.pool().clone();
    let off: Vec<SubdiskMove> = pool
        .moves
        .iter()
        .filter(|m| pool.moving(m).is_some_and(|sd| sd.drive == args.drive))
        .cloned()
        .collect();
    for m in off {
        let name = m.subdisk_name();
        let moved = move_in(&mut open, m, args.copy.rate, &AtomicBool::new(false))?;
        outln!(
            "{name}: on {} at {} now",
            moved.to.drive,
            moved.to.offset_bytes
        );
    }
    outln!(
        "drive {} holds no subdisk now (generation {}); `pool remove-drive` takes it out",
        args.drive,
        open.pool().generation
    );
    Ok(())
}

/// A move for every subdisk on `drive` (those moving already keep their
/// move), each to the roomiest drive present and up where it keeps its
/// plex's and volume's rules; refused, naming the subdisk, when one has
/// nowhere to go. Writes nothing.
pub fn plan_evacuation(open: &OpenPool, drive: &str) -> Result<Vec<SubdiskMove>> {
    let mut planned = open.pool().clone();
    if planned.drive(drive).is_none() {
        return Err(CliError(format!(
            "pool {} has no drive {drive}",
            planned.name
        )));
    }
    let present = open.present_names();
    let mut out = Vec::new();
    for v in open.pool().volumes.clone() {
        for (p, plex) in v.plexes.iter().enumerate() {
            for (s, sd) in plex.subdisks.iter().enumerate() {
                if sd.drive != drive || planned.move_of(&v.name, p, s).is_some() {
                    continue;
                }
                let m = place_off(&planned, &present, (&v.name, p, s), drive)?;
                planned.moves.push(m.clone());
                out.push(m);
            }
        }
    }
    Ok(out)
}

/// A move of subdisk (volume, plex, slot) off `leaving`, to the drive
/// with the most free space that takes it.
fn place_off(
    pool: &Pool,
    present: &[String],
    (volume, plex, slot): (&str, usize, usize),
    leaving: &str,
) -> Result<SubdiskMove> {
    let free = platter_core::pool::alloc::free_by_drive(pool);
    let mut drives: Vec<&String> = present.iter().filter(|d| *d != leaving).collect();
    drives.sort_by_key(|d| std::cmp::Reverse(free.get(*d).copied().unwrap_or(0)));
    let v = pool.volume(volume).expect("walked");
    let name = v.subdisk_name(plex, slot);
    let mut why = Vec::new();
    for d in drives {
        match plan_move(pool, volume, plex, slot, d) {
            Ok(m) => return Ok(m),
            Err(e) => why.push(e.0.replace(&format!("{name} cannot move to "), "")),
        }
    }
    Err(CliError(format!(
        "drive {leaving} cannot be emptied: {name} has nowhere to go ({}); nothing was written",
        if why.is_empty() {
            "no other drive is present".to_string()
        } else {
            why.join("; ")
        }
    )))
}

/// One configuration records every move of `moves`, and marks drive
/// `leaving` (an evacuation's, when up) as being emptied: nothing new is
/// placed on it from then on.
pub fn record_moves(
    open: &mut OpenPool,
    moves: &[SubdiskMove],
    leaving: Option<&str>,
) -> Result<()> {
    let mut pool = open.pool().clone();
    pool.moves.extend(moves.iter().cloned());
    let mut marked = false;
    if let Some(d) = pool
        .drives
        .iter_mut()
        .find(|d| Some(d.name.as_str()) == leaving)
    {
        if d.state == DriveState::Up {
            d.state = DriveState::Leaving;
            marked = true;
        }
    }
    if moves.is_empty() && !marked {
        return Ok(());
    }
    open.write(pool)
}

/// Where a finished move took a subdisk from and to.
pub struct Moved {
    pub from: Subdisk,
    pub to: Subdisk,
}

/// Runs move `m` on the open pool to its end: recorded (if new), copied
/// with checkpoints, finished. Offline: nothing else writes the volume.
pub fn move_in(open: &mut OpenPool, m: SubdiskMove, rate: u64, stop: &AtomicBool) -> Result<Moved> {
    let resumed = open.pool().moves.contains(&m);
    if !resumed {
        record_move(open, &m)?;
    }
    let member = moving_member(open, &m)?;
    let copy = copy_move(&m, &member, resumed, rate, stop, &mut |at| {
        record_copied(open, &m, at)
    })?;
    match copy {
        Copy::Done => finish_move(open, &m, &member),
        Copy::Stopped(at) => Err(CliError(format!(
            "{}: the move stopped at {at} bytes; run it again to go on",
            m.subdisk_name()
        ))),
        Copy::GivenUp(why) => Err(give_up(open, &m, &why)),
        Copy::SourceFailed(why) => Err(CliError(format!(
            "{}: the move stopped, its old place failed a read ({why}); through the pool's \
             server a redundant volume rebuilds the subdisk at its new place instead (`subdisk \
             move --control`), or `pool heal` it once the volume has failed it",
            m.subdisk_name()
        ))),
    }
}

/// The old place failed: one configuration puts the subdisk at its new
/// place (its label area zeroed first, so that a start before the
/// rebuild takes it for a blank spare) and drops the move, for the array
/// to rebuild it there from its redundancy, as a heal does.
pub fn rebuild_at_new_place(
    open: &mut OpenPool,
    m: &SubdiskMove,
    member: &MovingMember,
) -> Result<()> {
    still_recorded(open, m)?;
    member.to().write_at(0, &[0u8; LABEL_BYTES])?;
    member.to().flush()?;
    let mut pool = open.pool().clone();
    let len_bytes = pool.moving(m).expect("recorded").len_bytes;
    pool.moves.retain(|x| x.subdisk_name() != m.subdisk_name());
    let v = pool
        .volumes
        .iter_mut()
        .find(|v| v.name == m.volume)
        .expect("recorded");
    v.plexes[m.plex].subdisks[m.slot] = m.target(len_bytes);
    open.write(pool)
}

/// One configuration records move `m` (copied 0).
pub fn record_move(open: &mut OpenPool, m: &SubdiskMove) -> Result<()> {
    record_moves(open, std::slice::from_ref(m), None)
}

/// The subdisk of `m` over its old place and its new one, as open.
pub fn moving_member(open: &OpenPool, m: &SubdiskMove) -> Result<Arc<MovingMember>> {
    moving_member_with(open, m, &std::collections::HashMap::new())
}

/// [`moving_member`], whose copy reaches each place behind the latency
/// `delays` names for its drive (`serve --inject`: the server's I/O layer
/// delays the volume's own I/O, the copy's goes around it).
pub fn moving_member_with(
    open: &OpenPool,
    m: &SubdiskMove,
    delays: &std::collections::HashMap<String, platter_io::aio::Delay>,
) -> Result<Arc<MovingMember>> {
    let pool = open.pool();
    let v = pool.volume(&m.volume).expect("checked pool");
    let sd = pool.moving(m).expect("checked pool");
    let drive = |name: &str| -> Result<Arc<dyn Member>> {
        let d = super::make::drive_index(open, name)?;
        open.drive(d)
            .ok_or_else(|| CliError(format!("drive {name} of pool {} is not present", pool.name)))
    };
    let from: Arc<dyn Member> = plex_window(pool, v, m.plex, m.slot, &drive(&sd.drive)?)?;
    let to: Arc<dyn Member> = plex_window(
        pool,
        &moved_volume(pool, m),
        m.plex,
        m.slot,
        &drive(&m.drive)?,
    )?;
    let delayed = |place: &Arc<dyn Member>, drive: &str| -> Arc<dyn Member> {
        match delays.get(drive) {
            Some(d) => Arc::new(platter_io::FaultyMember::new(
                Arc::clone(place),
                d.spec().clone(),
            )),
            None => Arc::clone(place),
        }
    };
    let (copy_from, copy_to) = (delayed(&from, &sd.drive), delayed(&to, &m.drive));
    Ok(Arc::new(
        MovingMember::new(from, to).with_copy_paths(copy_from, copy_to),
    ))
}

/// `m`'s volume with the subdisk at its new place.
pub fn moved_volume(pool: &Pool, m: &SubdiskMove) -> PoolVolume {
    let mut v = pool.volume(&m.volume).expect("checked pool").clone();
    let len_bytes = v.plexes[m.plex].subdisks[m.slot].len_bytes;
    v.plexes[m.plex].subdisks[m.slot] = m.target(len_bytes);
    v
}

/// Refused when the pool no longer records move `m` (a heal, a
/// `replace-drive` or a removal ended it meanwhile): its copy must not
/// decide where the subdisk is.
fn still_recorded(open: &OpenPool, m: &SubdiskMove) -> Result<()> {
    let name = m.subdisk_name();
    let recorded = open.pool().moves.iter().any(|x| {
        x.subdisk_name() == name && x.drive == m.drive && x.offset_bytes == m.offset_bytes
    });
    if recorded {
        Ok(())
    } else {
        Err(CliError(format!(
            "the move of {name} to {} is no longer recorded (a heal, a drive replaced or the \
             volume removed ended it)",
            m.drive
        )))
    }
}

/// The configuration's checkpoint of `m`, raised to `copied_bytes`.
pub fn record_copied(open: &mut OpenPool, m: &SubdiskMove, copied_bytes: u64) -> Result<()> {
    still_recorded(open, m)?;
    let mut pool = open.pool().clone();
    let rec = pool
        .moves
        .iter_mut()
        .find(|x| x.subdisk_name() == m.subdisk_name())
        .expect("still recorded");
    rec.copied_bytes = rec.copied_bytes.max(copied_bytes);
    open.write(pool)
}

/// The new place failed: the move is dropped, the subdisk stays.
pub fn give_up(open: &mut OpenPool, m: &SubdiskMove, why: &str) -> CliError {
    if let Err(e) = still_recorded(open, m) {
        return e;
    }
    let mut pool = open.pool().clone();
    pool.moves.retain(|x| x.subdisk_name() != m.subdisk_name());
    let dropped = open.write(pool);
    CliError(format!(
        "{}: the move to {} was given up, its new place failed ({why}); the subdisk stays \
         where it was{}",
        m.subdisk_name(),
        m.drive,
        dropped.map_or_else(
            |e| format!(" (and the record of the move stays: {e})"),
            |()| String::new()
        )
    ))
}

/// Both places flushed, then one configuration puts the subdisk at its
/// new place; from then on `member` uses only that, and the old place's
/// label is zeroed.
pub fn finish_move(open: &mut OpenPool, m: &SubdiskMove, member: &MovingMember) -> Result<Moved> {
    still_recorded(open, m)?;
    member.from().flush()?;
    member.flush_new_place();
    if let Some(why) = member.given_up() {
        return Err(give_up(open, m, &why));
    }
    let mut pool = open.pool().clone();
    let from = pool.moving(m).expect("recorded").clone();
    let to = m.target(from.len_bytes);
    pool.moves.retain(|x| x.subdisk_name() != m.subdisk_name());
    let v = pool
        .volumes
        .iter_mut()
        .find(|v| v.name == m.volume)
        .expect("recorded");
    v.plexes[m.plex].subdisks[m.slot] = to.clone();
    open.write(pool)?;
    member.switch_to_new();
    // The old place is free space now: its stale label must not be taken
    // for the member's (a failure here costs nothing but that).
    let zeroed = member
        .from()
        .write_at(0, &[0u8; LABEL_BYTES])
        .and_then(|()| member.from().flush());
    if let Err(e) = zeroed {
        tracing::warn!(subdisk = %m.subdisk_name(), error = %e, "the moved subdisk's old place kept its label");
    }
    Ok(Moved { from, to })
}

#[cfg(test)]
mod tests;
