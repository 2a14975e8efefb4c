//! A pool's drives on this host: finding them among devices, reading and
//! writing their pool areas, and each volume's subdisks as members.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use platter_core::label::{Label, LABEL_BYTES};
use platter_core::pool::area::{self, DriveSlots, Gathered, Seen, HEADER_BYTES, SLOT_BYTES};
use platter_core::pool::{Pool, PoolVolume};
use platter_io::subdisk::SubdiskMember;
use platter_io::{open_member, Member, OpenOptions};

use crate::error::{CliError, Result};

/// A pool as found on the devices given, with the drives open.
#[derive(Clone)]
pub struct OpenPool {
    pub gathered: Gathered,
    /// By the pool's drive order: the open drive, or `None` when missing.
    pub drives: Vec<Option<Arc<dyn Member>>>,
    /// The slot each open drive's next change writes.
    next_slots: Vec<u32>,
    /// Drives present whose subdisks a server found failed: nothing new
    /// is placed on them (`placeable_names`).
    pub failing: Vec<String>,
}

/// Reads a device's two slots.
pub fn read_slots(m: &dyn Member) -> std::result::Result<DriveSlots, String> {
    let read = |slot: u32| -> std::result::Result<area::SlotRead, String> {
        let at = area::slot_offset_bytes(slot);
        if m.size_bytes() < at + SLOT_BYTES {
            return Ok(Err(area::SlotFault::Blank));
        }
        let mut head = vec![0u8; HEADER_BYTES];
        m.read_at(at, &mut head).map_err(|e| e.to_string())?;
        let header = match area::decode_header(&head, slot) {
            Ok(h) => h,
            Err(f) => return Ok(Err(f)),
        };
        let mut text = vec![0u8; header.text_bytes as usize];
        m.read_at(at + HEADER_BYTES as u64, &mut text)
            .map_err(|e| e.to_string())?;
        Ok(area::decode_text(&header, &text).map(|p| (header, p)))
    };
    Ok(DriveSlots {
        slots: [read(0)?, read(1)?],
    })
}

/// The devices `paths` name (directories: their files and block devices),
/// each once.
pub fn candidates(paths: &[String]) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for p in paths {
        crate::scan::candidates_of(p, &mut out)?;
    }
    let mut seen = Vec::new();
    out.retain(|c| match platter_io::assembly::path_identity(c) {
        Some(id) if seen.contains(&id) => false,
        Some(id) => {
            seen.push(id);
            true
        }
        None => true,
    });
    Ok(out)
}

/// Every device under `paths` that holds a pool slot (valid or not), read
/// without a claim: a served pool's drives are read, not refused.
pub fn look(paths: &[String]) -> Result<Vec<Seen>> {
    let opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let mut seen = Vec::new();
    for c in candidates(paths)? {
        let Ok(m) = open_member(&c, opts) else {
            continue;
        };
        let slots = read_slots(m.as_ref()).map_err(|e| CliError(format!("{c}: {e}")))?;
        if slots.newest().is_some() || slots.has_pool_slot() {
            seen.push(Seen {
                device: c,
                slots,
                size_bytes: m.size_bytes(),
            });
        }
    }
    Ok(seen)
}

/// Opens pool `name` from the devices under `paths` (`area::gather`),
/// each of its drives found opened with `opts`. A drive that cannot be
/// opened so (a server holds it) is an error naming it.
pub fn open_pool(name: Option<&str>, paths: &[String], opts: OpenOptions) -> Result<OpenPool> {
    let seen = look(paths)?;
    let gathered = area::gather(&seen, name).map_err(CliError)?;
    let mut drives = vec![None; gathered.pool.drives.len()];
    let mut next_slots = vec![0; gathered.pool.drives.len()];
    for (i, drive_name) in &gathered.present {
        let d = gathered
            .pool
            .drives
            .iter()
            .position(|d| d.name == *drive_name)
            .expect("present");
        let device = &seen[*i].device;
        let m = open_member(device, opts).map_err(|e| {
            CliError(format!(
                "{device} (drive {drive_name} of pool {}): {e}; is the pool being served? \
                 Then volume create, extend and remove and pool add-drive and replace-drive go \
                 through its server (--control PATH); the other changes wait until it stops",
                gathered.pool.name
            ))
        })?;
        drives[d] = Some(Arc::<dyn Member>::from(m));
        next_slots[d] = seen[*i].slots.next_slot();
    }
    Ok(OpenPool {
        gathered,
        drives,
        next_slots,
        failing: Vec::new(),
    })
}

