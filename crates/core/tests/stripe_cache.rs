//! The stripe cache (crates/core/src/volume/cache.rs): sequential writes
//! gathered into full stripes, and the rules that keep cached data safe to
//! read and durable when promised.

mod support;

use bytes::Bytes;
use platter_core::volume::{CacheLimits, Maintenance, Reply, Request, Volume};
use platter_core::{Level, ParityLayout};
use std::cell::Cell;
use std::rc::Rc;
use support::*;

const MIB: u64 = 1 << 20;

/// RAID-5 over 4 members at 64 KiB: a 192 KiB data stripe, so 1 MiB writes
/// start and end inside stripes.
fn raid5_4x64k(rows: u64) -> Config {
    Config {
        level: Level::Raid5,
        layout: ParityLayout::DEFAULT,
        copies: 1,
        members: 4,
        interleave_bytes: 64 << 10,
        rows,
    }
}

fn small(level: Level, members: u32) -> Config {
    Config {
        level,
        layout: ParityLayout::ALL[members as usize % 4],
        copies: 1,
        members,
        interleave_bytes: 8 * SECTOR_BYTES,
        rows: 16,
    }
}

/// Full-stripe share of the stripe updates so far.
fn full_share(v: &Volume) -> f64 {
    let c = v.stats().volume.counters;
    let all = c.full_stripe_writes + c.read_modify_writes + c.reconstruct_writes;
    assert!(all > 0, "no stripe writes counted");
    c.full_stripe_writes as f64 / all as f64
}

/// `count` sequential 1 MiB writes from 0, `in_flight` at a time, then a
/// flush; returns the full-stripe share and checks the data.
fn sequential_mib_writes(cache: bool, in_flight: usize, count: u64) -> f64 {
    let config = raid5_4x64k(2 + count * MIB / (192 << 10));
    let mut h = Harness::new(&config, 5);
    if cache {
        h.enable_cache(CacheLimits::DEFAULT);
    }
    let mut model = Model::new(&h.volume);
    let mut next = 0;
    while next < count {
        for _ in 0..in_flight.min((count - next) as usize) {
            let req = Request::Write {
                offset_bytes: next * MIB,
                data: Bytes::from(h.rng.bytes(MIB as usize)),
                fua: false,
            };
            model.apply(&req);
            h.volume.submit(req);
            next += 1;
        }
        for c in h.run() {
            c.result.expect("write");
        }
    }
    h.flush();
    verify_all(&mut h, &model);
    full_share(&h.volume)
}

#[test]
fn sequential_mib_writes_are_at_least_90_percent_full_stripes() {
    for in_flight in [1, 8] {
        let share = sequential_mib_writes(true, in_flight, 25);
        eprintln!("with the cache, {in_flight} in flight: {share:.3} full-stripe");
        assert!(share >= 0.9, "{in_flight} in flight: {share:.3} full");
    }
    // Without the cache the same stream has a partial stripe at each end
    // of every request: the test would fail.
    let share = sequential_mib_writes(false, 1, 25);
    eprintln!("without the cache: {share:.3} full-stripe");
    assert!(share < 0.8, "without the cache: {share:.3} full");
}

