//! `platter volume extend`: a volume grown in place, each subdisk into
//! the free space that follows it on its drive (LVM's `lvextend` where
//! the extents are contiguous; vinum grows a concat plex the same way).
//!
//! The layouts that keep every byte where it is when members grow at
//! their ends grow this way: a stripe, mirror, raid10 (near), raid5 and
//! raid6 stripe by stripe index, so larger members only add stripes after
//! the last; a concat maps by its members' sizes, so only its last
//! subdisk grows. Order, so that a crash at any write loses nothing:
//! 1. the growth (each subdisk's new data bytes) and the bitmap are
//!    zeroed and flushed, while the configuration still gives that space
//!    out to nobody: zeros on every member are a stripe whose parity and
//!    copies agree, so the new stripes need no resync;
//! 2. the configuration (the next generation) gives each subdisk its new
//!    length and records the volume's new size;
//! 3. each subdisk's label is rewritten with its new data size and the
//!    volume's. A crash between labels leaves some saying the old size:
//!    [`bring_labels_up`], run by `volume extend` and by `serve --pool`
//!    before the volume is assembled, rewrites them from the pool's
//!    record, the same way every time.

use std::sync::Arc;

use clap::Args;
use platter_core::assemble::Assembly;
use platter_core::geometry::Geometry;
use platter_core::intent::{IntentLayout, INTENT_OFFSET_BYTES};
use platter_core::label::{Label, SlotEntry, SlotState, VolumeState, LABEL_BYTES};
use platter_core::pool::alloc::{place_spread, ALIGN_BYTES};
use platter_core::pool::{Pool, PoolVolume};
use platter_core::units::{format_size, parse_size, SECTOR_BYTES};
use platter_core::volume::Health;
use platter_core::Level;
use platter_io::assembly::assemble_devices;
use platter_io::Member;

use super::drives::{self, open_pool, OpenPool};
use super::{ControlArgs, DeviceArgs};
use crate::error::{CliError, Result};
use crate::out::outln;
use platter_server::manage::pool::spec_of;

#[derive(Args)]
pub struct VolumeExtendArgs {
    /// The pool the volume is in.
    #[arg(value_name = "POOL")]
    pool: String,
    /// The volume to make larger.
    #[arg(value_name = "NAME")]
    name: String,
    /// The volume's new size (at least; whole interleaves of every
    /// subdisk). Larger than today's: a volume does not shrink.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    size: u64,
    /// A striped or redundant volume with no room after its subdisks:
    /// grow it by new subdisks, as long as its others, on drives that hold
    /// none of it, and reshape it onto them while it serves (md's `--grow
    /// --raid-devices`; every byte moves, at the rebuild rate). Through
    /// the pool's server only (--control); clients see the new size once
    /// the reshape is done.
    #[arg(long, requires = "control")]
    add_subdisks: bool,
    #[command(flatten)]
    devices: DeviceArgs,
    #[command(flatten)]
    control: ControlArgs,
}

pub fn volume_extend(args: VolumeExtendArgs) -> Result<()> {
    if let Some(control) = &args.control.control {
        let req = serde_json::json!({
            "cmd": "volume-extend",
            "pool": args.pool,
            "name": args.name,
            "size_bytes": args.size,
            "add_subdisks": args.add_subdisks,
        });
        let done = crate::control::ask(control, req)?;
        if let Some(r) = done.get("reshape") {
            outln!(
                "volume {} of pool {}: {} subdisks added, reshaping from {} to {} members \
                 ({} to move); `platter status --volume {} --control ...` shows it; clients \
                 see the new size when it is done and they next connect",
                args.name,
                args.pool,
                done["subdisks_added"],
                r["from"]["members"],
                r["to"]["members"],
                format_size(r["moves_bytes"].as_u64().unwrap_or(0)),
                args.name
            );
            return Ok(());
        }
        let size = |k: &str| format_size(done[k].as_u64().unwrap_or(0));
        outln!(
            "volume {} of pool {}: {} -> {}; clients see the new size when they next connect",
            args.name,
            args.pool,
            size("old_size_bytes"),
            size("size_bytes")
        );
        return Ok(());
    }
    let mut open = open_pool(
        Some(&args.pool),
        &args.devices.devices,
        super::make::writable(),
    )?;
    let Some(v) = open.pool().volume(&args.name).cloned() else {
        return Err(CliError(format!(
            "pool {} has no volume {}",
            args.pool, args.name
        )));
    };
    let old_bytes = extend_volume(&mut open, &v, args.size)?;
    let v = open.pool().volume(&args.name).expect("still there");
    outln!(
        "volume {} of pool {}: {} -> {} (generation {}); clients see the new size when they \
         next connect",
        v.name,
        args.pool,
        format_size(old_bytes),
        format_size(v.size_bytes.expect("recorded")),
        open.pool().generation
    );
    Ok(())
}

