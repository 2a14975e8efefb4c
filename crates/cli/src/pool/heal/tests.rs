use std::sync::Arc;

use platter_core::volume::Health;
use platter_io::assembly::assemble_devices;
use platter_io::memory::MemoryMember;
use platter_io::Member;

use super::super::crash_kit::{crashing, empty_pool, gathered, volume};
use super::super::drives::{self, OpenPool};
use super::*;
use crate::create::{label_subdisks, subdisk_reserve_bytes, ArraySpec};

const MIB: u64 = 1 << 20;
const DRIVE_BYTES: u64 = 40 * MIB;

fn disks() -> Vec<Arc<MemoryMember>> {
    (0..5)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), DRIVE_BYTES)))
        .collect()
}

/// Pool `tank` of five drives: raid5 `r` on d0-d2 at 1 MiB, mirror `m`
/// on d1 and d3 at 10 MiB, concat `c` on d1 at 20 MiB, and d4 as
/// `d4_state` says (a spare, or up and empty). Every volume labelled;
/// d4 holds an old label where the first subdisk put on it would go.
fn pool_on(disks: &[Arc<MemoryMember>], d4_state: DriveState) -> Pool {
    let mut pool = Pool {
        volumes: vec![
            volume("r", Level::Raid5, 1, 8, &["d0", "d1", "d2"]),
            volume("m", Level::Mirror, 10, 8, &["d1", "d3"]),
            volume("c", Level::Concat, 20, 8, &["d1"]),
        ],
        ..empty_pool(5, DRIVE_BYTES)
    };
    pool.drives[4].state = d4_state;
    pool.check().unwrap();
    let open = all(disks);
    for v in &pool.volumes {
        let members = drives::subdisk_members(&pool, v, &open).unwrap();
        let spec = ArraySpec {
            level: v.plex().org,
            interleave_bytes: 64 << 10,
            layout: None,
            copies: 2,
            name: v.name.clone(),
        };
        label_subdisks(&spec, members, subdisk_reserve_bytes(8 * MIB)).unwrap();
    }
    let stale = disks[0].snapshot()[MIB as usize..MIB as usize + LABEL_BYTES].to_vec();
    disks[4].write_at(MIB, &stale).unwrap();
    for (d, m) in disks.iter().enumerate() {
        drives::write_slot(m.as_ref(), &pool, d, 0).unwrap();
    }
    pool
}

fn all(disks: &[Arc<MemoryMember>]) -> Vec<Option<Arc<dyn Member>>> {
    disks
        .iter()
        .map(|d| Some(Arc::clone(d) as Arc<dyn Member>))
        .collect()
}

/// The pool opened with d1 gone, as a command finds it then.
fn without_d1(disks: &[Arc<MemoryMember>], drives: Vec<Option<Arc<dyn Member>>>) -> OpenPool {
    let mut g = gathered(disks).unwrap();
    g.present.retain(|(_, n)| n != "d1");
    g.missing.push("d1".into());
    let mut drives = drives;
    drives[1] = None;
    OpenPool::over(g, drives)
}

fn lost_on_d1() -> Vec<(String, usize)> {
    vec![("r".into(), 1), ("m".into(), 0), ("c".into(), 0)]
}

fn label_at(m: &dyn Member, offset: u64) -> Vec<u8> {
    let mut buf = vec![0u8; LABEL_BYTES];
    m.read_at(offset, &mut buf).unwrap();
    buf
}

/// A spare takes the lost subdisk of every redundant volume on it, at
/// its lowest free extents, zeroed where their labels go; it is up after,
/// the drive left failed; the concat, with nothing to rebuild from, is
/// named and left.
#[test]
fn a_spare_takes_the_lost_subdisks_of_every_redundant_volume() {
    let disks = disks();
    pool_on(&disks, DriveState::Spare);
    let mut open = without_d1(&disks, all(&disks));
    let healed = heal_in(&mut open, &lost_on_d1(), Room::Spares).unwrap();
    let to: Vec<(&str, &str, u64)> = healed
        .placed
        .iter()
        .map(|p| (p.volume.as_str(), p.to.drive.as_str(), p.to.offset_bytes))
        .collect();
    assert_eq!(to, [("r", "d4", MIB), ("m", "d4", 9 * MIB)]);
    assert!(healed.placed.iter().all(|p| p.from == "d1"));
    assert_eq!(healed.unplaced.len(), 1, "{:?}", healed.unplaced);
    assert!(
        healed.unplaced[0].contains("c.p0.s0") && healed.unplaced[0].contains("no redundancy"),
        "{:?}",
        healed.unplaced
    );
    let pool = gathered(&disks).unwrap().pool;
    assert_eq!(pool.generation, 2);
    assert_eq!(pool.drive("d4").unwrap().state, DriveState::Up);
    assert_eq!(pool.drive("d1").unwrap().state, DriveState::Failed);
    assert_eq!(
        pool.volume("r").unwrap().plex().subdisks[1],
        healed.placed[0].to
    );
    assert_eq!(pool.volume("c").unwrap().plex().subdisks[0].drive, "d1");
    for p in &healed.placed {
        let label = label_at(disks[4].as_ref(), p.to.offset_bytes);
        assert!(
            label.iter().all(|&b| b == 0),
            "a stale label left at {}",
            p.to.offset_bytes
        );
    }
    // As a server opens `r` now: the two labelled subdisks assemble it
    // degraded, member 1 missing, and the blank one is its spare.
    let open = without_d1(&disks, all(&disks));
    let r = open.pool().volume("r").unwrap().clone();
    let members = open.subdisks(&r).unwrap();
    assert_eq!(members.len(), 3);
    let labelled: Vec<Arc<dyn Member>> = members
        .iter()
        .filter(|m| label_at(m.as_ref(), 0).iter().any(|&b| b != 0))
        .cloned()
        .collect();
    assert_eq!(labelled.len(), 2);
    let a = assemble_devices(labelled).unwrap().assembly;
    assert_eq!(a.health, [Health::Online, Health::Missing, Health::Online]);
}

