//! Seeded: a volume of one plex, in a pool of drives in memory, goes
//! through a seeded run of converts by copy: begun as `volume convert`
//! records them (`copy_in`), carried on as the pool's server carries them
//! (the new plex labelled as the volume's array saying the volume's size,
//! unless a checkpoint says it holds some already; the volume's bytes
//! copied into it, a checkpoint recorded halfway with the new plex
//! flushed, then the configuration that makes it the volume's plex, then
//! the old plex's labels zeroed),
//! or given up (`volume convert --abort`, `abort_copy_in`). The last
//! change is cut off at a seeded write, at a seeded length, as a kill -9
//! or a power cut would leave the drives. After it, as `serve --pool`
//! would find them: the configuration gathers and keeps every rule, the
//! plex it names holds the volume's bytes at the volume's size, and a
//! copy's checkpoint never runs ahead of what its new plex holds. A
//! copy the cut left recorded is then carried on or given up, after
//! which the dropped plex's subdisks hold no label, and the pool takes
//! the next change.
//!
//! The server's own steps (the front engine, the pause while the end is
//! recorded, the export handed over) are shown by `e2e_convert.rs`,
//! SIGKILL mid-copy included; this drives the order of the writes.
//!
//! `PLATTER_COPY_SEEDS` (default 60) and `PLATTER_COPY_FIRST_SEED` set the
//! seeds; a failure names its seed, which replays alone with
//! `PLATTER_COPY_FIRST_SEED=N PLATTER_COPY_SEEDS=1` (the copy goes through
//! engines whose member I/O runs on threads, so the write a cut falls on
//! can differ by one between runs of a seed).

use std::sync::Arc;

use platter_core::pool::{Pool, PoolVolume};
use platter_core::Level;
use platter_io::assembly::assemble_devices;
use platter_io::memory::MemoryMember;
use platter_io::Member;
use platter_testkit::rng::Rng;
use serde_json::json;

use super::convert::{
    abort_copy_in, copy_finished, copy_in, copy_recorded, erase_plex, label_copy_plex,
};
use super::crash_kit::{assert_unlabelled, crashing, env_u64, open_over, plain, write_empty_pool};
use super::drives::{plex_windows, OpenPool};
use super::make::{create_in, VolumeCreateArgs};
use super::plexes::plex_members;
use crate::error::{CliError, Result};

const MIB: u64 = 1 << 20;
const DRIVES: u8 = 6;
const DRIVE_BYTES: u64 = 24 * MIB;
const VOLUME_BYTES: u64 = 2 * MIB;
/// How the stand-in copier copies: a chunk at a time.
const COPY_CHUNK_BYTES: u64 = 256 << 10;

/// Organisations a volume starts as or is converted to: level, subdisks.
const ORGS: [(Level, u32); 4] = [
    (Level::Concat, 1),
    (Level::Stripe, 2),
    (Level::Mirror, 2),
    (Level::Raid5, 3),
];

#[derive(Debug)]
enum Change {
    Convert(Level, u32),
    CarryOn,
    Abort,
}

fn volume(pool: &Pool) -> PoolVolume {
    pool.volume("c").cloned().expect("the run's volume")
}

fn pattern(seed: u64) -> Vec<u8> {
    (0..VOLUME_BYTES)
        .map(|b| (b.wrapping_mul(29) ^ seed.rotate_left(7) ^ (b >> 9)) as u8)
        .collect()
}

/// Plex `p` of `v`'s array, served by an engine here.
fn array(o: &OpenPool, v: &PoolVolume, p: usize) -> Result<Arc<dyn Member>> {
    let windows = plex_windows(o.pool(), v, p, &o.drives)?;
    let members = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
    Ok(plex_members(v, std::iter::once(members))?.remove(0))
}

/// The volume's size as a start tells its clients: what plex 0's labels
/// say, at most what its layout holds (`startup::export_info`).
fn told_bytes(o: &OpenPool, v: &PoolVolume) -> Result<u64> {
    let windows = plex_windows(o.pool(), v, 0, &o.drives)?;
    let members = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
    let a = assemble_devices(members)
        .map_err(|e| CliError(format!("volume {}: {e}", v.name)))?
        .assembly;
    Ok(a.label.told_bytes(a.geometry.volume_size_bytes()))
}