/// Grows `v` to at least `size_bytes`; returns its size before.
pub fn extend_volume(open: &mut OpenPool, v: &PoolVolume, size_bytes: u64) -> Result<u64> {
    open.pool()
        .not_moving(&v.name, "extend it")
        .map_err(CliError)?;
    open.pool()
        .not_converting(&v.name, "extend it")
        .map_err(CliError)?;
    if v.has_plexes() {
        return plexes::extend_plexes(open, v, size_bytes);
    }
    let members = open.subdisks(v)?;
    if members.len() != v.plex().subdisks.len() {
        return Err(CliError(format!(
            "volume {}: a drive of its subdisks is missing; it is extended with every one \
             present",
            v.name
        )));
    }
    bring_labels_up(open.pool(), v, &members)?;
    let a = assemble_devices(members.clone())
        .map_err(|e| CliError(format!("volume {}: {e}", v.name)))?
        .assembly;
    extendable(v, &a)?;
    let old_bytes = a.label.volume_size_bytes;
    if size_bytes <= old_bytes {
        return Err(CliError(format!(
            "volume {} is {} already; extend makes a volume larger (it does not shrink)",
            v.name,
            format_size(old_bytes)
        )));
    }
    let grown = grow(open, v, &a.label, size_bytes)?;
    bring_labels_up(open.pool(), &grown.volume, &grown.members)?;
    Ok(old_bytes)
}

/// A volume's growth made, the labels excepted: its subdisks' new lengths
/// (`volume`), the label that says them, and the wide subdisks.
pub struct Grown {
    pub volume: PoolVolume,
    pub label: Label,
    pub members: Vec<Arc<dyn Member>>,
}

/// Steps 1 and 2 of an extend of `v`, whose labels say `label`, to at
/// least `size_bytes`: the growth and the bitmap zeroed, then the
/// configuration written. Step 3, the labels, is the caller's (offline
/// [`bring_labels_up`], a server its own label writes).
pub fn grow(open: &mut OpenPool, v: &PoolVolume, label: &Label, size_bytes: u64) -> Result<Grown> {
    open.pool()
        .not_moving(&v.name, "extend it")
        .map_err(CliError)?;
    open.pool()
        .not_converting(&v.name, "extend it")
        .map_err(CliError)?;
    let lens = match new_lengths(open.pool(), v, label, size_bytes) {
        Ok(lens) => lens,
        // A concat without room after its last subdisk takes another.
        Err(_) if v.plex().org == Level::Concat => {
            return add_subdisk(open, v, label, size_bytes);
        }
        Err(e) => return Err(e),
    };
    let grown = grown_label(v, label, &lens)?;
    let mut pv = v.clone();
    for (sd, len) in pv.plexes[0].subdisks.iter_mut().zip(&lens) {
        sd.len_bytes = *len;
    }
    pv.size_bytes = Some(grown.volume_size_bytes);
    let mut pool = open.pool().clone();
    for x in pool.volumes.iter_mut().filter(|x| x.name == v.name) {
        *x = pv.clone();
    }
    pool.check().map_err(CliError)?;
    let wide = open.subdisks(&pv)?;
    zero_growth(&wide, label, &grown)?;
    open.write(pool)?;
    Ok(Grown {
        volume: pv,
        label: grown,
        members: wide,
    })
}

