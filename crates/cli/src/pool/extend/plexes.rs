//! `volume extend` of a volume of several plexes, in place: each plex's
//! array grows as a volume of one plex does (each subdisk into the free
//! space after it), then the volume's mirror over the plexes grows into
//! the room that gives it. The pool's server must be stopped (through it,
//! with `--control`, it is not done yet).
//!
//! Order, so that a crash at any write loses nothing and a start finishes
//! what it cut short:
//! 1. every plex's growth and bitmap zeroed, and the mirror's bitmap (in
//!    the plexes' data, through their engines): zeros in every plex's new
//!    stripes read as zeros through the mirror, so nothing needs a resync;
//! 2. one configuration gives every subdisk its new length and records the
//!    volume's new size;
//! 3. each plex's labels brought up to what its subdisks now hold;
//! 4. the mirror's labels (at the start of each plex's data) brought up,
//!    through engines over the grown plexes.
//!
//! A start brings labels up the same way before it assembles
//! (`bring_plex_labels_up`, `bring_mirror_labels_up`), so a crash after 2
//! ends as a whole extend, and one before 2 as none.

use std::sync::Arc;

use platter_core::label::Label;
use platter_core::pool::{Plex, Pool, PoolVolume};
use platter_core::Level;
use platter_io::assembly::assemble_devices;
use platter_io::Member;

use super::super::drives::{self, OpenPool};
use super::super::plexes::plex_members;
use super::{
    bring_labels_up, extendable, grown_label, new_lengths, zero_bitmap, zero_data_growth,
    LONE_COPY_OFFSET_BYTES,
};
use crate::error::{CliError, Result};

/// Grows volume of plexes `v` to at least `size_bytes`; returns its size
/// before.
pub fn extend_plexes(open: &mut OpenPool, v: &PoolVolume, size_bytes: u64) -> Result<u64> {
    let mut arrays = Vec::new();
    for p in 0..v.plexes.len() {
        let members = whole_plex(open, v, p)?;
        bring_plex_labels_up(open.pool(), v, p, &members)?;
        let a = assemble_devices(members.clone())
            .map_err(|e| CliError(format!("plex {}: {e}", v.plex_name(p))))?
            .assembly;
        extendable(&plex_view(v, p), &a)?;
        arrays.push((members, a.label));
    }
    let plexes = plex_members(v, arrays.iter().map(|(m, _)| m.clone()))?;
    bring_mirror_labels_up(open.pool(), v, &plexes)?;
    let mirror = assemble_devices(plexes.clone())
        .map_err(|e| CliError(format!("volume {}: {e}", v.name)))?
        .assembly;
    extendable(v, &mirror)?;
    let old_bytes = mirror.label.volume_size_bytes;
    if size_bytes <= old_bytes {
        return Err(CliError(format!(
            "volume {} is {} already; extend makes a volume larger (it does not shrink)",
            v.name,
            platter_core::units::format_size(old_bytes)
        )));
    }
    let old: Vec<Label> = arrays.iter().map(|(_, l)| l.clone()).collect();
    let growth = plan_plexes(open.pool(), v, &old, &mirror.label, size_bytes)?;
    // 1: zeros, while nothing gives the growth out: the mirror's bitmap
    // through the plexes as they are, then each plex's.
    zero_bitmap(&plexes, &growth.mirror)?;
    drop(plexes);
    grow_plexes(open, v, &old, &growth)?;
    // 3 and 4: the labels.
    let grown = &growth.volume;
    let mut wide_plexes = Vec::new();
    for p in 0..grown.plexes.len() {
        let wide = whole_plex(open, grown, p)?;
        bring_plex_labels_up(open.pool(), grown, p, &wide)?;
        wide_plexes.push(wide);
    }
    let plexes = plex_members(grown, wide_plexes.into_iter())?;
    bring_mirror_labels_up(open.pool(), grown, &plexes)?;
    Ok(old_bytes)
}

/// An extend of a volume of plexes worked out, nothing written: the
/// volume as the configuration will record it, each plex's grown label
/// and the mirror's.
pub struct PlexesGrowth {
    pub volume: PoolVolume,
    pub plexes: Vec<Label>,
    pub mirror: Label,
}

/// `v` grown: each plex's subdisks (whose labels say `plexes`) as long as
/// a mirror of `size_bytes` needs after its reserve, and the mirror (whose
/// labels say `mirror`) over them.
pub fn plan_plexes(
    pool: &Pool,
    v: &PoolVolume,
    plexes: &[Label],
    mirror: &Label,
    size_bytes: u64,
) -> Result<PlexesGrowth> {
    pool.not_moving(&v.name, "extend it").map_err(CliError)?;
    pool.none_detached(&v.name, "extend it").map_err(CliError)?;
    if let Some(c) = pool.convert_of(&v.name) {
        return Err(CliError(format!(
            "volume {}: plex {} is being converted; extend it once that is done",
            v.name,
            v.plex_name(c.from)
        )));
    }
    let plex_bytes = size_bytes
        .checked_add(mirror.data_offset_bytes)
        .ok_or_else(|| CliError("--size is too large".into()))?;
    let mut grown = v.clone();
    let mut labels = Vec::new();
    for (p, label) in plexes.iter().enumerate() {
        let view = plex_view(v, p);
        let want = plex_bytes.max(label.volume_size_bytes);
        let lens = new_lengths(pool, &view, label, want)?;
        for (sd, len) in grown.plexes[p].subdisks.iter_mut().zip(&lens) {
            sd.len_bytes = *len;
        }
        labels.push(grown_label(&view, label, &lens)?);
    }
    let sizes: Vec<u64> = labels.iter().map(|l| l.volume_size_bytes).collect();
    let grown_mirror = grown_label(&mirror_view(v, &sizes), mirror, &sizes)?;
    grown.size_bytes = Some(grown_mirror.volume_size_bytes);
    Ok(PlexesGrowth {
        volume: grown,
        plexes: labels,
        mirror: grown_mirror,
    })
}

