use platter_io::memory::MemoryMember;

use super::super::crash_kit::{crashing, volume};
use super::super::drives;
use super::*;
use crate::create::{label_subdisks, subdisk_reserve_bytes, ArraySpec};

const MIB: u64 = 1 << 20;
const DRIVE_BYTES: u64 = 48 * MIB;

/// Pool `tank` of three drives: raid5 `r` (8 MiB subdisks at 1 MiB),
/// concat `c` (d0 at 20 MiB, then d1 at 20 MiB), and `block` on d2 at
/// 30 MiB, which leaves `r`'s subdisk on d2 room up to 30 MiB only.
/// Every volume labelled, its data areas filled with a pattern.
fn pool_on(disks: &[Arc<MemoryMember>]) -> Pool {
    pool_with(
        disks,
        vec![
            volume("r", Level::Raid5, 1, 8, &["d0", "d1", "d2"]),
            volume("c", Level::Concat, 20, 4, &["d0", "d1"]),
            volume("block", Level::Concat, 30, 4, &["d2"]),
        ],
    )
}

/// Pool `tank` of three drives holding `volumes`, each labelled, its
/// data areas filled with a pattern.
fn pool_with(disks: &[Arc<MemoryMember>], volumes: Vec<PoolVolume>) -> Pool {
    let pool = Pool {
        volumes,
        ..super::super::crash_kit::empty_pool(3, DRIVE_BYTES)
    };
    pool.check().unwrap();
    let open = opened(disks);
    for v in &pool.volumes {
        let members = drives::subdisk_members(&pool, v, &open).unwrap();
        let spec = ArraySpec {
            level: v.plex().org,
            interleave_bytes: 64 << 10,
            layout: None,
            copies: 2,
            name: v.name.clone(),
        };
        let reserve = subdisk_reserve_bytes(v.plex().subdisks[0].len_bytes);
        label_subdisks(&spec, members.clone(), reserve).unwrap();
        for (s, m) in members.iter().enumerate() {
            let l = label_of(m.as_ref());
            m.write_at(l.data_offset_bytes, &pattern(s, l.data_size_bytes))
                .unwrap();
        }
    }
    for (d, m) in disks.iter().enumerate() {
        drives::write_slot(m.as_ref(), &pool, d, 0).unwrap();
    }
    pool
}

fn pattern(s: usize, len: u64) -> Vec<u8> {
    (0..len)
        .map(|b| (b as usize * 31 + s * 7 + (b as usize >> 9)) as u8)
        .collect()
}

fn label_of(m: &dyn Member) -> Label {
    let mut buf = vec![0u8; LABEL_BYTES];
    m.read_at(0, &mut buf).unwrap();
    Label::decode(&buf).unwrap()
}

fn opened(disks: &[Arc<MemoryMember>]) -> Vec<Option<Arc<dyn Member>>> {
    disks
        .iter()
        .map(|d| Some(Arc::clone(d) as Arc<dyn Member>))
        .collect()
}

fn disks() -> Vec<Arc<MemoryMember>> {
    (0..3)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), DRIVE_BYTES)))
        .collect()
}

/// The pool on `disks` opened as a command opens it, over `drives`.
fn open_over(disks: &[Arc<MemoryMember>], drives: Vec<Option<Arc<dyn Member>>>) -> OpenPool {
    OpenPool::over(super::super::crash_kit::gathered(disks).unwrap(), drives)
}