/// `volume extend --add-subdisks`'s writes: `count` new subdisks for
/// `v`'s plex, as long as its longest, on drives up that hold none of it
/// (the roomiest first), their label areas zeroed, then the configuration
/// naming them as the plex's next slots (the labels say the size from
/// then on: the reshape onto them writes them).
pub fn add_plex_subdisks(open: &mut OpenPool, v: &PoolVolume, count: u32) -> Result<PoolVolume> {
    open.pool()
        .not_moving(&v.name, "extend it")
        .map_err(CliError)?;
    open.pool()
        .not_converting(&v.name, "extend it")
        .map_err(CliError)?;
    let plex = v.plex();
    let len = plex
        .subdisks
        .iter()
        .map(|sd| sd.len_bytes)
        .max()
        .unwrap_or(0);
    let candidates: Vec<String> = open
        .placeable_names()
        .into_iter()
        .filter(|d| !plex.subdisks.iter().any(|sd| sd.drive == *d))
        .collect();
    let placed = place_spread(open.pool(), &candidates, count, len).map_err(|e| {
        CliError(format!(
            "volume {}: {count} new subdisks on drives that hold none of it: {e}",
            v.name
        ))
    })?;
    let mut grown = v.clone();
    grown.plexes[0].subdisks.extend(placed.iter().cloned());
    grown.size_bytes = None;
    let mut pool = open.pool().clone();
    for x in pool.volumes.iter_mut().filter(|x| x.name == v.name) {
        *x = grown.clone();
    }
    pool.check().map_err(CliError)?;
    for sd in &placed {
        let d = super::make::drive_index(open, &sd.drive)?;
        let m = open.drives[d].as_ref().expect("placed on a drive present");
        m.write_at(sd.offset_bytes, &[0u8; LABEL_BYTES])?;
        m.flush()?;
    }
    open.write(pool)?;
    Ok(grown)
}

/// The last `count` subdisks of `v` out of the configuration again: a
/// reshape onto them did not begin, or a crash came first (they are
/// blank and no label counts them).
pub fn drop_plex_subdisks(open: &mut OpenPool, v: &PoolVolume, count: usize) -> Result<PoolVolume> {
    let mut kept = v.clone();
    let n = kept.plexes[0].subdisks.len();
    kept.plexes[0].subdisks.truncate(n.saturating_sub(count));
    let mut pool = open.pool().clone();
    for x in pool.volumes.iter_mut().filter(|x| x.name == v.name) {
        *x = kept.clone();
    }
    open.write(pool)?;
    Ok(kept)
}

/// A reshape onto new subdisks writes its label to the old members
/// first, then to the added ones (`Meta::begin_reshape`): a crash between
/// leaves the added subdisks blank while every other label counts them,
/// and a raid5 missing two would not assemble. Nothing has moved then
/// (the labels say position 0, and the move starts after every label is
/// written): the added subdisks hold nothing, and their labels are
/// written as the start would have. Returns how many.
pub fn finish_reshape_labels(v: &PoolVolume, members: &[Arc<dyn Member>]) -> Result<usize> {
    if members.len() != v.plex().subdisks.len() {
        return Ok(0);
    }
    let labels = drives::labels_of(members)?;
    let Some(newest) = drives::newest_label(&labels) else {
        return Ok(0);
    };
    let Some(r) = newest.reshape else {
        return Ok(0);
    };
    let old = r.old_member_count as usize;
    if r.position_bytes != 0
        || newest.member_count as usize != members.len()
        || old >= members.len()
    {
        return Ok(0);
    }
    let mut written = 0;
    for (slot, m) in members.iter().enumerate().skip(old) {
        if !drives::is_blank(m.as_ref())? {
            continue;
        }
        m.write_at(0, &newest.for_slot(slot as u32).encode())?;
        m.flush()?;
        written += 1;
    }
    Ok(written)
}

/// How many of `v`'s last subdisks were added for a reshape that never
/// began: blank, beyond the member count any of its labels says
/// (`members` in slot order, every subdisk present).
pub fn unbegun_subdisks(v: &PoolVolume, members: &[Arc<dyn Member>]) -> Result<usize> {
    if members.len() != v.plex().subdisks.len() || v.plex().org == Level::Concat {
        return Ok(0);
    }
    let labels = drives::labels_of(members)?;
    let Some(counted) = labels
        .iter()
        .flatten()
        .map(|l| l.member_count as usize)
        .max()
    else {
        return Ok(0);
    };
    if counted >= members.len() || labels[counted..].iter().any(Option::is_some) {
        return Ok(0);
    }
    Ok(members.len() - counted)
}

