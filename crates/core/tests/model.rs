//! The engine against a flat byte array: every layout, interleave and width,
//! random unaligned requests completed in random order, lost members.

mod support;

use platter_core::volume::{CacheLimits, ErrorKind, Event, Request};
use platter_core::{Level, ParityLayout};
use proptest::prelude::*;
use support::*;

const SECTOR: u64 = 512;
/// 1s, 8s, 126s, 128s, 2048s and 1M: the interleaves DESIGN.md names.
const INTERLEAVES: [u64; 6] = [
    SECTOR,
    8 * SECTOR,
    126 * SECTOR,
    128 * SECTOR,
    2048 * SECTOR,
    1 << 20,
];
const WIDTHS: [u32; 6] = [2, 3, 4, 5, 8, 16];

#[test]
fn every_layout_interleave_and_width_matches_the_model() {
    let configs = all_configs(&INTERLEAVES, &WIDTHS);
    assert!(configs.len() > 200);
    for (i, config) in configs.iter().enumerate() {
        let mut h = Harness::new(config, i as u64);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 24, 8);
        verify_all(&mut h, &model);
    }
}

fn any_config() -> impl Strategy<Value = Config> {
    (
        0usize..6,
        0usize..4,
        1u32..=16,
        1u64..=300,
        2u64..=5,
        2u32..=4,
    )
        .prop_filter_map(
            "level needs more members",
            |(level, layout, members, il_sectors, rows, copies)| {
                let level = Level::ALL[level];
                if members < level.min_members() {
                    return None;
                }
                let copies = match level {
                    Level::Raid10 => copies.min(members),
                    Level::Mirror => members,
                    _ => 1,
                };
                Some(Config {
                    level,
                    layout: ParityLayout::ALL[layout],
                    copies,
                    members,
                    interleave_bytes: il_sectors * SECTOR,
                    rows,
                })
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any interleave in sectors, not just the round ones.
    #[test]
    fn random_volumes_match_the_model(config in any_config(), seed in any::<u64>(), concurrency in 1u64..=16) {
        let mut h = Harness::new(&config, seed);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 40, concurrency);
        verify_all(&mut h, &model);
    }
}

/// The sets of members a level must survive losing.
fn loss_sets(config: &Config) -> Vec<Vec<u32>> {
    let n = config.members;
    let singles: Vec<Vec<u32>> = (0..n).map(|m| vec![m]).collect();
    match config.level {
        Level::Raid6 => (0..n)
            .flat_map(|a| (a + 1..n).map(move |b| vec![a, b]))
            .chain(singles)
            .collect(),
        Level::Mirror | Level::Raid10 | Level::Raid5 => singles,
        Level::Concat | Level::Stripe => Vec::new(),
    }
}

/// A small stripe cache (so that it fills and evicts), for the runs with
/// the cache on.
const SMALL_CACHE: CacheLimits = CacheLimits {
    max_stripes: 4,
    max_bytes: 16 << 20,
};

#[test]
fn every_parity_layout_matches_the_model_with_the_stripe_cache() {
    let configs: Vec<Config> = all_configs(&INTERLEAVES, &WIDTHS)
        .into_iter()
        .filter(|c| c.level.is_parity())
        .collect();
    for (i, config) in configs.iter().enumerate() {
        let limits = if i % 2 == 0 {
            SMALL_CACHE
        } else {
            CacheLimits::DEFAULT
        };
        let mut h = Harness::with_cache(config, 500 + i as u64, limits);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 40, 8);
        verify_all(&mut h, &model);
        h.flush();
        verify_all(&mut h, &model);
    }
}

#[test]
fn every_byte_survives_every_allowed_loss() {
    survives_every_allowed_loss(None);
}

#[test]
fn every_byte_survives_every_allowed_loss_with_the_stripe_cache() {
    survives_every_allowed_loss(Some(SMALL_CACHE));
}

fn survives_every_allowed_loss(cache: Option<CacheLimits>) {
    let configs: Vec<Config> = all_configs(
        &[SECTOR, 126 * SECTOR, 128 * SECTOR, 1 << 20],
        &[2, 3, 4, 5, 7],
    )
    .into_iter()
    .filter(|c| c.level.is_parity() || matches!(c.level, Level::Mirror | Level::Raid10))
    .filter(|c| cache.is_none() || c.level.is_parity())
    .collect();
    for (i, config) in configs.iter().enumerate() {
        let mut h = Harness::new(config, 1000 + i as u64);
        if let Some(limits) = cache {
            h.enable_cache(limits);
        }
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 12, 4);
        if cache.is_some() {
            // The members are copied below: the cached stripes first.
            h.flush();
        }
        let pristine = h.members.clone();
        for lost in loss_sets(config) {
            h.members = pristine.clone();
            h.reassemble(&lost);
            verify_all(&mut h, &model);
            // Degraded writes, then degraded reads of everything.
            let mut degraded = Model {
                bytes: model.bytes.clone(),
                ..Model::new(&h.volume)
            };
            random_workload(&mut h, &mut degraded, 10, 4);
            verify_all(&mut h, &degraded);
        }
    }
}

#[test]
fn members_that_die_mid_workload_are_survived() {
    members_die_mid_workload(None);
}

#[test]
fn members_that_die_mid_workload_are_survived_with_the_stripe_cache() {
    members_die_mid_workload(Some(SMALL_CACHE));
    members_die_mid_workload(Some(CacheLimits::DEFAULT));
}

