use std::sync::Arc;

use platter_core::pool::{DriveState, Pool};
use platter_core::Level;
use platter_io::error::{MemberError, MemberErrorKind, Op};
use platter_io::memory::MemoryMember;
use platter_io::Member;

use super::super::crash_kit::{crashing, empty_pool, gathered, plain, volume};
use super::super::drives::{self, OpenPool};
use super::*;

const MIB: u64 = 1 << 20;
const DRIVE_BYTES: u64 = 24 * MIB;

fn disks() -> Vec<Arc<MemoryMember>> {
    (0..5)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), DRIVE_BYTES)))
        .collect()
}

fn all(disks: &[Arc<dyn Member>]) -> Vec<Option<Arc<dyn Member>>> {
    disks.iter().cloned().map(Some).collect()
}

/// Pool `tank` of five drives: raid5 `r` on d0-d2 at 1 MiB and a concat
/// `c` on d3 at 1 MiB, 4 MiB each, d4 empty; every subdisk holds bytes
/// of its own (what is in them is the copy's business, not its meaning).
fn pool_on(disks: &[Arc<MemoryMember>]) -> Pool {
    let pool = Pool {
        volumes: vec![
            volume("r", Level::Raid5, 1, 4, &["d0", "d1", "d2"]),
            volume("c", Level::Concat, 1, 4, &["d3"]),
        ],
        ..empty_pool(5, DRIVE_BYTES)
    };
    pool.check().unwrap();
    for (d, m) in disks.iter().enumerate() {
        let bytes: Vec<u8> = (0..4 * MIB)
            .map(|i| (i / 4096) as u8 ^ (d as u8 * 37 + 1))
            .collect();
        if d < 4 {
            m.write_at(MIB, &bytes).unwrap();
        }
        drives::write_slot(m.as_ref(), &pool, d, 0).unwrap();
    }
    pool
}

/// The bytes of subdisk `name` where the pool's configuration puts it.
fn subdisk_bytes(disks: &[Arc<MemoryMember>], pool: &Pool, name: &str) -> Vec<u8> {
    let (v, p, s) = parse_subdisk_name(pool, name).unwrap();
    let sd = &pool.volume(&v).unwrap().plexes[p].subdisks[s];
    let d = pool.drives.iter().position(|x| x.name == sd.drive).unwrap();
    let mut out = vec![0u8; sd.len_bytes as usize];
    disks[d].read_at(sd.offset_bytes, &mut out).unwrap();
    out
}

fn open(disks: &[Arc<dyn Member>], memory: &[Arc<MemoryMember>]) -> OpenPool {
    OpenPool::over(gathered(memory).unwrap(), all(disks))
}

/// A move copies every byte, then one configuration puts the subdisk at
/// its new place (the lowest free extent of the drive named) and drops
/// the move; the old place's label is zeroed.
#[test]
fn a_move_copies_every_byte_and_points_the_volume_at_the_copy() {
    let disks = disks();
    pool_on(&disks);
    let before = subdisk_bytes(&disks, &gathered(&disks).unwrap().pool, "r.p0.s1");
    let mut o = open(&plain(&disks), &disks);
    let m = plan_or_resume(&o, "r.p0.s1", Some("d4")).unwrap();
    assert_eq!((m.drive.as_str(), m.offset_bytes), ("d4", MIB));
    let moved = move_in(&mut o, m, UNLIMITED, &AtomicBool::new(false)).unwrap();
    assert_eq!(
        (moved.from.drive.as_str(), moved.to.drive.as_str()),
        ("d1", "d4")
    );
    let pool = gathered(&disks).unwrap().pool;
    assert!(pool.moves.is_empty());
    assert_eq!(pool.volume("r").unwrap().plexes[0].subdisks[1].drive, "d4");
    assert!(subdisk_bytes(&disks, &pool, "r.p0.s1") == before);
    let mut old_label = vec![1u8; LABEL_BYTES];
    disks[1].read_at(MIB, &mut old_label).unwrap();
    assert!(
        old_label.iter().all(|&b| b == 0),
        "the old place's label is zeroed"
    );
    // 1 record, 4 checkpoints (one a chunk at this size), 1 finish.
    assert_eq!(pool.generation, 1 + 1 + 4 + 1);
}

const UNLIMITED: u64 = platter_server::UNLIMITED_RATE;