/// Steps 1 and 2 of an extend of concat `v` whose last subdisk has no
/// room after it: a new subdisk, its last member, wherever a drive has
/// room (the roomiest, at the lowest offset that fits), as vinum and LVM
/// grow a concat. Its bytes are zeroed and its label written (the volume
/// grown, at the others' event count) before the configuration gives it
/// out; until the other labels are brought up (step 3), the new label is
/// the one that says the volume's shape.
fn add_subdisk(
    open: &mut OpenPool,
    v: &PoolVolume,
    label: &Label,
    size_bytes: u64,
) -> Result<Grown> {
    let extra = (size_bytes - label.volume_size_bytes).next_multiple_of(v.plex().interleave_bytes);
    let len = label
        .data_offset_bytes
        .checked_add(extra)
        .ok_or_else(too_large)?
        .next_multiple_of(ALIGN_BYTES);
    let placeable = open.placeable_names();
    let placed = place_spread(open.pool(), &placeable, 1, len).map_err(|e| {
        CliError(format!(
            "volume {}: no room after its last subdisk, and {e}",
            v.name
        ))
    })?;
    let mut pv = v.clone();
    pv.plexes[0].subdisks.extend(placed);
    let grown = added_label(v, label, len)?;
    pv.size_bytes = Some(grown.volume_size_bytes);
    let mut pool = open.pool().clone();
    for x in pool.volumes.iter_mut().filter(|x| x.name == v.name) {
        *x = pv.clone();
    }
    pool.check().map_err(CliError)?;
    let wide = open.subdisks(&pv)?;
    assert_eq!(wide.len(), pv.plex().subdisks.len(), "every drive present");
    let new = wide.last().expect("the new subdisk");
    // Zeros, as create gives a new volume's space: then its label.
    new.trim(0, len)?;
    new.write_at(0, &grown.for_slot(grown.member_count - 1).encode())?;
    new.flush()?;
    open.write(pool)?;
    Ok(Grown {
        volume: pv,
        label: grown,
        members: wide,
    })
}

/// `label` with one more member, of `len` bytes of subdisk (all of it
/// after the data offset), at the end.
fn added_label(v: &PoolVolume, label: &Label, len: u64) -> Result<Label> {
    let mut g = label.clone();
    g.slots.push(SlotEntry {
        member_uuid: *uuid::Uuid::new_v4().as_bytes(),
        data_size_bytes: (len - label.data_offset_bytes) / SECTOR_BYTES * SECTOR_BYTES,
        state: SlotState::Active,
        left_at_events: 0,
    });
    g.member_count = u32::try_from(g.slots.len()).map_err(|_| too_large())?;
    finish_label(v, g)
}

/// A clean, whole volume of a layout that grows at its end.
fn extendable(v: &PoolVolume, a: &Assembly) -> Result<()> {
    let name = &v.name;
    if a.health.iter().any(|h| *h != Health::Online) {
        return Err(CliError(format!(
            "volume {name} is not whole: let it rebuild first"
        )));
    }
    if a.label.state != VolumeState::Clean {
        return Err(CliError(format!(
            "volume {name} is {}: serve it and stop it cleanly first (is it being served?)",
            a.label.state.name()
        )));
    }
    if a.label.reshape.is_some() {
        return Err(CliError(format!(
            "volume {name} is being reshaped: let the reshape finish first"
        )));
    }
    if a.label.checksums.is_some() {
        return Err(CliError(format!(
            "volume {name} keeps checksums, whose area is sized for its data: it cannot grow \
             in place"
        )));
    }
    Ok(())
}

/// Each subdisk's new length: room for the data `size_bytes` needs, in
/// whole MiBs, inside the free space after it on its drive.
fn new_lengths(pool: &Pool, v: &PoolVolume, l: &Label, size_bytes: u64) -> Result<Vec<u64>> {
    let plex = v.plex();
    let n = plex.subdisks.len() as u32;
    let mut data: Vec<u64> = l.slots.iter().map(|s| s.data_size_bytes).collect();
    if plex.org == Level::Concat {
        let extra = (size_bytes - l.volume_size_bytes).next_multiple_of(plex.interleave_bytes);
        let last = data.last_mut().expect("a plex has subdisks");
        *last = last.checked_add(extra).ok_or_else(too_large)?;
    } else {
        let want = super::make::data_per_subdisk(
            plex.org,
            n,
            plex.copies,
            plex.interleave_bytes,
            size_bytes,
        )?;
        data.iter_mut().for_each(|d| *d = (*d).max(want));
    }
    let mut lens = Vec::new();
    for (s, (sd, d)) in plex.subdisks.iter().zip(&data).enumerate() {
        let len = l
            .data_offset_bytes
            .checked_add(*d)
            .ok_or_else(too_large)?
            .next_multiple_of(ALIGN_BYTES)
            .max(sd.len_bytes);
        let room = free_after(pool, &sd.drive, sd.offset_bytes) - sd.offset_bytes;
        if len > room {
            return Err(CliError(format!(
                "drive {} has {} from subdisk {} to the next subdisk or its end; the extend \
                 needs {} there (a volume grows in place, each subdisk into the space after it{})",
                sd.drive,
                format_size(room),
                v.subdisk_name(0, s),
                format_size(len),
                if matches!(plex.org, Level::Concat | Level::Mirror) {
                    ""
                } else {
                    "; or, while the pool is served, onto new subdisks: `volume extend \
                     --add-subdisks --control ...`"
                }
            )));
        }
        lens.push(len);
    }
    Ok(lens)
}

