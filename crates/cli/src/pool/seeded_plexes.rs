//! Seeded: a volume of several plexes, in a pool of drives in memory, goes
//! through a seeded run of plex changes: plexes detached and attached as
//! `platter plex detach|attach` records them, converts begun as `volume
//! convert` records them and carried on as the pool's server carries them
//! (the new plex labelled under the old one's name; the mirror's revive
//! stood in for by a copy of another plex's bytes, the data first and the
//! mirror's label last, as the mirror counts a plex in step only once it
//! is revived; then the configuration that ends the convert and the old
//! plex's labels zeroed), or given up (`volume convert --abort`). The last
//! change is cut off at a seeded write, at a seeded length, as a kill -9
//! or a power cut would leave the drives. After it, as `serve --pool`
//! would find them: the configuration gathers and keeps every rule, every
//! plex the start would serve from (counted attached, not a convert's new
//! plex, in step in the mirror's labels) and every plex split off holds
//! the volume's bytes, and one of them at least does. A convert the cut
//! left recorded is then carried on or given up, and after it every plex
//! holds the bytes, the dropped plex's subdisks hold no label, and the
//! pool takes the next change.
//!
//! The server's own steps (the pause, the bitmap's sweep, the mirror's
//! labels as it marks a plex out and takes one in) are shown by the seeded
//! SIGKILLs of `e2e_split.rs` and `e2e_convert.rs`; this drives the order
//! of the writes the command line makes for them.
//!
//! `PLATTER_PLEX_SEEDS` (default 60) and `PLATTER_PLEX_FIRST_SEED` set the
//! seeds; a failure names its seed, which replays alone with
//! `PLATTER_PLEX_FIRST_SEED=N PLATTER_PLEX_SEEDS=1` (the copy goes
//! through an engine whose member I/O runs on threads, so the write a cut
//! falls on can differ by one between runs of a seed).

use std::sync::Arc;

use platter_core::label::LABEL_BYTES;
use platter_core::pool::{DetachedPlex, PlexConvert, Pool, PoolVolume};
use platter_core::Level;
use platter_io::memory::MemoryMember;
use platter_io::Member;
use platter_testkit::rng::Rng;
use serde_json::json;

use super::convert::{abort_in, convert_in, erase_plex, finished, new_in_slot};
use super::crash_kit::{assert_unlabelled, crashing, env_u64, open_over, plain, write_empty_pool};
use super::drives::{plex_windows, OpenPool};
use super::make::{create_in, VolumeCreateArgs};
use super::plexes::{label_plex_as, mirror_label_on, plex_members, MirrorLabels};
use super::split::{attach_in, detach_in};
use crate::error::{CliError, Result};

const MIB: u64 = 1 << 20;
const DRIVES: u8 = 6;
const DRIVE_BYTES: u64 = 24 * MIB;
const VOLUME_BYTES: u64 = 2 * MIB;
/// How the stand-in revive copies: a chunk at a time, as a rebuild does.
const COPY_CHUNK_BYTES: u64 = 256 << 10;

/// The plexes a run's volume starts with: none uses more than three of
/// the six drives, so that a convert has drives to go to.
const FIRST_PLEXES: [&[&str]; 3] = [
    &["concat", "concat"],
    &["concat", "mirror:2"],
    &["stripe:2", "concat"],
];

/// New plexes a convert asks for: level and subdisks.
const NEW_PLEXES: [(Level, u32); 4] = [
    (Level::Concat, 1),
    (Level::Stripe, 2),
    (Level::Mirror, 2),
    (Level::Raid5, 3),
];

#[derive(Debug)]
enum Change {
    Detach(usize),
    Attach(usize),
    Convert(usize, Level, u32),
    CarryOn,
    Abort,
}

fn volume(pool: &Pool) -> PoolVolume {
    pool.volume("u").cloned().expect("the run's volume")
}

/// The volume's bytes as a mirror write would leave them on every plex.
fn pattern(seed: u64) -> Vec<u8> {
    (0..VOLUME_BYTES)
        .map(|b| (b.wrapping_mul(13) ^ seed ^ (b >> 11)) as u8)
        .collect()
}

/// Plex `p`'s array, served by an engine here, as the mirror's member.
fn plex_member(open: &OpenPool, v: &PoolVolume, p: usize) -> Result<Arc<dyn Member>> {
    let windows = plex_windows(open.pool(), v, p, &open.drives)?;
    let members = windows.into_iter().map(|w| w as Arc<dyn Member>).collect();
    Ok(plex_members(v, std::iter::once(members))?.remove(0))
}

/// The volume's bytes as plex `p` holds them (`None`: it has no mirror
/// label, or does not assemble).
fn bytes_on(open: &OpenPool, v: &PoolVolume, p: usize) -> Option<Vec<u8>> {
    let label = mirror_label_on(open, v, p)?;
    let m = plex_member(open, v, p).ok()?;
    let mut out = vec![0u8; VOLUME_BYTES as usize];
    m.read_at(label.data_offset_bytes, &mut out).ok()?;
    Some(out)
}