/// Volume `name` as `serve --pool` finds it: labels brought up, then
/// assembled. Checks it is whole and clean, that every member's old data
/// is where it was, and that what it gained reads as zeros.
fn assert_volume(disks: &[Arc<MemoryMember>], name: &str, old: &[Label]) -> u64 {
    let open = open_over(disks, opened(disks));
    let v = open.pool().volume(name).unwrap().clone();
    let members = open.subdisks(&v).unwrap();
    bring_labels_up(open.pool(), &v, &members).unwrap();
    let a = assemble_devices(members.clone()).unwrap().assembly;
    assert!(a.health.iter().all(|h| *h == Health::Online), "{name}");
    assert_eq!(a.label.state, VolumeState::Clean);
    if let Some(s) = v.size_bytes {
        assert_eq!(a.label.volume_size_bytes, s, "{name}: the size recorded");
    }
    for (s, (m, was)) in members.iter().zip(old).enumerate() {
        let now = label_of(m.as_ref());
        assert_eq!(now.data_offset_bytes, was.data_offset_bytes);
        let mut data = vec![0u8; was.data_size_bytes as usize];
        m.read_at(was.data_offset_bytes, &mut data).unwrap();
        assert!(
            data == pattern(s, was.data_size_bytes),
            "{name}: data moved"
        );
        let gained = now.data_size_bytes - was.data_size_bytes;
        let mut new = vec![1u8; gained as usize];
        m.read_at(was.data_offset_bytes + was.data_size_bytes, &mut new)
            .unwrap();
        assert!(new.iter().all(|&b| b == 0), "{name}: growth not zeroed");
    }
    a.label.volume_size_bytes
}

fn labels(disks: &[Arc<MemoryMember>], name: &str) -> Vec<Label> {
    let open = open_over(disks, opened(disks));
    let v = open.pool().volume(name).unwrap().clone();
    open.subdisks(&v)
        .unwrap()
        .iter()
        .map(|m| label_of(m.as_ref()))
        .collect()
}

#[test]
fn a_raid5_and_a_concat_grow_in_place() {
    let disks = disks();
    pool_on(&disks);
    let r_before = labels(&disks, "r");
    let c_before = labels(&disks, "c");
    let r_size = r_before[0].volume_size_bytes;
    let mut open = open_over(&disks, opened(&disks));
    let v = open.pool().volume("r").unwrap().clone();
    extend_volume(&mut open, &v, r_size + 20 * MIB).unwrap();
    let grown = assert_volume(&disks, "r", &r_before);
    assert!(grown >= r_size + 20 * MIB, "{grown}");
    let v = open.pool().volume("c").unwrap().clone();
    let c_size = c_before[0].volume_size_bytes;
    extend_volume(&mut open, &v, c_size + 10 * MIB).unwrap();
    assert!(assert_volume(&disks, "c", &c_before) >= c_size + 10 * MIB);
    let c_after = labels(&disks, "c");
    assert_eq!(
        c_after[0].slots[0].data_size_bytes, c_before[0].slots[0].data_size_bytes,
        "a concat's first subdisk keeps its size: its bytes map by it"
    );
}

#[test]
fn an_extend_without_the_room_or_smaller_is_refused_untouched() {
    let disks = disks();
    pool_on(&disks);
    let before: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
    let size = labels(&disks, "r")[0].volume_size_bytes;
    let mut open = open_over(&disks, opened(&disks));
    let v = open.pool().volume("r").unwrap().clone();
    let e = extend_volume(&mut open, &v, size + 60 * MIB).unwrap_err();
    assert!(e.0.contains("drive d0 has"), "{}", e.0);
    let e = extend_volume(&mut open, &v, size).unwrap_err();
    assert!(e.0.contains("does not shrink"), "{}", e.0);
    for (d, b) in disks.iter().zip(&before) {
        assert!(d.snapshot() == *b, "a refused extend wrote");
    }
}

/// The story this guards: an extend zeroes the growth, writes the
/// configuration on every drive, then rewrites every label, and a crash
/// can cut any of those writes short. After a crash at any write, at any
/// length, the pool gathers, the volume assembles whole and clean at its
/// old size or its new one (labels a crash left behind brought up, as
/// `serve --pool` brings them), its old bytes in place, and running the
/// extend again reaches the new size.
#[test]
fn a_crash_at_any_write_of_an_extend_leaves_the_old_size_or_the_new() {
    crash_every_write(pool_on, "r", 16 * MIB, 40);
}

