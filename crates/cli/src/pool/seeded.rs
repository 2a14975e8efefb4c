//! Seeded: a pool of drives in memory goes through a seeded run of
//! changes (volumes created, extended and removed, and a drive lost under
//! them healed: `pool heal` places the lost subdisks of its redundant
//! volumes in free space, and a rebuild, stood in for by a copy of the
//! lost subdisk's bytes, fills them), the last of them cut
//! off at a seeded write, at a seeded length, as a kill -9 or a power cut
//! there would leave the drives. After it, as `serve --pool` would find
//! them: the configuration gathers and keeps every rule, every volume it
//! gives assembles whole and clean (an extend's labels brought up; one
//! whose subdisk the cut heal placed anew assembles from the others, that
//! subdisk blank), and every volume made before the cut still holds the
//! bytes written to it.
//! The pool then takes the next change.
//!
//! `PLATTER_POOL_SEEDS` (default 200) and `PLATTER_POOL_FIRST_SEED` set
//! the seeds; a failure names its seed, which replays alone with
//! `PLATTER_POOL_FIRST_SEED=N PLATTER_POOL_SEEDS=1`.

use std::collections::BTreeMap;
use std::sync::Arc;

use platter_core::label::{Label, VolumeState, LABEL_BYTES};
use platter_core::volume::Health;
use platter_core::Level;
use platter_io::assembly::assemble_devices;
use platter_io::memory::MemoryMember;
use platter_io::Member;
use platter_testkit::rng::Rng;

use super::crash_kit::{crashing, env_u64, gathered, open_over, plain, write_empty_pool};
use super::drives::OpenPool;
use super::extend::{bring_labels_up, extend_volume};
use super::heal::{heal_in, Room};
use super::make::{create_in, remove_in, VolumeCreateArgs};
use super::relocate::{move_in, plan_move};
use platter_core::pool::{DriveState, Pool, Subdisk};
use std::sync::atomic::AtomicBool;

const MIB: u64 = 1 << 20;
const DRIVES: u8 = 4;
const DRIVE_BYTES: u64 = 48 * MIB;
/// Bytes of each subdisk's data area a volume's pattern covers.
const PATTERN_BYTES: u64 = 128 << 10;

#[derive(Debug)]
enum Change {
    /// Name, level, size, and how many subdisks (all drives: `None`).
    Create(String, Level, u64, Option<u32>),
    Extend(String, u64),
    Remove(String),
    /// The drive is lost: its redundant volumes' subdisks placed anew.
    Heal(usize),
    /// A subdisk (volume, slot) moved to a drive (`subdisk move`).
    Move(String, usize, String),
}

/// Picks the next change from `rng`; with `heals` (a second stream, so
/// that a seed without one replays as it did before heals were picked),
/// one change in five loses a drive and heals it, and a volume is made
/// on fewer drives than the pool has, leaving room outside its plex.
fn pick_change(rng: &mut Rng, heals: &mut Option<Rng>, pool: &Pool, n: &mut u32) -> Change {
    let names: Vec<&String> = pool.volumes.iter().map(|v| &v.name).collect();
    if let Some(h) = heals.as_mut() {
        let up: Vec<usize> = (0..pool.drives.len())
            .filter(|&d| pool.drives[d].state == DriveState::Up)
            .collect();
        if h.below(5) == 0 && !up.is_empty() {
            return Change::Heal(up[h.below(up.len() as u64) as usize]);
        }
        // A third stream, so that the seeds replay their heals as before.
        if h.below(4) == 0 && !pool.volumes.is_empty() {
            let v = &pool.volumes[h.below(pool.volumes.len() as u64) as usize];
            let slot = h.below(v.plex().subdisks.len() as u64) as usize;
            let drive = &pool.drives[h.below(pool.drives.len() as u64) as usize].name;
            return Change::Move(v.name.clone(), slot, drive.clone());
        }
    }
    match (rng.below(3), names.is_empty()) {
        (1, false) => {
            let v = names[rng.below(names.len() as u64) as usize];
            Change::Extend(v.clone(), (1 + rng.below(8)) * MIB)
        }
        (2, false) => Change::Remove(names[rng.below(names.len() as u64) as usize].clone()),
        _ => {
            *n += 1;
            let level = Level::ALL[rng.below(Level::ALL.len() as u64) as usize];
            let fewer = heals.as_mut().and_then(|h| {
                let min = level.min_members().max(2);
                (level != Level::Concat && min < u32::from(DRIVES))
                    .then(|| min + h.below(u64::from(u32::from(DRIVES) - min)) as u32)
            });
            Change::Create(format!("v{n}"), level, (1 + rng.below(10)) * MIB, fewer)
        }
    }
}

