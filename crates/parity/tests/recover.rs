//! recover() in every backend built in: every single loss (RAID-5 and
//! RAID-6) and every pair of losses (RAID-6) rebuilt bit for bit, and bad
//! requests refused without touching the stripe.

mod common;

use common::{backends, block_len, contents, skew, Blocks};
use platter_parity::{reference, RecoverError, MAX_DATA_BLOCKS};
use proptest::prelude::*;

/// A full stripe, data then P (then Q), with parity from the reference.
fn stripe(data: &[Vec<u8>], raid6: bool) -> Vec<Vec<u8>> {
    let len = data[0].len();
    let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
    let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
    let mut all = data.to_vec();
    if raid6 {
        reference::gen_pq(&refs, &mut p, &mut q);
        all.extend([p, q]);
    } else {
        reference::gen_p(&refs, &mut p);
        all.push(p);
    }
    all
}

/// Overwrites `missing` with garbage (every byte differs from the truth, so
/// a block left unrebuilt cannot pass), recovers, and compares.
fn check_rebuild(
    backend: &common::Backend,
    truth: &[Vec<u8>],
    data_count: usize,
    missing: &[usize],
    skew: usize,
) -> Result<(), TestCaseError> {
    let mut blocks = Blocks::new(truth, skew);
    {
        let mut refs = blocks.get_mut();
        for &m in missing {
            refs[m].iter_mut().for_each(|b| *b = !*b);
        }
        let result = (backend.recover)(&mut refs, data_count, missing);
        prop_assert_eq!(result, Ok(()), "{} missing {:?}", backend.name, missing);
    }
    let got = blocks.to_vecs();
    for (i, (g, t)) in got.iter().zip(truth).enumerate() {
        prop_assert!(
            g == t,
            "{}: block {} wrong after losing {:?} of {} data + {} parity",
            backend.name,
            i,
            missing,
            data_count,
            truth.len() - data_count
        );
    }
    Ok(())
}

