//! Volumes of several TiB on sparse in-memory members: write-intent bitmaps
//! of many 4 KiB pages, member offsets past 2^32 sectors, stripe numbers
//! past 2^32 and volume offsets past 2^40.
//!
//! Every other engine test has a bitmap of one page (at most 32,768
//! regions), so the multi-page path of a bitmap round (`intent_issue` in
//! `volume/intent.rs`: which pages go out, adjacent pages merged into one
//! write, each run written at its page's offset) was never seen by a test:
//! cargo-mutants left 9 mutants alive there. A bug in it leaves the bit of
//! a region being written unset (or set in the wrong region) on the
//! members, and after a crash the resync skips a stripe whose parity or
//! copies disagree. These tests write a few MiB at scattered offsets of
//! multi-TiB volumes, look at the bitmap bytes the members hold, crash, and
//! check that what a crash leaves inconsistent is marked and that the data
//! reads back.

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::intent::{
    IntentLayout, DEFAULT_REGION_BYTES, INTENT_OFFSET_BYTES, INTENT_PAGE_BYTES,
};
use platter_core::volume::{ErrorKind, Maintenance, MemberOp, Reply, Request};
use platter_core::{Level, ParityLayout};
use platter_testkit::volatile::{BitmapRig, VolatileDisk};
use std::collections::BTreeSet;

const TIB: u64 = 1 << 40;
/// As `platter create` lays members out: room for a bitmap of 255 pages.
const DATA_OFFSET_BYTES: u64 = 1 << 20;
const PAGE: u64 = 4096;
/// Regions one bitmap page covers.
const REGIONS_PER_PAGE: u64 = INTENT_PAGE_BYTES * 8;

/// Bytes kept in 4 KiB pages; a page never written reads as zeros.

#[derive(Clone, Copy, Debug)]
struct Case {
    level: Level,
    members: u32,
    copies: u32,
    interleave_bytes: u64,
    member_data_bytes: u64,
}

/// The levels with a bitmap, each at a size where a 32-bit sector or
/// stripe number would wrap: member data areas of 2.5 to 3 TiB (offsets
/// past 2^32 sectors), volumes of 2.5 to 9 TiB (offsets past 2^40), and
/// for RAID-6 and RAID-10 a 512-byte interleave, so stripe numbers pass
/// 2^32 as well.
const CASES: [Case; 4] = [
    Case {
        level: Level::Raid5,
        members: 4,
        copies: 1,
        interleave_bytes: 64 << 10,
        member_data_bytes: 3 * TIB,
    },
    Case {
        level: Level::Raid6,
        members: 5,
        copies: 1,
        interleave_bytes: 512,
        member_data_bytes: 5 * TIB / 2,
    },
    Case {
        level: Level::Raid10,
        members: 3,
        copies: 2,
        interleave_bytes: 512,
        member_data_bytes: 5 * TIB,
    },
    Case {
        level: Level::Mirror,
        members: 2,
        copies: 2,
        interleave_bytes: 64 << 10,
        member_data_bytes: 5 * TIB / 2,
    },
];

impl Case {
    fn geometry(&self) -> Geometry {
        Geometry::new(GeometrySpec {
            level: self.level,
            parity_layout: ParityLayout::LeftSymmetric,
            copies: self.copies,
            interleave_bytes: self.interleave_bytes,
            data_offset_bytes: DATA_OFFSET_BYTES,
            member_data_bytes: vec![self.member_data_bytes; self.members as usize],
        })
        .expect("valid geometry")
    }
}

/// The volume with the bitmap `platter create` would give it (4 MiB
/// regions, grown until the bitmap fits in front of the data).
fn new_rig(case: Case, seed: u64) -> BitmapRig {
    let g = case.geometry();
    let region_stripes = IntentLayout::choose_region_stripes(&g, DEFAULT_REGION_BYTES);
    let layout = IntentLayout::new(&g, region_stripes)
        .unwrap()
        .expect("a bitmap");
    BitmapRig::new(g, layout, seed)
}