/// A move onto its plex's other drives (whatever the organisation), onto
/// a drive without room, to a place another move holds, or of a
/// subdisk the pool does not have: one line each, nothing written.
#[test]
fn a_move_that_would_share_a_drive_or_find_no_room_is_refused_by_name() {
    let disks = disks();
    pool_on(&disks);
    let o = open(&plain(&disks), &disks);
    let refused = |name: &str, to: &str, words: &[&str]| {
        let e = plan_or_resume(&o, name, Some(to)).unwrap_err().0;
        assert!(words.iter().all(|w| e.contains(w)), "{name} to {to}: {e}");
    };
    refused("r.p0.s1", "d2", &["r.p0.s2 of its plex", "d2"]);
    refused("r.p0.s0", "d0:1M", &["overlap"]);
    refused("c.p0.s0", "d4:22M", &["not inside drive"]);
    refused("r.p0.s3", "d4", &["no subdisk r.p0.s3"]);
    refused("r.p0.s1", "d9", &["no drive d9"]);
    refused(
        "r.p0.s1",
        "d4:abc",
        &["--to d4:abc: the offset", "invalid size"],
    );
    let mut pool = o.pool().clone();
    pool.drives[4].size_bytes = DRIVE_BYTES;
    let mut full = pool.clone();
    full.volumes
        .push(volume("big", Level::Concat, 1, 22, &["d4"]));
    let e = plan_move(&full, "c", 0, 0, "d4").unwrap_err().0;
    assert!(
        e.contains("needs 4194304 bytes free") && e.contains("largest there is 1048576"),
        "{e}"
    );
    pool.drives[4].state = DriveState::Spare;
    let e = plan_move(&pool, "c", 0, 0, "d4").unwrap_err().0;
    assert!(e.contains("not up"), "{e}");
    assert_eq!(
        gathered(&disks).unwrap().pool.generation,
        1,
        "nothing written"
    );
}

/// The story this guards: a move is many writes (the record, each
/// chunk, each checkpoint, the finish, the old label), and a crash can
/// cut any of them short. At every write, the pool gathered afterwards
/// is valid and names the subdisk at its old place or its new one; run
/// again, the move ends with the subdisk's bytes where the configuration
/// says, equal to what they were.
#[test]
fn a_crash_at_any_write_of_a_move_leaves_a_place_whole_and_it_resumes() {
    let mut outcomes = std::collections::BTreeSet::new();
    for torn_at in 0..40 {
        for keep_bytes in [0, 512] {
            let disks = disks();
            pool_on(&disks);
            let before = subdisk_bytes(&disks, &gathered(&disks).unwrap().pool, "c.p0.s0");
            let cut = crashing(&disks, torn_at, keep_bytes);
            let mut o = open(&cut, &disks);
            let m = plan_or_resume(&o, "c.p0.s0", Some("d4")).unwrap();
            let done = move_in(&mut o, m, UNLIMITED, &AtomicBool::new(false)).is_ok();
            let pool = gathered(&disks).unwrap().pool;
            pool.check().unwrap();
            let at = pool.volume("c").unwrap().plexes[0].subdisks[0]
                .drive
                .clone();
            let recorded = !pool.moves.is_empty();
            outcomes.insert((done, at.clone(), recorded));
            if !recorded {
                assert!(
                    subdisk_bytes(&disks, &pool, "c.p0.s0") == before,
                    "write {torn_at}: {at}"
                );
                continue;
            }
            let mut o = open(&plain(&disks), &disks);
            let m = plan_or_resume(&o, "c.p0.s0", None).unwrap();
            move_in(&mut o, m, UNLIMITED, &AtomicBool::new(false)).unwrap();
            let pool = gathered(&disks).unwrap().pool;
            assert!(pool.moves.is_empty());
            assert!(
                subdisk_bytes(&disks, &pool, "c.p0.s0") == before,
                "write {torn_at}: resumed"
            );
        }
    }
    assert!(
        outcomes.contains(&(true, "d4".into(), false)),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&(false, "d3".into(), true)),
        "{outcomes:?}"
    );
    assert!(
        outcomes.contains(&(false, "d3".into(), false)),
        "{outcomes:?}"
    );
}

