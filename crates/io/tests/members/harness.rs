//! The same contract checks, run against every kind of member.
//!
//! Each check takes a fresh member from a [`Kind`]; the `member_kind!` macro
//! at the bottom instantiates all of them for each kind, so a failure names
//! both the check and the kind (`harness::file_direct::trim_zeroes_...`).

use std::sync::Arc;
use std::thread;

use platter_io::{Member, MemberErrorKind};
use platter_testkit::check::assert_same;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

use crate::common::{contents, pattern, Fixture, Kind};

/// Big enough for several bounce-buffer-sized pieces of unaligned I/O, small
/// enough to compare whole contents often.
const SIZE_BYTES: u64 = 3 << 20;

fn fixture(kind: Kind) -> Option<Fixture> {
    kind.fixture(SIZE_BYTES)
}

/// Fills the member with a nonzero pattern and returns the model of it.
fn fill(member: &dyn Member) -> Vec<u8> {
    let model = pattern(1, SIZE_BYTES as usize);
    member.write_at(0, &model).expect("fill the member");
    model
}

fn write_both(member: &dyn Member, model: &mut [u8], offset_bytes: u64, data: &[u8]) {
    member
        .write_at(offset_bytes, data)
        .unwrap_or_else(|err| panic!("{err}"));
    model[offset_bytes as usize..offset_bytes as usize + data.len()].copy_from_slice(data);
}

fn trim_both(member: &dyn Member, model: &mut [u8], offset_bytes: u64, len_bytes: u64) {
    member
        .trim(offset_bytes, len_bytes)
        .unwrap_or_else(|err| panic!("{err}"));
    model[offset_bytes as usize..(offset_bytes + len_bytes) as usize].fill(0);
}

pub fn size_is_right(kind: Kind) {
    let Some(fx) = fixture(kind) else { return };
    let member = &*fx.member;
    assert_eq!(member.size_bytes(), SIZE_BYTES);
    let block_bytes = member.logical_block_bytes();
    assert!(
        block_bytes >= 512 && block_bytes.is_power_of_two(),
        "{block_bytes}"
    );
    assert!(!member.describe().is_empty());
}

pub fn unwritten_reads_zero(kind: Kind) {
    let Some(fx) = fixture(kind) else { return };
    let member = &*fx.member;
    assert!(contents(member).iter().all(|&b| b == 0));
    for (offset_bytes, len) in [(0, 1), (1, 1), (511, 3), (4095, 4098), (SIZE_BYTES - 1, 1)] {
        let mut buf = vec![0xa5; len];
        member.read_at(offset_bytes, &mut buf).unwrap();
        assert!(
            buf.iter().all(|&b| b == 0),
            "read of {len} at {offset_bytes}"
        );
    }
    // A zero-length read is fine anywhere up to the end, and touches nothing.
    member.read_at(SIZE_BYTES, &mut []).unwrap();
}

pub fn unaligned_writes_round_trip(kind: Kind) {
    let Some(fx) = fixture(kind) else { return };
    let member = &*fx.member;
    // Start from a pattern, so that bytes next to a write that a
    // read-modify-write failed to preserve show up.
    let mut model = fill(member);
    let writes: [(u64, usize); 8] = [
        (1, 1),
        (511, 2),
        (4095, 2),
        (8191, 4097),
        (20_000, 300_000),      // spans many blocks, unaligned at both ends
        (1_048_575, 1_048_578), // more than one bounce-buffer piece
        (2 << 20, 4096),        // aligned
        (SIZE_BYTES - 3, 3),    // the very end
    ];
    for (i, (offset_bytes, len)) in writes.into_iter().enumerate() {
        write_both(
            member,
            &mut model,
            offset_bytes,
            &pattern(i as u64 + 10, len),
        );
        let mut back = vec![0; len];
        member.read_at(offset_bytes, &mut back).unwrap();
        assert_same(&back, &model[offset_bytes as usize..][..len], "read back");
    }
    // Unaligned reads of a region written unaligned, including ones whose
    // buffer is not aligned in memory.
    let mut backing = vec![0; 70_001];
    let buf = &mut backing[1..];
    member.read_at(8190, buf).unwrap();
    assert_same(buf, &model[8190..8190 + buf.len()], "unaligned read");
    assert_same(&contents(member), &model, "whole member");
}