/// A new volume of one plex of the organisation seed `rng` picks, its
/// first bytes `bytes`; returns its size.
fn make_volume(disks: &[Arc<MemoryMember>], rng: &mut Rng, bytes: &[u8]) -> u64 {
    write_empty_pool(disks, DRIVE_BYTES);
    let mut o = open_over(disks, plain(disks));
    let (level, n) = ORGS[rng.below(ORGS.len() as u64) as usize];
    let mut args = VolumeCreateArgs::new("tank", "c", level, VOLUME_BYTES);
    args.subdisks = Some(n);
    let v = create_in(&mut o, &args).expect("room for the volume");
    let m = array(&o, &v, 0).unwrap();
    m.write_at(0, bytes).unwrap();
    m.flush().unwrap();
    told_bytes(&o, &v).unwrap()
}

fn pick_change(rng: &mut Rng, pool: &Pool) -> Change {
    if pool.copy_of("c").is_some() {
        return match rng.below(3) {
            0 => Change::Abort,
            _ => Change::CarryOn,
        };
    }
    let (level, n) = ORGS[rng.below(ORGS.len() as u64) as usize];
    Change::Convert(level, n)
}

/// Applies `change`; a refusal (no room on the drives left) is an outcome
/// like any other, but never a panic.
fn apply(o: &mut OpenPool, change: &Change) -> Result<()> {
    match change {
        Change::Convert(level, n) => {
            let req = json!({
                "volume": "c",
                "level": level.name(),
                "interleave_bytes": 63 << 10,
                "subdisks": n,
            });
            copy_in(o, &req)?;
            carry_on(o)
        }
        Change::CarryOn => carry_on(o),
        Change::Abort => abort_copy_in(o, "c"),
    }
}

/// The copy carried on as the pool's server does: the new plex labelled,
/// the volume's bytes copied into it and flushed, the configuration that
/// ends the copy, then the old plex's labels zeroed.
fn carry_on(o: &mut OpenPool) -> Result<()> {
    let pool = o.pool().clone();
    let v = volume(&pool);
    let copy = pool.copy_of("c").expect("a copy");
    let both = copy.with_new_plex(&v);
    let told = told_bytes(o, &v)?;
    // Taken up past a checkpoint, the new plex keeps what it holds (the
    // server compares below the checkpoint; with no client writing, the
    // copy again writes the same bytes).
    if copy.copied_bytes == 0 {
        label_copy_plex(&pool, &both, &o.drives, told)?;
    }
    let (from, to) = (array(o, &both, 0)?, array(o, &both, 1)?);
    let halfway = told / 2 / COPY_CHUNK_BYTES * COPY_CHUNK_BYTES;
    let mut buf = vec![0u8; COPY_CHUNK_BYTES as usize];
    let mut at = 0;
    while at < told {
        if at == halfway && halfway > copy.copied_bytes {
            to.flush()?;
            o.write(copy_recorded(o.pool(), "c", halfway))?;
        }
        let n = COPY_CHUNK_BYTES.min(told - at) as usize;
        from.read_at(at, &mut buf[..n])?;
        to.write_at(at, &buf[..n])?;
        at += n as u64;
    }
    to.flush()?;
    o.write(copy_finished(&pool, "c"))?;
    erase_plex(o, &v, 0)
}

/// What `serve --pool` finds: the configuration whole and keeping every
/// rule, and the volume's plex holding its bytes at its size.
fn check_start(disks: &[Arc<MemoryMember>], bytes: &[u8], size: u64, seed: u64) -> Pool {
    let o = open_over(disks, plain(disks));
    let pool = o.pool().clone();
    pool.check().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let v = volume(&pool);
    let told = told_bytes(&o, &v).unwrap_or_else(|e| panic!("seed {seed}: {}", e.0));
    assert_eq!(
        told, size,
        "seed {seed}: the volume's size changed: {pool:?}"
    );
    let mut on = vec![0u8; bytes.len()];
    array(&o, &v, 0)
        .and_then(|m| Ok(m.read_at(0, &mut on)?))
        .unwrap_or_else(|e| panic!("seed {seed}: {}", e.0));
    assert!(
        on == bytes,
        "seed {seed}: the volume's plex lost its bytes: {pool:?}"
    );
    // A copy's checkpoint never runs ahead of what its new plex holds.
    if let Some(c) = pool.copy_of("c").filter(|c| c.copied_bytes > 0) {
        let mut copied = vec![0u8; c.copied_bytes as usize];
        array(&o, &c.with_new_plex(&v), 1)
            .and_then(|m| Ok(m.read_at(0, &mut copied)?))
            .unwrap_or_else(|e| panic!("seed {seed}: the new plex: {}", e.0));
        assert!(
            copied[..] == bytes[..copied.len()],
            "seed {seed}: the new plex lacks bytes below the checkpoint: {pool:?}"
        );
    }
    pool
}

