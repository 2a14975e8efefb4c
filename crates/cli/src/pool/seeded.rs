//! Seeded: a pool of drives in memory goes through a seeded run of
//! changes (volumes created, extended and removed), the last of them cut
//! off at a seeded write, at a seeded length, as a kill -9 or a power cut
//! there would leave the drives. After it, as `serve --pool` would find
//! them: the configuration gathers and keeps every rule, every volume it
//! gives assembles whole and clean (an extend's labels brought up), and
//! every volume made before the cut still holds the bytes written to it.
//! The pool then takes the next change.
//!
//! `PLATTER_POOL_SEEDS` (default 48) and `PLATTER_POOL_FIRST_SEED` set
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

use super::crash_kit::{crashing, empty_pool, gathered};
use super::drives::{self, OpenPool};
use super::extend::{bring_labels_up, extend_volume};
use super::make::{create_in, remove_in, VolumeCreateArgs};
use platter_core::pool::Pool;

const MIB: u64 = 1 << 20;
const DRIVES: u8 = 4;
const DRIVE_BYTES: u64 = 48 * MIB;
/// Bytes of each subdisk's data area a volume's pattern covers.
const PATTERN_BYTES: u64 = 128 << 10;

#[derive(Debug)]
enum Change {
    Create(String, Level, u64),
    Extend(String, u64),
    Remove(String),
}

fn new_pool(disks: &[Arc<MemoryMember>]) {
    let pool = empty_pool(DRIVES, DRIVE_BYTES);
    for (d, m) in disks.iter().enumerate() {
        drives::write_slot(m.as_ref(), &pool, d, 0).unwrap();
    }
}

fn open(disks: &[Arc<MemoryMember>], over: Vec<Arc<dyn Member>>) -> OpenPool {
    OpenPool::over(
        gathered(disks).unwrap(),
        over.into_iter().map(Some).collect(),
    )
}

fn plain(disks: &[Arc<MemoryMember>]) -> Vec<Arc<dyn Member>> {
    disks
        .iter()
        .map(|d| Arc::clone(d) as Arc<dyn Member>)
        .collect()
}

fn pick_change(rng: &mut Rng, pool: &Pool, n: &mut u32) -> Change {
    let names: Vec<&String> = pool.volumes.iter().map(|v| &v.name).collect();
    match (rng.below(3), names.is_empty()) {
        (1, false) => {
            let v = names[rng.below(names.len() as u64) as usize];
            Change::Extend(v.clone(), (1 + rng.below(8)) * MIB)
        }
        (2, false) => Change::Remove(names[rng.below(names.len() as u64) as usize].clone()),
        _ => {
            *n += 1;
            let level = Level::ALL[rng.below(Level::ALL.len() as u64) as usize];
            Change::Create(format!("v{n}"), level, (1 + rng.below(10)) * MIB)
        }
    }
}

/// Applies `change`; a refusal (no room, too few drives) is an outcome
/// like any other, but never a panic.
fn apply(open: &mut OpenPool, change: &Change) -> bool {
    match change {
        Change::Create(name, level, size) => {
            create_in(open, &VolumeCreateArgs::new("tank", name, *level, *size)).is_ok()
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

/// What `serve --pool` finds: every volume whole and clean, and those in
/// `written` holding their patterns on the subdisks they were written
/// to (how many), and zeros on any a concat took since.
fn check_pool(disks: &[Arc<MemoryMember>], written: &BTreeMap<String, usize>, seed: u64) {
    let open = open(disks, plain(disks));
    open.pool()
        .check()
        .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    for v in &open.pool().volumes {
        let members = open.subdisks(v).unwrap();
        bring_labels_up(open.pool(), v, &members).unwrap();
        let a = assemble_devices(members.clone())
            .unwrap_or_else(|e| panic!("seed {seed}: volume {}: {e}", v.name))
            .assembly;
        assert!(
            a.health.iter().all(|h| *h == Health::Online),
            "seed {seed}: volume {} not whole",
            v.name
        );
        assert_eq!(a.label.state, VolumeState::Clean, "seed {seed}: {}", v.name);
        if let Some(size) = v.size_bytes {
            assert_eq!(a.label.volume_size_bytes, size, "seed {seed}: {}", v.name);
        }
        let Some(&filled) = written.get(&v.name) else {
            continue;
        };
        for (s, m) in members.iter().enumerate() {
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
    cut_short: u64,
    cut_finished: u64,
}

fn run_seed(seed: u64, tally: &mut Tally) {
    let mut rng = Rng::new(seed);
    let disks: Vec<Arc<MemoryMember>> = (0..DRIVES)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), DRIVE_BYTES)))
        .collect();
    new_pool(&disks);
    let mut written = BTreeMap::new();
    let mut n = 0;
    for _ in 0..1 + rng.below(6) {
        let mut o = open(&disks, plain(&disks));
        let change = pick_change(&mut rng, o.pool(), &mut n);
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
            }
        }
    }
    let o = open(&disks, plain(&disks));
    let change = pick_change(&mut rng, o.pool(), &mut n);
    let torn_at = rng.below(24) as usize;
    let keep_bytes = [0, 512, 4096, 1 << 20][rng.below(4) as usize];
    let mut cut = open(&disks, crashing(&disks, torn_at, keep_bytes));
    if apply(&mut cut, &change) {
        tally.cut_finished += 1;
    } else {
        tally.cut_short += 1;
    }
    check_pool(&disks, &written, seed);
    // The pool takes the next change, whatever the cut left.
    let mut o = open(&disks, plain(&disks));
    let next = pick_change(&mut rng, o.pool(), &mut n);
    apply(&mut o, &next);
    written.retain(|name, _| o.pool().volume(name).is_some());
    check_pool(&disks, &written, seed);
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

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn pool_changes_cut_at_any_write_leave_every_volume_whole() {
    let first = env_u64("PLATTER_POOL_FIRST_SEED", 0);
    let seeds = env_u64("PLATTER_POOL_SEEDS", 48);
    let mut tally = Tally::default();
    for seed in REGRESSION_SEEDS {
        run_seed(seed, &mut Tally::default());
    }
    for seed in first..first + seeds {
        run_seed(seed, &mut tally);
    }
    crate::out::errln!(
        "{seeds} seeds from {first}: {} changes made whole; the cut change failed or was refused {} times, finished {} \
         times",
        tally.made, tally.cut_short, tally.cut_finished
    );
    if seeds >= 16 {
        assert!(tally.made >= seeds, "the runs made too few changes");
        assert!(
            tally.cut_short > 0 && tally.cut_finished > 0,
            "cuts fell on one side"
        );
    }
}