#[test]
fn reads_see_cached_data_at_every_moment() {
    for (i, (level, n)) in [(Level::Raid5, 3), (Level::Raid5, 5), (Level::Raid6, 6)]
        .into_iter()
        .enumerate()
    {
        let config = small(level, n);
        let limits = CacheLimits {
            max_stripes: 3,
            max_bytes: 16 * MIB,
        };
        let mut h = Harness::with_cache(&config, 40 + i as u64, limits);
        let mut model = Model::new(&h.volume);
        let size = h.volume.size_bytes();
        let sb = h.volume.geometry().stripe_data_bytes();
        for step in 0..300 {
            // Mostly small partial writes, which the cache holds.
            let len = 1 + h.rng.below(sb + sb / 2);
            let at = h.rng.below(size - len + 1);
            let req = Request::Write {
                offset_bytes: at,
                data: Bytes::from(h.rng.bytes(len as usize)),
                fua: h.rng.chance(5),
            };
            model.apply(&req);
            h.one(req).expect("write");
            if step % 7 == 0 {
                h.one(Request::CacheTick { all: false }).expect("tick");
            }
            // Read back around the write, and somewhere at random.
            for (a, l) in [
                (
                    at.saturating_sub(sb),
                    (len + 2 * sb).min(size - at.saturating_sub(sb)),
                ),
                {
                    let l = 1 + h.rng.below(2 * sb).min(size - 1);
                    (h.rng.below(size - l + 1), l)
                },
            ] {
                let got = h.read(a, l).expect("read");
                assert!(
                    got[..] == model.bytes[a as usize..(a + l) as usize],
                    "{config:?} step {step}: read {a}+{l} differs"
                );
            }
        }
        assert!(h.volume.cached_stripes() > 0, "nothing was left cached");
        verify_all(&mut h, &model);
        h.flush();
        verify_all(&mut h, &model);
    }
}

/// P (and for RAID-6 also Q, through the engine's check) from the member
/// bytes, and every data chunk against the model.
fn check_members(h: &mut Harness, model: &Model) {
    let g = h.volume.geometry().clone();
    let il = g.interleave_bytes() as usize;
    let sb = g.stripe_data_bytes();
    for stripe in 0..g.stripes() {
        let roles = g.parity_roles(stripe).expect("parity level");
        let at = g.member_offset_bytes(stripe, 0) as usize;
        let chunk = |m: u32| &h.members[m as usize][at..at + il];
        let mut p = vec![0u8; il];
        for (d, &m) in roles.data.iter().enumerate() {
            let v = (stripe * sb) as usize + d * il;
            assert!(
                chunk(m) == &model.bytes[v..v + il],
                "stripe {stripe}: data chunk {d} on member {m} is not what was written"
            );
            for (x, y) in p.iter_mut().zip(chunk(m)) {
                *x ^= y;
            }
        }
        assert!(chunk(roles.p) == &p[..], "stripe {stripe}: P is wrong");
    }
    if g.level() == Level::Raid6 {
        let r = h.one(Request::Maintain {
            first_stripe: 0,
            stripe_count: g.stripes(),
            action: Maintenance::Check,
        });
        match r {
            Ok(Reply::Checked(r)) => assert!(r.mismatched_stripes.is_empty(), "{r:?}"),
            other => panic!("check: {other:?}"),
        }
    }
}

#[test]
fn flush_writes_out_every_cached_stripe_then_flushes_the_members() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let config = small(level, n);
        let mut h = Harness::with_cache(&config, 9, CacheLimits::DEFAULT);
        let mut model = Model::new(&h.volume);
        let size = h.volume.size_bytes();
        let sb = h.volume.geometry().stripe_data_bytes();
        for _ in 0..40 {
            let len = 1 + h.rng.below(sb - 1);
            let at = h.rng.below(size - len + 1);
            let data = h.rng.bytes(len as usize);
            model.apply(&Request::Write {
                offset_bytes: at,
                data: Bytes::from(data.clone()),
                fua: false,
            });
            h.write(at, &data).expect("write");
        }
        assert!(h.volume.cached_stripes() > 0);
        let before = h.members.clone();
        h.log = Some(Vec::new());
        h.one(Request::Flush).expect("flush");
        assert_eq!(h.volume.cached_stripes(), 0);
        assert_ne!(before, h.members, "the flush wrote nothing");
        // Every member flush comes after every write of the flush.
        let log = h.log.take().expect("logging");
        let last_write = log
            .iter()
            .rposition(|(_, op)| *op == "write")
            .expect("writes");
        let first_flush = log
            .iter()
            .position(|(_, op)| *op == "flush")
            .expect("flushes");
        assert!(
            first_flush > last_write,
            "{level}: a member was flushed before the cached data was written: {log:?}"
        );
        let flushed: Vec<u32> = log[first_flush..].iter().map(|(m, _)| *m).collect();
        assert_eq!(flushed.len(), n as usize, "{log:?}");
        check_members(&mut h, &model);
    }
}

