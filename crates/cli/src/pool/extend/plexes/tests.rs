use std::collections::BTreeSet;

use platter_core::label::VolumeState;
use platter_core::volume::Health;
use platter_io::memory::MemoryMember;

use super::super::super::crash_kit::{crashing, empty_pool, gathered, volume};
use super::super::super::plexes::label_plexes;
use super::*;

const MIB: u64 = 1 << 20;

/// Pool `tank` of four 48 MiB drives with volume `u`: a raid5 plex on
/// d0-d2 (8 MiB subdisks at 1 MiB) mirrored by a concat plex on d3 (16
/// MiB at 1 MiB); labelled, its data a pattern (written to each plex as
/// the mirror writes it).
fn pool_on(disks: &[Arc<MemoryMember>]) -> Pool {
    let mut v = volume("u", Level::Raid5, 1, 8, &["d0", "d1", "d2"]);
    v.plexes
        .push(volume("x", Level::Concat, 1, 16, &["d3"]).plexes.remove(0));
    let pool = Pool {
        volumes: vec![v.clone()],
        ..empty_pool(4, 48 * MIB)
    };
    pool.check().unwrap();
    let open = opened(disks);
    label_plexes(&pool, &v, &open).unwrap();
    for (d, m) in disks.iter().enumerate() {
        drives::write_slot(m.as_ref(), &pool, d, 0).unwrap();
    }
    let (plexes, mirror) = served(disks);
    let data = pattern(mirror.volume_size_bytes);
    for m in &plexes {
        m.write_at(mirror.data_offset_bytes, &data).unwrap();
        m.flush().unwrap();
    }
    pool
}

/// Four fresh drives with `u` laid out and written (`pool_on`), checked
/// whole; its size.
fn fresh() -> (Vec<Arc<MemoryMember>>, u64) {
    let disks: Vec<Arc<MemoryMember>> = (0..4)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), 48 * MIB)))
        .collect();
    pool_on(&disks);
    let old = served(&disks).1.volume_size_bytes;
    assert_eq!(assert_volume(&disks, old), old);
    (disks, old)
}

fn pattern(len: u64) -> Vec<u8> {
    (0..len).map(|b| (b * 13 + (b >> 11)) as u8).collect()
}

fn opened(disks: &[Arc<MemoryMember>]) -> Vec<Option<Arc<dyn Member>>> {
    disks
        .iter()
        .map(|d| Some(Arc::clone(d) as Arc<dyn Member>))
        .collect()
}

fn open_over(disks: &[Arc<MemoryMember>], drives: Vec<Option<Arc<dyn Member>>>) -> OpenPool {
    OpenPool::over(gathered(disks).unwrap(), drives)
}

/// Volume `u` as `serve --pool` starts it: each plex's labels brought
/// up and its array assembled whole and clean, then the mirror's labels
/// brought up and the mirror assembled whole and clean, at the size the
/// pool records. Returns the plexes (as the mirror's members) and the
/// mirror's label.
fn served(disks: &[Arc<MemoryMember>]) -> (Vec<Arc<dyn Member>>, Label) {
    let open = open_over(disks, opened(disks));
    let v = open.pool().volume("u").unwrap().clone();
    let mut arrays = Vec::new();
    for p in 0..v.plexes.len() {
        let members = whole_plex(&open, &v, p).unwrap();
        bring_plex_labels_up(open.pool(), &v, p, &members).unwrap();
        let a = assemble_devices(members.clone()).unwrap().assembly;
        assert!(a.health.iter().all(|h| *h == Health::Online), "plex {p}");
        assert_eq!(a.label.state, VolumeState::Clean, "plex {p}");
        arrays.push(members);
    }
    let plexes = plex_members(&v, arrays.into_iter()).unwrap();
    bring_mirror_labels_up(open.pool(), &v, &plexes).unwrap();
    let a = assemble_devices(plexes.clone()).unwrap().assembly;
    assert!(a.health.iter().all(|h| *h == Health::Online), "mirror");
    assert_eq!(a.label.state, VolumeState::Clean);
    if let Some(s) = v.size_bytes {
        assert_eq!(a.label.volume_size_bytes, s, "the size recorded");
    }
    (plexes, a.label)
}