/// Extends `name` of the pool `make` lays out by `more` bytes, cut at
/// each of the first `writes` writes at several lengths: after each, the
/// volume is whole at its old size or the new one, its old bytes in
/// place, and the extend run again reaches the new size. Both outcomes
/// must occur.
fn crash_every_write(make: fn(&[Arc<MemoryMember>]) -> Pool, name: &str, more: u64, writes: usize) {
    let mut sizes = std::collections::BTreeSet::new();
    for torn_at in 0..writes {
        for keep_bytes in [0, 512, 4096] {
            let disks = disks();
            make(&disks);
            let before = labels(&disks, name);
            let old_size = before[0].volume_size_bytes;
            let cut = crashing(&disks, torn_at, keep_bytes);
            let mut open = open_over(&disks, cut.into_iter().map(Some).collect());
            let v = open.pool().volume(name).unwrap().clone();
            let target = old_size + more;
            let done = extend_volume(&mut open, &v, target).is_ok();
            let size = assert_volume(&disks, name, &before);
            assert!(
                size == old_size || size >= target,
                "write {torn_at} cut at {keep_bytes}: {size}"
            );
            assert!(!done || size >= target);
            sizes.insert(size == old_size);
            let mut open = open_over(&disks, opened(&disks));
            let v = open.pool().volume(name).unwrap().clone();
            if size == old_size {
                extend_volume(&mut open, &v, target).unwrap();
            }
            assert!(assert_volume(&disks, name, &before) >= target);
        }
    }
    assert_eq!(sizes.len(), 2, "crashes left the old size and the new");
}

/// Concat `c` (d0 at 20 MiB, d1 at 20 MiB) with `block` right after its
/// last subdisk: no room to grow in place.
fn boxed_in(disks: &[Arc<MemoryMember>]) -> Pool {
    pool_with(
        disks,
        vec![
            volume("r", Level::Raid5, 1, 8, &["d0", "d1", "d2"]),
            volume("c", Level::Concat, 20, 4, &["d0", "d1"]),
            volume("block", Level::Concat, 24, 4, &["d1"]),
        ],
    )
}

/// A concat whose last subdisk has no room after it takes a new subdisk
/// where a drive has room (vinum's and LVM's way), zeroed; its bytes
/// before stay where they were.
#[test]
fn a_concat_boxed_in_grows_by_a_new_subdisk() {
    let disks = disks();
    boxed_in(&disks);
    let before = labels(&disks, "c");
    let size = before[0].volume_size_bytes;
    let mut open = open_over(&disks, opened(&disks));
    let v = open.pool().volume("c").unwrap().clone();
    extend_volume(&mut open, &v, size + 10 * MIB).unwrap();
    let grown = open.pool().volume("c").unwrap().clone();
    assert_eq!(grown.plex().subdisks.len(), 3, "{grown:?}");
    assert!(assert_volume(&disks, "c", &before) >= size + 10 * MIB);
    let after = labels(&disks, "c");
    assert_eq!(after.len(), 3);
    assert!(after.iter().all(|l| l.member_count == 3), "{after:?}");
    let new = &after[2];
    let members = open.subdisks(&grown).unwrap();
    let mut data = vec![1u8; new.slots[2].data_size_bytes as usize];
    members[2]
        .read_at(new.data_offset_bytes, &mut data)
        .unwrap();
    assert!(data.iter().all(|&b| b == 0), "the new subdisk reads zeros");
}

/// A crash at any write of a concat's growth by a new subdisk (its zeros,
/// its label, the configuration, the other labels) leaves the old size or
/// the new one, whole and clean, the old bytes in place.
#[test]
fn a_crash_at_any_write_of_a_concat_taking_a_subdisk_leaves_the_old_size_or_the_new() {
    crash_every_write(boxed_in, "c", 10 * MIB, 16);
}

