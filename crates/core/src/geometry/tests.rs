use super::*;

const INTERLEAVES_SECTORS: [u64; 6] = [1, 8, 126, 128, 2048, 2048];

fn spec(level: Level, layout: ParityLayout, copies: u32, il: u64, sizes: Vec<u64>) -> GeometrySpec {
    GeometrySpec {
        level,
        parity_layout: layout,
        copies,
        interleave_bytes: il,
        data_offset_bytes: 1 << 20,
        member_data_bytes: sizes,
    }
}

/// Every layout the tests sweep: (level, layout, copies, members).
fn variants() -> Vec<(Level, ParityLayout, u32, u32)> {
    let mut v = Vec::new();
    for n in 1..=16u32 {
        v.push((Level::Concat, ParityLayout::DEFAULT, 1, n));
        v.push((Level::Stripe, ParityLayout::DEFAULT, 1, n));
        if n >= 2 {
            v.push((Level::Mirror, ParityLayout::DEFAULT, n, n));
            for c in 2..=n.min(4) {
                v.push((Level::Raid10, ParityLayout::DEFAULT, c, n));
            }
        }
        for layout in ParityLayout::ALL {
            if n >= 3 {
                v.push((Level::Raid5, layout, 1, n));
            }
            if n >= 4 {
                v.push((Level::Raid6, layout, 1, n));
            }
        }
    }
    v
}

/// Maps every volume sector (and every parity sector) to member sectors and
/// checks that no member sector is used twice, that all lie inside the used
/// data area, and that together they cover it exactly.
fn check_bijection(g: &Geometry) {
    let il = g.interleave_bytes();
    let members = g.members() as usize;
    let mut used: Vec<Vec<bool>> = (0..members)
        .map(|m| vec![false; (g.member_used_bytes(m as u32) / 512) as usize])
        .collect();
    let mut mark = |member: u32, member_offset: u64| {
        let off = member_offset - g.spec().data_offset_bytes;
        assert!(member_offset >= g.spec().data_offset_bytes);
        assert!(off.is_multiple_of(512));
        let s = (off / 512) as usize;
        let map = &mut used[member as usize];
        assert!(
            s < map.len(),
            "member {member} sector {s} past used area {}",
            map.len()
        );
        assert!(!map[s], "member {member} sector {s} used twice");
        map[s] = true;
    };
    let sectors = g.volume_size_bytes() / 512;
    for s in 0..sectors {
        let mut ex = g.extents(s * 512, 512);
        let e = ex.next().unwrap();
        assert!(ex.next().is_none());
        assert_eq!(e.volume_offset_bytes, s * 512);
        let mut copies = 0;
        let mut members_seen = Vec::new();
        for loc in g.data_locations(e.stripe, e.data_index) {
            assert!(
                !members_seen.contains(&loc.member),
                "two copies on one member"
            );
            members_seen.push(loc.member);
            mark(loc.member, g.member_offset_bytes(loc.row, e.within_bytes));
            copies += 1;
        }
        assert_eq!(copies, g.copies().max(1));
        if let Some(roles) = g.parity_roles(e.stripe) {
            assert_eq!(roles.role_of(members_seen[0]), Role::Data(e.data_index));
            // Parity of this stripe sits at the same row and offset.
            if e.data_index == 0 {
                mark(roles.p, g.member_offset_bytes(e.stripe, e.within_bytes));
                if let Some(q) = roles.q {
                    mark(q, g.member_offset_bytes(e.stripe, e.within_bytes));
                }
            }
        }
    }
    // Every used member sector is covered, except RAID-10 row remainders
    // (members * rows not a multiple of copies leaves a partial last slot set).
    let missing: usize = used.iter().map(|m| m.iter().filter(|x| !**x).count()).sum();
    if g.level() == Level::Raid10 {
        let slots_left =
            (u64::from(g.members()) * g.member_used_bytes(0) / il) % u64::from(g.copies());
        assert_eq!(missing as u64, slots_left * il / 512);
    } else {
        assert_eq!(missing, 0, "member sectors not reached");
    }
    let _ = il;
}