/// Applies `change`; a refusal (no room, too few drives) is an outcome
/// like any other, but never a panic.
fn apply(open: &mut OpenPool, change: &Change) -> bool {
    match change {
        Change::Create(name, level, size, subdisks) => {
            let mut args = VolumeCreateArgs::new("tank", name, *level, *size);
            args.subdisks = *subdisks;
            create_in(open, &args).is_ok()
        }
        Change::Extend(name, more) => {
            let v = open
                .pool()
                .volume(name)
                .cloned()
                .expect("picked from the pool");
            let now = v.size_bytes.unwrap_or(0).max(volume_bytes(open, name));
            extend_volume(open, &v, now + more).is_ok()
        }
        Change::Remove(name) => remove_in(open, name).is_ok(),
        Change::Heal(d) => {
            // As a command finds the pool with the drive gone.
            let name = open.pool().drives[*d].name.clone();
            open.drives[*d] = None;
            open.gathered.present.retain(|(_, x)| *x != name);
            open.gathered.missing.push(name.clone());
            let lost: Vec<(String, usize)> = open
                .pool()
                .volumes
                .iter()
                .flat_map(|v| {
                    let on = v.plex().subdisks.iter().enumerate();
                    on.filter(|(_, sd)| sd.drive == name)
                        .map(|(s, _)| (v.name.clone(), s))
                        .collect::<Vec<_>>()
                })
                .collect();
            heal_in(open, &lost, Room::FreeSpace).is_ok_and(|h| !h.placed.is_empty())
        }
        Change::Move(name, slot, drive) => {
            let Ok(m) = plan_move(open.pool(), name, 0, *slot, drive) else {
                return false;
            };
            move_in(
                open,
                m,
                platter_server::UNLIMITED_RATE,
                &AtomicBool::new(false),
            )
            .is_ok()
        }
    }
}

/// A move the pool records (a cut left it), taken up and finished as
/// `subdisk move` without --to, or `serve --pool`, would.
fn finish_recorded_moves(disks: &[Arc<MemoryMember>], seed: u64) -> bool {
    let mut o = open_over(disks, plain(disks));
    let Some(m) = o.pool().moves.first().cloned() else {
        return false;
    };
    move_in(
        &mut o,
        m,
        platter_server::UNLIMITED_RATE,
        &AtomicBool::new(false),
    )
    .unwrap_or_else(|e| panic!("seed {seed}: a recorded move taken up: {}", e.0));
    true
}

/// The subdisks `now` places elsewhere than `was` did, each with its old
/// place: (volume, slot, old, new).
fn moved(was: &Pool, now: &Pool) -> Vec<(String, usize, Subdisk, Subdisk)> {
    let mut out = Vec::new();
    for v in &now.volumes {
        let Some(old) = was.volume(&v.name) else {
            continue;
        };
        let pairs = old.plex().subdisks.iter().zip(&v.plex().subdisks);
        for (s, (a, b)) in pairs.enumerate() {
            if a.drive != b.drive {
                out.push((v.name.clone(), s, a.clone(), b.clone()));
            }
        }
    }
    out
}

/// The rebuild of each subdisk a heal placed anew, stood in for: the
/// lost subdisk's bytes (still on its drive in memory) copied whole.
fn rebuild_moved(
    disks: &[Arc<MemoryMember>],
    pool: &Pool,
    moved: &[(String, usize, Subdisk, Subdisk)],
) {
    let at = |name: &str| {
        pool.drives
            .iter()
            .position(|d| d.name == name)
            .expect("a drive")
    };
    for (_, _, old, new) in moved {
        let mut bytes = vec![0u8; old.len_bytes as usize];
        disks[at(&old.drive)]
            .read_at(old.offset_bytes, &mut bytes)
            .unwrap();
        disks[at(&new.drive)]
            .write_at(new.offset_bytes, &bytes)
            .unwrap();
    }
}

fn volume_bytes(open: &OpenPool, name: &str) -> u64 {
    let v = open.pool().volume(name).expect("there").clone();
    let members = open.subdisks(&v).unwrap();
    label_of(members[0].as_ref()).volume_size_bytes
}

fn label_of(m: &dyn Member) -> Label {
    let mut buf = vec![0u8; LABEL_BYTES];
    m.read_at(0, &mut buf).unwrap();
    Label::decode(&buf).unwrap()
}