/// Nothing is placed on a drive of the failed subdisk's own plex (its
/// loss would then cost the plex two), nor on a failed drive; without
/// spares the server's own heal places nothing and writes nothing, and
/// `pool heal` takes the roomiest drive up outside the plex.
#[test]
fn free_space_is_taken_only_outside_the_plex_and_only_when_asked() {
    let disks = disks();
    pool_on(&disks, DriveState::Up);
    let before: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
    let mut open = without_d1(&disks, all(&disks));
    let healed = heal_in(&mut open, &lost_on_d1()[..2], Room::Spares).unwrap();
    assert!(healed.placed.is_empty());
    assert!(
        healed.unplaced[0].contains("no spare drive present"),
        "{:?}",
        healed.unplaced
    );
    assert!(
        healed.unplaced[0].contains("add-drive tank --spare"),
        "{:?}",
        healed.unplaced
    );
    for (d, b) in disks.iter().zip(&before) {
        assert!(d.snapshot() == *b, "a heal that placed nothing wrote");
    }
    let healed = heal_in(&mut open, &lost_on_d1()[..2], Room::FreeSpace).unwrap();
    let to: Vec<(&str, &str)> = healed
        .placed
        .iter()
        .map(|p| (p.volume.as_str(), p.to.drive.as_str()))
        .collect();
    // r (d0, d2 left) goes to the emptiest outside it, d4; m (d3 left)
    // then to the first of d0, d2 and d4, which have as much free now.
    assert_eq!(to, [("r", "d4"), ("m", "d0")]);
    let pool = open.pool().clone();
    pool.check().unwrap();
    for v in &pool.volumes {
        let drives: std::collections::BTreeSet<&str> =
            v.plex().subdisks.iter().map(|s| s.drive.as_str()).collect();
        assert_eq!(drives.len(), v.plex().subdisks.len(), "{}", v.name);
    }
    // d1 failed now: a later heal puts nothing there, even with room.
    let e = heal_in(&mut open, &[("r".into(), 0)], Room::FreeSpace).unwrap();
    assert!(
        e.placed.iter().all(|p| p.to.drive != "d1"),
        "{:?}",
        e.placed
    );
}

/// The story this guards: a heal zeroes each new extent's label area,
/// then writes the configuration on every drive present, and a crash can
/// cut any of those writes short. After a crash at any write, the pool
/// gathers with the subdisks where they were or all where the heal put
/// them, and wherever the configuration puts one, no stale label is
/// there to be taken for a member.
#[test]
fn a_crash_at_any_write_of_a_heal_leaves_the_old_places_or_the_new() {
    let mut outcomes = std::collections::BTreeSet::new();
    for torn_at in 0..8 {
        for keep_bytes in [0, 512, 4096] {
            let disks = disks();
            let old = pool_on(&disks, DriveState::Spare);
            let cut = crashing(&disks, torn_at, keep_bytes);
            let mut open = without_d1(&disks, cut.into_iter().map(Some).collect());
            let done = heal_in(&mut open, &lost_on_d1(), Room::Spares).is_ok();
            let now = gathered(&disks).unwrap().pool;
            let moved = now.generation == 2;
            assert!(!done || moved, "write {torn_at} cut at {keep_bytes}");
            if moved {
                for v in ["r", "m"] {
                    let sd = &now.volume(v).unwrap().plex().subdisks[usize::from(v == "r")];
                    assert_eq!(sd.drive, "d4", "{v}");
                    let label = label_at(disks[4].as_ref(), sd.offset_bytes);
                    assert!(label.iter().all(|&b| b == 0), "{v}: a stale label");
                }
            } else {
                assert_eq!(
                    now.volumes, old.volumes,
                    "write {torn_at} cut at {keep_bytes}"
                );
            }
            outcomes.insert(moved);
        }
    }
    assert_eq!(outcomes.len(), 2, "crashes left the old places and the new");
}