/// The story this guards: a server crashed while a move ran with writes
/// landing on both places; one had reached the old place and not the
/// new, below the recorded checkpoint, where the copy does not go again.
/// Taken up again, the move compares what lies below its checkpoint and
/// copies again what differs, so the moved subdisk has the write.
#[test]
fn a_resumed_move_copies_again_what_differs_below_its_checkpoint() {
    let disks = disks();
    pool_on(&disks);
    let mut o = open(&plain(&disks), &disks);
    let m = plan_or_resume(&o, "c.p0.s0", Some("d4")).unwrap();
    let stop = AtomicBool::new(false);
    record_move(&mut o, &m).unwrap();
    let member = moving_member(&o, &m).unwrap();
    for at in (0..3 * MIB).step_by(MIB as usize) {
        member.copy(at, &mut vec![0u8; MIB as usize]).unwrap();
    }
    record_copied(&mut o, &m, 3 * MIB).unwrap();
    // The write that reached only the old place before the crash.
    disks[3]
        .write_at(MIB + 2 * MIB + 4096, &[0xEE; 512])
        .unwrap();
    let before = subdisk_bytes(&disks, &gathered(&disks).unwrap().pool, "c.p0.s0");
    let mut o = open(&plain(&disks), &disks);
    let m = plan_or_resume(&o, "c.p0.s0", None).unwrap();
    assert_eq!(m.copied_bytes, 3 * MIB);
    move_in(&mut o, m, UNLIMITED, &stop).unwrap();
    let pool = gathered(&disks).unwrap().pool;
    assert_eq!(pool.volume("c").unwrap().plexes[0].subdisks[0].drive, "d4");
    assert!(subdisk_bytes(&disks, &pool, "c.p0.s0") == before);
}

/// The story this guards: a heal placed a moving subdisk elsewhere while
/// its copy ran (the old place had failed), dropping the move; the copy,
/// ending, would then have written the configuration that put the
/// subdisk at the move's new place, over the heal's. A move the pool no
/// longer records now finishes, records and gives up nothing.
#[test]
fn a_move_the_pool_no_longer_records_changes_nothing_at_its_end() {
    let disks = disks();
    pool_on(&disks);
    let mut o = open(&plain(&disks), &disks);
    let m = plan_or_resume(&o, "c.p0.s0", Some("d4")).unwrap();
    record_move(&mut o, &m).unwrap();
    let member = moving_member(&o, &m).unwrap();
    let mut pool = o.pool().clone();
    pool.moves.clear();
    o.write(pool).unwrap();
    let generation = o.pool().generation;
    for e in [
        finish_move(&mut o, &m, &member).map(|_| ()).unwrap_err(),
        record_copied(&mut o, &m, MIB).unwrap_err(),
        rebuild_at_new_place(&mut o, &m, &member).unwrap_err(),
        give_up(&mut o, &m, "why"),
    ] {
        assert!(e.0.contains("no longer recorded"), "{}", e.0);
    }
    let pool = gathered(&disks).unwrap().pool;
    assert_eq!(pool.generation, generation, "nothing written");
    assert_eq!(pool.volume("c").unwrap().plexes[0].subdisks[0].drive, "d3");
}

/// A drive whose writes past `from_bytes` fail (full, or failing there);
/// its pool area, before them, still takes the configuration.
struct FullPast {
    inner: Arc<MemoryMember>,
    from_bytes: u64,
}

impl Member for FullPast {
    fn describe(&self) -> &str {
        self.inner.describe()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> std::result::Result<(), MemberError> {
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> std::result::Result<(), MemberError> {
        if offset_bytes + data.len() as u64 > self.from_bytes {
            return Err(MemberError::new(
                MemberErrorKind::NoSpace,
                "full",
                Op::Write,
                offset_bytes,
                data.len() as u64,
            ));
        }
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> std::result::Result<(), MemberError> {
        Ok(())
    }
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> std::result::Result<(), MemberError> {
        self.inner.trim(offset_bytes, len_bytes)
    }
}

/// The new place fills up (or fails) half way through the copy: the
/// move is given up, named with the drive's error, the configuration
/// drops it, and the subdisk stays where it was with every byte.
#[test]
fn a_new_place_that_fills_up_gives_the_move_up_and_keeps_the_subdisk() {
    let disks = disks();
    pool_on(&disks);
    let before = subdisk_bytes(&disks, &gathered(&disks).unwrap().pool, "c.p0.s0");
    let mut drives = plain(&disks);
    drives[4] = Arc::new(FullPast {
        inner: Arc::clone(&disks[4]),
        from_bytes: 3 * MIB,
    });
    let mut o = open(&drives, &disks);
    let m = plan_or_resume(&o, "c.p0.s0", Some("d4")).unwrap();
    let e = move_in(&mut o, m, UNLIMITED, &AtomicBool::new(false))
        .map(|_| ())
        .unwrap_err();
    assert!(
        e.0.contains("was given up") && e.0.contains("no space left"),
        "{}",
        e.0
    );
    let pool = gathered(&disks).unwrap().pool;
    assert!(pool.moves.is_empty(), "the move is dropped");
    assert_eq!(pool.volume("c").unwrap().plexes[0].subdisks[0].drive, "d3");
    assert!(subdisk_bytes(&disks, &pool, "c.p0.s0") == before);
}