impl OpenPool {
    /// For tests: a pool over drives opened by the caller (any
    /// [`Member`]), each writing next the slot its newest is not in.
    #[cfg(test)]
    pub fn over(gathered: Gathered, drives: Vec<Option<Arc<dyn Member>>>) -> OpenPool {
        let next_slots = drives
            .iter()
            .map(|m| {
                m.as_ref()
                    .map_or(0, |m| read_slots(m.as_ref()).unwrap().next_slot())
            })
            .collect();
        OpenPool {
            gathered,
            drives,
            next_slots,
            failing: Vec::new(),
        }
    }

    pub fn pool(&self) -> &Pool {
        &self.gathered.pool
    }

    /// Drive `d`'s device, if present.
    pub fn drive(&self, d: usize) -> Option<Arc<dyn Member>> {
        self.drives[d].clone()
    }

    /// The names of the drives present.
    pub fn present_names(&self) -> Vec<String> {
        self.gathered
            .present
            .iter()
            .map(|(_, n)| n.clone())
            .collect()
    }

    /// The drives present that new subdisks may go on: not spares, kept
    /// for failed subdisks, nor failed ones, nor those failing under a
    /// server.
    pub fn placeable_names(&self) -> Vec<String> {
        let pool = self.pool();
        self.present_names()
            .into_iter()
            .filter(|n| pool.drive(n).is_some_and(|d| d.state.takes_new_subdisks()))
            .filter(|n| !self.failing.contains(n))
            .collect()
    }

    /// Writes `pool` (the next generation) to every drive present: each
    /// the slot not holding its newest, then a flush. Drives missing get
    /// it at a later change, when they are back. A drive whose write fails
    /// (it failed under a server) is left out from then on, as a missing
    /// one, and the change stands on the others; it fails only when no
    /// drive took it.
    pub fn write(&mut self, mut pool: Pool) -> Result<()> {
        pool.generation = self.gathered.pool.generation + 1;
        for (d, m) in self.drives.iter().enumerate() {
            if let Some(m) = m {
                pool.drives[d].device = m.describe().to_string();
            }
        }
        pool.check().map_err(CliError)?;
        area::fits(&pool).map_err(CliError)?;
        let mut failed = Vec::new();
        let mut landed = 0;
        for (d, m) in self.drives.iter().enumerate() {
            let Some(m) = m else { continue };
            match write_slot(m.as_ref(), &pool, d, self.next_slots[d]) {
                Ok(()) => {
                    landed += 1;
                    self.next_slots[d] = 1 - self.next_slots[d];
                }
                // Its next write goes to the same slot: the other still
                // holds its newest whole.
                Err(e) => failed.push((d, e)),
            }
        }
        if landed == 0 {
            // A drive whose write failed may hold the generation now: the
            // next change must not write another at it (two
            // configurations of one generation do not gather).
            self.gathered.pool.generation = pool.generation;
            let (_, e) = failed.into_iter().next().expect("a drive is present");
            return Err(e);
        }
        for (d, e) in failed {
            tracing::warn!(drive = %pool.drives[d].name, error = %e, "drive failed the configuration's write: left out of the pool's changes until it is found again");
            self.leave_out(d);
        }
        self.gathered.pool = pool;
        Ok(())
    }

    /// Drive `d` out of the open pool (`pool remove-drive`, before the
    /// configuration without it is written); its device, if present.
    pub fn forget_drive(&mut self, d: usize) -> Option<Arc<dyn Member>> {
        let name = self.gathered.pool.drives[d].name.clone();
        self.gathered.present.retain(|(_, x)| *x != name);
        self.gathered.missing.retain(|x| *x != name);
        self.gathered.behind.retain(|(x, _)| *x != name);
        self.failing.retain(|x| *x != name);
        self.gathered.pool.drives.remove(d);
        self.next_slots.remove(d);
        self.drives.remove(d)
    }

    /// Drive `d` as if missing: no change writes it again.
    fn leave_out(&mut self, d: usize) {
        self.drives[d] = None;
        let name = self.gathered.pool.drives[d].name.clone();
        self.gathered.present.retain(|(_, x)| *x != name);
        if !self.gathered.missing.contains(&name) {
            self.gathered.missing.push(name);
        }
    }

    /// Puts a drive opened by the caller in place `d` (a missing drive's
    /// replacement); its slot 0 is written first. It is present from now
    /// on, to the changes that follow (a server's).
    pub fn put(&mut self, d: usize, m: Arc<dyn Member>) {
        self.drives[d] = Some(m);
        self.next_slots[d] = 0;
        let name = self.gathered.pool.drives[d].name.clone();
        self.gathered.missing.retain(|x| *x != name);
        self.gathered.present.retain(|(_, x)| *x != name);
        self.gathered.present.push((d, name));
    }