#[test]
fn fua_writes_reach_the_members_before_they_complete() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let config = small(level, n);
        let mut h = Harness::with_cache(&config, 11, CacheLimits::DEFAULT);
        let mut model = Model::new(&h.volume);
        let sb = h.volume.geometry().stripe_data_bytes();
        let mut put = |h: &mut Harness, at: u64, len: u64, fua: bool| {
            let req = Request::Write {
                offset_bytes: at,
                data: Bytes::from(h.rng.bytes(len as usize)),
                fua,
            };
            model.apply(&req);
            h.one(req).expect("write");
        };
        // A partial write is cached: the members do not have it.
        put(&mut h, sb + 100, 1000, false);
        assert_eq!(h.volume.cached_stripes(), 1);
        // A FUA write to the same stripe takes the cached bytes with it.
        let flushes = h.received[0].flushes;
        put(&mut h, sb + 3000, 2000, true);
        assert_eq!(h.volume.cached_stripes(), 0);
        assert!(
            h.received[0].flushes > flushes,
            "FUA without a member flush"
        );
        // And one to a stripe with nothing cached goes straight out.
        put(&mut h, 3 * sb + 512, 700, true);
        assert_eq!(h.volume.cached_stripes(), 0);
        check_members(&mut h, &model);
    }
}

/// The bound is on memory: entries and the write-outs still holding their
/// stripe's buffer together. Write-outs used to count for nothing, so with
/// slow members (an e2e RAID-5 at 200 ms per I/O) they piled up, 800
/// stripes (166 MB) for a 64-stripe cache, each entry's room reused at
/// once by a new one.
#[test]
fn the_cache_bound_is_never_exceeded() {
    let config = small(Level::Raid5, 4);
    for max_stripes in [1, 2, 5] {
        let limits = CacheLimits {
            max_stripes,
            max_bytes: 16 * MIB,
        };
        let mut h = Harness::with_cache(&config, max_stripes, limits);
        let worst = Rc::new(Cell::new(0));
        let w = Rc::clone(&worst);
        h.after_io = Some(Box::new(move |v: &Volume| {
            let s = v.cache_status().expect("cache on");
            w.set(w.get().max(s.stripes));
            assert!(s.stripes + s.writing <= max_stripes, "{s:?}");
        }));
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 300, 8);
        let s = h.volume.cache_status().expect("cache on");
        assert!(s.stripes <= max_stripes, "{s:?}");
        assert_eq!(s.capacity_stripes, max_stripes);
        verify_all(&mut h, &model);
        assert_eq!(worst.get(), max_stripes, "the cache never filled");
    }
    // The byte bound: 16 KiB of 12 KiB stripes is one stripe; a stripe
    // larger than the bound caches nothing.
    let mut h = Harness::with_cache(
        &config,
        1,
        CacheLimits {
            max_stripes: 64,
            max_bytes: 16 << 10,
        },
    );
    assert_eq!(h.volume.cache_status().unwrap().capacity_stripes, 1);
    h.write(100, &[1; 100]).unwrap();
    assert_eq!(h.volume.cached_stripes(), 1);
    // Full: the oldest goes out, and this write goes to the members itself.
    h.write(20_000, &[1; 100]).unwrap();
    assert_eq!(h.volume.cached_stripes(), 0);
    h.write(20_000, &[1; 100]).unwrap();
    assert_eq!(h.volume.cached_stripes(), 1);
    let mut h = Harness::new(&config, 1);
    h.enable_cache(CacheLimits {
        max_stripes: 64,
        max_bytes: 4096,
    });
    assert_eq!(h.volume.cache_status(), None);
}