/// After a heal, the failed drive leaves the pool (`pool remove-drive`)
/// once nothing is on it: refused while the concat's subdisk is there,
/// naming it; then the others no longer name it and its slots are
/// erased. A crash at any write leaves the drive in the pool or out of
/// it, and a device left holding the old configuration is named, never
/// taken for a drive.
#[test]
fn a_failed_drive_leaves_the_pool_once_empty_and_a_crash_leaves_it_in_or_out() {
    let mut outcomes = std::collections::BTreeSet::new();
    for torn_at in 0..8 {
        let disks = disks();
        pool_on(&disks, DriveState::Spare);
        let mut open = without_d1(&disks, all(&disks));
        heal_in(&mut open, &lost_on_d1(), Room::Spares).unwrap();
        let mut open = OpenPool::over(gathered(&disks).unwrap(), all(&disks));
        let e = super::super::retire::remove_drive_in(&mut open, "d1").unwrap_err();
        assert!(
            e.0.contains("c.p0.s0") && e.0.contains("volume remove"),
            "{}",
            e.0
        );
        super::super::make::remove_in(&mut open, "c").unwrap();
        let cut = crashing(&disks, torn_at, 512);
        let mut open = OpenPool::over(
            gathered(&disks).unwrap(),
            cut.into_iter().map(Some).collect(),
        );
        let done = super::super::retire::remove_drive_in(&mut open, "d1").is_ok();
        let g = gathered(&disks).unwrap();
        let out = g.pool.drive("d1").is_none();
        assert!(!done || out, "write {torn_at}");
        g.pool.check().unwrap();
        if out {
            assert_eq!(g.pool.drives.len(), 4);
            assert!(g.present.iter().all(|(_, n)| n != "d1"));
            let slots = drives::read_slots(disks[1].as_ref()).unwrap();
            if slots.newest().is_some() {
                assert!(
                    g.damaged
                        .iter()
                        .any(|(dev, why)| dev == "mem1" && why.contains("not a drive")),
                    "write {torn_at}: {:?}",
                    g.damaged
                );
            }
        } else {
            assert_eq!(g.pool.drives.len(), 5);
        }
        if done {
            let slots = drives::read_slots(disks[1].as_ref()).unwrap();
            assert!(
                slots.newest().is_none() && !slots.has_pool_slot(),
                "write {torn_at}: not erased"
            );
        }
        outcomes.insert(out);
    }
    assert_eq!(outcomes.len(), 2, "crashes left the drive in and out");
}

/// A volume of plexes: a failed subdisk of its concat plex, which has no
/// redundancy, is placed all the same (the plex is made anew from the
/// other plex); and a subdisk of either plex goes to no drive any plex
/// of the volume uses, whose loss would cost the volume both copies.
#[test]
fn a_plex_s_lost_subdisk_goes_outside_every_plex_of_its_volume() {
    let disks = disks();
    let mut v = volume("v", Level::Concat, 1, 8, &["d0"]);
    v.plexes.push(
        volume("x", Level::Mirror, 1, 8, &["d1", "d2"])
            .plexes
            .remove(0),
    );
    let mut pool = Pool {
        volumes: vec![v, volume("c", Level::Concat, 20, 8, &["d1"])],
        ..empty_pool(5, DRIVE_BYTES)
    };
    pool.drives[4].state = DriveState::Spare;
    pool.check().unwrap();
    for (d, m) in disks.iter().enumerate() {
        drives::write_slot(m.as_ref(), &pool, d, 0).unwrap();
    }
    let mut open = without_d1(&disks, all(&disks));
    let lost = [("v.p1".to_string(), 0), ("c".to_string(), 0)];
    let healed = heal_in(&mut open, &lost, Room::FreeSpace).unwrap();
    let to: Vec<(&str, &str)> = healed
        .placed
        .iter()
        .map(|p| (p.volume.as_str(), p.to.drive.as_str()))
        .collect();
    // The spare first; never d0 or d2, where the volume's plexes are.
    assert_eq!(to, [("v.p1", "d4")]);
    assert!(
        healed.unplaced[0].contains("c.p0.s0"),
        "{:?}",
        healed.unplaced
    );
    let healed = heal_in(&mut open, &[("v.p0".into(), 0)], Room::FreeSpace).unwrap();
    assert_eq!(healed.placed[0].to.drive, "d3", "{:?}", healed.placed);
    let pool = open.pool().clone();
    pool.check().unwrap();
    let v = pool.volume("v").unwrap();
    assert_eq!(v.plexes[0].subdisks[0].drive, "d3");
    assert_eq!(v.plexes[1].subdisks[0].drive, "d4");
    // No room outside the volume's plexes: named, nothing placed.
    let e = heal_in(&mut open, &[("v.p0".into(), 0)], Room::Spares).unwrap();
    assert!(e.placed.is_empty());
    assert!(e.unplaced[0].contains("v.p0.s0"), "{:?}", e.unplaced);
}