    /// Forgets the drives added after the first `keep` (a change that
    /// failed before its configuration named them).
    pub fn forget_added(&mut self, keep: usize) {
        assert!(
            keep >= self.gathered.pool.drives.len(),
            "only drives not yet recorded"
        );
        self.drives.truncate(keep);
        self.next_slots.truncate(keep);
        let names: Vec<&str> = self
            .gathered
            .pool
            .drives
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        self.gathered
            .present
            .retain(|(_, n)| names.contains(&n.as_str()));
    }

    /// Adds drive `name`, opened by the caller; its slot 0 is written
    /// first. It is present from now on.
    pub fn add(&mut self, name: &str, m: Arc<dyn Member>) {
        self.drives.push(Some(m));
        self.next_slots.push(0);
        self.gathered
            .present
            .push((self.drives.len() - 1, name.to_string()));
    }

    /// Volume `name`'s subdisks as members, in slot order; a subdisk on a
    /// missing drive is left out.
    pub fn subdisks(&self, v: &PoolVolume) -> Result<Vec<Arc<dyn Member>>> {
        subdisk_members(self.pool(), v, &self.drives)
    }
}

/// The platter label at `offset_bytes` of `m` (a member's at 0, a moved
/// or copied one further in), if one is there and whole.
pub fn read_label_at(m: &dyn Member, offset_bytes: u64) -> Result<Option<Label>> {
    if m.size_bytes() < offset_bytes + LABEL_BYTES as u64 {
        return Ok(None);
    }
    let mut buf = vec![0u8; LABEL_BYTES];
    m.read_at(offset_bytes, &mut buf)?;
    Ok(Label::decode(&buf).ok())
}

/// Each of `members`' labels at its start, in their order; `None` where
/// none is whole.
pub fn labels_of(members: &[Arc<dyn Member>]) -> Result<Vec<Option<Label>>> {
    members
        .iter()
        .map(|m| read_label_at(m.as_ref(), 0))
        .collect()
}

/// The label with the highest event count among `labels`: the one a
/// volume's assembly trusts.
pub fn newest_label(labels: &[Option<Label>]) -> Option<Label> {
    labels
        .iter()
        .flatten()
        .max_by_key(|l| l.event_counter)
        .cloned()
}

/// Whether `m`'s label area is all zeros: a subdisk laid out anew (by
/// `replace-drive`, `heal` or an extend), which its volume takes as a
/// spare. A damaged label is not blank.
pub fn is_blank(m: &dyn Member) -> Result<bool> {
    let area = platter_io::assembly::read_label_area(m)?;
    Ok(area.iter().all(|&b| b == 0))
}

/// Writes slot `slot` of drive `d` and flushes it.
pub fn write_slot(m: &dyn Member, pool: &Pool, d: usize, slot: u32) -> Result<()> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|t| t.as_secs())
        .unwrap_or(0);
    let bytes = area::encode(pool, pool.drives[d].uuid, slot, now);
    m.write_at(area::slot_offset_bytes(slot), &bytes)?;
    m.flush()?;
    Ok(())
}

/// `v`'s subdisks over the open drives, in slot order.
pub fn subdisk_members(
    pool: &Pool,
    v: &PoolVolume,
    drives: &[Option<Arc<dyn Member>>],
) -> Result<Vec<Arc<dyn Member>>> {
    let windows = subdisk_windows(pool, v, drives)?;
    Ok(windows.into_iter().map(|w| w as Arc<dyn Member>).collect())
}

/// [`subdisk_members`] as windows a server can widen.
pub fn subdisk_windows(
    pool: &Pool,
    v: &PoolVolume,
    drives: &[Option<Arc<dyn Member>>],
) -> Result<Vec<Arc<SubdiskMember>>> {
    plex_windows(pool, v, 0, drives)
}

/// Plex `p` of `v`: its subdisks over the open drives, in slot order (a
/// subdisk on a missing drive left out).
pub fn plex_windows(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    drives: &[Option<Arc<dyn Member>>],
) -> Result<Vec<Arc<SubdiskMember>>> {
    let mut out = Vec::new();
    for (s, sd) in v.plexes[p].subdisks.iter().enumerate() {
        let d = pool
            .drives
            .iter()
            .position(|d| d.name == sd.drive)
            .expect("checked pool");
        let Some(drive) = &drives[d] else { continue };
        out.push(plex_window(pool, v, p, s, drive)?);
    }
    Ok(out)
}

/// Subdisk `s` of `v` on its open `drive`, named for messages by the
/// subdisk, its drive and the drive's device.
pub fn subdisk_window(
    pool: &Pool,
    v: &PoolVolume,
    s: usize,
    drive: &Arc<dyn Member>,
) -> Result<Arc<SubdiskMember>> {
    plex_window(pool, v, 0, s, drive)
}

