use platter_io::assembly::assemble_devices;
use platter_io::memory::MemoryMember;
use platter_io::subdisk::SubdiskMember;

use super::super::crash_kit::crashing;
use super::*;
use crate::create::{label_subdisks, ArraySpec};

const MEMBER_BYTES: u64 = 8 << 20;
const MEMBERS: usize = 4;

/// A raid5 of four members as `platter create --reserve RESERVE` makes
/// it, every data byte set to a pattern of its drive offset.
fn array(reserve_bytes: u64) -> Vec<Arc<MemoryMember>> {
    let disks: Vec<Arc<MemoryMember>> = (0..MEMBERS)
        .map(|i| Arc::new(MemoryMember::new(format!("m{i}"), MEMBER_BYTES)))
        .collect();
    let spec = ArraySpec {
        level: Level::Raid5,
        interleave_bytes: 64 << 10,
        layout: None,
        copies: 2,
        name: "vol".into(),
    };
    let members = disks.iter().map(|d| Arc::clone(d) as Arc<dyn Member>);
    label_subdisks(&spec, members.collect(), reserve_bytes).unwrap();
    let label = drives::read_label_at(disks[0].as_ref(), 0)
        .unwrap()
        .unwrap();
    for (i, d) in disks.iter().enumerate() {
        let data = data_bytes(i, &label);
        d.write_at(label.data_offset_bytes, &data).unwrap();
    }
    disks
}

/// What member `i`'s data area holds (not parity-correct: the test reads
/// the bytes, not the volume).
fn data_bytes(i: usize, l: &Label) -> Vec<u8> {
    (0..l.data_size_bytes)
        .map(|b| (b as usize * 7 + i * 13 + (b as usize >> 12)) as u8)
        .collect()
}

fn dyn_members(disks: &[Arc<MemoryMember>]) -> Vec<Arc<dyn Member>> {
    disks
        .iter()
        .map(|d| Arc::clone(d) as Arc<dyn Member>)
        .collect()
}

/// The pool on `disks`, gathered as `serve --pool` gathers it.
fn gathered(disks: &[Arc<MemoryMember>]) -> std::result::Result<Pool, String> {
    super::super::crash_kit::gathered(disks).map(|g| g.pool)
}

/// Checks `disks` hold pool `tank` of the imported volume: its subdisks
/// assemble, whole and clean, with the data area at the same drive bytes
/// holding the same bytes as before.
fn assert_imported(disks: &[Arc<MemoryMember>], before: &Label) {
    let pool = gathered(disks).unwrap();
    assert_eq!(pool.generation, 1);
    let v = pool.volume("vol").expect("the volume keeps its name");
    assert_eq!(v.plex().org, Level::Raid5);
    let subdisks: Vec<Arc<dyn Member>> = v
        .plex()
        .subdisks
        .iter()
        .enumerate()
        .map(|(s, sd)| {
            assert_eq!(sd.offset_bytes, SHIFT_BYTES);
            let d = &disks[pool.drives.iter().position(|d| d.name == sd.drive).unwrap()];
            Arc::new(
                SubdiskMember::new(
                    Arc::clone(d) as Arc<dyn Member>,
                    sd.offset_bytes,
                    sd.len_bytes,
                    format!("s{s}"),
                )
                .unwrap(),
            ) as Arc<dyn Member>
        })
        .collect();
    let opened = assemble_devices(subdisks).unwrap();
    let a = &opened.assembly;
    assert!(a.health.iter().all(|h| *h == Health::Online));
    assert_eq!(a.label.state, VolumeState::Clean);
    assert_eq!(a.label.volume_uuid, before.volume_uuid);
    assert_eq!(
        a.label.data_offset_bytes + SHIFT_BYTES,
        before.data_offset_bytes,
        "the data area stays at the same drive bytes"
    );
    assert_eq!(a.geometry.spec().interleave_bytes, before.interleave_bytes);
    for (i, d) in disks.iter().enumerate() {
        let mut now = vec![0u8; before.data_size_bytes as usize];
        d.read_at(before.data_offset_bytes, &mut now).unwrap();
        assert!(now == data_bytes(i, before), "member {i}'s data moved");
    }
}