/// What these tests ask of the test kit's rig besides.
trait RigExt {
    fn read(&mut self, offset_bytes: u64, len_bytes: u64) -> Vec<u8>;
    fn check(&mut self, first_stripe: u64, stripe_count: u64, action: Maintenance) -> Vec<u64>;
    fn region_offset(&self, region: u64) -> u64;
    fn region_bytes(&self) -> u64;
}

impl RigExt for BitmapRig {
    fn read(&mut self, offset_bytes: u64, len_bytes: u64) -> Vec<u8> {
        match self.one(Request::Read {
            offset_bytes,
            len_bytes,
        }) {
            Reply::Data(d) => d.to_vec(),
            other => panic!("{other:?}"),
        }
    }

    fn check(&mut self, first_stripe: u64, stripe_count: u64, action: Maintenance) -> Vec<u64> {
        match self.one(Request::Maintain {
            first_stripe,
            stripe_count,
            action,
        }) {
            Reply::Checked(r) => {
                assert_eq!(r.unchecked_stripes, 0);
                r.mismatched_stripes
            }
            other => panic!("{other:?}"),
        }
    }

    /// The volume byte where `region` starts.
    fn region_offset(&self, region: u64) -> u64 {
        region * self.layout.region_stripes * self.volume.geometry().stripe_data_bytes()
    }

    /// Volume bytes a region holds (the last one may be shorter).
    fn region_bytes(&self) -> u64 {
        self.layout.region_stripes * self.volume.geometry().stripe_data_bytes()
    }
}

fn write(offset_bytes: u64, data: Vec<u8>, fua: bool) -> Request {
    Request::Write {
        offset_bytes,
        data: Bytes::from(data),
        fua,
    }
}

/// Regions to write in the placement test: the first region of page 0;
/// then regions on pages 5, 6 and 7 (one run of three adjacent pages,
/// with the last region of page 5 and the first of page 6 side by side);
/// page 9 alone; and the volume's last region, on its last page.
fn scattered_regions(layout: &IntentLayout) -> (u64, Vec<u64>) {
    let p = REGIONS_PER_PAGE;
    let last = layout.regions - 1;
    assert!(
        last / p > 10,
        "the volume needs a bitmap of more than 10 pages, has {}",
        layout.pages()
    );
    (
        0,
        vec![5 * p + 17, 6 * p - 1, 6 * p, 7 * p + 4000, 9 * p + 1, last],
    )
}

