//! Scrub: a check finds exactly the stripes whose parity or copies were
//! damaged behind the engine's back, writes nothing, and a repair makes the
//! next check clean.

mod support;

use platter_core::stats::ScrubStats;
use platter_core::volume::{Maintenance, Reply, Request};
use platter_core::Level;
use support::*;

/// The stripe a member's row belongs to (rows past the volume: None).
fn stripe_of(h: &Harness, member: u32, row: u64) -> Option<u64> {
    let g = h.volume.geometry();
    let n = u64::from(g.members());
    let k = u64::from(g.data_per_stripe());
    let chunks = g.volume_size_bytes() / g.interleave_bytes();
    match g.level() {
        Level::Raid5 | Level::Raid6 => (row < g.stripes()).then_some(row),
        Level::Mirror => (row < chunks).then_some(row),
        Level::Raid10 => {
            let chunk = (row * n + u64::from(member)) / u64::from(g.copies());
            (chunk < chunks).then_some(chunk / k)
        }
        Level::Concat | Level::Stripe => None,
    }
}

#[test]
fn check_finds_damage_and_repair_mends_it() {
    let configs: Vec<Config> = all_configs(&[512, 126 * 512, 65536], &[2, 3, 4, 5, 7])
        .into_iter()
        .filter(|c| !matches!(c.level, Level::Concat | Level::Stripe))
        .collect();
    assert!(configs.len() > 25);
    for (i, config) in configs.iter().enumerate() {
        let mut h = Harness::new(config, 90_000 + i as u64);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 20, 6);

        let before = h.members.clone();
        let clean = h.scrub(Maintenance::Check);
        assert_eq!(clean.mismatched_stripes, Vec::<u64>::new(), "{config:?}");
        assert_eq!(clean.unchecked_stripes, 0);
        assert!(h.members == before, "{config:?}: a check wrote");

        // Damage one byte of a used row on one member.
        let il = config.interleave_bytes;
        let (member, row, stripe) = loop {
            let m = h.rng.below(u64::from(config.members)) as u32;
            let row = h.rng.below(config.rows);
            if let Some(s) = stripe_of(&h, m, row) {
                break (m, row, s);
            }
        };
        let at = (DATA_OFFSET_BYTES + row * il + h.rng.below(il)) as usize;
        let undamaged = h.members.clone();
        h.members[member as usize][at] ^= 0x5a;
        let found = h.scrub(Maintenance::Check);
        assert_eq!(
            found.mismatched_stripes,
            vec![stripe],
            "{config:?}: damage on member {member} row {row}"
        );
        // RAID-6's syndromes and a majority of three or more copies name
        // the damaged member; RAID-5 and two copies cannot.
        let locates = config.level == Level::Raid6
            || (matches!(config.level, Level::Mirror | Level::Raid10) && config.copies >= 3);
        if locates {
            assert_eq!(found.wrong_members, vec![(stripe, member)], "{config:?}");
            assert!(found.unlocated_stripes.is_empty(), "{config:?}");
        } else {
            assert!(found.wrong_members.is_empty(), "{config:?}");
            assert_eq!(found.unlocated_stripes, vec![stripe], "{config:?}");
        }

        let repaired = h.scrub(Maintenance::Repair);
        assert_eq!(repaired.mismatched_stripes, vec![stripe]);
        let after = h.scrub(Maintenance::Check);
        assert!(
            after.mismatched_stripes.is_empty(),
            "{config:?}: still damaged after repair"
        );
        if locates {
            // The damaged member itself was mended, whatever its role:
            // every member is byte for byte as before the damage.
            assert!(
                h.members == undamaged,
                "{config:?}: the repair did not restore member {member}"
            );
            verify_all(&mut h, &model);
        }

        // Damage to parity, or to a copy the repair does not trust, is
        // mended without touching the data clients see.
        let roles = h.volume.geometry().parity_roles(stripe);
        let data_damaged = match &roles {
            Some(r) => r.data.contains(&member),
            None => {
                let g = h.volume.geometry();
                let d = ((row * u64::from(g.members()) + u64::from(member))
                    / u64::from(g.copies()))
                    % u64::from(g.data_per_stripe());
                let first = g.data_locations(stripe, d as u32).next().unwrap();
                first.member == member && first.row == row
            }
        };
        if !data_damaged {
            verify_all(&mut h, &model);
        }
    }
}