/// Steps 1 (each plex's growth and bitmap zeroed; the mirror's bitmap is
/// the caller's, before) and 2 (the configuration) of `growth`, the plexes'
/// labels saying `old`.
pub fn grow_plexes(
    open: &mut OpenPool,
    v: &PoolVolume,
    old: &[Label],
    growth: &PlexesGrowth,
) -> Result<()> {
    let mut pool = open.pool().clone();
    for x in pool.volumes.iter_mut().filter(|x| x.name == v.name) {
        *x = growth.volume.clone();
    }
    pool.check().map_err(CliError)?;
    for (p, (was, now)) in old.iter().zip(&growth.plexes).enumerate() {
        let wide = whole_plex(open, &growth.volume, p)?;
        zero_data_growth(&wide, was, now)?;
        zero_bitmap(&wide, now)?;
    }
    open.write(pool)
}

/// Plex `p` of `v` as a volume of one plex, named as its array (`v.p1`):
/// what the one-plex extend code grows.
fn plex_view(v: &PoolVolume, p: usize) -> PoolVolume {
    PoolVolume {
        name: v.plex_name(p),
        size_bytes: None,
        plexes: vec![v.plexes[p].clone()],
    }
}

/// The volume's mirror as a volume of one plex whose members are its
/// plexes' arrays, of `sizes` bytes (the one-plex label code reads only
/// its organisation and the members' lengths).
fn mirror_view(v: &PoolVolume, sizes: &[u64]) -> PoolVolume {
    PoolVolume {
        name: v.name.clone(),
        size_bytes: v.size_bytes,
        plexes: vec![Plex {
            org: Level::Mirror,
            interleave_bytes: 64 << 10,
            parity_layout: platter_core::ParityLayout::DEFAULT,
            copies: sizes.len() as u32,
            subdisks: sizes
                .iter()
                .enumerate()
                .map(|(p, &len_bytes)| platter_core::pool::Subdisk {
                    drive: v.plex_name(p),
                    offset_bytes: 0,
                    len_bytes,
                })
                .collect(),
        }],
    }
}

/// Plex `p`'s labels brought up to what its subdisks hold, when the pool
/// records an extend of `v` that a crash cut short (nothing otherwise).
pub fn bring_plex_labels_up(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    members: &[Arc<dyn Member>],
) -> Result<()> {
    if v.size_bytes.is_none() || members.len() != v.plexes[p].subdisks.len() {
        return Ok(());
    }
    let labels = drives::labels_of(members)?;
    // A plex of one subdisk whose label a crash tore has the copy its
    // extend wrote first.
    let lone = match members {
        [m] if labels[0].is_none() => drives::read_label_at(m.as_ref(), LONE_COPY_OFFSET_BYTES)?,
        _ => None,
    };
    let Some(newest) = labels
        .iter()
        .flatten()
        .chain(&lone)
        .max_by_key(|l| l.event_counter)
    else {
        return Ok(());
    };
    let view = plex_view(v, p);
    let lens: Vec<u64> = v.plexes[p].subdisks.iter().map(|s| s.len_bytes).collect();
    let held = grown_label(&view, newest, &lens)?.volume_size_bytes;
    let view = PoolVolume {
        size_bytes: Some(held),
        ..view
    };
    bring_labels_up(pool, &view, members)
}

/// The mirror's labels (on `plexes`, its members in slot order) brought
/// up to the size the pool records for `v`.
pub fn bring_mirror_labels_up(
    pool: &Pool,
    v: &PoolVolume,
    plexes: &[Arc<dyn Member>],
) -> Result<()> {
    if v.size_bytes.is_none() {
        return Ok(());
    }
    // With a plex missing the others' labels stay as they are: the next
    // start with every plex brings them up.
    if plexes.len() != v.plexes.len() {
        return Ok(());
    }
    let sizes: Vec<u64> = plexes.iter().map(|m| m.size_bytes()).collect();
    bring_labels_up(pool, &mirror_view(v, &sizes), plexes)
}

/// Plex `p`'s subdisks, every one present.
fn whole_plex(open: &OpenPool, v: &PoolVolume, p: usize) -> Result<Vec<Arc<dyn Member>>> {
    let windows = drives::plex_windows(open.pool(), v, p, &open.drives)?;
    if windows.len() != v.plexes[p].subdisks.len() {
        return Err(CliError(format!(
            "volume {}: a drive of plex {} is missing; it is extended with every subdisk present",
            v.name,
            v.plex_name(p)
        )));
    }
    Ok(windows.into_iter().map(|w| w as Arc<dyn Member>).collect())
}

#[cfg(test)]
mod tests;