fn members_die_mid_workload(cache: Option<CacheLimits>) {
    for (i, config) in all_configs(&[8 * SECTOR, 126 * SECTOR], &[3, 4, 6])
        .iter()
        .enumerate()
    {
        if cache.is_some() && !config.level.is_parity() {
            continue;
        }
        let Some(redundancy) = (match config.level {
            Level::Raid6 => Some(2),
            Level::Raid5 => Some(1),
            Level::Mirror | Level::Raid10 => Some(config.copies - 1),
            _ => None,
        }) else {
            continue;
        };
        let mut h = Harness::new(config, 7000 + i as u64);
        if let Some(limits) = cache {
            h.enable_cache(limits);
        }
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 10, 6);
        for k in 0..redundancy {
            let victim = (i as u32 + k * 2 + 1) % config.members;
            h.broken[victim as usize] = true;
            random_workload(&mut h, &mut model, 12, 6);
        }
        verify_all(&mut h, &model);
        let mut faulty = Vec::new();
        while let Some(Event::MemberFaulty { member, .. }) = h.volume.next_event() {
            faulty.push(member);
        }
        assert!(faulty.len() as u32 <= redundancy, "{config:?}: {faulty:?}");
        assert!(faulty.iter().all(|m| h.broken[*m as usize]));
    }
}

/// Past the redundancy budget a read may fail, but never with wrong bytes.
#[test]
fn beyond_redundancy_reads_fail_and_never_lie() {
    for (i, config) in all_configs(&[8 * SECTOR, 126 * SECTOR], &[2, 4, 5])
        .iter()
        .enumerate()
    {
        let mut h = Harness::new(config, 9000 + i as u64);
        let mut model = Model::new(&h.volume);
        random_workload(&mut h, &mut model, 10, 4);
        let lost: Vec<u32> = match config.level {
            Level::Raid6 => vec![0, 1, 2],
            Level::Raid5 => vec![0, 1],
            Level::Raid10 => (0..config.copies).collect(),
            Level::Mirror => (0..config.members).collect(),
            Level::Concat | Level::Stripe => vec![1],
        };
        h.reassemble(&lost);
        let size = h.volume.size_bytes();
        let (mut failed, mut served) = (0, 0);
        for _ in 0..200 {
            let len = 1 + h.rng.below(20_000).min(size - 1);
            let at = h.rng.below(size - len + 1);
            match h.read(at, len) {
                Ok(got) => {
                    served += 1;
                    assert!(got[..] == model.bytes[at as usize..(at + len) as usize]);
                }
                Err(kind) => {
                    failed += 1;
                    assert_eq!(kind, ErrorKind::Io);
                }
            }
        }
        assert!(
            failed > 0,
            "{config:?}: nothing failed with members {lost:?} lost"
        );
        if matches!(config.level, Level::Concat | Level::Raid5 | Level::Raid6) {
            assert!(
                served > 0,
                "{config:?}: reads of surviving members should still work"
            );
        }
        // Writes that need lost members fail too, and say so.
        let err = h.one(Request::Write {
            offset_bytes: 0,
            data: vec![1u8; size as usize].into(),
            fua: false,
        });
        assert_eq!(err.unwrap_err().kind, ErrorKind::Io);
    }
}

#[test]
fn requests_past_the_end_are_refused() {
    let config = &all_configs(&[4096], &[3])[0];
    let mut h = Harness::new(config, 1);
    let size = h.volume.size_bytes();
    assert_eq!(h.read(size - 10, 11), Err(ErrorKind::OutOfRange));
    assert_eq!(h.read(u64::MAX, 2), Err(ErrorKind::OutOfRange));
    assert_eq!(h.write(size, &[1]), Err(ErrorKind::OutOfRange));
    assert_eq!(h.read(size - 10, 10).map(|v| v.len()), Ok(10));
    assert_eq!(h.read(5, 0), Ok(Vec::new()));
}

/// The parity on the members is md's: P is the XOR of the stripe's data
/// chunks and Q is sum(g^i * D_i) with i counted the way md walks the disks
/// (from the one after Q, skipping P and Q), recomputed here independently.
#[test]
fn parity_on_members_is_mds() {
    for layout in ParityLayout::ALL {
        for (level, n) in [
            (Level::Raid5, 4),
            (Level::Raid5, 5),
            (Level::Raid6, 5),
            (Level::Raid6, 7),
        ] {
            let il = 126 * SECTOR;
            let config = Config {
                level,
                layout,
                copies: 1,
                members: n,
                interleave_bytes: il,
                rows: 6,
            };
            let mut h = Harness::new(&config, u64::from(n) * 31);
            let mut model = Model::new(&h.volume);
            random_workload(&mut h, &mut model, 30, 4);
            let g = h.volume.geometry().clone();
            for stripe in 0..g.stripes() {
                let roles = g.parity_roles(stripe).unwrap();
                let chunk = |m: u32| {
                    let a = g.member_offset_bytes(stripe, 0) as usize;
                    h.members[m as usize][a..a + il as usize].to_vec()
                };
                let mut p = vec![0u8; il as usize];
                let mut q = vec![0u8; il as usize];
                let d0 = roles.q.map_or(0, |q| if q == n - 1 { 0 } else { q + 1 });
                let walk: Vec<u32> = (0..n)
                    .map(|i| (d0 + i) % n)
                    .filter(|&m| m != roles.p && Some(m) != roles.q)
                    .collect();
                for (slot, &m) in walk.iter().enumerate() {
                    let d = chunk(m);
                    let coef = platter_parity::reference::gf_exp2(slot as u32);
                    for i in 0..d.len() {
                        p[i] ^= d[i];
                        q[i] ^= platter_parity::reference::gf_mul(coef, d[i]);
                    }
                }
                assert!(
                    chunk(roles.p) == p,
                    "{level} {layout} stripe {stripe}: P differs"
                );
                if let Some(qm) = roles.q {
                    assert!(
                        chunk(qm) == q,
                        "{level} {layout} stripe {stripe}: Q differs"
                    );
                }
            }
        }
    }
}