pub fn past_end_is_out_of_range_and_changes_nothing(kind: Kind) {
    let Some(fx) = fixture(kind) else { return };
    let member = &*fx.member;
    let model = fill(member);
    let end = SIZE_BYTES;
    for (offset_bytes, len) in [(end - 10, 11), (end, 1), (end + 4096, 4096), (u64::MAX, 1)] {
        let mut buf = vec![0x77; len];
        let err = member.read_at(offset_bytes, &mut buf).unwrap_err();
        assert_eq!(err.kind, MemberErrorKind::OutOfRange, "{err}");
        assert!(
            buf.iter().all(|&b| b == 0x77),
            "a refused read wrote into the buffer"
        );

        let err = member.write_at(offset_bytes, &vec![0x55; len]).unwrap_err();
        assert_eq!(err.kind, MemberErrorKind::OutOfRange, "{err}");
        assert_eq!(
            (err.offset_bytes, err.len_bytes),
            (offset_bytes, len as u64)
        );
        assert!(err.to_string().contains(member.describe()), "{err}");

        let err = member.trim(offset_bytes, len as u64).unwrap_err();
        assert_eq!(err.kind, MemberErrorKind::OutOfRange, "{err}");
    }
    // Overflowing offset + length must not wrap round into range.
    let err = member.trim(u64::MAX - 1, 4).unwrap_err();
    assert_eq!(err.kind, MemberErrorKind::OutOfRange);
    assert_same(&contents(member), &model, "after refused requests");
}

pub fn trim_zeroes_range_and_keeps_neighbours(kind: Kind) {
    let Some(fx) = fixture(kind) else { return };
    let member = &*fx.member;
    let mut model = fill(member);
    let trims: [(u64, u64); 7] = [
        (1000, 4000),           // inside and across a 4 KiB block, unaligned
        (8192, 65_536),         // aligned
        (100_000, 1),           // a single byte
        (200_001, 511),         // less than a sector, crossing none
        (262_144 + 512, 3584),  // sector-aligned, not page-aligned
        (1_000_000, 1_500_003), // big, unaligned at both ends
        (SIZE_BYTES - 5, 5),    // the very end
    ];
    for (offset_bytes, len_bytes) in trims {
        trim_both(member, &mut model, offset_bytes, len_bytes);
        let mut around = vec![0; len_bytes as usize + 2];
        let start = offset_bytes.saturating_sub(1);
        let len = (len_bytes as usize + 2).min((SIZE_BYTES - start) as usize);
        member.read_at(start, &mut around[..len]).unwrap();
        assert_same(
            &around[..len],
            &model[start as usize..][..len],
            "around the trim",
        );
    }
    member.trim(0, 0).unwrap();
    member.trim(SIZE_BYTES, 0).unwrap();
    assert_same(&contents(member), &model, "whole member after trims");
    // A trimmed range takes writes again.
    write_both(member, &mut model, 1000, &pattern(99, 100));
    assert_same(&contents(member), &model, "whole member after rewrite");
}

pub fn flush_works(kind: Kind) {
    let Some(fx) = fixture(kind) else { return };
    let member = &*fx.member;
    member.flush().unwrap();
    let mut model = vec![0; SIZE_BYTES as usize];
    write_both(member, &mut model, 12_345, &pattern(5, 10_000));
    member.flush().unwrap();
    member.flush().unwrap();
    assert_same(&contents(member), &model, "after flush");
}