#[test]
fn a_tick_writes_out_stripes_idle_for_a_whole_interval() {
    let config = small(Level::Raid5, 4);
    let mut h = Harness::with_cache(&config, 3, CacheLimits::DEFAULT);
    let sb = h.volume.geometry().stripe_data_bytes();
    h.write(10, &[7; 100]).unwrap();
    h.write(2 * sb + 10, &[8; 100]).unwrap();
    assert_eq!(h.volume.cached_stripes(), 2);
    h.one(Request::CacheTick { all: false }).unwrap();
    // Both were written since the last tick: they stay.
    assert_eq!(h.volume.cached_stripes(), 2);
    h.write(2 * sb + 500, &[9; 100]).unwrap();
    h.one(Request::CacheTick { all: false }).unwrap();
    // Stripe 0 was idle for the interval; stripe 2 was written again.
    assert_eq!(h.volume.cached_stripes(), 1);
    let writes = h.received.iter().map(|r| r.writes).sum::<u64>();
    assert!(
        writes >= 2,
        "stripe 0 went out as a data and a parity write"
    );
    h.one(Request::CacheTick { all: true }).unwrap();
    assert_eq!(h.volume.cached_stripes(), 0);
    let c = h.volume.stats().volume.counters;
    // Two partial stripes written out, counted as stripe writes.
    assert_eq!(c.read_modify_writes + c.reconstruct_writes, 2, "{c:?}");
    assert_eq!(h.read(2 * sb + 500, 100).unwrap(), vec![9; 100]);
}

#[test]
fn zeroes_and_trims_drop_the_cached_bytes_they_cover() {
    for (level, n) in [(Level::Raid5, 4), (Level::Raid6, 5)] {
        let config = small(level, n);
        let mut h = Harness::with_cache(&config, 21, CacheLimits::DEFAULT);
        let mut model = Model::new(&h.volume);
        let sb = h.volume.geometry().stripe_data_bytes();
        let mut apply = |h: &mut Harness, req: Request| {
            model.apply(&req);
            h.one(req).expect("request");
        };
        let data = |h: &mut Harness, len: u64| Bytes::from(h.rng.bytes(len as usize));
        // Cached partial stripes 0, 1 and 3.
        for s in [0, 1, 3] {
            let d = data(&mut h, sb / 2);
            apply(
                &mut h,
                Request::Write {
                    offset_bytes: s * sb + 64,
                    data: d,
                    fua: false,
                },
            );
        }
        assert_eq!(h.volume.cached_stripes(), 3);
        // Zeroes over the middle of stripe 0's cached bytes; stripe 0 stays
        // cached around them.
        apply(
            &mut h,
            Request::WriteZeroes {
                offset_bytes: 1000,
                len_bytes: 2000,
                fua: false,
            },
        );
        assert_eq!(h.volume.cached_stripes(), 3);
        // Zeroes covering all of stripe 1's cached bytes drop its entry.
        apply(
            &mut h,
            Request::WriteZeroes {
                offset_bytes: sb,
                len_bytes: sb - 100,
                fua: false,
            },
        );
        assert_eq!(h.volume.cached_stripes(), 2);
        // A trim of whole stripes 2..4 drops stripe 3; a partial trim of
        // stripe 0 leaves its bytes alone.
        apply(
            &mut h,
            Request::Trim {
                offset_bytes: 2 * sb,
                len_bytes: 2 * sb,
            },
        );
        apply(
            &mut h,
            Request::Trim {
                offset_bytes: 0,
                len_bytes: sb - 1,
            },
        );
        assert_eq!(h.volume.cached_stripes(), 1);
        verify_all(&mut h, &model);
        h.flush();
        verify_all(&mut h, &model);
        check_members(&mut h, &model);
    }
}

