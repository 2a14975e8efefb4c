//! Tests written for mutants that survived `bench/mutants.sh`
//! (docs/mutants.md lists each with the test that now kills it). Each
//! test says which mutant it kills and what bug that mutant stands for.

use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::{Level, ParityLayout};

fn spec(level: Level, members: u32, copies: u32, member_bytes: u64) -> GeometrySpec {
    GeometrySpec {
        level,
        parity_layout: ParityLayout::LeftSymmetric,
        copies,
        interleave_bytes: 64 << 10,
        data_offset_bytes: 1 << 20,
        member_data_bytes: vec![member_bytes; members as usize],
    }
}

/// Kills `geometry/mod.rs: replace gcd -> u64 with 1`. A RAID-10 stripe is
/// the chunks of one repeat of md's near layout, lcm(members, copies)
/// slots: 4 members with 2 copies repeat every 4 slots, 2 chunks. With
/// gcd taken as 1 the stripe would be 4 chunks: every stripe number, the
/// stripe locks and the write-intent bitmap's regions (stored as stripes
/// per region in the labels) would change meaning under an existing volume.
#[test]
fn a_raid10_stripe_is_one_repeat_of_the_near_layout() {
    for (members, copies, k) in [
        (4u32, 2u32, 2u32),
        (6, 2, 3),
        (6, 3, 2),
        (6, 4, 3),
        (3, 2, 3),
    ] {
        let g = Geometry::new(spec(Level::Raid10, members, copies, 1 << 30)).unwrap();
        assert_eq!(g.data_per_stripe(), k, "raid10 {members}x{copies}");
        assert_eq!(g.stripe_data_bytes(), u64::from(k) * (64 << 10));
        let chunks = u64::from(members) * (1 << 30) / (64 << 10) / u64::from(copies);
        assert_eq!(g.stripes(), chunks.div_ceil(u64::from(k)));
    }
}

/// Kills `geometry/mod.rs: replace <impl Display for GeometryError>::fmt
/// with Ok(Default::default())`: a refused geometry must say why, in words
/// (`platter create` prints this text and nothing else). A volume over
/// 2^64 bytes is the size case: 255 members of 2^57 bytes.
#[test]
fn a_refused_geometry_says_why() {
    let e = Geometry::new(spec(Level::Stripe, 255, 1, 1 << 57)).unwrap_err();
    assert_eq!(e.to_string(), e.0);
    assert!(e.to_string().contains("more than 2^64 bytes"), "{e}");
    let e = Geometry::new(spec(Level::Raid6, 3, 1, 1 << 30)).unwrap_err();
    assert!(e.to_string().contains("at least 4 members"), "{e}");
}

/// Kills `geometry/mod.rs: Geometry::redundancy` with `copies - 1` mutated
/// to `copies + 1` or `copies / 1`, and `data_per_stripe -> 0 | 1` (the
/// stripe test above). The redundancy is what `platter status` and the
/// simulator's budget take as the failures a volume survives in every
/// stripe: a mirror of 3 survives 2, not 4; a raid10 with 2 copies, 1.
#[test]
fn redundancy_is_copies_less_one_or_the_parity_members() {
    for (level, members, copies, want) in [
        (Level::Mirror, 3u32, 3u32, 2u32),
        (Level::Mirror, 2, 2, 1),
        (Level::Raid10, 4, 2, 1),
        (Level::Raid10, 6, 3, 2),
        (Level::Raid5, 4, 1, 1),
        (Level::Raid6, 5, 1, 2),
        (Level::Stripe, 3, 1, 0),
    ] {
        let g = Geometry::new(spec(level, members, copies, 1 << 30)).unwrap();
        assert_eq!(g.redundancy(), want, "{level:?} x{members} copies {copies}");
    }
}