/// Each bitmap round writes exactly the pages that changed, adjacent ones
/// as one write at the first one's offset, and every member then holds the
/// regions written, and no other. Kills the mutants cargo-mutants left in
/// `intent_issue`: a wrong merge condition (pages written one by one or
/// gaps merged), a wrong run length (`*n += 1` mutated), a wrong range of
/// page bytes, and a wrong page offset (`first * PAGE` mutated to `/` or
/// `+`): each either changes the writes below or leaves a written
/// region's bit off the members.
#[test]
fn bitmap_rounds_write_the_changed_pages_at_their_offsets_merging_adjacent_ones() {
    for (i, case) in CASES.iter().enumerate() {
        let mut rig = new_rig(*case, 100 + i as u64);
        let layout = rig.layout;
        let g = rig.volume.geometry().clone();
        assert!(g.volume_size_bytes() > 2 * TIB, "{case:?}");
        let (first, later) = scattered_regions(&layout);
        // Round 1: one region on page 0.
        rig.volume
            .submit(write(rig.region_offset(first) + 100, vec![1; 3000], false));
        rig.settle_ok();
        let mut expected = BTreeSet::from([first]);
        for m in 0..case.members as usize {
            let bits: BTreeSet<u64> = rig.durable_bits(m).iter().collect();
            assert_eq!(bits, expected, "{case:?} member {m} after round 1");
        }
        // Round 2 sets a second bit on page 0; the later regions arrive
        // while it runs and all wait for round 3.
        let mark = rig.log.len();
        rig.volume
            .submit(write(rig.region_offset(first + 3), vec![9; 512], false));
        // Inside each region, clear of its ends (the last may be short).
        let spots: Vec<(u64, u64)> = later
            .iter()
            .map(|&r| {
                let bytes = layout.stripes_of(r).1 * g.stripe_data_bytes();
                let len = 5000.min(bytes - 2);
                (rig.region_offset(r) + (bytes - len) / 2, len)
            })
            .collect();
        for (j, &(at, len)) in spots.iter().enumerate() {
            rig.volume
                .submit(write(at, vec![2 + j as u8; len as usize], false));
        }
        rig.settle_ok();
        expected.extend(later.iter().copied());
        expected.insert(first + 3);
        let last_page = layout.pages() - 1;
        let mut want_writes = vec![
            (INTENT_OFFSET_BYTES, PAGE),
            (INTENT_OFFSET_BYTES + 5 * PAGE, 3 * PAGE),
            (INTENT_OFFSET_BYTES + 9 * PAGE, PAGE),
            (INTENT_OFFSET_BYTES + last_page * PAGE, PAGE),
        ];
        want_writes.sort_unstable();
        for m in 0..case.members {
            let mut bitmap_writes = rig.metadata_writes(mark, m);
            bitmap_writes.sort_unstable();
            assert_eq!(
                bitmap_writes, want_writes,
                "{case:?} member {m}: the bitmap writes of rounds 2 and 3"
            );
            let bits: BTreeSet<u64> = rig.durable_bits(m as usize).iter().collect();
            assert_eq!(bits, expected, "{case:?} member {m} after round 3");
        }
        // The data went past 2^40 on the volume and past 2^32 sectors on
        // the members.
        let data_ends: Vec<u64> = rig
            .log
            .iter()
            .filter_map(|(_, op)| match op {
                MemberOp::Write { offset_bytes, data } if *offset_bytes >= DATA_OFFSET_BYTES => {
                    Some(offset_bytes + data.len() as u64)
                }
                _ => None,
            })
            .collect();
        assert!(
            data_ends.iter().any(|&e| e > (1u64 << 32) * 512),
            "{case:?}: no member write past 2^32 sectors"
        );
        for (j, &(at, len)) in spots.iter().enumerate() {
            let mut want = vec![0u8; len as usize + 2];
            want[1..=len as usize].fill(2 + j as u8);
            assert_eq!(
                rig.read(at - 1, len + 2),
                want,
                "{case:?} region {}",
                later[j]
            );
        }
        assert!(rig.region_offset(layout.regions - 1) > TIB);
        // Members held a few MiB, not TiBs.
        for m in &rig.disks {
            assert!(m.bytes_held() < 64 << 20);
        }
    }
}

/// Stripe numbers past 2^32 (RAID-6 and RAID-10 at a 512-byte
/// interleave): a stripe number cut to 32 bits would put the write, its
/// parity or its copies in the wrong row, or its region in the wrong place.
/// The write's bytes must land where the geometry says, its region's bit
/// must be the one set, and a check of its stripes must find them
/// consistent.
#[test]
fn stripes_past_2_pow_32_map_mark_and_check_consistently() {
    for case in CASES.iter().filter(|c| c.interleave_bytes == 512) {
        let mut rig = new_rig(*case, 7);
        let g = rig.volume.geometry().clone();
        assert!(
            g.stripes() > (1 << 32) + 2,
            "{case:?}: {} stripes",
            g.stripes()
        );
        let stripe_bytes = g.stripe_data_bytes();
        for stripe in [(1u64 << 32) - 1, 1 << 32, (1 << 32) + 1, g.stripes() - 2] {
            let at = stripe * stripe_bytes;
            let data: Vec<u8> = (0..2 * stripe_bytes).map(|i| (i % 251) as u8 + 1).collect();
            rig.one(write(at, data.clone(), true));
            assert_eq!(
                rig.read(at, data.len() as u64),
                data,
                "{case:?} stripe {stripe}"
            );
            assert!(rig.check(stripe, 2, Maintenance::Check).is_empty());
            // The first byte sits where the geometry puts data index 0.
            let loc = g.data_locations(stripe, 0).next().unwrap();
            let off = g.member_offset_bytes(loc.row, 0);
            if stripe >= 1 << 32 {
                assert!(
                    off > 1 << 41,
                    "{case:?} stripe {stripe} at member offset {off}"
                );
            }
            assert_eq!(
                rig.disks[loc.member as usize].read(off, 1),
                vec![1],
                "{case:?} stripe {stripe}"
            );
            let region = rig.layout.region_of(stripe);
            assert!(
                rig.durable_union().contains(region),
                "{case:?} region {region}"
            );
        }
    }
}