#[test]
fn checks_and_rebuilds_see_the_cached_data() {
    let config = small(Level::Raid5, 4);
    let mut h = Harness::with_cache(&config, 31, CacheLimits::DEFAULT);
    let mut model = Model::new(&h.volume);
    let sb = h.volume.geometry().stripe_data_bytes();
    let req = Request::Write {
        offset_bytes: sb + 10,
        data: Bytes::from(vec![5u8; 1000]),
        fua: false,
    };
    model.apply(&req);
    h.one(req).unwrap();
    assert_eq!(h.volume.cached_stripes(), 1);
    // A check of stripes 0..2 writes stripe 1 out first.
    let r = h.one(Request::Maintain {
        first_stripe: 0,
        stripe_count: 2,
        action: Maintenance::Check,
    });
    assert!(
        matches!(r, Ok(Reply::Checked(ref r)) if r.mismatched_stripes.is_empty()),
        "{r:?}"
    );
    assert_eq!(h.volume.cached_stripes(), 0);
    check_members(&mut h, &model);
    // A rebuild over cached stripes: the rebuilt member holds them too.
    let req = Request::Write {
        offset_bytes: 3 * sb + 10,
        data: Bytes::from(vec![6u8; 1000]),
        fua: false,
    };
    model.apply(&req);
    h.one(req).unwrap();
    h.broken[2] = true;
    let _ = h.read(0, h.volume.size_bytes());
    h.broken[2] = false;
    h.members[2].fill(0);
    h.volume.start_rebuild(2, 0).unwrap();
    while let Some(id) = h.volume.rebuild_step(2) {
        let done = h.run();
        assert!(done.iter().any(|c| c.id == id && c.result.is_ok()));
    }
    assert_eq!(h.volume.cached_stripes(), 0);
    check_members(&mut h, &model);
}

#[test]
fn a_stripe_that_cannot_be_written_out_stays_readable_and_fails_the_flush() {
    let config = small(Level::Raid5, 4);
    let mut h = Harness::with_cache(&config, 41, CacheLimits::DEFAULT);
    let sb = h.volume.geometry().stripe_data_bytes();
    h.write(sb + 100, &[3; 1000]).unwrap();
    assert_eq!(h.volume.cached_stripes(), 1);
    // Two members of four lost: past what RAID-5 survives.
    h.broken[0] = true;
    h.broken[1] = true;
    let _ = h.read(0, h.volume.size_bytes());
    let flushed = h.one(Request::Flush);
    assert!(
        flushed.is_err(),
        "a flush succeeded with its cached data unwritable"
    );
    // The acknowledged bytes are still what reads return, never older ones.
    assert_eq!(h.read(sb + 100, 1000).unwrap(), vec![3; 1000]);
    assert_eq!(h.volume.cached_stripes(), 1);
    assert!(
        h.one(Request::Flush).is_err(),
        "every later flush fails too"
    );
}

/// A write lets go of the stripes the cache took whole when it starts: the
/// next sequential write, which completes the cached stripe, goes to the
/// members at once instead of waiting for all of the one before it.
#[test]
fn a_sequential_write_does_not_wait_for_the_one_before_it() {
    writes_in_order_do_not_wait(&[0, 1]);
}

/// The same at the write's first stripe: writes going backwards (a file
/// system filling a region from its end) share each write's first stripe
/// with the next one's last. Mutation testing found the first-stripe side
/// unexamined (`first < end` made `==`, so a write kept its first stripe
/// locked, unseen).
#[test]
fn a_write_going_backwards_does_not_wait_for_the_one_after_it() {
    writes_in_order_do_not_wait(&[1, 0]);
}