#[test]
fn every_layout_is_a_bijection_onto_member_space() {
    for (level, layout, copies, n) in variants() {
        for (i, il_sectors) in INTERLEAVES_SECTORS.iter().enumerate() {
            let il = if i == 5 { 1 << 20 } else { il_sectors * 512 };
            // Unequal members: the volume must use the smallest (or all, for concat).
            let rows = if il >= 1 << 20 { 2 } else { 5 };
            let sizes: Vec<u64> = (0..n)
                .map(|m| il * (rows + u64::from(m % 3)) + 512 * u64::from(m % 2))
                .collect();
            let g = Geometry::new(spec(level, layout, copies, il, sizes.clone())).unwrap();
            let expect_chunks: u64 = match level {
                Level::Concat => sizes.iter().map(|s| s / il).sum(),
                Level::Stripe => rows * u64::from(n),
                Level::Mirror => rows,
                Level::Raid10 => rows * u64::from(n) / u64::from(copies),
                Level::Raid5 => rows * u64::from(n - 1),
                Level::Raid6 => rows * u64::from(n - 2),
            };
            assert_eq!(
                g.volume_size_bytes(),
                expect_chunks * il,
                "{level} n={n} il={il}"
            );
            check_bijection(&g);
        }
    }
}

#[test]
fn extents_split_at_chunk_boundaries() {
    let g = Geometry::new(spec(
        Level::Stripe,
        ParityLayout::DEFAULT,
        1,
        126 * 512,
        vec![126 * 512 * 4; 3],
    ))
    .unwrap();
    let il = 126 * 512;
    let ex: Vec<Extent> = g.extents(il - 100, il + 200).collect();
    assert_eq!(ex.len(), 3);
    assert_eq!(
        (ex[0].data_index, ex[0].within_bytes, ex[0].len_bytes),
        (0, il - 100, 100)
    );
    assert_eq!(
        (ex[1].data_index, ex[1].within_bytes, ex[1].len_bytes),
        (1, 0, il)
    );
    assert_eq!(
        (ex[2].data_index, ex[2].within_bytes, ex[2].len_bytes),
        (2, 0, 100)
    );
    assert_eq!(ex.iter().map(|e| e.len_bytes).sum::<u64>(), il + 200);
}

/// md's documented pictures (drivers/md/raid5.c and mdadm's man page), stripe
/// by stripe: which member holds P, Q and each data index.
#[test]
fn parity_placement_matches_md() {
    let roles = |level, layout, n, s| stripe_roles_for(level, layout, n, s);
    // RAID-5, 4 disks, left-symmetric: P walks left, data starts after P.
    assert_eq!(
        roles(Level::Raid5, ParityLayout::LeftSymmetric, 4, 0),
        (vec![0, 1, 2], 3, None)
    );
    assert_eq!(
        roles(Level::Raid5, ParityLayout::LeftSymmetric, 4, 1),
        (vec![3, 0, 1], 2, None)
    );
    assert_eq!(
        roles(Level::Raid5, ParityLayout::LeftSymmetric, 4, 2),
        (vec![2, 3, 0], 1, None)
    );
    assert_eq!(
        roles(Level::Raid5, ParityLayout::LeftSymmetric, 4, 3),
        (vec![1, 2, 3], 0, None)
    );
    // left-asymmetric: data keeps disk order, skipping P.
    assert_eq!(
        roles(Level::Raid5, ParityLayout::LeftAsymmetric, 4, 1),
        (vec![0, 1, 3], 2, None)
    );
    // right-symmetric / right-asymmetric: P walks right.
    assert_eq!(
        roles(Level::Raid5, ParityLayout::RightSymmetric, 4, 1),
        (vec![2, 3, 0], 1, None)
    );
    assert_eq!(
        roles(Level::Raid5, ParityLayout::RightAsymmetric, 4, 1),
        (vec![0, 2, 3], 1, None)
    );
    // RAID-6, 5 disks, left-symmetric: P then Q, data after Q.
    assert_eq!(
        roles(Level::Raid6, ParityLayout::LeftSymmetric, 5, 0),
        (vec![1, 2, 3], 4, Some(0))
    );
    assert_eq!(
        roles(Level::Raid6, ParityLayout::LeftSymmetric, 5, 1),
        (vec![0, 1, 2], 3, Some(4))
    );
    // left-asymmetric: "Q D D D P" when P is last, else "D D P Q D".
    assert_eq!(
        roles(Level::Raid6, ParityLayout::LeftAsymmetric, 5, 0),
        (vec![1, 2, 3], 4, Some(0))
    );
    assert_eq!(
        roles(Level::Raid6, ParityLayout::LeftAsymmetric, 5, 2),
        (vec![0, 1, 4], 2, Some(3))
    );
    assert_eq!(
        roles(Level::Raid6, ParityLayout::RightAsymmetric, 5, 1),
        (vec![0, 3, 4], 1, Some(2))
    );
}