/// Threads write disjoint, interleaved, unaligned pieces that share blocks,
/// while others read. With O_DIRECT each piece is a read-modify-write of its
/// blocks, so a missing lock would lose pieces.
pub fn concurrent_disjoint_writes_all_land(kind: Kind) {
    let Some(fx) = fixture(kind) else { return };
    let member: Arc<dyn Member> = Arc::from(fx.member);
    const THREADS: u64 = 4;
    const PIECE_BYTES: u64 = 333;
    const PIECES: u64 = 800;
    let threads: Vec<_> = (0..THREADS + 1)
        .map(|t| {
            let member = Arc::clone(&member);
            thread::spawn(move || {
                if t == THREADS {
                    // A reader, to mix reads in with the read-modify-writes.
                    let mut buf = vec![0; 70_000];
                    for i in 0..50 {
                        member.read_at(i * 997, &mut buf).unwrap();
                    }
                    return;
                }
                for piece in (t..PIECES).step_by(THREADS as usize) {
                    let data = pattern(piece, PIECE_BYTES as usize);
                    member.write_at(7 + piece * PIECE_BYTES, &data).unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().expect("writer thread");
    }
    let mut model = vec![0; SIZE_BYTES as usize];
    for piece in 0..PIECES {
        let at = (7 + piece * PIECE_BYTES) as usize;
        model[at..at + PIECE_BYTES as usize].copy_from_slice(&pattern(piece, PIECE_BYTES as usize));
    }
    assert_same(&contents(&*member), &model, "after concurrent writes");
}

#[derive(Clone, Debug)]
enum Action {
    Write {
        offset_bytes: u64,
        len: usize,
        seed: u64,
    },
    Trim {
        offset_bytes: u64,
        len_bytes: u64,
    },
    Read {
        offset_bytes: u64,
        len: usize,
    },
}

/// Offsets biased towards block edges, where alignment bugs live.
fn offset_strategy(size_bytes: u64) -> impl Strategy<Value = u64> {
    let blocks = size_bytes / 512;
    prop_oneof![
        0..size_bytes,
        (0..blocks).prop_map(|b| b * 512),
        (1..blocks).prop_map(|b| b * 512 - 1),
        (0..size_bytes / 4096).prop_map(|b| b * 4096 + 1),
    ]
}

fn action_strategy(size_bytes: u64) -> impl Strategy<Value = Action> {
    let len = prop_oneof![0u64..16, 0u64..9000, 0u64..300_000];
    (0..3u8, offset_strategy(size_bytes), len, any::<u64>()).prop_map(
        move |(which, offset_bytes, len, seed)| {
            let len = len.min(size_bytes - offset_bytes);
            match which {
                0 => Action::Write {
                    offset_bytes,
                    len: len as usize,
                    seed,
                },
                1 => Action::Trim {
                    offset_bytes,
                    len_bytes: len,
                },
                _ => Action::Read {
                    offset_bytes,
                    len: len as usize,
                },
            }
        },
    )
}

/// Random writes, trims and reads against a `Vec<u8>` model. One member
/// serves all cases (loop devices are slow to make); each case starts by
/// trimming it whole, which the other checks have shown to work, and
/// checking it reads as zeros.
pub fn random_actions_match_model(kind: Kind, cases: u32) {
    let Some(fx) = fixture(kind) else { return };
    let member = &*fx.member;
    let size_bytes = SIZE_BYTES;
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = proptest::collection::vec(action_strategy(size_bytes), 1..24);
    runner
        .run(&strategy, |actions| {
            member.trim(0, size_bytes).unwrap();
            let mut model = vec![0; size_bytes as usize];
            prop_assert!(contents(member) == model, "trimmed member is not all zeros");
            for action in &actions {
                match *action {
                    Action::Write {
                        offset_bytes,
                        len,
                        seed,
                    } => write_both(member, &mut model, offset_bytes, &pattern(seed, len)),
                    Action::Trim {
                        offset_bytes,
                        len_bytes,
                    } => trim_both(member, &mut model, offset_bytes, len_bytes),
                    Action::Read { offset_bytes, len } => {
                        let mut buf = vec![0; len];
                        member.read_at(offset_bytes, &mut buf).unwrap();
                        let expected = &model[offset_bytes as usize..][..len];
                        if buf != expected {
                            return Err(TestCaseError::fail(format!(
                                "read of {len} bytes at {offset_bytes} differs from the model"
                            )));
                        }
                    }
                }
            }
            prop_assert!(
                contents(member) == model,
                "member differs from the model at the end"
            );
            Ok(())
        })
        .unwrap_or_else(|err| panic!("{kind:?}: {err}"));
}

/// Instantiates every check for one kind of member.
macro_rules! member_kind {
    ($module:ident, $kind:expr, proptest_cases = $cases:expr) => {
        mod $module {
            use super::*;

            #[test]
            fn size_is_right() {
                super::size_is_right($kind);
            }
            #[test]
            fn unwritten_reads_zero() {
                super::unwritten_reads_zero($kind);
            }
            #[test]
            fn unaligned_writes_round_trip() {
                super::unaligned_writes_round_trip($kind);
            }
            #[test]
            fn past_end_is_out_of_range_and_changes_nothing() {
                super::past_end_is_out_of_range_and_changes_nothing($kind);
            }
            #[test]
            fn trim_zeroes_range_and_keeps_neighbours() {
                super::trim_zeroes_range_and_keeps_neighbours($kind);
            }
            #[test]
            fn flush_works() {
                super::flush_works($kind);
            }
            #[test]
            fn concurrent_disjoint_writes_all_land() {
                super::concurrent_disjoint_writes_all_land($kind);
            }
            #[test]
            fn random_actions_match_model() {
                super::random_actions_match_model($kind, $cases);
            }
        }
    };
}

member_kind!(memory, Kind::Memory, proptest_cases = 256);
member_kind!(file, Kind::File, proptest_cases = 64);
member_kind!(file_direct, Kind::FileDirect, proptest_cases = 64);
member_kind!(loop_device, Kind::LoopDevice, proptest_cases = 48);
member_kind!(
    loop_device_direct,
    Kind::LoopDeviceDirect,
    proptest_cases = 48
);
member_kind!(
    loop_device_4k_direct,
    Kind::LoopDevice4kDirect,
    proptest_cases = 32
);