#[test]
fn stripes_with_a_lost_member_are_reported_unchecked() {
    let config = all_configs(&[4096], &[4])
        .into_iter()
        .find(|c| c.level == Level::Raid5)
        .unwrap();
    let mut h = Harness::new(&config, 3);
    let mut model = Model::new(&h.volume);
    random_workload(&mut h, &mut model, 10, 3);
    h.reassemble(&[1]);
    let r = h.scrub(Maintenance::Check);
    assert_eq!(r.unchecked_stripes, h.volume.geometry().stripes());
    assert!(r.mismatched_stripes.is_empty());
    assert_eq!(h.volume.stats().scrub.checked_stripes, 0, "none compared");
    // The report says which stripes it covers.
    let part = h
        .one(Request::Maintain {
            first_stripe: 2,
            stripe_count: 3,
            action: Maintenance::Check,
        })
        .expect("a check");
    let Reply::Checked(part) = part else {
        panic!("{part:?}")
    };
    assert_eq!((part.first_stripe, part.stripe_count), (2, 3));
    // Nothing of them is read: with no checksums to set from what the
    // members hold, a stripe that cannot be compared has nothing to give
    // (mutation testing let a check or resync read them for nothing
    // unseen, `&&` → `||` in the resync-with-checksums test).
    for action in [Maintenance::Check, Maintenance::Resync] {
        let before: u64 = h.received.iter().map(|r| r.reads).sum();
        let r = h.scrub(action);
        assert_eq!(r.unchecked_stripes, h.volume.geometry().stripes());
        let after: u64 = h.received.iter().map(|r| r.reads).sum();
        assert_eq!(after, before, "{action:?} read an uncomparable stripe");
    }
}

/// RAID-6 locates page by page: two members wrong in different 4 KiB
/// pages of one stripe are each named and each mended; two wrong in the
/// same page cannot be told apart and are reported unlocated (the repair
/// then makes parity agree with the data, as md's does).
#[test]
fn raid6_names_each_wrong_member_page_by_page() {
    for n in [4u32, 5, 7] {
        let config = all_configs(&[65536], &[n])
            .into_iter()
            .find(|c| c.level == Level::Raid6)
            .expect("raid6 at 4+ members");
        let mut h = Harness::new(&config, 7_000 + u64::from(n));
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 20, 6);
        let il = config.interleave_bytes;
        let stripe = h.rng.below(h.volume.geometry().stripes());
        let roles = h.volume.geometry().parity_roles(stripe).expect("raid6");
        let (a, b) = (roles.data[0], roles.q.expect("raid6"));
        let undamaged = h.members.clone();
        // Garbage over a whole page of a (data) and another page of b (Q).
        let page = |p: u64| {
            let at = (DATA_OFFSET_BYTES + stripe * il + p * 4096) as usize;
            at..at + 4096
        };
        for (m, p) in [(a, 1), (b, 5)] {
            for (i, byte) in h.members[m as usize][page(p)].iter_mut().enumerate() {
                *byte ^= (i % 251 + 1) as u8;
            }
        }
        let found = h.scrub(Maintenance::Check);
        let mut want = vec![(stripe, a), (stripe, b)];
        want.sort_unstable();
        assert_eq!(found.wrong_members, want, "raid6 x{n}");
        h.scrub(Maintenance::Repair);
        assert!(h.members == undamaged, "raid6 x{n}: not restored");
        verify_all(&mut h, &model);

        // Two members wrong in the same page: unlocated.
        let c = roles.data[1];
        for m in [a, c] {
            for byte in &mut h.members[m as usize][page(3)] {
                *byte = byte.wrapping_add(m as u8 + 1);
            }
        }
        let found = h.scrub(Maintenance::Check);
        assert_eq!(found.mismatched_stripes, vec![stripe], "raid6 x{n}");
        assert_eq!(found.unlocated_stripes, vec![stripe], "raid6 x{n}");
        h.scrub(Maintenance::Repair);
        assert!(h.scrub(Maintenance::Check).mismatched_stripes.is_empty());
    }
}

/// A resync (after an unclean stop) keeps md's rule, where a mismatch is a
/// write cut short: the data as it stands wins. On RAID-6 the syndromes
/// would "correct" a freshly written data chunk back to its old bytes;
/// a resync must recompute P and Q instead and leave the data alone.
#[test]
fn a_resync_lets_the_data_win() {
    let config = all_configs(&[65536], &[5])
        .into_iter()
        .find(|c| c.level == Level::Raid6)
        .expect("raid6");
    let mut h = Harness::new(&config, 12);
    let mut model = Model::new(&h.volume);
    random_workload(&mut h, &mut model, 10, 3);
    let stripe = 1;
    let roles = h.volume.geometry().parity_roles(stripe).expect("raid6");
    let m = roles.data[0];
    let at = (DATA_OFFSET_BYTES + stripe * config.interleave_bytes + 100) as usize;
    h.members[m as usize][at] ^= 0xff;
    let data_as_it_stands = h.members[m as usize].clone();
    let r = h.scrub(Maintenance::Resync);
    assert_eq!(r.mismatched_stripes, vec![stripe]);
    assert_eq!(r.unlocated_stripes, vec![stripe], "a resync names no one");
    assert!(r.wrong_members.is_empty());
    assert!(
        h.members[m as usize] == data_as_it_stands,
        "the resync rewrote the data member"
    );
    assert!(h.scrub(Maintenance::Check).mismatched_stripes.is_empty());
}