/// Two 1 MiB writes at `order` (in MiB), each submitted before any member
/// I/O completes: both reach the members at once.
fn writes_in_order_do_not_wait(order: &[u64]) {
    let mut h = Harness::new(&raid5_4x64k(16), 11);
    h.enable_cache(CacheLimits::DEFAULT);
    let mut model = Model::new(&h.volume);
    let mut queued = Vec::new();
    for &i in order {
        let req = Request::Write {
            offset_bytes: i * MIB,
            data: Bytes::from(h.rng.bytes(MIB as usize)),
            fua: false,
        };
        model.apply(&req);
        h.volume.submit(req);
        // Take the member I/Os issued so far, completing none of them.
        while let Some(io) = h.volume.next_io() {
            queued.push(io);
        }
        assert!(!queued.is_empty(), "write {i} issued nothing");
    }
    let writes = queued
        .iter()
        .filter(|io| matches!(io.op, platter_core::volume::MemberOp::Write { .. }))
        .count();
    // Each write is 5 stripes and a bit on 4 members: one merged write per
    // member each.
    assert_eq!(writes, 8, "the second write waited for the first");
    for io in queued {
        h.perform(io);
    }
    for c in h.run() {
        c.result.expect("write");
    }
    h.flush();
    verify_all(&mut h, &model);
}

/// A stripe the cache writes out counts once, by the way its parity was
/// kept, like a client write's stripe: a full stripe, a read-modify-write,
/// a reconstruct-write, or no parity (its member lost). The earlier test
/// destaged only reconstruct-writes, so the other three counts could be
/// dropped or mangled (mutants of `account_finish`) unseen.
#[test]
fn destaged_stripes_count_by_how_their_parity_was_kept() {
    let config = small(Level::Raid5, 5);
    let mut h = Harness::with_cache(&config, 31, CacheLimits::DEFAULT);
    let sb = h.volume.geometry().stripe_data_bytes();
    let counts = |h: &Harness| {
        let c = h.volume.stats().volume.counters;
        (
            c.full_stripe_writes,
            c.read_modify_writes,
            c.reconstruct_writes,
            c.parityless_writes,
        )
    };
    // Stripe 0 whole, in two halves: out as one full-stripe write.
    h.write(0, &vec![1; (sb / 2) as usize]).unwrap();
    h.write(sb / 2, &vec![2; (sb / 2) as usize]).unwrap();
    h.one(Request::CacheTick { all: true }).unwrap();
    assert_eq!(counts(&h), (1, 0, 0, 0));
    // One sector of stripe 1 (one data chunk of four): the old chunk and
    // parity (two reads) beat the three others: a read-modify-write.
    h.write(sb, &[3; 512]).unwrap();
    h.one(Request::CacheTick { all: true }).unwrap();
    assert_eq!(counts(&h), (1, 1, 0, 0));
    // Three chunks of stripe 2: reading the fourth beats reading three
    // and parity: a reconstruct-write.
    let il = config.interleave_bytes;
    h.write(2 * sb, &vec![4; (3 * il) as usize]).unwrap();
    h.one(Request::CacheTick { all: true }).unwrap();
    assert_eq!(counts(&h), (1, 1, 1, 0));
    // Stripe 3's parity member lost: its write-out keeps no parity.
    let p = h.volume.geometry().parity_roles(3).unwrap().p;
    h.reassemble(&[p]);
    h.write(3 * sb, &[5; 512]).unwrap();
    h.one(Request::CacheTick { all: true }).unwrap();
    assert_eq!(counts(&h).3, 1, "{:?}", counts(&h));
}

/// The cache gathers writes into full stripes of parity: levels without
/// parity get none (their writes have no parity to save). Mutation testing
/// found the level test weakened (`||` to `&&`) unseen: every cache test
/// used RAID-5 or RAID-6.
#[test]
fn levels_without_parity_get_no_cache() {
    for level in [Level::Concat, Level::Stripe, Level::Mirror, Level::Raid10] {
        let mut config = small(level, 4);
        config.copies = if matches!(level, Level::Mirror | Level::Raid10) {
            2
        } else {
            1
        };
        let mut h = Harness::new(&config, 3);
        h.enable_cache(CacheLimits::DEFAULT);
        assert!(h.volume.cache_status().is_none(), "{level:?}");
    }
    let mut h = Harness::new(&small(Level::Raid5, 4), 3);
    h.enable_cache(CacheLimits::DEFAULT);
    assert!(h.volume.cache_status().is_some());
}