/// `u` served whole at its recorded size, the first `old_bytes` the
/// pattern on every plex and the rest zeros; returns its size.
fn assert_volume(disks: &[Arc<MemoryMember>], old_bytes: u64) -> u64 {
    let (plexes, mirror) = served(disks);
    let size = mirror.volume_size_bytes;
    for (p, m) in plexes.iter().enumerate() {
        let mut data = vec![0u8; size as usize];
        m.read_at(mirror.data_offset_bytes, &mut data).unwrap();
        let (old, gained) = data.split_at(old_bytes as usize);
        assert!(old == pattern(old_bytes), "plex {p}: the data moved");
        assert!(gained.iter().all(|&b| b == 0), "plex {p}: growth not zeros");
    }
    size
}

/// Both plexes grow in place, the concat into the space after its one
/// subdisk and the raid5 each subdisk; the bytes stay, and a start finds
/// the volume whole at the new size.
#[test]
fn a_volume_of_a_raid5_and_a_concat_plex_grows_in_place() {
    let (disks, old) = fresh();
    let mut open = open_over(&disks, opened(&disks));
    let v = open.pool().volume("u").unwrap().clone();
    assert_eq!(extend_plexes(&mut open, &v, old + 10 * MIB).unwrap(), old);
    let size = assert_volume(&disks, old);
    assert!(size >= old + 10 * MIB, "{size}");
    let v = open.pool().volume("u").unwrap();
    assert_eq!(v.size_bytes, Some(size));
    assert!(v.plexes[0].subdisks[0].len_bytes > 8 * MIB);
    assert!(v.plexes[1].subdisks[0].len_bytes > 16 * MIB);
    // No smaller, and no more than the drives hold: refused, unchanged.
    let mut open = open_over(&disks, opened(&disks));
    let v = open.pool().volume("u").unwrap().clone();
    let e = extend_plexes(&mut open, &v, size).unwrap_err();
    assert!(e.0.contains("does not shrink"), "{e}");
    let e = extend_plexes(&mut open, &v, 200 * MIB).unwrap_err();
    assert!(e.0.contains("grows in place"), "{e}");
    assert_eq!(assert_volume(&disks, old), size);
}

/// The story this guards: an extend of a volume of plexes writes zeros
/// into each plex and the mirror's bitmap, one configuration, then each
/// plex's labels, then the mirror's through the plexes; a crash can cut
/// any of those writes short. After a crash at any write, a start finds
/// the volume whole at its old size or the new one, every old byte in
/// place on every plex and the growth zeros, and the extend run again
/// reaches the new size. Both outcomes occur.
#[test]
fn a_crash_at_any_write_of_a_plexes_extend_leaves_the_old_size_or_the_new() {
    let mut outcomes = BTreeSet::new();
    let mut torn_at = 0;
    loop {
        let mut finished = false;
        for keep_bytes in [0, 512, 4096] {
            let (disks, old) = fresh();
            let target = old + 10 * MIB;
            let cut = crashing(&disks, torn_at, keep_bytes);
            let mut open = open_over(&disks, cut.into_iter().map(Some).collect());
            let v = open.pool().volume("u").unwrap().clone();
            finished |= extend_plexes(&mut open, &v, target).is_ok();
            let story = format!("write {torn_at} cut at {keep_bytes}");
            let size = assert_volume(&disks, old);
            assert!(size == old || size >= target, "{story}: {size}");
            outcomes.insert(size == old);
            if size == old {
                let mut open = open_over(&disks, opened(&disks));
                let v = open.pool().volume("u").unwrap().clone();
                extend_plexes(&mut open, &v, target).unwrap();
            }
            assert!(assert_volume(&disks, old) >= target, "{story}");
        }
        if finished {
            break;
        }
        torn_at += 1;
        assert!(torn_at < 400, "the extend never finished");
    }
    assert_eq!(outcomes.len(), 2, "crashes left the old size and the new");
}