fn stripe_roles_for(
    level: Level,
    layout: ParityLayout,
    n: u32,
    s: u64,
) -> (Vec<u32>, u32, Option<u32>) {
    let r = parity::stripe_roles(level, layout, n, s);
    (r.data, r.p, r.q)
}

#[test]
fn q_syndrome_order_follows_md() {
    // Symmetric layouts: syndrome order is data order.
    for s in 0..10 {
        let r = parity::stripe_roles(Level::Raid6, ParityLayout::LeftSymmetric, 6, s);
        assert_eq!(r.q_slot, vec![0, 1, 2, 3]);
    }
    // Left-asymmetric, 5 disks, stripe 2: D0 D1 P Q D2. md walks from the disk
    // after Q (disk 4 = D2), then wraps to disks 0 and 1.
    let r = parity::stripe_roles(Level::Raid6, ParityLayout::LeftAsymmetric, 5, 2);
    assert_eq!(r.q_slot, vec![1, 2, 0]);
}

#[test]
fn raid10_near_on_three_members_matches_md() {
    // md near=2 over 3 devices: A A B / B C C / D D E ...
    let g = Geometry::new(spec(
        Level::Raid10,
        ParityLayout::DEFAULT,
        2,
        512,
        vec![512 * 4; 3],
    ))
    .unwrap();
    let locs = |chunk: u64| {
        let (s, d) = g.chunk_position(chunk);
        g.data_locations(s, d)
            .map(|l| (l.member, l.row))
            .collect::<Vec<_>>()
    };
    assert_eq!(locs(0), vec![(0, 0), (1, 0)]);
    assert_eq!(locs(1), vec![(2, 0), (0, 1)]);
    assert_eq!(locs(2), vec![(1, 1), (2, 1)]);
    assert_eq!(g.volume_size_bytes(), 512 * 6);
}

#[test]
fn bad_specs_are_refused() {
    let bad = |level, copies, il, sizes: Vec<u64>| {
        Geometry::new(spec(level, ParityLayout::DEFAULT, copies, il, sizes))
            .unwrap_err()
            .0
    };
    assert!(bad(Level::Raid5, 1, 4096, vec![1 << 20; 2]).contains("at least 3 members"));
    assert!(bad(Level::Raid6, 1, 4096, vec![1 << 20; 3]).contains("at least 4 members"));
    assert!(bad(Level::Stripe, 1, 1000, vec![1 << 20; 2]).contains("multiple of 512"));
    assert!(bad(Level::Stripe, 1, 0, vec![1 << 20; 2]).contains("multiple of 512"));
    assert!(bad(Level::Raid10, 5, 4096, vec![1 << 20; 4]).contains("copies"));
    assert!(bad(Level::Stripe, 1, 1 << 20, vec![4096; 2]).contains("too small"));
}

