//! An Nth-I/O error sweep: for N = 1, 2, ... until the workload completes
//! without reaching its Nth member I/O, fail exactly that I/O. Nothing
//! panics; the failure either reaches a client as EIO, marks a member
//! faulty, or (a client read on a level with copies) is corrected in place;
//! and no read ever returns wrong bytes.

mod support;

use bytes::Bytes;
use platter_core::volume::{CacheLimits, ErrorKind, Event, Health, Reply, Request};
use platter_core::Level;
use support::*;

/// A fixed small workload: writes, reads, zeroes and flushes, some at once.
/// A request that fails leaves its range unknown (NBD: the contents of a
/// failed write are unspecified), so reads skip those bytes; every other
/// byte must match. Returns the number of requests that failed.
fn workload(h: &mut Harness, model: &mut Model, unknown: &mut [bool]) -> u64 {
    let size = h.volume.size_bytes();
    let mut rng = Rng(7);
    let mut failed = 0;
    for _ in 0..6 {
        let mut reads = Vec::new();
        let mut ranges = Vec::new();
        for _ in 0..4 {
            let len = 1 + rng
                .below(3 * h.volume.geometry().stripe_data_bytes())
                .min(size - 1);
            let at = rng.below(size - len + 1);
            let req = match rng.below(5) {
                0 | 1 => Request::Write {
                    offset_bytes: at,
                    data: Bytes::from(rng.bytes(len as usize)),
                    fua: rng.chance(20),
                },
                2 => Request::Read {
                    offset_bytes: at,
                    len_bytes: len,
                },
                3 => Request::WriteZeroes {
                    offset_bytes: at,
                    len_bytes: len,
                    fua: false,
                },
                _ => Request::Flush,
            };
            let id = h.volume.submit(req.clone());
            ranges.push((id, req.range()));
            if let Request::Read {
                offset_bytes,
                len_bytes,
            } = req
            {
                reads.push((
                    id,
                    offset_bytes,
                    model.bytes[offset_bytes as usize..(offset_bytes + len_bytes) as usize]
                        .to_vec(),
                ));
            }
            model.apply(&req);
        }
        let done = h.run();
        for c in &done {
            if let Err(e) = &c.result {
                assert_eq!(e.kind, ErrorKind::Io, "{e}");
                failed += 1;
                let (at, len) = ranges
                    .iter()
                    .find(|(id, _)| *id == c.id)
                    .expect("submitted")
                    .1;
                unknown[at as usize..(at + len) as usize].fill(true);
            }
        }
        for c in done {
            if let Ok(Reply::Data(d)) = c.result {
                let (_, at, want) = reads.iter().find(|(id, _, _)| *id == c.id).expect("a read");
                let got = d.to_vec();
                for (i, (g, w)) in got.iter().zip(want).enumerate() {
                    assert!(
                        unknown[*at as usize + i] || g == w,
                        "a read returned wrong bytes at {} (fail_nth {:?})",
                        *at as usize + i,
                        h.fail_nth
                    );
                }
            }
        }
    }
    failed
}

#[test]
fn failing_any_single_member_io_is_reported_and_never_corrupts() {
    sweep(None);
}

/// The same with the stripe cache on (parity levels): a cached write's
/// failure shows when its stripe goes out, as a faulty member.
#[test]
fn failing_any_single_member_io_with_the_stripe_cache() {
    sweep(Some(CacheLimits {
        max_stripes: 2,
        max_bytes: 16 << 20,
    }));
}

fn harness(config: &Config, seed: u64, cache: Option<CacheLimits>) -> Harness {
    let mut h = Harness::new(config, seed);
    if let Some(limits) = cache {
        h.enable_cache(limits);
    }
    h
}

fn sweep(cache: Option<CacheLimits>) {
    let configs = all_configs(&[8 * 512, 126 * 512], &[2, 4, 5]);
    for (i, config) in configs.iter().enumerate() {
        if cache.is_some() && !config.level.is_parity() {
            continue;
        }
        // The I/O count of a clean run bounds the sweep.
        let mut clean = harness(config, i as u64, cache);
        let mut model = Model::new(&clean.volume);
        let mut unknown = vec![false; model.bytes.len()];
        workload(&mut clean, &mut model, &mut unknown);
        assert!(
            !unknown.contains(&true),
            "{config:?}: the clean run failed a request"
        );
        let total = clean.ios;
        assert!(total > 10, "{config:?}: only {total} member I/Os");
        let mut corrections = 0;
        for n in 1..=total {
            let mut h = harness(config, i as u64, cache);
            h.fail_nth = Some(n);
            let mut model = Model::new(&h.volume);
            let mut unknown = vec![false; model.bytes.len()];
            let failed = workload(&mut h, &mut model, &mut unknown);
            let (mut faulty, mut corrected) = (0, 0);
            while let Some(e) = h.volume.next_event() {
                match e {
                    Event::MemberFaulty { .. } => faulty += 1,
                    Event::ReadErrorCorrected { .. } => corrected += 1,
                    Event::RebuildDone { .. } | Event::NoSpace { .. } => {}
                }
            }
            assert!(
                failed > 0 || faulty > 0 || corrected > 0,
                "{config:?}: I/O {n} failed and nobody heard of it"
            );
            corrections += corrected;
            if corrected > 0 {
                // A client read's error on a copy, corrected: the member is
                // still in use and nothing else failed.
                assert_eq!(
                    (failed, faulty, corrected),
                    (0, 0, 1),
                    "{config:?}: I/O {n}"
                );
                assert!(h.volume.health().iter().all(|x| *x == Health::Online));
            }
            if h.volume.geometry().redundancy() > 0 {
                // One failure is within every redundant level's budget: no
                // request fails, and everything reads back as written.
                assert_eq!(failed, 0, "{config:?}: I/O {n} failed a request");
                verify_all(&mut h, &model);
            }
        }
        if matches!(config.level, Level::Mirror | Level::Raid10) {
            assert!(corrections > 0, "{config:?}: no read error was corrected");
        }
    }
}