fn pattern(volume: &str, s: usize) -> Vec<u8> {
    let salt = volume.bytes().fold(s as u64, |a, b| a * 31 + u64::from(b));
    (0..PATTERN_BYTES)
        .map(|b| (b.wrapping_mul(7) ^ salt ^ (b >> 9)) as u8)
        .collect()
}

/// Writes each subdisk of `name` its pattern at the start of its data;
/// returns how many it has.
fn fill(open: &OpenPool, name: &str) -> usize {
    let v = open.pool().volume(name).expect("there").clone();
    let members = open.subdisks(&v).unwrap();
    for (s, m) in members.iter().enumerate() {
        let l = label_of(m.as_ref());
        m.write_at(l.data_offset_bytes, &pattern(name, s)).unwrap();
    }
    members.len()
}

/// What `serve --pool` finds: every volume whole and clean (but for the
/// subdisks `blank` names, placed anew by a heal and not rebuilt: blank,
/// the volume whole without them), and those in `written` holding their
/// patterns on the subdisks they were written to (how many), and zeros
/// on any a concat took since.
fn check_pool(
    disks: &[Arc<MemoryMember>],
    written: &BTreeMap<String, usize>,
    blank: &[(String, usize)],
    seed: u64,
) {
    let open = open_over(disks, plain(disks));
    open.pool()
        .check()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for v in &open.pool().volumes {
        let members = open.subdisks(v).unwrap();
        let is_blank = |s: usize| blank.contains(&(v.name.clone(), s));
        for (s, m) in members.iter().enumerate().filter(|(s, _)| is_blank(*s)) {
            let area = platter_io::assembly::read_label_area(m.as_ref()).unwrap();
            assert!(
                area.iter().all(|&b| b == 0),
                "seed {seed}: {} {s}: not blank",
                v.name
            );
        }
        let labelled: Vec<Arc<dyn Member>> = members
            .iter()
            .enumerate()
            .filter(|(s, _)| !is_blank(*s))
            .map(|(_, m)| Arc::clone(m))
            .collect();
        bring_labels_up(open.pool(), v, &labelled).unwrap();
        let a = assemble_devices(labelled)
            .unwrap_or_else(|e| panic!("seed {seed}: volume {}: {e}", v.name))
            .assembly;
        for (s, h) in a.health.iter().enumerate() {
            let want = if is_blank(s) {
                Health::Missing
            } else {
                Health::Online
            };
            assert_eq!(*h, want, "seed {seed}: volume {} member {s}", v.name);
        }
        assert_eq!(a.label.state, VolumeState::Clean, "seed {seed}: {}", v.name);
        if let Some(size) = v.size_bytes {
            assert_eq!(a.label.volume_size_bytes, size, "seed {seed}: {}", v.name);
        }
        let Some(&filled) = written.get(&v.name) else {
            continue;
        };
        for (s, m) in members.iter().enumerate().filter(|(s, _)| !is_blank(*s)) {
            let l = label_of(m.as_ref());
            let mut now = vec![0u8; PATTERN_BYTES as usize];
            m.read_at(l.data_offset_bytes, &mut now).unwrap();
            if s < filled {
                assert!(
                    now == pattern(&v.name, s),
                    "seed {seed}: volume {} subdisk {s}: its bytes changed",
                    v.name
                );
            } else {
                assert!(
                    now.iter().all(|&b| b == 0),
                    "seed {seed}: volume {} took subdisk {s} with bytes in it",
                    v.name
                );
            }
        }
    }
}

/// What a seed did, so that the run can tell it did something: changes
/// made whole, and whether the cut change failed (cut) or finished.
#[derive(Default)]
struct Tally {
    made: u64,
    healed: u64,
    /// Moves made whole, and moves a cut left recorded, taken up after.
    moved: u64,
    taken_up: u64,
    cut_short: u64,
    cut_finished: u64,
}

