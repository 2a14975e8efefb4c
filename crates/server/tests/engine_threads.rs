//! The server's engine driven from several threads at once, in process,
//! over memory members whose jittered latency completes member I/Os out of
//! order: what the connection workers of several clients do to it. The
//! threads write and read small extents of one volume, interleaved at 4 KiB
//! so that neighbours share stripes (partial-stripe writes of different
//! threads meet in the same stripe's parity), and each checks every read
//! against what it wrote itself. Halfway through, a member starts failing
//! every I/O. After: every byte reads back as last written, and a check
//! of the whole volume finds parity and copies in agreement.
//!
//! What it would catch: a lost update when two writers plan the same
//! stripe (stripe locks), a read served from a stale cached stripe, a
//! completion delivered to the wrong request, a write acknowledged before
//! a failed member's copy was accounted for (the label hold), a deadlock
//! between the engine lock and the I/O layer's completions.

use bytes::Bytes;
use platter_core::volume::{Health, Maintenance, Reply, Request};
use platter_core::Level;
use platter_io::fault::Jitter;
use platter_io::FaultSpec;
use platter_server::engine::Engine;
use platter_testkit::Rng;
use std::sync::{Arc, Barrier};
use std::time::Duration;

mod support;

use support::{pool, read, Rig, Spec};

const MEMBER_BYTES: u64 = 4 << 20;
/// Ownership grain: block `b` belongs to thread `b % THREADS`.
const BLOCK_BYTES: u64 = 4 << 10;
const THREADS: u64 = 4;
const OPS_PER_THREAD: u64 = 400;

/// Member I/Os complete out of order: each takes 0 to 300 µs more.
fn rig(level: Level, members: u32, copies: u32, stripe_cache: bool) -> Rig {
    support::rig(Spec {
        copies,
        member_bytes: MEMBER_BYTES,
        faults: FaultSpec {
            latency_jitter: Some(Jitter::Uniform { max_us: 300 }),
            ..FaultSpec::default()
        },
        stripe_cache,
        layer: pool(8, Duration::from_secs(30)),
        ..Spec::new(level, members)
    })
}

/// One thread's work: writes of 1 to 3 of its own blocks (each a separate
/// request, since the blocks between are another thread's), reads of them
/// checked against `mine`, a FUA now and then, a flush now and then.
fn worker(engine: &Engine, t: u64, start: &Barrier, halfway: &Barrier) -> Vec<u8> {
    let size = engine.size_bytes();
    let blocks = size / BLOCK_BYTES;
    let mut mine = vec![0u8; size as usize];
    // Each thread its own stream of offsets, kinds and bytes.
    let mut rng = Rng::new(0xC0FF_EE00 + t);
    start.wait();
    for op in 0..OPS_PER_THREAD {
        if op == OPS_PER_THREAD / 2 {
            // Every thread is halfway when the member starts failing (the
            // main thread sets it between the two meetings): what follows
            // runs degraded, and the first I/Os to fail are among them.
            halfway.wait();
            halfway.wait();
        }
        let block = (rng.next() % (blocks / THREADS)) * THREADS + t;
        let off = block * BLOCK_BYTES;
        match rng.next() % 10 {
            0..=5 => {
                let data: Vec<u8> = (0..BLOCK_BYTES).map(|_| rng.next() as u8).collect();
                let fua = rng.next().is_multiple_of(8);
                engine
                    .run(Request::Write {
                        offset_bytes: off,
                        data: Bytes::from(data.clone()),
                        fua,
                    })
                    .unwrap_or_else(|e| panic!("thread {t}: write at {off}: {e}"));
                mine[off as usize..(off + BLOCK_BYTES) as usize].copy_from_slice(&data);
            }
            6..=8 => {
                let got = read(engine, off, BLOCK_BYTES)
                    .unwrap_or_else(|e| panic!("thread {t}: read at {off}: {e}"));
                assert!(
                    got[..] == mine[off as usize..(off + BLOCK_BYTES) as usize],
                    "thread {t}: block {block} does not read back as written (op {op})"
                );
            }
            _ => {
                engine
                    .run(Request::Flush)
                    .unwrap_or_else(|e| panic!("thread {t}: flush: {e}"));
            }
        }
    }
    mine
}

