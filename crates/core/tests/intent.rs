//! The write-intent bitmap: a write is issued only after its region's bit
//! is durable on the members, bits are cleared only after a flush, and —
//! the property that matters — after a crash at any moment every stripe
//! whose parity or copies disagree lies in a region the bitmap marks, so a
//! resync of those regions alone makes the volume consistent.

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::intent::{IntentLayout, INTENT_OFFSET_BYTES};
use platter_core::volume::{Maintenance, MemberOp, Reply, Request};
use platter_core::{Level, ParityLayout};
use platter_testkit::volatile::BitmapRig;

const DATA_OFFSET_BYTES: u64 = 64 << 10;

fn geometry(level: Level, members: u32) -> Geometry {
    Geometry::new(GeometrySpec {
        level,
        parity_layout: ParityLayout::LeftSymmetric,
        copies: match level {
            Level::Mirror => members,
            Level::Raid10 => 2,
            _ => 1,
        },
        interleave_bytes: 4096,
        data_offset_bytes: DATA_OFFSET_BYTES,
        member_data_bytes: vec![256 << 10; members as usize],
    })
    .expect("valid geometry")
}

/// Two stripes a region: small, so that workloads touch several.
fn new_rig(level: Level, members: u32, seed: u64) -> BitmapRig {
    let g = geometry(level, members);
    let layout = IntentLayout::new(&g, 2).unwrap().expect("a bitmap");
    BitmapRig::new(g, layout, seed)
}

fn is_data_write(op: &MemberOp) -> Option<u64> {
    match op {
        MemberOp::Write { offset_bytes, .. } | MemberOp::Trim { offset_bytes, .. }
            if *offset_bytes >= DATA_OFFSET_BYTES =>
        {
            Some(*offset_bytes)
        }
        _ => None,
    }
}

fn mismatched_stripes(rig: &mut BitmapRig) -> Vec<u64> {
    let stripes = rig.volume.geometry().stripes();
    match rig.one(Request::Maintain {
        first_stripe: 0,
        stripe_count: stripes,
        action: Maintenance::Check,
    }) {
        Reply::Checked(r) => {
            assert_eq!(r.unchecked_stripes, 0);
            r.mismatched_stripes
        }
        other => panic!("{other:?}"),
    }
}

/// A log as (member, kind, offset): short enough for a failure message.
fn brief(log: &[(u32, MemberOp)]) -> Vec<(u32, &'static str, u64)> {
    log.iter()
        .map(|(m, op)| match op {
            MemberOp::Read { offset_bytes, .. } => (*m, "read", *offset_bytes),
            MemberOp::Write { offset_bytes, .. } => (*m, "write", *offset_bytes),
            MemberOp::Trim { offset_bytes, .. } => (*m, "trim", *offset_bytes),
            MemberOp::Flush => (*m, "flush", 0),
        })
        .collect()
}

fn write(offset_bytes: u64, len: usize, byte: u8) -> Request {
    Request::Write {
        offset_bytes,
        data: Bytes::from(vec![byte; len]),
        fua: false,
    }
}

#[test]
fn a_write_is_issued_only_after_its_bit_is_flushed_on_every_member() {
    let mut rig = new_rig(Level::Raid5, 4, 1);
    let stripe_bytes = rig.volume.geometry().stripe_data_bytes();
    // Region 3 = stripes 6 and 7.
    rig.volume.submit(write(6 * stripe_bytes + 100, 5000, 0xAB));
    rig.settle();
    let first_data = rig
        .log
        .iter()
        .position(|(_, op)| is_data_write(op).is_some())
        .expect("the write reached the members");
    for m in 0..4u32 {
        let bitmap_write = rig.log[..first_data].iter().position(|(mm, op)| {
            *mm == m && matches!(op, MemberOp::Write { offset_bytes, .. } if *offset_bytes == INTENT_OFFSET_BYTES)
        });
        let flush = rig.log[..first_data]
            .iter()
            .rposition(|(mm, op)| *mm == m && matches!(op, MemberOp::Flush));
        assert!(
            matches!((bitmap_write, flush), (Some(w), Some(f)) if w < f),
            "member {m}: bitmap write then flush before any data write: {:?}",
            brief(&rig.log[..first_data])
        );
        let bits = rig.durable_bits(m as usize);
        assert_eq!(bits.iter().collect::<Vec<_>>(), vec![3], "member {m}");
    }
    // A second write to the same region needs no bitmap I/O.
    let before = rig.log.len();
    rig.volume.submit(write(7 * stripe_bytes, 512, 1));
    rig.settle();
    assert!(rig.log[before..]
        .iter()
        .all(|(_, op)| !matches!(op, MemberOp::Flush)));
    assert_eq!(rig.volume.intent_status().unwrap().rounds, 1);
}