/// A new volume of the plexes seed `rng` picks, each plex written the
/// volume's bytes at the mirror's data offset.
fn make_volume(disks: &[Arc<MemoryMember>], rng: &mut Rng, bytes: &[u8]) {
    write_empty_pool(disks, DRIVE_BYTES);
    let mut o = open_over(disks, plain(disks));
    let mut args = VolumeCreateArgs::new("tank", "u", Level::Concat, VOLUME_BYTES);
    args.level = None;
    let plexes = FIRST_PLEXES[rng.below(FIRST_PLEXES.len() as u64) as usize];
    args.plexes = plexes.iter().map(|p| p.to_string()).collect();
    let v = create_in(&mut o, &args).expect("room for the volume");
    for p in 0..v.plexes.len() {
        let label = mirror_label_on(&o, &v, p).expect("labelled");
        let m = plex_member(&o, &v, p).unwrap();
        m.write_at(label.data_offset_bytes, bytes).unwrap();
        m.flush().unwrap();
    }
}

fn pick_change(rng: &mut Rng, pool: &Pool) -> Change {
    let v = volume(pool);
    if pool.convert_of("u").is_some() {
        return match rng.below(3) {
            0 => Change::Abort,
            _ => Change::CarryOn,
        };
    }
    if let Some(d) = pool.detached.first() {
        return Change::Attach(d.plex);
    }
    let p = rng.below(v.plexes.len() as u64) as usize;
    match rng.below(2) {
        0 => Change::Detach(p),
        _ => {
            let (level, subdisks) = NEW_PLEXES[rng.below(NEW_PLEXES.len() as u64) as usize];
            Change::Convert(p, level, subdisks)
        }
    }
}

/// Applies `change`; a refusal (no room on the drives left) is an outcome
/// like any other, but never a panic.
fn apply(o: &mut OpenPool, change: &Change) -> Result<()> {
    match change {
        Change::Detach(p) => {
            let d = DetachedPlex {
                volume: "u".into(),
                plex: *p,
                as_volume: None,
                writable: false,
            };
            detach_in(o, &d)
        }
        Change::Attach(p) => attach_in(o, "u", *p),
        Change::Convert(p, level, subdisks) => {
            let req = json!({
                "volume": "u",
                "plex": p.to_string(),
                "level": level.name(),
                "interleave_bytes": 64 << 10,
                "subdisks": subdisks,
            });
            let c = convert_in(o, &req)?;
            carry_on(o, &c)
        }
        Change::CarryOn => {
            let c = o.pool().convert_of("u").cloned().expect("picked");
            carry_on(o, &c)
        }
        Change::Abort => abort_in(o, "u").map(|_| ()),
    }
}

/// Convert `c` carried on as the pool's server does: its new plex, unless
/// it holds its slot already, labelled under the old plex's name and
/// revived (stood in for: another plex's bytes copied, the mirror's label
/// last); then the configuration that ends it, and the old plex's labels
/// zeroed.
fn carry_on(o: &mut OpenPool, c: &PlexConvert) -> Result<()> {
    let v = volume(o.pool());
    if !new_in_slot(o, &v, c) {
        label_plex_as(o.pool(), &v, c.into, &o.drives, &v.plex_name(c.from))?;
        let labels = MirrorLabels::read(o, &v)?;
        let q = (0..v.plexes.len())
            .find(|&q| q != c.from && q != c.into && labels.in_step(q))
            .ok_or_else(|| CliError("no plex to revive from".into()))?;
        revive(o, &v, q, c.into, labels.newest.data_offset_bytes)?;
    }
    o.write(finished(o.pool(), c))?;
    erase_plex(o, &v, c.from)
}

/// Plex `from`'s part of the mirror copied to plex `to`: the bitmap and
/// the data, then the label.
fn revive(o: &OpenPool, v: &PoolVolume, from: usize, to: usize, data_offset: u64) -> Result<()> {
    let src = plex_member(o, v, from)?;
    let dst = plex_member(o, v, to)?;
    let end = data_offset + VOLUME_BYTES;
    let mut at = LABEL_BYTES as u64;
    let mut buf = vec![0u8; COPY_CHUNK_BYTES as usize];
    while at < end {
        let n = COPY_CHUNK_BYTES.min(end - at) as usize;
        src.read_at(at, &mut buf[..n])?;
        dst.write_at(at, &buf[..n])?;
        at += n as u64;
    }
    dst.flush()?;
    let mut label = vec![0u8; LABEL_BYTES];
    src.read_at(0, &mut label)?;
    dst.write_at(0, &label)?;
    dst.flush()?;
    Ok(())
}