#[test]
fn serves_all_knows_which_losses_keep_every_chunk() {
    let geometry = |level, copies, n: usize| {
        Geometry::new(spec(
            level,
            ParityLayout::DEFAULT,
            copies,
            512,
            vec![512 * 8; n],
        ))
        .unwrap()
    };
    let serves = |g: &Geometry, lost: &[u32]| g.serves_all(|m| !lost.contains(&m));
    // raid10 near 2 over 4: slots 0,1 hold the same chunks, and 2,3.
    let r10 = geometry(Level::Raid10, 2, 4);
    assert!(serves(&r10, &[0, 2]) && serves(&r10, &[1, 3]) && serves(&r10, &[0, 3]));
    assert!(!serves(&r10, &[0, 1]) && !serves(&r10, &[2, 3]));
    // Over 3 (A A B / B C C): every pair of slots shares a chunk.
    let r10 = geometry(Level::Raid10, 2, 3);
    assert!(serves(&r10, &[0]) && serves(&r10, &[1]) && serves(&r10, &[2]));
    assert!(!serves(&r10, &[0, 1]) && !serves(&r10, &[0, 2]) && !serves(&r10, &[1, 2]));
    let mirror = geometry(Level::Mirror, 3, 3);
    assert!(serves(&mirror, &[0, 1]) && !serves(&mirror, &[0, 1, 2]));
    let r5 = geometry(Level::Raid5, 1, 4);
    assert!(serves(&r5, &[3]) && !serves(&r5, &[0, 3]));
    let r6 = geometry(Level::Raid6, 1, 5);
    assert!(serves(&r6, &[1, 4]) && !serves(&r6, &[0, 1, 4]));
    for level in [Level::Concat, Level::Stripe] {
        let g = geometry(level, 1, 3);
        assert!(serves(&g, &[]) && !serves(&g, &[1]));
    }
}

/// md's `_6` RAID-6 layouts (`raid5_compute_sector`, ALGORITHM_*_6): the
/// RAID-5 layout over all members but the last, Q on the last, and the
/// syndrome's slots walked from disk 0 (`raid6_d0` when Q is the last).
#[test]
fn raid6_q_last_layouts_are_mds() {
    // 5 members, left-symmetric-6, stripe 1: the RAID-5 of 4 puts P on
    // disk 3 - 1 = 2 and data at (2 + 1 + d) % 4 = 3, 0, 1; Q on disk 4.
    let r = parity::stripe_roles(Level::Raid6, ParityLayout::LeftSymmetric6, 5, 1);
    assert_eq!((r.data.clone(), r.p, r.q), (vec![3, 0, 1], 2, Some(4)));
    // Slots by disk order from disk 0: disk 0 -> 0, disk 1 -> 1, disk 3 -> 2.
    assert_eq!(r.q_slot, vec![2, 0, 1]);
    for base in ParityLayout::ALL {
        let six = base.with_q_last().expect("a _6 layout");
        assert_eq!(six.raid5_part(), Some(base));
        for n in 4..8 {
            for s in 0..2 * u64::from(n) {
                let r5 = parity::stripe_roles(Level::Raid5, base, n - 1, s);
                let r6 = parity::stripe_roles(Level::Raid6, six, n, s);
                assert_eq!((r5.data, r5.p), (r6.data.clone(), r6.p), "{six} {n} {s}");
                assert_eq!(r6.q, Some(n - 1));
            }
        }
    }
    // A `_6` layout is RAID-6's alone.
    let spec = |level| GeometrySpec {
        level,
        parity_layout: ParityLayout::LeftSymmetric6,
        copies: 1,
        interleave_bytes: 4096,
        data_offset_bytes: 4096,
        member_data_bytes: vec![1 << 20; 5],
    };
    assert!(Geometry::new(spec(Level::Raid5)).is_err());
    assert!(Geometry::new(spec(Level::Raid6)).is_ok());
}

/// The rows a log record makes parity in (its own, less what newer records
/// decided and the cells of lost members) and the rows a write must read:
/// wherever the spans lie (before, inside, after, overlapping, past either
/// end).
#[test]
fn uncovered_rows_are_the_rows_less_the_spans() {
    let rows = |lo, hi, spans: &[(u64, u64)]| -> Vec<(u64, u64)> {
        uncovered_rows(lo, hi, spans.iter().copied()).collect()
    };
    assert_eq!(rows(0, 100, &[]), vec![(0, 100)]);
    assert_eq!(rows(10, 100, &[(40, 60)]), vec![(10, 40), (60, 100)]);
    assert_eq!(rows(10, 100, &[(0, 20), (90, 200)]), vec![(20, 90)]);
    assert_eq!(
        rows(10, 100, &[(30, 50), (40, 70)]),
        vec![(10, 30), (70, 100)]
    );
    assert_eq!(rows(10, 100, &[(10, 50), (50, 100)]), vec![]);
    assert_eq!(rows(10, 100, &[(0, 5), (200, 300)]), vec![(10, 100)]);
    assert_eq!(rows(10, 100, &[(60, 60)]), vec![(10, 60), (60, 100)]);
}