/// A drive whose writes fail while `failing` is set; with `lands` set,
/// a write lands before it fails (as one whose flush then fails).
struct Flaky {
    inner: Arc<MemoryMember>,
    failing: std::sync::atomic::AtomicBool,
    lands: bool,
}

impl Member for Flaky {
    fn describe(&self) -> &str {
        self.inner.describe()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, o: u64, b: &mut [u8]) -> std::result::Result<(), platter_io::MemberError> {
        self.inner.read_at(o, b)
    }
    fn write_at(&self, o: u64, d: &[u8]) -> std::result::Result<(), platter_io::MemberError> {
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            if self.lands {
                self.inner.write_at(o, d)?;
            }
            return Err(platter_io::MemberError::new(
                platter_io::error::MemberErrorKind::Gone,
                "flaky",
                platter_io::error::Op::Write,
                o,
                0,
            ));
        }
        self.inner.write_at(o, d)
    }
    fn flush(&self) -> std::result::Result<(), platter_io::MemberError> {
        Ok(())
    }
    fn trim(&self, o: u64, l: u64) -> std::result::Result<(), platter_io::MemberError> {
        self.inner.trim(o, l)
    }
}

fn flaky(disk: &Arc<MemoryMember>, lands: bool) -> Arc<Flaky> {
    Arc::new(Flaky {
        inner: Arc::clone(disk),
        failing: std::sync::atomic::AtomicBool::new(true),
        lands,
    })
}

/// How it showed (a review of the pool's server): the server keeps one
/// open pool across requests. A change whose configuration write failed
/// on d2 left d0 and d1 at generation G+1 while the open pool still said
/// G; the next change was written at G+1 too, with other content, and
/// the pool no longer gathered ("a different configuration at the same
/// generation"). A write that no drive took uses its generation up.
#[test]
fn a_configuration_write_that_failed_part_way_does_not_reuse_its_generation() {
    let disks = disks();
    pool_on(&disks);
    // d0 takes the write but fails it; d1 and d2 refuse it.
    let all: Vec<Arc<Flaky>> = (0..3).map(|d| flaky(&disks[d], d == 0)).collect();
    let drives = all
        .iter()
        .map(|f| Some(f.clone() as Arc<dyn Member>))
        .collect();
    let mut open = open_over(&disks, drives);
    assert!(super::super::make::remove_in(&mut open, "c").is_err());
    for f in &all {
        f.failing.store(false, std::sync::atomic::Ordering::SeqCst);
    }
    super::super::make::remove_in(&mut open, "block").unwrap();
    let g = super::super::crash_kit::gathered(&disks);
    assert!(
        g.is_ok(),
        "the pool no longer gathers: {}",
        g.err().unwrap()
    );
    let pool = g.unwrap().pool;
    assert!(pool.volume("block").is_none() && pool.volume("c").is_some());
}

/// How it showed (a pool served, one drive truncated under it): every
/// change through the server then failed, `pool add-drive --spare` too,
/// because the configuration's write to the dead drive failed. A drive
/// that fails the write is left out now, as a missing one, and the change
/// stands on the others; the drive is behind when it is found again.
#[test]
fn a_drive_failing_the_configuration_write_is_left_out_and_the_change_stands() {
    let disks = disks();
    pool_on(&disks);
    let bad = flaky(&disks[2], false);
    let drives: Vec<Option<Arc<dyn Member>>> = vec![
        Some(Arc::clone(&disks[0]) as Arc<dyn Member>),
        Some(Arc::clone(&disks[1]) as Arc<dyn Member>),
        Some(bad.clone() as Arc<dyn Member>),
    ];
    let mut open = open_over(&disks, drives);
    super::super::make::remove_in(&mut open, "c").unwrap();
    assert!(open.drives[2].is_none() && open.gathered.missing == ["d2"]);
    bad.failing
        .store(false, std::sync::atomic::Ordering::SeqCst);
    super::super::make::remove_in(&mut open, "block").unwrap();
    let g = super::super::crash_kit::gathered(&disks).unwrap();
    assert!(g.pool.volume("block").is_none() && g.pool.volume("c").is_none());
    assert_eq!(g.behind.len(), 1, "d2 is behind: {:?}", g.behind);
    assert_eq!(g.behind[0].0, "d2");
}