#[test]
fn a_sweep_clears_a_region_only_after_a_quiet_interval_and_a_flush() {
    let mut rig = new_rig(Level::Mirror, 2, 2);
    rig.volume.submit(write(0, 4096, 7));
    rig.settle();
    assert_eq!(rig.durable_union().len(), 1);
    // Written since the last sweep: kept.
    rig.one(Request::Sweep { all: false });
    assert_eq!(rig.durable_union().len(), 1);
    let before = rig.log.len();
    rig.one(Request::Sweep { all: false });
    assert!(rig.durable_union().is_empty(), "idle for a whole interval");
    let log = &rig.log[before..];
    for m in 0..2u32 {
        let flush = log
            .iter()
            .position(|(mm, op)| *mm == m && matches!(op, MemberOp::Flush));
        let clear = log
            .iter()
            .position(|(mm, op)| *mm == m && matches!(op, MemberOp::Write { .. }));
        assert!(
            matches!((flush, clear), (Some(f), Some(c)) if f < c),
            "member {m}: flush before the clearing write: {:?}",
            brief(log)
        );
    }
    // A sweep with nothing to clear does no I/O.
    let before = rig.log.len();
    rig.one(Request::Sweep { all: false });
    assert_eq!(rig.log.len(), before);
}

#[test]
fn a_write_racing_a_clearing_round_waits_for_its_bit_again() {
    let mut rig = new_rig(Level::Raid6, 5, 3);
    rig.volume.submit(write(0, 4096, 7));
    rig.settle();
    rig.volume.submit(Request::Sweep { all: true });
    // The clearing round has started (its pre-flush is out); now a write
    // to the region being cleared arrives.
    rig.take_ios();
    assert!(rig.pool.iter().all(|io| matches!(io.op, MemberOp::Flush)));
    assert!(!rig.pool.is_empty());
    rig.volume.submit(write(100, 10, 9));
    rig.take_ios();
    assert!(
        rig.pool
            .iter()
            .all(|io| is_data_write(&io.op).is_none() && !matches!(io.op, MemberOp::Read { .. })),
        "the write must wait: {:?}",
        rig.pool
            .iter()
            .map(|io| (io.member, io.op.clone()))
            .collect::<Vec<_>>()
            .len()
    );
    rig.settle();
    // The write went out after a round that set the bit again.
    assert_eq!(rig.durable_union().iter().collect::<Vec<_>>(), vec![0]);
    let last_bitmap = rig
        .log
        .iter()
        .rposition(|(_, op)| matches!(op, MemberOp::Write { offset_bytes, .. } if *offset_bytes == INTENT_OFFSET_BYTES))
        .unwrap();
    let last_data = rig
        .log
        .iter()
        .rposition(|(_, op)| is_data_write(op).is_some())
        .unwrap();
    assert!(last_bitmap < last_data);
}

/// The property: crash anywhere in a random workload with random sweeps;
/// every stripe left inconsistent is in a marked region; resyncing the
/// marked regions leaves none.
#[test]
fn after_a_crash_every_inconsistent_stripe_is_in_a_marked_region() {
    let mut inconsistent_seen = 0;
    let mut resynced_regions = 0u64;
    let mut all_regions = 0u64;
    for seed in 0..300u64 {
        let (level, members) = match seed % 4 {
            0 => (Level::Raid5, 3 + (seed / 4 % 3) as u32),
            1 => (Level::Raid6, 4 + (seed / 4 % 3) as u32),
            2 => (Level::Mirror, 2 + (seed / 4 % 2) as u32),
            _ => (Level::Raid10, 3 + (seed / 4 % 2) as u32),
        };
        let mut rig = new_rig(level, members, seed);
        let size = rig.volume.size_bytes();
        // Writes cluster in the first third, as real workloads do.
        let hot = size / 3;
        let steps = 20 + rig.rng.below(400);
        for _ in 0..steps {
            match rig.rng.below(20) {
                0 => {
                    rig.volume.submit(Request::Sweep {
                        all: rig.rng.below(4) == 0,
                    });
                }
                1 => {
                    rig.volume.submit(Request::Flush);
                }
                2..=9 => {
                    let len = 1 + rig.rng.below(20_000);
                    let at = rig.rng.below(hot - len);
                    let byte = rig.rng.below(255) as u8 + 1;
                    rig.volume.submit(write(at, len as usize, byte));
                }
                _ => {
                    rig.step();
                }
            }
            while rig.volume.next_completion().is_some() {}
        }
        rig.crash();
        let bits = rig.restart();
        let bad = mismatched_stripes(&mut rig);
        inconsistent_seen += bad.len();
        for s in &bad {
            assert!(
                bits.contains(rig.layout.region_of(*s)),
                "seed {seed} ({level:?}): stripe {s} is inconsistent but region {} is not marked",
                rig.layout.region_of(*s)
            );
        }
        // The resync: repair the marked regions only.
        let mut region = 0;
        while let Some(r) = rig.volume.unsynced_from(region) {
            let (first, count) = rig.layout.stripes_of(r);
            rig.one(Request::Maintain {
                first_stripe: first,
                stripe_count: count,
                action: Maintenance::Repair,
            });
            rig.volume.resynced(r);
            resynced_regions += 1;
            region = r + 1;
        }
        all_regions += rig.layout.regions;
        assert!(mismatched_stripes(&mut rig).is_empty(), "seed {seed}");
        // Two sweeps later the bitmap is clean again.
        rig.volume.submit(Request::Sweep { all: false });
        rig.settle();
        rig.volume.submit(Request::Sweep { all: false });
        rig.settle();
        assert!(rig.durable_union().is_empty(), "seed {seed}");
    }
    // The test must have seen the problem it guards against, and the
    // bitmap must have kept the resync to part of the volumes.
    assert!(
        inconsistent_seen > 20,
        "only {inconsistent_seen} inconsistent stripes seen"
    );
    assert!(
        resynced_regions * 2 < all_regions,
        "resynced {resynced_regions} of {all_regions} regions"
    );
}