#[test]
fn an_import_keeps_the_data_where_it_is() {
    let disks = array(2 << 20);
    let before = drives::read_label_at(disks[0].as_ref(), 0)
        .unwrap()
        .unwrap();
    let pool = import_devices("tank", None, &dyn_members(&disks)).unwrap();
    assert_eq!(pool.volumes.len(), 1);
    assert_imported(&disks, &before);
    // Run again on a finished import: nothing to do, nothing changed.
    import_devices("tank", None, &dyn_members(&disks)).unwrap();
    assert_imported(&disks, &before);
}

/// The story this guards: an import writes every member twice (the moved
/// label, then the pool area over the old one), and a crash can cut any
/// write short. After a crash at any write, at any length, either the
/// old array still assembles whole or a drive is already the pool's, and
/// running the import again finishes it with the data in place.
#[test]
fn a_crash_at_any_write_of_an_import_leaves_the_array_or_an_import_to_finish() {
    let mut kinds = std::collections::BTreeSet::new();
    for torn_at in 0..20 {
        for keep_bytes in [0, 512, 4096, 1 << 20] {
            let disks = array(2 << 20);
            let before = drives::read_label_at(disks[0].as_ref(), 0)
                .unwrap()
                .unwrap();
            let crashing = crashing(&disks, torn_at, keep_bytes);
            if import_devices("tank", None, &crashing).is_ok() {
                kinds.insert("finished");
                assert_imported(&disks, &before);
                continue;
            }
            // Until the first pool area is whole the array is whole, but
            // for the one member whose old label a torn pool area cut.
            let labelled: Vec<Arc<MemoryMember>> = disks
                .iter()
                .filter(|d| drives::read_label_at(d.as_ref(), 0).unwrap().is_some())
                .cloned()
                .collect();
            let old = assemble_devices(dyn_members(&labelled));
            let old_online = old.as_ref().map_or(0, |o| {
                assert_eq!(o.assembly.label.data_offset_bytes, before.data_offset_bytes);
                o.assembly
                    .health
                    .iter()
                    .filter(|h| **h == Health::Online)
                    .count()
            });
            let old_whole = old_online == MEMBERS;
            let some_imported = disks
                .iter()
                .any(|d| drives::read_slots(d.as_ref()).unwrap().newest().is_some());
            assert!(
                old_whole || some_imported || old_online == MEMBERS - 1,
                "write {torn_at} cut at {keep_bytes}: neither the array nor the pool"
            );
            kinds.insert(if old_whole { "array" } else { "part" });
            import_devices("tank", None, &dyn_members(&disks))
                .unwrap_or_else(|e| panic!("write {torn_at} cut at {keep_bytes}: {e}"));
            assert_imported(&disks, &before);
        }
    }
    assert_eq!(
        kinds.len(),
        3,
        "crashes left the array, a part import and none: {kinds:?}"
    );
}

#[test]
fn a_volume_without_room_before_its_data_is_refused_untouched() {
    let disks = array(1 << 20);
    let bytes_before: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
    let e = import_devices("tank", None, &dyn_members(&disks)).unwrap_err();
    assert!(e.0.contains("--reserve 2M"), "{}", e.0);
    for (d, b) in disks.iter().zip(&bytes_before) {
        assert!(d.snapshot() == *b, "a refused import wrote");
    }
}

#[test]
fn a_partial_or_unclean_volume_is_refused() {
    let disks = array(2 << 20);
    let three = dyn_members(&disks[..3]);
    let e = import_devices("tank", None, &three).unwrap_err();
    assert!(e.0.contains("every member"), "{}", e.0);
    let mut dirty = drives::read_label_at(disks[0].as_ref(), 0)
        .unwrap()
        .unwrap();
    dirty.state = VolumeState::Dirty;
    for (i, d) in disks.iter().enumerate() {
        d.write_at(0, &dirty.for_slot(i as u32).encode()).unwrap();
    }
    let e = import_devices("tank", None, &dyn_members(&disks)).unwrap_err();
    assert!(e.0.contains("stop it cleanly"), "{}", e.0);
}

#[test]
fn a_bad_volume_name_or_a_drive_of_another_pool_is_refused() {
    let disks = array(2 << 20);
    let e = import_devices("tank", Some("no way"), &dyn_members(&disks)).unwrap_err();
    assert!(e.0.contains("--volume"), "{}", e.0);
    import_devices("tank", None, &dyn_members(&disks)).unwrap();
    let e = import_devices("other", None, &dyn_members(&disks)).unwrap_err();
    assert!(e.0.contains("drive of pool tank"), "{}", e.0);
}