/// Seed `seed`'s run; with `heals`, drives are lost and healed too.
fn run_seed(seed: u64, heals: bool, tally: &mut Tally) {
    let mut rng = Rng::new(seed);
    let mut heals = heals.then(|| Rng::new(seed ^ 0x4ea1_4ea1_4ea1_4ea1));
    let disks: Vec<Arc<MemoryMember>> = (0..DRIVES)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), DRIVE_BYTES)))
        .collect();
    write_empty_pool(&disks, DRIVE_BYTES);
    let mut written = BTreeMap::new();
    let mut n = 0;
    for _ in 0..1 + rng.below(6) {
        let mut o = open_over(&disks, plain(&disks));
        let was = o.pool().clone();
        let change = pick_change(&mut rng, &mut heals, o.pool(), &mut n);
        if apply(&mut o, &change) {
            tally.made += 1;
            match &change {
                Change::Create(name, ..) => {
                    written.insert(name.clone(), fill(&o, name));
                }
                Change::Remove(name) => {
                    written.remove(name);
                }
                Change::Extend(..) => {}
                Change::Move(..) => tally.moved += 1,
                Change::Heal(_) => {
                    tally.healed += 1;
                    rebuild_moved(&disks, o.pool(), &moved(&was, o.pool()));
                }
            }
        }
    }
    let o = open_over(&disks, plain(&disks));
    let was = o.pool().clone();
    let change = pick_change(&mut rng, &mut heals, o.pool(), &mut n);
    let torn_at = rng.below(24) as usize;
    let keep_bytes = [0, 512, 4096, 1 << 20][rng.below(4) as usize];
    let mut cut = open_over(&disks, crashing(&disks, torn_at, keep_bytes));
    if apply(&mut cut, &change) {
        tally.cut_finished += 1;
    } else {
        tally.cut_short += 1;
    }
    let now = gathered(&disks).unwrap().pool;
    // A heal's new places are blank until rebuilt; a move's hold a copy.
    let cut_moved = match change {
        Change::Move(..) => Vec::new(),
        _ => moved(&was, &now),
    };
    let blank: Vec<(String, usize)> = cut_moved.iter().map(|(v, s, ..)| (v.clone(), *s)).collect();
    check_pool(&disks, &written, &blank, seed);
    rebuild_moved(&disks, &now, &cut_moved);
    check_pool(&disks, &written, &[], seed);
    if finish_recorded_moves(&disks, seed) {
        tally.taken_up += 1;
        check_pool(&disks, &written, &[], seed);
    }
    // The pool takes the next change, whatever the cut left.
    let mut o = open_over(&disks, plain(&disks));
    let was = o.pool().clone();
    let next = pick_change(&mut rng, &mut heals, o.pool(), &mut n);
    apply(&mut o, &next);
    // A heal's new places are rebuilt; a move's hold their copies.
    if !matches!(next, Change::Move(..)) {
        rebuild_moved(&disks, o.pool(), &moved(&was, o.pool()));
    }
    written.retain(|name, _| o.pool().volume(name).is_some());
    check_pool(&disks, &written, &[], seed);
}

/// Seeds that tear what once failed, run every time. Seed 1363 found
/// it: a concat of one subdisk extended, its label's rewrite torn at 512
/// bytes; the volume had no other label to be rebuilt from and did not
/// assemble. The extend now writes the label's copy first
/// (`LONE_COPY_OFFSET_BYTES`), and zeroes its growth with one trim where
/// it wrote 1 MiB at a time, so the writes a seed counts moved: 2885
/// tears the lone label after its copy now, and fails with the copy not
/// read back. (1363 and 1683 tore it before.) Seed 30026 extends a
/// concat boxed in on its drive, which takes a new subdisk: the check
/// once took the new subdisk, zeros where no pattern was written, for
/// one whose bytes changed; it now checks the new one reads zeros.
const REGRESSION_SEEDS: [u64; 4] = [1363, 1683, 2885, 30026];

#[test]
fn pool_changes_cut_at_any_write_leave_every_volume_whole() {
    let first = env_u64("PLATTER_POOL_FIRST_SEED", 0);
    let seeds = env_u64("PLATTER_POOL_SEEDS", 200);
    let mut tally = Tally::default();
    // Told as they were found: before heals were picked.
    for seed in REGRESSION_SEEDS {
        run_seed(seed, false, &mut Tally::default());
    }
    for seed in first..first + seeds {
        run_seed(seed, true, &mut tally);
    }
    crate::out::errln!(
        "{seeds} seeds from {first}: {} changes made whole ({} heals, {} moves); the cut change failed or was refused {} \
         times, finished {} times; {} moves a cut left recorded were taken up",
        tally.made, tally.healed, tally.moved, tally.cut_short, tally.cut_finished, tally.taken_up
    );
    if seeds >= 16 {
        assert!(tally.made >= seeds, "the runs made too few changes");
        assert!(tally.healed > 0, "no heal was made");
        assert!(
            tally.moved > 0 && tally.taken_up > 0,
            "no move was made, or none taken up"
        );
        assert!(
            tally.cut_short > 0 && tally.cut_finished > 0,
            "cuts fell on one side"
        );
    }
}