/// The subdisks the copy recorded in `pool` leaves behind: the volume's
/// old plex when it ends, the new plex when it is given up.
fn left_behind(pool: &Pool, ended: bool) -> Vec<(String, u64)> {
    let plex = match ended {
        true => volume(pool).plexes[0].clone(),
        false => pool.copy_of("c").expect("a copy").plex.clone(),
    };
    plex.subdisks
        .iter()
        .map(|sd| (sd.drive.clone(), sd.offset_bytes))
        .collect()
}

#[derive(Default)]
struct Tally {
    made: u64,
    cut_short: u64,
    cut_finished: u64,
    ended: u64,
    given_up: u64,
    /// Copies taken up past a checkpoint.
    past_checkpoint: u64,
}

fn run_seed(seed: u64, tally: &mut Tally) {
    let mut rng = Rng::new(seed);
    let disks: Vec<Arc<MemoryMember>> = (0..DRIVES)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), DRIVE_BYTES)))
        .collect();
    let bytes = pattern(seed);
    let size = make_volume(&disks, &mut rng, &bytes);
    for _ in 0..rng.below(3) {
        let mut o = open_over(&disks, plain(&disks));
        let change = pick_change(&mut rng, o.pool());
        if apply(&mut o, &change).is_ok() {
            tally.made += 1;
        }
    }
    let o = open_over(&disks, plain(&disks));
    let change = pick_change(&mut rng, o.pool());
    let torn_at = rng.below(40) as usize;
    let keep_bytes = [0, 512, 4096, 1 << 20][rng.below(4) as usize];
    let mut cut = open_over(&disks, crashing(&disks, torn_at, keep_bytes));
    match apply(&mut cut, &change) {
        Ok(()) => tally.cut_finished += 1,
        Err(_) => tally.cut_short += 1,
    }
    let pool = check_start(&disks, &bytes, size, seed);
    if let Some(c) = pool.copy_of("c") {
        tally.past_checkpoint += u64::from(c.copied_bytes > 0);
        let mut o = open_over(&disks, plain(&disks));
        let ended = rng.below(3) != 0;
        let taken = match ended {
            true => carry_on(&mut o),
            false => abort_copy_in(&mut o, "c"),
        };
        taken.unwrap_or_else(|e| panic!("seed {seed}: the copy taken up ({ended}): {}", e.0));
        match ended {
            true => tally.ended += 1,
            false => tally.given_up += 1,
        }
        let after = check_start(&disks, &bytes, size, seed);
        assert!(after.copies.is_empty(), "seed {seed}");
        assert_unlabelled(&disks, &after, &left_behind(&pool, ended), seed);
    }
    let mut o = open_over(&disks, plain(&disks));
    let next = pick_change(&mut rng, o.pool());
    let _ = apply(&mut o, &next);
    check_start(&disks, &bytes, size, seed);
}

#[test]
fn copies_cut_at_any_write_leave_the_volume_whole_at_its_size() {
    let first = env_u64("PLATTER_COPY_FIRST_SEED", 0);
    let seeds = env_u64("PLATTER_COPY_SEEDS", 60);
    let mut tally = Tally::default();
    for seed in first..first + seeds {
        run_seed(seed, &mut tally);
    }
    crate::out::errln!(
        "{seeds} seeds from {first}: {} converts made whole; the cut change failed {} times, \
         finished {} times; copies a cut left recorded: {} ended, {} given up, {} past a \
         checkpoint",
        tally.made,
        tally.cut_short,
        tally.cut_finished,
        tally.ended,
        tally.given_up,
        tally.past_checkpoint
    );
    if seeds >= 16 {
        assert!(
            tally.cut_short > 0 && tally.cut_finished > 0,
            "cuts fell on one side"
        );
        assert!(
            tally.ended > 0 && tally.given_up > 0,
            "no copy a cut left was ended, or none given up"
        );
        assert!(tally.past_checkpoint > 0, "no cut fell past a checkpoint");
    }
}