/// Subdisk `s` of plex `p` of `v` on its open `drive`.
pub fn plex_window(
    pool: &Pool,
    v: &PoolVolume,
    p: usize,
    s: usize,
    drive: &Arc<dyn Member>,
) -> Result<Arc<SubdiskMember>> {
    let sd = &v.plexes[p].subdisks[s];
    let name = format!(
        "{}/{} ({} of {})",
        pool.name,
        v.subdisk_name(p, s),
        sd.drive,
        drive.describe()
    );
    Ok(Arc::new(SubdiskMember::new(
        Arc::clone(drive),
        sd.offset_bytes,
        sd.len_bytes,
        name,
    )?))
}

#[cfg(test)]
mod tests {
    use platter_core::pool::{Drive, Subdisk};
    use platter_io::memory::MemoryMember;

    use super::super::crash_kit::crashing;
    use super::*;

    fn pool(generation: u64, volumes: usize) -> Pool {
        let drives = (0..3u8)
            .map(|i| Drive {
                name: format!("d{i}"),
                uuid: [i + 1; 16],
                size_bytes: 8 << 20,
                device: format!("mem{i}"),
                state: platter_core::pool::DriveState::Up,
            })
            .collect();
        let volumes = (0..volumes)
            .map(|v| PoolVolume {
                name: format!("v{v}"),
                size_bytes: None,
                plexes: vec![platter_core::pool::Plex {
                    org: platter_core::Level::Raid5,
                    interleave_bytes: 65536,
                    parity_layout: platter_core::ParityLayout::DEFAULT,
                    copies: 1,
                    subdisks: (0..3)
                        .map(|d| Subdisk {
                            drive: format!("d{d}"),
                            offset_bytes: (1 + v as u64) << 20,
                            len_bytes: 1 << 20,
                        })
                        .collect(),
                }],
            })
            .collect();
        Pool {
            name: "tank".into(),
            uuid: [9; 16],
            generation,
            drives,
            volumes,
            moves: Vec::new(),
            detached: Vec::new(),
            converts: Vec::new(),
            copies: Vec::new(),
        }
    }

    fn gathered(disks: &[Arc<MemoryMember>]) -> std::result::Result<Pool, String> {
        super::super::crash_kit::gathered(disks).map(|g| g.pool)
    }

    /// The story this guards: a configuration change is one write per
    /// drive, and a crash can cut any of them short. At every write of a
    /// change (and at every 512 bytes of a slot's first 4 KiB, and past
    /// its header), the pool gathered afterwards is the old configuration
    /// or the new one, whole, never an error and never a mix.
    #[test]
    fn a_crash_at_any_write_of_a_change_leaves_the_old_or_the_new_configuration() {
        let mut seen_generations = std::collections::BTreeSet::new();
        for torn_at in 0..3 {
            for keep_bytes in (0..=4096).step_by(512).chain([6000, 1 << 20]) {
                let disks: Vec<Arc<MemoryMember>> = (0..3)
                    .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), 8 << 20)))
                    .collect();
                // Generations 1 and 2 written whole: both slots in use.
                for g in 1..=2 {
                    for (d, m) in disks.iter().enumerate() {
                        write_slot(m.as_ref(), &pool(g, g as usize), d, (g - 1) as u32).unwrap();
                    }
                }
                let drives = crashing(&disks, torn_at, keep_bytes)
                    .into_iter()
                    .map(Some)
                    .collect();
                let seen_before = gathered(&disks).unwrap();
                assert_eq!(seen_before.generation, 2);
                let mut open = OpenPool {
                    gathered: Gathered {
                        pool: seen_before,
                        present: (0..3).map(|d| (d, format!("d{d}"))).collect(),
                        behind: Vec::new(),
                        damaged: Vec::new(),
                        missing: Vec::new(),
                    },
                    drives,
                    next_slots: vec![0; 3],
                    failing: Vec::new(),
                };
                // Err when the crash came before any drive took it whole.
                let _ = open.write(pool(2, 3));
                let after = gathered(&disks)
                    .unwrap_or_else(|e| panic!("write {torn_at} torn at {keep_bytes}: {e}"));
                let expect_new = after.generation == 3;
                assert_eq!(
                    after,
                    pool(after.generation, if expect_new { 3 } else { 2 })
                );
                assert!(matches!(after.generation, 2 | 3), "{torn_at}/{keep_bytes}");
                seen_generations.insert(after.generation);
            }
        }
        assert_eq!(
            seen_generations.len(),
            2,
            "crashes left the old and the new alike"
        );
    }
}