fn run(level: Level, members: u32, copies: u32, cache: bool, fail: Option<u32>) {
    let what = format!("{level} x{members} (cache {cache}, fail {fail:?})");
    let r = rig(level, members, copies, cache);
    let start = Arc::new(Barrier::new(THREADS as usize));
    // The main thread joins the halfway meeting to fail the member.
    let halfway = Arc::new(Barrier::new(THREADS as usize + 1));
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let (engine, start, halfway) = (
                Arc::clone(&r.engine),
                Arc::clone(&start),
                Arc::clone(&halfway),
            );
            std::thread::spawn(move || worker(&engine, t, &start, &halfway))
        })
        .collect();
    halfway.wait();
    if let Some(m) = fail {
        let c = &r.controls[m as usize];
        c.set(FaultSpec {
            fail_from_nth: Some(c.io_count() + 1),
            ..c.spec()
        });
    }
    halfway.wait();
    let written: Vec<Vec<u8>> = handles
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| panic!("{what}: a thread panicked"))
        })
        .collect();
    r.engine.run(Request::Flush).expect("final flush");
    r.engine
        .run(Request::CacheTick { all: true })
        .expect("destage");

    if let Some(m) = fail {
        assert_eq!(
            r.engine.health()[m as usize],
            Health::Faulty,
            "{what}: the failing member was taken out"
        );
    }
    // Every block as its owner last wrote it (zeros where nobody wrote).
    let size = r.engine.size_bytes();
    let chunk = 256 << 10;
    for off in (0..size).step_by(chunk as usize) {
        let got = read(&r.engine, off, chunk).unwrap_or_else(|e| panic!("{what}: read {off}: {e}"));
        for (i, b) in got.iter().enumerate() {
            let at = off + i as u64;
            let owner = (at / BLOCK_BYTES) % THREADS;
            assert_eq!(
                *b, written[owner as usize][at as usize],
                "{what}: byte {at} (thread {owner}'s) reads back wrong"
            );
        }
    }
    // Parity and copies agree wherever every member is there to compare.
    if fail.is_none() && level != Level::Stripe {
        let stripes = r.engine.with_volume(|v| v.geometry().stripes());
        match r.engine.run(Request::Maintain {
            first_stripe: 0,
            stripe_count: stripes,
            action: Maintenance::Check,
        }) {
            Ok(Reply::Checked(report)) => assert!(
                report.mismatched_stripes.is_empty() && report.unchecked_stripes == 0,
                "{what}: check found {:?} mismatched, {} unchecked",
                report.mismatched_stripes,
                report.unchecked_stripes
            ),
            other => panic!("{what}: check answered {other:?}"),
        }
    }
}

#[test]
fn raid5_from_four_threads_with_and_without_the_stripe_cache() {
    run(Level::Raid5, 4, 1, false, None);
    run(Level::Raid5, 4, 1, true, None);
}

#[test]
fn raid5_and_raid6_lose_a_member_while_four_threads_write() {
    run(Level::Raid5, 4, 1, true, Some(2));
    run(Level::Raid6, 5, 1, true, Some(0));
    run(Level::Raid6, 5, 1, false, None);
}

#[test]
fn mirror_raid10_and_stripe_from_four_threads() {
    run(Level::Mirror, 2, 2, false, None);
    run(Level::Mirror, 3, 3, false, Some(1));
    run(Level::Raid10, 4, 2, false, None);
    run(Level::Raid10, 4, 2, false, Some(3));
    run(Level::Stripe, 3, 1, false, None);
}
