//! Finding room for a new volume's subdisks.
//!
//! Subdisks start and end on whole MiBs ([`ALIGN_BYTES`]), as partitions
//! do: a member's label, bitmap and data then keep the alignment the
//! array gives them. Each plex that keeps redundancy or stripes gets its
//! subdisks on distinct drives, those with the most room first, so that
//! one drive's loss costs a plex one subdisk and the load spreads; a
//! concat volume fills the roomiest drives in turn.

use std::collections::BTreeMap;

use super::{Pool, Subdisk, POOL_AREA_BYTES};
use crate::units::format_size;

/// Subdisks' offsets and lengths are whole multiples of this.
pub const ALIGN_BYTES: u64 = 1 << 20;

/// The unused extents of drive `name`, lowest first: (offset, length).
/// A move's new place is used.
pub fn free_extents(pool: &Pool, name: &str) -> Vec<(u64, u64)> {
    let Some(drive) = pool.drive(name) else {
        return Vec::new();
    };
    let mut used: Vec<(u64, u64)> = pool
        .subdisks()
        .filter(|(_, sd)| sd.drive == name)
        .map(|(_, sd)| (sd.offset_bytes, sd.end_bytes()))
        .chain(
            pool.move_targets()
                .filter(|(_, to)| to.drive == name)
                .map(|(_, to)| (to.offset_bytes, to.end_bytes())),
        )
        .collect();
    used.sort_unstable();
    let end = drive.size_bytes / ALIGN_BYTES * ALIGN_BYTES;
    let mut free = Vec::new();
    let mut at = POOL_AREA_BYTES;
    for (start, stop) in used {
        if start > at {
            free.push((at, start - at));
        }
        at = at.max(stop.next_multiple_of(ALIGN_BYTES));
    }
    if end > at {
        free.push((at, end - at));
    }
    free
}

/// The largest free extent of each drive: (drive, offset, length).
fn largest_free(pool: &Pool, drives: &[String]) -> Vec<(String, u64, u64)> {
    drives
        .iter()
        .map(|d| {
            let (offset, len) = free_extents(pool, d)
                .into_iter()
                .max_by_key(|&(o, l)| (l, std::cmp::Reverse(o)))
                .unwrap_or((0, 0));
            (d.clone(), offset, len)
        })
        .collect()
}

/// Places `count` subdisks of `len_bytes` each on distinct drives among
/// `drives`, the roomiest first, each at the lowest offset it fits.
pub fn place_spread(
    pool: &Pool,
    drives: &[String],
    count: u32,
    len_bytes: u64,
) -> Result<Vec<Subdisk>, String> {
    assert!(count > 0, "a plex has subdisks");
    let len_bytes = len_bytes.next_multiple_of(ALIGN_BYTES);
    let mut room = largest_free(pool, drives);
    room.sort_by_key(|(_, _, len)| std::cmp::Reverse(*len));
    let fitting: Vec<&(String, u64, u64)> =
        room.iter().filter(|(_, _, l)| *l >= len_bytes).collect();
    if fitting.len() < count as usize {
        return Err(shortage(count, len_bytes, &room));
    }
    Ok(fitting
        .into_iter()
        .take(count as usize)
        .map(|(d, _, _)| {
            let (offset, _) = free_extents(pool, d)
                .into_iter()
                .find(|&(_, l)| l >= len_bytes)
                .expect("the largest extent fits");
            Subdisk {
                drive: d.clone(),
                offset_bytes: offset,
                len_bytes,
            }
        })
        .collect())
}

fn shortage(count: u32, len_bytes: u64, room: &[(String, u64, u64)]) -> String {
    let have: Vec<String> = room
        .iter()
        .map(|(d, _, l)| format!("{d} {}", format_size(*l)))
        .collect();
    format!(
        "needs {count} drives with {} free in one piece; the largest free extents are: {}",
        format_size(len_bytes),
        if have.is_empty() {
            "none".to_string()
        } else {
            have.join(", ")
        }
    )
}

/// Places subdisks for a concat of `data_bytes`, each subdisk costing
/// `overhead_bytes` of its own (its label and bitmap area) besides its
/// share of the data, of which only whole `interleave_bytes` count (md's
/// linear rounds each member down to its chunk): the largest free extents
/// first, fewest subdisks.
pub fn place_concat(
    pool: &Pool,
    drives: &[String],
    (data_bytes, interleave_bytes): (u64, u64),
    overhead_bytes: u64,
    max_subdisks: u32,
) -> Result<Vec<Subdisk>, String> {
    let il = interleave_bytes.max(1);
    let mut extents: Vec<(String, u64, u64)> = drives
        .iter()
        .flat_map(|d| {
            free_extents(pool, d)
                .into_iter()
                .map(move |(o, l)| (d.clone(), o, l))
        })
        .filter(|(_, _, l)| *l > overhead_bytes)
        .collect();
    extents.sort_by_key(|(d, o, l)| (std::cmp::Reverse(*l), d.clone(), *o));
    let mut left = data_bytes;
    let mut out = Vec::new();
    for (drive, offset, len) in extents {
        if left == 0 || out.len() as u32 == max_subdisks {
            break;
        }
        let want = left
            .next_multiple_of(il)
            .saturating_add(overhead_bytes)
            .next_multiple_of(ALIGN_BYTES);
        let take = want.min(len);
        left = left.saturating_sub((take - overhead_bytes) / il * il);
        out.push(Subdisk {
            drive,
            offset_bytes: offset,
            len_bytes: take,
        });
    }
    if left > 0 {
        let free: u64 = drives
            .iter()
            .flat_map(|d| free_extents(pool, d))
            .map(|(_, l)| l)
            .sum();
        return Err(format!(
            "needs {} more than the drives have free ({} in all, less {} per subdisk for its label)",
            format_size(left),
            format_size(free),
            format_size(overhead_bytes)
        ));
    }
    Ok(out)
}

/// How much each drive of the pool has free in all, for `list`.
pub fn free_by_drive(pool: &Pool) -> BTreeMap<String, u64> {
    pool.drives
        .iter()
        .map(|d| {
            (
                d.name.clone(),
                free_extents(pool, &d.name).iter().map(|(_, l)| l).sum(),
            )
        })
        .collect()
}
