//! The added members' labels of a reshape that has not begun, written at
//! the start when a crash cut them off.
//!
//! `platter reshape --add` (and a reshape through the control socket)
//! writes the new layout's label to the volume's members first, then to
//! the added devices. The story this mends: killed between the two, the
//! added devices were left blank while every other label counted them, and
//! `platter serve m0 m1 m2 A B` refused with "member A: no platter label",
//! a raid5 of five missing two. Nothing has moved then (the labels say
//! position 0 and the volume clean: no server has run since they were
//! written, and the move begins only under a server), so the blank
//! devices hold nothing the volume needs: their labels are written as the
//! reshape would have, and the volume serves and reshapes. A volume served
//! since (its labels say so) is left alone: a server may have begun the
//! first window, whose undo record is on the first added member, and a
//! blank one then is a lost one.

use std::collections::BTreeSet;
use std::sync::Arc;

use platter_core::label::{Label, VolumeState};
use platter_io::Member;

use crate::error::Result;
use crate::pool::drives::{is_blank, labels_of, newest_label};

/// Writes the labels of the blank devices among `devices` when the newest
/// label of the others says a reshape at position 0, of a volume not
/// served since, counts exactly that many members it has no device for,
/// every one of them an added slot, and each blank device is large
/// enough. Returns the devices labelled,
/// with their slots; nothing is written otherwise (assembly then says
/// what is wrong).
pub fn finish_added_labels(devices: &[Arc<dyn Member>]) -> Result<Vec<(String, u32)>> {
    let mut blank = Vec::new();
    for d in devices {
        if is_blank(d.as_ref())? {
            blank.push(Arc::clone(d));
        }
    }
    if blank.is_empty() {
        return Ok(Vec::new());
    }
    let labels = labels_of(devices)?;
    let Some(newest) = newest_label(&labels) else {
        return Ok(Vec::new());
    };
    let Some(missing) = added_slots_without_device(&newest, &labels) else {
        return Ok(Vec::new());
    };
    let placed: Vec<(&Arc<dyn Member>, u32)> = blank.iter().zip(missing.iter().copied()).collect();
    let fits = |(d, slot): &(&Arc<dyn Member>, u32)| {
        let data_bytes = newest.slots[*slot as usize].data_size_bytes;
        d.size_bytes() >= newest.data_offset_bytes.saturating_add(data_bytes)
    };
    if missing.len() != blank.len() || !placed.iter().all(fits) {
        return Ok(Vec::new());
    }
    let mut written = Vec::new();
    for (d, slot) in placed {
        d.write_at(0, &newest.for_slot(slot).encode())?;
        d.flush()?;
        written.push((d.describe().to_string(), slot));
    }
    Ok(written)
}

/// The slots of `newest`'s layout that no labelled device of its volume
/// holds, when that is a reshape at position 0 and each such slot is one
/// the reshape adds.
fn added_slots_without_device(newest: &Label, labels: &[Option<Label>]) -> Option<Vec<u32>> {
    let r = newest.reshape.as_ref()?;
    if r.position_bytes != 0
        || r.old_member_count >= newest.member_count
        || newest.state != VolumeState::Clean
    {
        return None;
    }
    let held: BTreeSet<u32> = labels
        .iter()
        .flatten()
        .filter(|l| l.volume_uuid == newest.volume_uuid)
        .map(|l| l.slot)
        .collect();
    let missing: Vec<u32> = (0..newest.member_count)
        .filter(|s| !held.contains(s))
        .collect();
    missing
        .iter()
        .all(|&s| s >= r.old_member_count)
        .then_some(missing)
}

#[cfg(test)]
mod tests;