/// The property of the bitmap at size: random writes in windows scattered
/// over a multi-TiB volume (around bitmap page boundaries and the volume's
/// end), random sweeps and flushes, a crash at a random point. Every
/// stripe the crash left inconsistent lies in a region the members' bitmap
/// marks; resyncing the marked regions alone leaves the windows
/// consistent; and writes completed with FUA before the crash read back.
#[test]
fn after_a_crash_at_size_every_inconsistent_stripe_is_marked() {
    let mut inconsistent = 0;
    let mut pages_marked = BTreeSet::new();
    for seed in 0..24u64 {
        let case = CASES[(seed % 4) as usize];
        let mut rig = new_rig(case, seed);
        let layout = rig.layout;
        let size = rig.volume.size_bytes();
        let p = REGIONS_PER_PAGE;
        // Windows of two regions each, straddling a region boundary.
        let mut windows: Vec<u64> = [p, 2 * p, 7 * p, 8 * p, layout.regions - 1]
            .iter()
            .map(|&r| rig.region_offset(r))
            .collect();
        let random_region = rig.rng.below(layout.regions - 1) + 1;
        windows.push(rig.region_offset(random_region));
        let region_bytes = rig.region_bytes();
        let window_span = |w: u64| (w.saturating_sub(region_bytes), (w + region_bytes).min(size));
        // Phase 1: FUA writes, one per window, left alone afterwards.
        let mut fua = Vec::new();
        for &w in &windows {
            let (a, _) = window_span(w);
            let data = rig.rng.bytes(3000);
            rig.one(write(a, data.clone(), true));
            fua.push((a, data));
        }
        // Phase 2: random writes after the FUA ranges, sweeps, flushes.
        let steps = 50 + rig.rng.below(300);
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
                    let w = windows[rig.rng.below(windows.len() as u64) as usize];
                    let (a, b) = window_span(w);
                    let a = a + 4096;
                    let len = 1 + rig.rng.below(40_000).min(b - a - 1);
                    let at = a + rig.rng.below(b - a - len);
                    let data = rig.rng.bytes(len as usize);
                    rig.volume.submit(write(at, data, false));
                }
                _ => {
                    rig.step();
                }
            }
            while let Some(c) = rig.volume.next_completion() {
                c.result.expect("request succeeds");
            }
        }
        rig.crash();
        let bits = rig.restart();
        for r in bits.iter() {
            pages_marked.insert(r / p);
        }
        for &w in &windows {
            let (a, b) = window_span(w);
            let g = rig.volume.geometry().clone();
            let first = a / g.stripe_data_bytes();
            let last = (b - 1) / g.stripe_data_bytes();
            let bad = rig.check(first, last - first + 1, Maintenance::Check);
            inconsistent += bad.len();
            for s in bad {
                assert!(
                    bits.contains(layout.region_of(s)),
                    "seed {seed} ({case:?}): stripe {s} is inconsistent but region {} (page {}) \
                     is not marked",
                    layout.region_of(s),
                    layout.region_of(s) / p
                );
            }
        }
        // The resync: the marked regions only.
        let mut region = 0;
        let mut resynced = 0;
        while let Some(r) = rig.volume.unsynced_from(region) {
            let (first, count) = layout.stripes_of(r);
            rig.check(first, count, Maintenance::Repair);
            rig.volume.resynced(r);
            resynced += 1;
            region = r + 1;
        }
        assert!(
            resynced <= 2 * windows.len() as u64 + 2,
            "seed {seed}: {resynced}"
        );
        for &w in &windows {
            let (a, b) = window_span(w);
            let sb = rig.volume.geometry().stripe_data_bytes();
            let (first, last) = (a / sb, (b - 1) / sb);
            assert!(
                rig.check(first, last - first + 1, Maintenance::Check)
                    .is_empty(),
                "seed {seed} ({case:?}): window at {w} inconsistent after the resync"
            );
        }
        for (a, data) in &fua {
            assert_eq!(
                &rig.read(*a, data.len() as u64),
                data,
                "seed {seed} ({case:?}) at {a}"
            );
        }
        // Two sweeps later the bitmap is clean again, on every page.
        rig.one(Request::Sweep { all: false });
        rig.one(Request::Sweep { all: false });
        assert!(rig.durable_union().is_empty(), "seed {seed}");
    }
    // The test must see what it guards against, on several pages.
    assert!(inconsistent > 5, "only {inconsistent} inconsistent stripes");
    assert!(
        pages_marked.len() >= 4,
        "marked bits on pages {pages_marked:?} only"
    );
}