fn too_large() -> CliError {
    CliError("--size is too large".into())
}

/// Where the next subdisk after `offset_bytes` on `drive` starts, or the
/// drive's end.
fn free_after(pool: &Pool, drive: &str, offset_bytes: u64) -> u64 {
    let end = pool.drive(drive).map_or(0, |d| d.size_bytes);
    pool.subdisks()
        .map(|(_, sd)| sd)
        .filter(|sd| sd.drive == drive && sd.offset_bytes > offset_bytes)
        .map(|sd| sd.offset_bytes)
        .fold(end, u64::min)
}

/// `label` with each member's data as its subdisk of `lens` holds it (as
/// `create` sizes a member's data: all of it after the data offset, in
/// whole sectors) and the volume's size from that; the bitmap's regions
/// grown if its old ones no longer fit before the data.
fn grown_label(v: &PoolVolume, label: &Label, lens: &[u64]) -> Result<Label> {
    let mut g = label.clone();
    let last = g.slots.len() - 1;
    for (s, (slot, len)) in g.slots.iter_mut().zip(lens).enumerate() {
        let data = (len - label.data_offset_bytes) / SECTOR_BYTES * SECTOR_BYTES;
        assert!(
            data >= slot.data_size_bytes,
            "a member's data never shrinks"
        );
        assert!(
            v.plex().org != Level::Concat || s == last || data == slot.data_size_bytes,
            "only a concat's last member grows"
        );
        slot.data_size_bytes = data;
    }
    finish_label(v, g)
}

/// A grown label's sizes made whole: its member's data, the volume's size
/// from its layout, the bitmap's regions re-chosen if the old ones no
/// longer fit before the data; then checked.
fn finish_label(v: &PoolVolume, mut g: Label) -> Result<Label> {
    g.data_size_bytes = g.slots[g.slot as usize].data_size_bytes;
    let geometry = Geometry::new(spec_of(&g))
        .map_err(|e| CliError(format!("volume {}: grown: {e}", v.name)))?;
    g.volume_size_bytes = geometry.volume_size_bytes();
    if g.intent_region_stripes > 0 && IntentLayout::new(&geometry, g.intent_region_stripes).is_err()
    {
        g.intent_region_stripes =
            IntentLayout::choose_region_stripes(&geometry, g.intent_region_stripes);
    }
    IntentLayout::new(&geometry, g.intent_region_stripes)
        .map_err(|e| CliError(format!("volume {}: grown: {e}", v.name)))?;
    g.validate()
        .map_err(|e| CliError(format!("volume {}: grown: {e}", v.name)))?;
    Ok(g)
}

/// Zeros, on every member, the data bytes the growth adds and the bitmap
/// the grown label has, then flushes: the space is nobody's yet, and the
/// volume is clean, so neither write can lose anything.
fn zero_growth(members: &[Arc<dyn Member>], old: &Label, grown: &Label) -> Result<()> {
    zero_data_growth(members, old, grown)?;
    zero_bitmap(members, grown)
}

/// Each member's data between its old end and its grown one zeroed.
fn zero_data_growth(members: &[Arc<dyn Member>], old: &Label, grown: &Label) -> Result<()> {
    for (m, (was, now)) in members.iter().zip(old.slots.iter().zip(&grown.slots)) {
        let from = old.data_offset_bytes + was.data_size_bytes;
        // `trim` reads back as zeros (the member contract), as `create`
        // zeroes a new volume's data.
        m.trim(from, now.data_size_bytes - was.data_size_bytes)?;
        m.flush()?;
    }
    Ok(())
}