/// How it showed (a review): `{"cmd": "volume-create", "size_bytes":
/// 18446744073709486080, ...}` to a pool's server overflowed in the
/// placement's arithmetic and panicked with the pool's change lock held,
/// after which every change and the stop panicked too. Sizes near 2^64,
/// created or extended, are refused now, nothing written.
#[test]
fn sizes_near_2_to_the_64_are_refused_not_panicked_on() {
    let disks = disks();
    pool_on(&disks);
    let before: Vec<Vec<u8>> = disks.iter().map(|d| d.snapshot()).collect();
    let mut open = open_over(&disks, opened(&disks));
    for level in ["mirror", "concat", "raid5", "raid10"] {
        for size in [u64::MAX, u64::MAX - 65535, 1 << 62] {
            let req = serde_json::json!({"cmd": "volume-create", "name": "big", "level": level,
                "size_bytes": size});
            let args = super::super::make::VolumeCreateArgs::from_request("tank", &req).unwrap();
            let e = super::super::make::create_in(&mut open, &args).unwrap_err();
            assert!(e.0.contains("at most"), "{level} {size}: {}", e.0);
        }
    }
    for name in ["c", "r"] {
        let label = labels(&disks, name)[0].clone();
        let v = open.pool().volume(name).unwrap().clone();
        for size in [u64::MAX, u64::MAX - 4096, u64::MAX - (4 << 20)] {
            assert!(grow(&mut open, &v, &label, size).is_err(), "{name} {size}");
        }
    }
    for (d, b) in disks.iter().zip(&before) {
        assert!(d.snapshot() == *b, "a refused change wrote");
    }
}

/// `volume extend --add-subdisks` records the new subdisks before the
/// reshape onto them writes their labels. A crash between the two leaves
/// them blank, beyond the member count every label says: the next start
/// finds exactly those (`unbegun_subdisks`) and takes them out again, the
/// volume as it was. Once labelled, or with one missing, none is taken.
#[test]
fn subdisks_added_for_a_reshape_that_never_began_are_taken_out_again() {
    let disks = disks();
    pool_with(
        &disks,
        vec![volume("s", Level::Stripe, 1, 8, &["d0", "d1"])],
    );
    let mut open = open_over(&disks, opened(&disks));
    let v = open.pool().volume("s").unwrap().clone();
    let grown = add_plex_subdisks(&mut open, &v, 1).unwrap();
    assert_eq!(grown.plex().subdisks[2].drive, "d2");
    let members = open.subdisks(&grown).unwrap();
    assert_eq!(unbegun_subdisks(&grown, &members).unwrap(), 1);
    // With a subdisk missing, nothing is judged.
    assert_eq!(unbegun_subdisks(&grown, &members[..2]).unwrap(), 0);
    let kept = drop_plex_subdisks(&mut open, &grown, 1).unwrap();
    assert_eq!(kept, v);
    let again = open_over(&disks, opened(&disks));
    assert_eq!(again.pool().volume("s").unwrap(), &v);
    // Labelled (the reshape began), the added one is the volume's.
    let grown = add_plex_subdisks(&mut open, &v, 1).unwrap();
    let members = open.subdisks(&grown).unwrap();
    let l = label_of(members[0].as_ref());
    members[2].write_at(0, &l.encode()).unwrap();
    assert_eq!(unbegun_subdisks(&grown, &members).unwrap(), 0);
}