/// The scrub counters add up what checks and repairs reported, and a
/// resync (crash recovery's own pass) counts nothing. Mutation testing
/// found them unexamined by the core tests: sums made products, the
/// resync's exception inverted.
#[test]
fn scrub_counters_add_up_the_reports() {
    let mut seen = ScrubStats::default();
    for level in [Level::Raid6, Level::Raid5] {
        let config = all_configs(&[4096], &[5])
            .into_iter()
            .find(|c| c.level == level)
            .unwrap();
        let mut h = Harness::new(&config, 4);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 20, 6);
        let il = config.interleave_bytes;
        // One byte wrong in two stripes, both on member 1.
        let rows: Vec<u64> = (0..config.rows)
            .filter(|&r| stripe_of(&h, 1, r).is_some())
            .take(2)
            .collect();
        for r in &rows {
            h.members[1][(DATA_OFFSET_BYTES + r * il) as usize] ^= 0x5a;
        }
        let mut want = ScrubStats::default();
        for action in [Maintenance::Check, Maintenance::Repair] {
            let r = h.scrub(action);
            want.checked_stripes += r.stripe_count - r.unchecked_stripes;
            want.mismatched_stripes += r.mismatched_stripes.len() as u64;
            want.wrong_members += r.wrong_members.len() as u64;
            want.unlocated_stripes += r.unlocated_stripes.len() as u64;
            if action == Maintenance::Repair {
                want.repaired_stripes += r.mismatched_stripes.len() as u64;
            }
            assert_eq!(h.volume.stats().scrub, want, "{level:?} {action:?}");
        }
        h.scrub(Maintenance::Resync);
        assert_eq!(h.volume.stats().scrub, want, "{level:?}: a resync counted");
        seen.mismatched_stripes += want.mismatched_stripes;
        seen.wrong_members += want.wrong_members;
        seen.unlocated_stripes += want.unlocated_stripes;
        seen.repaired_stripes += want.repaired_stripes;
        assert_eq!(want.checked_stripes, 2 * h.volume.geometry().stripes());
    }
    // Every counter moved by more than one at some point.
    assert!(
        seen.mismatched_stripes > 2 && seen.wrong_members > 1,
        "{seen:?}"
    );
    assert!(
        seen.unlocated_stripes > 1 && seen.repaired_stripes > 2,
        "{seen:?}"
    );
}

/// A repair whose rewrite fails on a member fails (the member is marked
/// faulty, and the operator is told the repair did not complete), instead
/// of answering as if the stripes were mended. Mutation testing found the
/// answer unexamined: `write_result` without its maintenance arm said
/// "done" whenever the range was still readable.
#[test]
fn a_repair_whose_rewrite_fails_says_so() {
    let config = Config {
        level: Level::Mirror,
        layout: platter_core::ParityLayout::DEFAULT,
        copies: 2,
        members: 2,
        interleave_bytes: 8 * 512,
        rows: 32,
    };
    // The same volume, damage and I/O order twice: the first run finds
    // which I/O is the repair's rewrite, the second fails it.
    let setup = || {
        let mut h = Harness::new(&config, 4242);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 10, 4);
        h.flush();
        let at = (DATA_OFFSET_BYTES + 3 * config.interleave_bytes) as usize;
        h.members[1][at..at + 512].fill(0x99);
        h
    };
    let repair = Request::Maintain {
        first_stripe: 0,
        stripe_count: setup().volume.geometry().stripes(),
        action: Maintenance::Repair,
    };
    let mut h = setup();
    let before = h.ios;
    h.log = Some(Vec::new());
    let r = h.one(repair.clone()).expect("a repair without faults");
    assert!(matches!(r, Reply::Checked(_)), "{r:?}");
    let log = h.log.take().unwrap();
    let k = log
        .iter()
        .position(|&(m, op)| m == 1 && op == "write")
        .expect("the repair rewrites member 1's copy");

    let mut h = setup();
    h.fail_nth = Some(before + k as u64 + 1);
    let err = h.one(repair).expect_err("the rewrite failed");
    assert!(err.to_string().contains("repair write failed"), "{err}");
    assert_eq!(h.volume.health()[1], platter_core::volume::Health::Faulty);
}