fn data_strategy(max: usize) -> impl Strategy<Value = (Vec<Vec<u8>>, usize)> {
    (1..=max, block_len(), skew())
        .prop_flat_map(|(count, len, skew)| (contents(count, len), Just(skew)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn raid5_every_single_loss((data, skew) in data_strategy(30)) {
        let truth = stripe(&data, false);
        for backend in &backends() {
            for m in 0..truth.len() {
                check_rebuild(backend, &truth, data.len(), &[m], skew)?;
            }
        }
    }

    #[test]
    fn raid6_every_single_loss((data, skew) in data_strategy(30)) {
        let truth = stripe(&data, true);
        for backend in &backends() {
            for m in 0..truth.len() {
                check_rebuild(backend, &truth, data.len(), &[m], skew)?;
            }
        }
    }

    /// Every pair: data+data, data+P, data+Q, P+Q. Pairs are listed high
    /// index first, so recover() must not rely on `missing` being sorted.
    #[test]
    fn raid6_every_pair_of_losses((data, skew) in data_strategy(14)) {
        let truth = stripe(&data, true);
        for backend in &backends() {
            for a in 0..truth.len() {
                for b in 0..a {
                    check_rebuild(backend, &truth, data.len(), &[a, b], skew)?;
                }
            }
        }
    }
}

/// The widest RAID-6 stripe, losing the two data blocks whose coefficients
/// are furthest apart, and the last data block with P.
#[test]
fn raid6_at_max_width() {
    let data: Vec<Vec<u8>> = (0..MAX_DATA_BLOCKS)
        .map(|i| (0..80).map(|j| (i * 13 + j * 5 + 1) as u8).collect())
        .collect();
    let truth = stripe(&data, true);
    let last = MAX_DATA_BLOCKS - 1;
    for backend in &backends() {
        for missing in [[0, last], [last, MAX_DATA_BLOCKS]] {
            check_rebuild(backend, &truth, MAX_DATA_BLOCKS, &missing, 0).unwrap();
        }
    }
}

/// Runs `recover` on a small stripe and checks it fails with `want` and
/// leaves every block as it was.
fn assert_refused(blocks: usize, data_count: usize, missing: &[usize], want: RecoverError) {
    let original: Vec<Vec<u8>> = (0..blocks)
        .map(|i| vec![(i as u8).wrapping_add(1); 40])
        .collect();
    for backend in &backends() {
        let mut copy = original.clone();
        let mut refs: Vec<&mut [u8]> = copy.iter_mut().map(Vec::as_mut_slice).collect();
        let got = (backend.recover)(&mut refs, data_count, missing);
        assert_eq!(got, Err(want.clone()), "{}", backend.name);
        assert_eq!(copy, original, "{} wrote to a refused stripe", backend.name);
    }
}

#[test]
fn refuses_more_losses_than_parity() {
    assert_refused(
        4,
        3,
        &[0, 1],
        RecoverError::TooManyMissing {
            missing: 2,
            parity: 1,
        },
    );
    assert_refused(
        5,
        3,
        &[0, 1, 4],
        RecoverError::TooManyMissing {
            missing: 3,
            parity: 2,
        },
    );
}

#[test]
fn refuses_bad_indices() {
    assert_refused(
        4,
        3,
        &[4],
        RecoverError::IndexOutOfRange {
            index: 4,
            blocks: 4,
        },
    );
    assert_refused(
        5,
        3,
        &[1, 9],
        RecoverError::IndexOutOfRange {
            index: 9,
            blocks: 5,
        },
    );
    assert_refused(5, 3, &[2, 2], RecoverError::DuplicateIndex { index: 2 });
}

#[test]
fn refuses_impossible_geometry() {
    for (blocks, data_count) in [(5, 2), (3, 3), (1, 0), (2, 0), (3, 5)] {
        assert_refused(
            blocks,
            data_count,
            &[0],
            RecoverError::BadGeometry { blocks, data_count },
        );
    }
    let wide = MAX_DATA_BLOCKS + 1;
    assert_refused(
        wide + 2,
        wide,
        &[0],
        RecoverError::BadGeometry {
            blocks: wide + 2,
            data_count: wide,
        },
    );
}

#[test]
fn wide_raid5_is_allowed() {
    // Only Q limits the width: a RAID-5 stripe wider than MAX_DATA_BLOCKS is fine.
    let data: Vec<Vec<u8>> = (0..300).map(|i| vec![i as u8; 33]).collect();
    let truth = stripe(&data, false);
    for backend in &backends() {
        check_rebuild(backend, &truth, 300, &[299], 0).unwrap();
    }
}

#[test]
fn nothing_missing_changes_nothing() {
    let data: Vec<Vec<u8>> = (0..4).map(|i| vec![i as u8; 100]).collect();
    let truth = stripe(&data, true);
    for backend in &backends() {
        check_rebuild(backend, &truth, 4, &[], 3).unwrap();
    }
}

#[test]
fn errors_read_well() {
    let text = RecoverError::TooManyMissing {
        missing: 3,
        parity: 2,
    }
    .to_string();
    assert!(text.contains('3') && text.contains('2'), "{text}");
    let boxed: Box<dyn std::error::Error> = Box::new(RecoverError::DuplicateIndex { index: 7 });
    assert!(boxed.to_string().contains('7'));
}

#[test]
#[should_panic(expected = "same length")]
fn unequal_lengths_panic() {
    let mut a = vec![0u8; 8];
    let mut b = vec![0u8; 8];
    let mut c = vec![0u8; 9];
    let mut blocks: Vec<&mut [u8]> = vec![&mut a, &mut b, &mut c];
    let _ = platter_parity::recover(&mut blocks, 2, &[0]);
}

/// gen_pq in every backend agrees with the reference-built stripes used above,
/// so the recovery tests start from the parity each backend would write.
#[test]
fn backends_generate_the_same_parity() {
    let data: Vec<Vec<u8>> = (0..7)
        .map(|i| (0..200).map(|j| (i * j) as u8).collect())
        .collect();
    let truth = stripe(&data, true);
    for backend in &backends() {
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let (mut p, mut q) = (vec![0u8; 200], vec![0u8; 200]);
        (backend.gen_pq)(&refs, &mut p, &mut q);
        assert_eq!(p, truth[7], "{}", backend.name);
        assert_eq!(q, truth[8], "{}", backend.name);
    }
}