/// A member that joins (a rebuild onto a fresh device) has an empty bitmap
/// area: the next round must write every page of the bitmap to every
/// member, as one write from the first page. Kills the mutant that drops
/// `intent_member_joined` (the round would write only the changed page,
/// and the new member would lack the marks of every other page: after a
/// crash its copy, OR-ed with the others, is no loss, but once the old
/// members are gone it is all there is).
#[test]
fn a_member_that_joins_gets_every_bitmap_page() {
    let case = CASES[0];
    let mut rig = new_rig(case, 11);
    let layout = rig.layout;
    let p = REGIONS_PER_PAGE;
    for r in [3 * p + 5, 40 * p + 7] {
        rig.one(write(rig.region_offset(r), vec![5; 4096], false));
    }
    // Slot 1 gets a fresh device.
    rig.volume.mark_faulty(1, "test: replaced".into());
    rig.volume.failure_recorded(1);
    rig.disks[1] = VolatileDisk::new(rig.disks[1].size_bytes());
    rig.volume.start_rebuild(1, 0).unwrap();
    let mark = rig.log.len();
    let r = 7 * p + 9;
    rig.one(write(rig.region_offset(r), vec![6; 4096], false));
    let want: BTreeSet<u64> = [3 * p + 5, 40 * p + 7, r].into();
    for m in 0..case.members {
        let writes = rig.metadata_writes(mark, m);
        assert_eq!(
            writes,
            vec![(INTENT_OFFSET_BYTES, layout.pages() * PAGE)],
            "member {m}: one write of every page"
        );
        let bits: BTreeSet<u64> = rig.durable_bits(m as usize).iter().collect();
        assert_eq!(bits, want, "member {m}");
    }
}

/// A write a member refused for space (ENOSPC on a sparse member) may
/// have landed on some members only: its regions stay marked, across
/// sweeps, until a resync repairs them, and only they are owed (not the
/// whole volume). Kills the mutant that makes `intent_keep_unsynced`
/// answer false (the volume would owe a resync of all of its TiBs, and a
/// sweep would clear the region's bit with its stripes still in
/// disagreement).
#[test]
fn a_write_refused_for_space_keeps_its_regions_marked_until_resynced() {
    let case = CASES[0];
    let mut rig = new_rig(case, 12);
    let layout = rig.layout;
    let r = 9 * REGIONS_PER_PAGE + 77;
    rig.full = Some(2);
    let id = rig
        .volume
        .submit(write(rig.region_offset(r) + 4096, vec![8; 300_000], false));
    let mut result = None;
    while rig.step() {
        while let Some(c) = rig.volume.next_completion() {
            assert_eq!(c.id, id);
            result = Some(c.result);
        }
    }
    while let Some(c) = rig.volume.next_completion() {
        result = Some(c.result);
    }
    let err = result.expect("completed").expect_err("refused for space");
    assert_eq!(err.kind, ErrorKind::NoSpace);
    rig.full = None;
    assert_eq!(rig.volume.unsynced_from(0), Some(r));
    assert_eq!(rig.volume.unsynced_from(r + 1), None);
    assert!(rig.volume.resync_owed());
    for _ in 0..3 {
        rig.one(Request::Sweep { all: true });
    }
    assert_eq!(rig.durable_union().iter().collect::<Vec<_>>(), vec![r]);
    // The resync of that region alone settles it.
    let (first, count) = layout.stripes_of(r);
    assert!(!rig.check(first, count, Maintenance::Repair).is_empty());
    rig.volume.resynced(r);
    assert!(!rig.volume.resync_owed());
    rig.one(Request::Sweep { all: true });
    assert!(rig.durable_union().is_empty());
    assert!(rig.check(first, count, Maintenance::Check).is_empty());
}