/// A write-out refused for space (a member on a full file system) is not a
/// failed one: the clock tries it again and it goes out once there is
/// room, no FLUSH needed. A write-out that failed because too many members
/// are lost waits for a FLUSH: ticks do not send it again and again.
///
/// Mutation testing swapped the two (`!op.trouble.no_space` to
/// `op.trouble.no_space` when a failed write-out is put back) unseen: no
/// cache test ran out of space.
#[test]
fn a_write_out_refused_for_space_goes_out_on_a_later_tick_and_a_failed_one_waits() {
    let config = small(Level::Raid5, 4);
    let mut h = Harness::with_cache(&config, 43, CacheLimits::DEFAULT);
    let sb = h.volume.geometry().stripe_data_bytes();
    h.write(sb + 100, &[5; 1000]).unwrap();
    assert_eq!(h.volume.cached_stripes(), 1);
    // Every member full: the write-out is refused.
    h.full.iter_mut().for_each(|f| *f = true);
    h.one(Request::CacheTick { all: true }).unwrap();
    assert_eq!(h.volume.cached_stripes(), 1, "refused, still cached");
    h.full.iter_mut().for_each(|f| *f = false);
    let writes = |h: &Harness| h.received.iter().map(|r| r.writes).sum::<u64>();
    let before = writes(&h);
    h.one(Request::CacheTick { all: false }).unwrap();
    h.one(Request::CacheTick { all: false }).unwrap();
    assert_eq!(
        h.volume.cached_stripes(),
        0,
        "room again: the clock wrote it out"
    );
    assert!(writes(&h) > before);
    assert_eq!(h.read(sb + 100, 1000).unwrap(), vec![5; 1000]);

    // Two of four members lost: the write-out fails and is put back.
    h.write(2 * sb + 100, &[6; 1000]).unwrap();
    h.broken[0] = true;
    h.broken[1] = true;
    h.record_failures();
    h.one(Request::CacheTick { all: true }).unwrap();
    assert_eq!(h.volume.cached_stripes(), 1);
    let before = writes(&h);
    for _ in 0..3 {
        h.one(Request::CacheTick { all: false }).unwrap();
    }
    assert_eq!(writes(&h), before, "ticks sent a failed write-out again");
    assert_eq!(h.read(2 * sb + 100, 1000).unwrap(), vec![6; 1000]);
}

/// A cache full of write-outs still running evicts no entry: the write-outs
/// end on their own, and an entry pushed out early is a partial stripe
/// written with its parity read back. Mutation testing turned the test of
/// whether entries fill the cache around (`<` to `>`) unseen: every full
/// cache in the tests was full of entries.
#[test]
fn a_cache_full_of_write_outs_evicts_no_entry() {
    let config = small(Level::Raid5, 4);
    let limits = CacheLimits {
        max_stripes: 2,
        max_bytes: 16 * MIB,
    };
    let mut h = Harness::with_cache(&config, 44, limits);
    let sb = h.volume.geometry().stripe_data_bytes();
    let w = |at: u64, b: u8| Request::Write {
        offset_bytes: at,
        data: Bytes::from(vec![b; 100]),
        fua: false,
    };
    h.write(100, &[1; 100]).unwrap();
    // Stripe 0 goes out; before its member writes run, stripe 1 is cached
    // (the cache is now full: one write-out, one entry) and a write to
    // stripe 2 finds no room.
    h.volume.submit(Request::CacheTick { all: true });
    h.volume.submit(w(sb + 100, 2));
    h.volume.submit(w(2 * sb + 100, 3));
    for c in h.run() {
        c.result.expect("succeeds");
    }
    assert_eq!(h.volume.cached_stripes(), 1, "stripe 1's entry was evicted");
    assert_eq!(h.read(sb + 100, 100).unwrap(), vec![2; 100]);
    assert_eq!(h.read(2 * sb + 100, 100).unwrap(), vec![3; 100]);
}