/// Each member's bitmap zeroed, as the grown layout sizes it: its regions
/// may mean other stripes now, and a clean volume owes no resync.
fn zero_bitmap(members: &[Arc<dyn Member>], grown: &Label) -> Result<()> {
    let bitmap_bytes = platter_server::manage::pool::bitmap_bytes(grown).map_err(CliError)?;
    for m in members {
        m.trim(INTENT_OFFSET_BYTES, bitmap_bytes)?;
        m.flush()?;
    }
    Ok(())
}

/// Rewrites the labels of `v`'s subdisks (`members`, by slot) that say
/// less than the size the pool records for it, or that a torn write
/// damaged: what a crash during an extend left. Each is the volume's label
/// grown to its subdisk's length, at the event count it had. Nothing to
/// do for a volume never extended, or whose labels all say its size.
pub fn bring_labels_up(pool: &Pool, v: &PoolVolume, members: &[Arc<dyn Member>]) -> Result<()> {
    let Some(size_bytes) = v.size_bytes else {
        return Ok(());
    };
    let labels = drives::labels_of(members)?;
    let lone = lone_copy(v, members, size_bytes)?;
    let Some(newest) = labels
        .iter()
        .flatten()
        .chain(&lone)
        // At one event count, a concat's added member's label (one slot
        // more) says the shape the pool records.
        .max_by_key(|l| (l.event_counter, l.member_count))
    else {
        return Ok(());
    };
    // With every subdisk present, members[i] is slot i.
    let whole = members.len() == v.plex().subdisks.len();
    let torn = whole && labels.iter().any(Option::is_none);
    if !torn
        && labels
            .iter()
            .flatten()
            .all(|l| l.volume_size_bytes >= size_bytes)
    {
        return Ok(());
    }
    let lens: Vec<u64> = v.plex().subdisks.iter().map(|sd| sd.len_bytes).collect();
    let grown = grown_label(v, newest, &lens)?;
    if grown.volume_size_bytes != size_bytes {
        return Err(CliError(format!(
            "volume {} of pool {}: the pool records {} bytes, and its subdisks hold {}",
            v.name, pool.name, size_bytes, grown.volume_size_bytes
        )));
    }
    for (i, (m, l)) in members.iter().zip(&labels).enumerate() {
        let mine = match l {
            Some(l) if l.volume_uuid == grown.volume_uuid && l.volume_size_bytes < size_bytes => {
                Label {
                    event_counter: l.event_counter,
                    ..grown.for_slot(l.slot)
                }
            }
            // Torn in the rewrite: its slot, if the volume still counts
            // it in, as the newest label has it.
            None if whole && grown.slots[i].state == SlotState::Active => grown.for_slot(i as u32),
            _ => continue,
        };
        if members.len() == 1 {
            // A lone subdisk has no other label to be rebuilt from if
            // this write is torn: its copy goes first.
            m.write_at(LONE_COPY_OFFSET_BYTES, &mine.encode())?;
            m.flush()?;
        }
        m.write_at(0, &mine.encode())?;
        m.flush()?;
    }
    Ok(())
}

/// Where the label of a volume of one subdisk (a concat: no bitmap, no
/// checksums, no log before its data) is written before it is rewritten
/// at byte 0 by an extend: the 4 KiB after it, which nothing else uses.
pub const LONE_COPY_OFFSET_BYTES: u64 = LABEL_BYTES as u64;

/// The copy of a lone subdisk's grown label, when its own label is torn
/// and the copy is whole and of the size the pool records.
fn lone_copy(
    v: &PoolVolume,
    members: &[Arc<dyn Member>],
    size_bytes: u64,
) -> Result<Option<Label>> {
    if members.len() != 1 || v.plex().subdisks.len() != 1 {
        return Ok(None);
    }
    if drives::read_label_at(members[0].as_ref(), 0)?.is_some() {
        return Ok(None);
    }
    let copy = drives::read_label_at(members[0].as_ref(), LONE_COPY_OFFSET_BYTES)?
        .filter(|l| l.volume_size_bytes == size_bytes && l.member_count == 1);
    if copy.is_some() {
        tracing::warn!(volume = %v.name, "its one label is damaged: written again from the copy its last extend left");
    }
    Ok(copy)
}

pub mod plexes;

#[cfg(test)]
mod tests;