/// What `serve --pool` finds: the configuration whole and keeping every
/// rule, the volume's bytes on every plex the start serves from and on
/// every plex split off, and on one plex at least.
fn check_start(disks: &[Arc<MemoryMember>], bytes: &[u8], seed: u64) -> Pool {
    let o = open_over(disks, plain(disks));
    let pool = o.pool().clone();
    pool.check().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
    let v = volume(&pool);
    let labels = MirrorLabels::read(&o, &v).unwrap_or_else(|e| panic!("seed {seed}: {}", e.0));
    let new_plex = pool.convert_of("u").map(|c| c.into);
    let detached: Vec<usize> = pool.detached.iter().map(|d| d.plex).collect();
    let mut holding = 0;
    for p in 0..v.plexes.len() {
        let serves = Some(p) != new_plex && labels.in_step(p);
        if !serves && !detached.contains(&p) {
            continue;
        }
        let on = bytes_on(&o, &v, p);
        assert!(
            on.as_deref() == Some(bytes),
            "seed {seed}: plex {} (serves {serves}, detached {}) lost the volume's bytes: {pool:?}",
            v.plex_name(p),
            detached.contains(&p)
        );
        holding += 1;
    }
    assert!(
        holding > 0,
        "seed {seed}: no plex holds the volume: {pool:?}"
    );
    pool
}

/// After a convert is taken up: every plex holds the volume's bytes, and
/// the dropped plex's subdisks (`gone`, as the configuration before it
/// placed them) hold no label.
fn check_settled(disks: &[Arc<MemoryMember>], bytes: &[u8], gone: &[(String, u64)], seed: u64) {
    let o = open_over(disks, plain(disks));
    let v = volume(o.pool());
    assert!(o.pool().converts.is_empty(), "seed {seed}");
    for p in 0..v.plexes.len() {
        assert!(
            bytes_on(&o, &v, p).as_deref() == Some(bytes),
            "seed {seed}: plex {} does not hold the volume's bytes",
            v.plex_name(p)
        );
    }
    assert_unlabelled(disks, o.pool(), gone, seed);
}

/// The subdisks (drive, offset) of the plex convert `c` leaves behind:
/// the old one when it ends, the new one when it is given up.
fn left_behind(pool: &Pool, c: &PlexConvert, ended: bool) -> Vec<(String, u64)> {
    let v = volume(pool);
    let p = if ended { c.from } else { c.into };
    v.plexes[p]
        .subdisks
        .iter()
        .map(|sd| (sd.drive.clone(), sd.offset_bytes))
        .collect()
}

/// What a seed did, so that the run can tell it did something.
#[derive(Default)]
struct Tally {
    made: u64,
    converts_ended: u64,
    converts_given_up: u64,
    cut_short: u64,
    cut_finished: u64,
    taken_up: u64,
}

fn run_seed(seed: u64, tally: &mut Tally) {
    let mut rng = Rng::new(seed);
    let disks: Vec<Arc<MemoryMember>> = (0..DRIVES)
        .map(|i| Arc::new(MemoryMember::new(format!("mem{i}"), DRIVE_BYTES)))
        .collect();
    let bytes = pattern(seed);
    make_volume(&disks, &mut rng, &bytes);
    for _ in 0..rng.below(4) {
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
    let pool = check_start(&disks, &bytes, seed);
    if let Some(c) = pool.convert_of("u").cloned() {
        tally.taken_up += 1;
        let mut o = open_over(&disks, plain(&disks));
        let ended = rng.below(3) != 0;
        let taken = match ended {
            true => carry_on(&mut o, &c),
            false => abort_in(&mut o, "u").map(|_| ()),
        };
        taken.unwrap_or_else(|e| panic!("seed {seed}: the convert taken up ({ended}): {}", e.0));
        match ended {
            true => tally.converts_ended += 1,
            false => tally.converts_given_up += 1,
        }
        check_settled(&disks, &bytes, &left_behind(&pool, &c, ended), seed);
    }
    // The pool takes the next change, whatever the cut left.
    let mut o = open_over(&disks, plain(&disks));
    let next = pick_change(&mut rng, o.pool());
    let _ = apply(&mut o, &next);
    check_start(&disks, &bytes, seed);
}

#[test]
fn plex_changes_cut_at_any_write_leave_the_volume_whole() {
    let first = env_u64("PLATTER_PLEX_FIRST_SEED", 0);
    let seeds = env_u64("PLATTER_PLEX_SEEDS", 60);
    let mut tally = Tally::default();
    for seed in first..first + seeds {
        run_seed(seed, &mut tally);
    }
    crate::out::errln!(
        "{seeds} seeds from {first}: {} changes made whole; the cut change failed {} times, \
         finished {} times; {} converts a cut left recorded taken up ({} ended, {} given up)",
        tally.made,
        tally.cut_short,
        tally.cut_finished,
        tally.taken_up,
        tally.converts_ended,
        tally.converts_given_up
    );
    if seeds >= 16 {
        assert!(
            tally.cut_short > 0 && tally.cut_finished > 0,
            "cuts fell on one side"
        );
        assert!(
            tally.converts_ended > 0 && tally.converts_given_up > 0,
            "no convert a cut left was ended, or none given up"
        );
    }
}
