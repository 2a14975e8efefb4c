//! The fault-injecting wrapper: transparent when idle, failing exactly the
//! I/Os it is told to, tearing writes at sector boundaries, losing unflushed
//! writes in a crash, bad sectors that fail reads until a write covers them,
//! and its text form for the command line.

use std::collections::BTreeSet;
use std::sync::Arc;

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{Event, Health, Limits, Volume};
use platter_core::{Level, ParityLayout};
use platter_io::fault::{
    BadRange, CrashReport, Fate, FaultSpecError, Jitter, DEFAULT_UNDO_LIMIT_BYTES, JITTER_EXP_CAP,
};
use platter_io::{
    CrashMode, FaultSpec, FaultyMember, Member, MemberError, MemberErrorKind, MemoryMember, Op,
};
use platter_testkit::executor::SyncExecutor;
use platter_testkit::Rng;

const SECTOR: u64 = 512;
const MIB: u64 = 1 << 20;

fn faulty(size: u64, spec: FaultSpec) -> FaultyMember<Arc<MemoryMember>> {
    FaultyMember::new(Arc::new(MemoryMember::new("m1", size)), spec)
}

fn snapshot(m: &FaultyMember<Arc<MemoryMember>>) -> Vec<u8> {
    m.inner().snapshot()
}

fn assert_injected(e: &MemberError, what: &str) {
    assert_eq!(e.kind, MemberErrorKind::Io, "{what}: {e}");
    assert!(e.to_string().contains("injected fault"), "{what}: {e}");
}

/// One I/O of each kind in turn (read, write, flush, trim), at `i`.
fn io_of_kind(m: &dyn Member, i: u64) -> (Op, Result<(), MemberError>) {
    let off = (i % 16) * SECTOR;
    match i % 4 {
        0 => (Op::Read, m.read_at(off, &mut [0u8; 100])),
        1 => (Op::Write, m.write_at(off, &[i as u8; 700])),
        2 => (Op::Flush, m.flush()),
        _ => (Op::Trim, m.trim(off + 3, 600)),
    }
}

// ---------------------------------------------------------------------------
// Transparency

/// A random sequence of reads, writes, trims and flushes (some past the
/// end) against the wrapper and against a plain member: same results, same
/// bytes.
fn check_transparent(spec: FaultSpec, seed: u64) {
    let size = 64 * 1024;
    let plain = MemoryMember::new("m1", size);
    let wrapped = faulty(size, spec.clone());
    let mut rng = Rng(seed);
    for step in 0..3000 {
        // Mostly in range, sometimes reaching past the end.
        let off = rng.below(size + 600);
        let len = rng.below(5000).min(size + 100 - off.min(size));
        let what = format!("{spec}: step {step}");
        match rng.below(4) {
            0 => {
                let (mut a, mut b) = (vec![1u8; len as usize], vec![2u8; len as usize]);
                let (ra, rb) = (plain.read_at(off, &mut a), wrapped.read_at(off, &mut b));
                assert_eq!(ra.is_ok(), rb.is_ok(), "{what}");
                if let (Err(ea), Err(eb)) = (&ra, &rb) {
                    assert_eq!(ea.to_string(), eb.to_string(), "{what}");
                    assert_eq!(ea.kind, eb.kind, "{what}");
                } else {
                    assert!(a == b, "{what}: read of {len} at {off} differs");
                }
            }
            1 => {
                let data = rng.bytes(len as usize);
                let (ra, rb) = (plain.write_at(off, &data), wrapped.write_at(off, &data));
                assert_eq!(
                    ra.map_err(|e| e.to_string()),
                    rb.map_err(|e| e.to_string()),
                    "{what}"
                );
            }
            2 => {
                let (ra, rb) = (plain.trim(off, len), wrapped.trim(off, len));
                assert_eq!(
                    ra.map_err(|e| e.to_string()),
                    rb.map_err(|e| e.to_string()),
                    "{what}"
                );
            }
            _ => {
                assert!(plain.flush().is_ok() && wrapped.flush().is_ok(), "{what}");
            }
        }
    }
    assert!(
        plain.snapshot() == snapshot(&wrapped),
        "{spec}: contents differ"
    );
    assert_eq!(wrapped.size_bytes(), plain.size_bytes());
    assert_eq!(wrapped.describe(), "m1");
    assert_eq!(wrapped.controls().injected_count(), 0, "{spec}");
}

#[test]
fn without_faults_the_wrapper_is_transparent() {
    check_transparent(FaultSpec::default(), 1);
    // Nothing configured: the fast path does not even count.
    let m = faulty(4096, FaultSpec::default());
    m.read_at(0, &mut [0u8; 10]).unwrap();
    assert_eq!(m.controls().io_count(), 0);
}

#[test]
fn armed_but_not_firing_is_transparent_too() {
    // The slow path with nothing that fires: far-off counts, the undo log
    // (with flushes clearing it), zero rates with a seed.
    check_transparent(
        FaultSpec {
            fail_nth: Some(u64::MAX),
            fail_from_nth: Some(u64::MAX),
            seed: 9,
            ..FaultSpec::default()
        },
        2,
    );
    check_transparent(
        FaultSpec {
            undo_log: true,
            ..FaultSpec::default()
        },
        3,
    );
}

#[test]
fn forwards_the_members_facts() {
    let dir = tempfile::Builder::new()
        .prefix("platter-fault-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let path = dir.path().join("m0");
    let opts = platter_io::OpenOptions {
        create_size_bytes: Some(MIB),
        ..Default::default()
    };
    let file: Arc<dyn Member> =
        Arc::from(platter_io::open_member(path.to_str().unwrap(), opts).unwrap());
    let wrapped = FaultyMember::new(Arc::clone(&file), FaultSpec::default());
    assert_eq!(wrapped.describe(), file.describe());
    assert_eq!(wrapped.identity(), file.identity());
    assert!(wrapped.identity().is_some());
    assert_eq!(wrapped.size_bytes(), MIB);
    assert_eq!(wrapped.logical_block_bytes(), file.logical_block_bytes());
    assert_eq!(wrapped.rotational(), file.rotational());
    // Usable wherever a member is.
    let as_member: Arc<dyn Member> = Arc::new(wrapped);
    as_member.write_at(4096, b"hello").unwrap();
    let mut b = [0u8; 5];
    file.read_at(4096, &mut b).unwrap();
    assert_eq!(&b, b"hello");
}

// ---------------------------------------------------------------------------
// Failing chosen I/Os

#[test]
fn fail_nth_fails_exactly_that_io_of_any_kind() {
    for nth in 1..=12u64 {
        let m = faulty(64 * 1024, FaultSpec::default());
        let c = m.controls();
        c.set(FaultSpec {
            fail_nth: Some(nth),
            ..FaultSpec::default()
        });
        let mut failed = Vec::new();
        for i in 1..=40u64 {
            let before = snapshot(&m);
            let (op, r) = io_of_kind(&m, i - 1);
            if let Err(e) = r {
                assert_injected(&e, &format!("nth {nth}"));
                assert_eq!(e.op, op, "{e}");
                assert!(
                    e.to_string()
                        .contains(&format!("injected fault: I/O {i} of member m1")),
                    "{e}"
                );
                // A failed write or trim changed nothing.
                assert!(
                    before == snapshot(&m),
                    "nth {nth}: a failed {op} changed data"
                );
                failed.push((i, op));
            }
        }
        let kinds = [Op::Read, Op::Write, Op::Flush, Op::Trim];
        assert_eq!(
            failed,
            vec![(nth, kinds[(nth as usize - 1) % 4])],
            "nth {nth}"
        );
        assert_eq!(c.io_count(), 40);
        assert_eq!(c.injected_count(), 1);
    }
}

#[test]
fn out_of_range_requests_are_refused_before_faults_and_not_numbered() {
    let m = faulty(
        4096,
        FaultSpec {
            fail_nth: Some(1),
            ..FaultSpec::default()
        },
    );
    let e = m.write_at(4000, &[0u8; 200]).unwrap_err();
    assert_eq!(e.kind, MemberErrorKind::OutOfRange, "{e}");
    assert_eq!(m.controls().io_count(), 0);
    assert_injected(
        &m.read_at(0, &mut [0u8; 1]).unwrap_err(),
        "the first in range",
    );
}

#[test]
fn fail_from_fails_every_io_from_there_on() {
    let m = faulty(
        64 * 1024,
        FaultSpec {
            fail_from_nth: Some(9),
            ..FaultSpec::default()
        },
    );
    for i in 1..=200u64 {
        let (op, r) = io_of_kind(&m, i);
        if i < 9 {
            r.unwrap_or_else(|e| panic!("I/O {i} ({op}): {e}"));
        } else {
            let e = r.expect_err("a dead member");
            assert_injected(&e, &format!("I/O {i}"));
        }
    }
    assert_eq!(m.controls().injected_count(), 192);
}

/// The numbers of the I/Os (all reads) that fail under `spec`.
fn failing_reads(spec: FaultSpec, n: u64) -> BTreeSet<u64> {
    let m = faulty(4096, spec);
    let mut out = BTreeSet::new();
    for i in 1..=n {
        if let Err(e) = m.read_at(i % 4000, &mut [0u8; 8]) {
            assert_injected(&e, "rate");
            assert!(e.to_string().contains(&format!("I/O {i} of")), "{e}");
            out.insert(i);
        }
    }
    assert_eq!(m.controls().injected_count(), out.len() as u64);
    out
}

#[test]
fn fail_rate_is_seeded_deterministic_and_about_right() {
    let spec = |rate, seed| FaultSpec {
        fail_rate: rate,
        seed,
        ..FaultSpec::default()
    };
    for rate in [0.001, 0.05, 0.3] {
        let a = failing_reads(spec(rate, 42), 10_000);
        let b = failing_reads(spec(rate, 42), 10_000);
        let c = failing_reads(spec(rate, 43), 10_000);
        assert_eq!(a, b, "the same seed fails the same I/Os");
        assert_ne!(a, c, "another seed fails others");
        let want = rate * 10_000.0;
        // Binomial: well within 5 standard deviations (and at least 1 away).
        let slack = 5.0 * (want * (1.0 - rate)).sqrt() + 1.0;
        for (set, seed) in [(&a, 42), (&c, 43)] {
            let got = set.len() as f64;
            assert!(
                (got - want).abs() <= slack,
                "rate {rate} seed {seed}: {got} failures of 10000, want about {want}"
            );
        }
    }
    assert!(failing_reads(spec(0.0, 1), 2000).is_empty());
    assert_eq!(failing_reads(spec(1.0, 1), 2000).len(), 2000);
}

#[test]
fn settings_flip_mid_workload() {
    let m = faulty(64 * 1024, FaultSpec::default());
    let c = m.controls();
    for i in 0..10 {
        io_of_kind(&m, i).1.unwrap();
    }
    // Dead from the next I/O: numbering restarts at set().
    c.set(FaultSpec {
        fail_from_nth: Some(1),
        ..FaultSpec::default()
    });
    let e = m.flush().unwrap_err();
    assert!(e.to_string().contains("I/O 1 of member m1"), "{e}");
    assert_eq!(c.spec().fail_from_nth, Some(1));
    // Back to healthy.
    c.set(FaultSpec::default());
    for i in 0..10 {
        io_of_kind(&m, i).1.unwrap();
    }
    // From another thread while I/O runs on this one.
    let c2 = Arc::clone(&c);
    let m = Arc::new(m);
    let t = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        c2.set(FaultSpec {
            fail_from_nth: Some(1),
            ..FaultSpec::default()
        });
    });
    let mut saw_failure = false;
    for i in 0..100_000u64 {
        if io_of_kind(&*m, i).1.is_err() {
            saw_failure = true;
            break;
        }
    }
    t.join().unwrap();
    assert!(saw_failure || m.read_at(0, &mut [0u8; 1]).is_err());
}

#[test]
fn latency_is_added() {
    let m = faulty(
        4096,
        FaultSpec {
            latency_us: 2000,
            ..FaultSpec::default()
        },
    );
    let t = std::time::Instant::now();
    for _ in 0..5 {
        m.read_at(0, &mut [0u8; 512]).unwrap();
    }
    // A lower bound only: sleeping at least this long is guaranteed.
    assert!(t.elapsed() >= std::time::Duration::from_millis(10));
}

/// `latency-from=N`: a member that becomes slow while served. I/Os before
/// the Nth (the label reads and writes of a server's start) take no
/// latency, from the Nth on every one does, jitter included.
#[test]
fn latency_from_delays_only_from_the_nth_io() {
    let s = FaultSpec::parse("latency=30s,latency-jitter=1ms,latency-from=5").unwrap();
    assert!((1..5).all(|n| s.latency_us_of(n) == 0));
    assert!((5..100).all(|n| s.latency_us_of(n) >= 30_000_000));
    let m = faulty(
        4096,
        FaultSpec {
            latency_us: 400_000,
            latency_from_nth: Some(4),
            ..FaultSpec::default()
        },
    );
    let t = std::time::Instant::now();
    for _ in 0..3 {
        m.read_at(0, &mut [0u8; 512]).unwrap();
    }
    assert!(t.elapsed() < std::time::Duration::from_millis(300));
    m.read_at(0, &mut [0u8; 512]).unwrap();
    assert!(t.elapsed() >= std::time::Duration::from_millis(400));
}

// ---------------------------------------------------------------------------
// Torn writes

/// Where `new` was written over `old` at `off`, the member holds a prefix of
/// `new` that ends at an absolute sector boundary (or is empty), then old
/// bytes; returns the prefix's length.
fn torn_prefix(held: &[u8], old: &[u8], new: &[u8], off: u64) -> usize {
    let len = new.len();
    let landed = (0..len).find(|&i| held[i] != new[i]).unwrap_or(len);
    // Bytes where old and new agree could extend the prefix; move back to
    // the last place the prefix may end.
    let mut cut = landed;
    while cut > 0 && !(off + cut as u64).is_multiple_of(SECTOR) {
        cut -= 1;
    }
    assert!(
        held[cut..] == old[cut..],
        "after the landed prefix ({cut} bytes, at offset {off}) the old bytes stay"
    );
    cut
}

#[test]
fn torn_writes_land_a_sector_prefix_and_fail() {
    let size = 256 * 1024;
    let mut rng = Rng(5);
    let m = faulty(size, FaultSpec::default());
    m.write_at(0, &rng.bytes(size as usize)).unwrap();
    m.controls().set(FaultSpec {
        tear_rate: 1.0,
        seed: 11,
        ..FaultSpec::default()
    });
    let mut landed_some = 0;
    let mut landed_none = 0;
    for i in 0..300 {
        let len = 1 + rng.below(12 * SECTOR) as usize;
        // Aligned and unaligned starts.
        let off = if i % 2 == 0 {
            rng.below(400) * SECTOR
        } else {
            rng.below(size - len as u64)
        };
        let old = snapshot(&m)[off as usize..off as usize + len].to_vec();
        let new: Vec<u8> = old.iter().map(|b| !b).collect(); // differs everywhere
        let e = m.write_at(off, &new).expect_err("every write tears");
        assert_injected(&e, "torn");
        assert!(e.to_string().contains("torn write"), "{e}");
        let held = snapshot(&m)[off as usize..off as usize + len].to_vec();
        let prefix = torn_prefix(&held, &old, &new, off);
        assert!(held[..prefix] == new[..prefix]);
        assert!(prefix < len, "never all of it ({len} bytes at {off})");
        if prefix > 0 {
            landed_some += 1;
        } else {
            landed_none += 1;
        }
    }
    assert!(
        landed_some > 50 && landed_none > 20,
        "{landed_some} {landed_none}"
    );
    // Only writes tear.
    m.read_at(0, &mut [0u8; 4096]).unwrap();
    m.trim(0, 4096).unwrap();
    m.flush().unwrap();
}

// ---------------------------------------------------------------------------
// Dropped writes

/// `drop-writes=OFFSET+LEN`: writes and trims are acknowledged, and only
/// their bytes outside the ranges land; reads and flushes are untouched.
/// This is the device that lies, which checksums' write records exist to
/// catch (crates/cli/tests/e2e_manage.rs serves one).
#[test]
fn dropped_writes_are_acknowledged_and_only_their_outside_lands() {
    let spec = FaultSpec::parse("drop-writes=4k+4k,drop-writes=12k+1k").unwrap();
    assert_eq!(spec.to_string(), "drop-writes=4k+4k,drop-writes=12k+1k");
    let m = faulty(32 << 10, spec);
    m.write_at(0, &[0x11; 16 << 10]).expect("acknowledged");
    m.flush().unwrap();
    let got = snapshot(&m);
    assert!(got[..4096].iter().all(|&b| b == 0x11));
    assert!(got[4096..8192].iter().all(|&b| b == 0), "dropped");
    assert!(got[8192..12288].iter().all(|&b| b == 0x11));
    assert!(got[12288..13312].iter().all(|&b| b == 0), "dropped");
    assert!(got[13312..16384].iter().all(|&b| b == 0x11));
    // A write wholly inside a range changes nothing; a trim outside lands.
    m.write_at(4096, &[0x22; 512]).expect("acknowledged");
    m.trim(0, 512).unwrap();
    let got = snapshot(&m);
    assert!(got[4096..4608].iter().all(|&b| b == 0));
    assert!(got[..512].iter().all(|&b| b == 0));
}

// ---------------------------------------------------------------------------
// Bad sectors

fn bad_spec(ranges: &[(u64, u64)]) -> FaultSpec {
    FaultSpec {
        bad_ranges: ranges
            .iter()
            .map(|&(offset_bytes, len_bytes)| BadRange {
                offset_bytes,
                len_bytes,
            })
            .collect(),
        ..FaultSpec::default()
    }
}

fn assert_bad_read(m: &dyn Member, off: u64, len: usize, what: &str) {
    let e = m
        .read_at(off, &mut vec![0u8; len])
        .expect_err(&format!("{what}: {len} bytes at {off} touch a bad sector"));
    assert_injected(&e, what);
    assert!(e.to_string().contains("bad sectors"), "{what}: {e}");
}

fn read(m: &dyn Member, off: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    m.read_at(off, &mut buf)
        .unwrap_or_else(|e| panic!("{len} bytes at {off}: {e}"));
    buf
}

#[test]
fn bad_sectors_fail_every_read_that_touches_them_and_nothing_else() {
    let size = 64 * 1024;
    let m = faulty(size, FaultSpec::default());
    let mut rng = Rng(3);
    let data = rng.bytes(size as usize);
    m.write_at(0, &data).unwrap();
    // Sectors 8..12 and 20 (overlapping ranges merge).
    m.controls().set(bad_spec(&[
        (4096, 1024),
        (5120, 1024),
        (4608, 512),
        (10240, 512),
    ]));
    assert_eq!(m.controls().bad_sectors(), vec![4096..6144, 10240..10752]);
    let bad = |b: u64| (4096..6144).contains(&b) || (10240..10752).contains(&b);
    for _ in 0..2000 {
        let off = rng.below(size - 1);
        let len = 1 + rng.below((size - off).min(3000));
        let touches = (off..off + len).any(bad);
        if touches {
            assert_bad_read(&m, off, len as usize, "random read");
        } else {
            assert_eq!(
                read(&m, off, len as usize),
                data[off as usize..(off + len) as usize]
            );
        }
    }
    // The edges, byte exact.
    assert_eq!(read(&m, 0, 4096), data[..4096]);
    assert_eq!(read(&m, 6144, 4096), data[6144..10240]);
    assert_bad_read(&m, 4095, 2, "last byte before");
    assert_bad_read(&m, 6143, 1, "last bad byte");
    assert_bad_read(&m, 0, size as usize, "all of it");
    // Writes, trims and flushes go through; the bytes under the bad
    // sectors are what they were.
    m.flush().unwrap();
    m.trim(4096, 2048).unwrap();
    assert_bad_read(&m, 4096, 512, "a trim does not heal");
    assert_eq!(m.controls().bad_sectors(), vec![4096..6144, 10240..10752]);
    assert!(m.controls().injected_count() > 100);
}

#[test]
fn a_write_heals_the_bad_sectors_it_covers_whole() {
    let size = 64 * 1024;
    let m = faulty(size, bad_spec(&[(4096, 4 * SECTOR)])); // sectors 8..12
    let c = m.controls();
    // Inside two sectors but neither whole: nothing heals.
    m.write_at(4096 + 100, &[1u8; 612]).unwrap();
    assert_eq!(c.bad_sectors(), vec![4096..6144]);
    assert_bad_read(&m, 4096 + 100, 612, "partly written");
    // Sector 7 (not bad) partly, 8 and 9 whole, 10 partly: 8 and 9 heal.
    let new: Vec<u8> = (0..1300u32).map(|i| (i % 251) as u8).collect();
    m.write_at(4000, &new).unwrap();
    assert_eq!(c.bad_sectors(), vec![5120..6144]);
    assert_eq!(
        read(&m, 4000, 1120),
        new[..1120],
        "healed: the bytes written"
    );
    assert_bad_read(&m, 5119, 2, "sector 10 is still bad");
    // The rest, sector-aligned: none left.
    m.write_at(5120, &[7u8; 1024]).unwrap();
    assert!(c.bad_sectors().is_empty());
    assert_eq!(read(&m, 5120, 1024), vec![7u8; 1024]);
    let before = c.injected_count();
    read(&m, 0, size as usize);
    assert_eq!(c.injected_count(), before, "no more bad reads");
    // Setting the spec again makes them bad again.
    c.set(c.spec());
    assert_eq!(c.bad_sectors(), vec![4096..6144]);
    assert_bad_read(&m, 5120, 512, "bad again");
}

#[test]
fn failed_and_torn_writes_heal_only_what_landed() {
    let size = 64 * 1024;
    let bad = (8 * SECTOR, 16 * SECTOR);
    // A write that fails heals nothing. I/O 1 is this write.
    let m = faulty(
        size,
        FaultSpec {
            fail_nth: Some(1),
            ..bad_spec(&[bad])
        },
    );
    assert_injected(
        &m.write_at(bad.0, &[1u8; 16 * 512]).expect_err("fail-nth=1"),
        "failed write",
    );
    assert_eq!(m.controls().bad_sectors(), vec![bad.0..bad.0 + bad.1]);
    // A torn write heals the whole sectors of its landed prefix.
    let mut healed_some = 0;
    for seed in 0..40 {
        let m = faulty(size, FaultSpec::default());
        m.controls().set(FaultSpec {
            tear_rate: 1.0,
            seed,
            ..bad_spec(&[bad])
        });
        // From the middle of sector 7 to the middle of sector 24.
        let off = 7 * SECTOR + 200;
        let new = vec![0xa5u8; (17 * SECTOR) as usize];
        let e = m.write_at(off, &new).expect_err("every write tears");
        assert!(e.to_string().contains("torn write"), "{e}");
        let held = snapshot(&m)[off as usize..off as usize + new.len()].to_vec();
        let landed = torn_prefix(&held, &vec![0u8; new.len()], &new, off) as u64;
        // The whole bad sectors under the prefix heal; from the first
        // sector it did not cover whole, they stay bad.
        let healed_to = ((off + landed) / SECTOR * SECTOR).clamp(bad.0, bad.0 + bad.1);
        let still: Vec<_> = (healed_to < bad.0 + bad.1)
            .then_some(healed_to..bad.0 + bad.1)
            .into_iter()
            .collect();
        assert_eq!(
            m.controls().bad_sectors(),
            still,
            "seed {seed}: {landed} landed"
        );
        if healed_to > bad.0 {
            healed_some += 1;
            read(&m, bad.0, (healed_to - bad.0) as usize);
        }
    }
    assert!(
        healed_some > 10,
        "{healed_some} of 40 tears healed something"
    );
}

#[test]
fn a_mirror_read_of_a_bad_sector_is_served_corrected_and_heals() {
    let data_offset = MIB;
    let member_size = data_offset + 2 * MIB;
    let geometry = Geometry::new(GeometrySpec {
        level: Level::Mirror,
        parity_layout: ParityLayout::DEFAULT,
        copies: 2,
        interleave_bytes: 64 * 1024,
        data_offset_bytes: data_offset,
        member_data_bytes: vec![2 * MIB; 2],
    })
    .unwrap();
    let good = Arc::new(MemoryMember::new("m0", member_size));
    let bad = Arc::new(FaultyMember::new(
        MemoryMember::new("m1", member_size),
        FaultSpec::default(),
    ));
    let members: Vec<Option<Arc<dyn Member>>> = vec![
        Some(Arc::clone(&good) as Arc<dyn Member>),
        Some(Arc::clone(&bad) as Arc<dyn Member>),
    ];
    let volume = Volume::new(geometry, vec![Health::Online; 2], Limits::default());
    let size = volume.size_bytes();
    let mut ex = SyncExecutor::new(volume, members);
    let data = Rng(23).bytes(size as usize);
    ex.write(0, Bytes::from(data.clone())).unwrap();
    // Bad sectors on m1 under volume bytes 512k..544k; their old bytes lost.
    let at = data_offset + 512 * 1024;
    bad.inner().write_at(at, &[0xee; 32 * 1024]).unwrap();
    bad.controls().set(bad_spec(&[(at, 32 * 1024)]));
    // Reads rotate over the copies: read the whole volume in 64k pieces,
    // each twice.
    for _ in 0..2 {
        for off in (0..size).step_by(64 * 1024) {
            for _ in 0..2 {
                let got = ex.read(off, 64 * 1024).unwrap();
                assert!(got[..] == data[off as usize..off as usize + 64 * 1024]);
            }
        }
    }
    assert_eq!(ex.volume().health()[1], Health::Online);
    assert_eq!(ex.volume().read_errors_corrected(1), 1);
    let events = ex.take_events();
    assert!(
        events.iter().any(|e| matches!(e,
            Event::ReadErrorCorrected { member: 1, offset_bytes, .. } if *offset_bytes == data_offset + 512 * 1024)),
        "{events:?}"
    );
    assert!(bad.controls().bad_sectors().is_empty(), "healed");
    assert_eq!(
        read(bad.inner(), at, 32 * 1024),
        data[512 * 1024..544 * 1024],
        "the good bytes were written back"
    );
}

// ---------------------------------------------------------------------------
// Crashes

fn undo_spec(seed: u64) -> FaultSpec {
    FaultSpec {
        undo_log: true,
        seed,
        ..FaultSpec::default()
    }
}

fn assert_dead(m: &dyn Member) {
    let errs = [
        m.read_at(0, &mut [0u8; 10]).unwrap_err(),
        m.write_at(0, &[1u8; 10]).unwrap_err(),
        m.flush().unwrap_err(),
        m.trim(0, 10).unwrap_err(),
    ];
    for e in errs {
        assert_injected(&e, "crashed");
        assert!(e.to_string().contains("crashed"), "{e}");
    }
}

#[test]
fn crash_drop_all_loses_every_unflushed_write_and_keeps_flushed_data() {
    let size = 64 * 1024;
    let m = faulty(size, undo_spec(1));
    let c = m.controls();
    let mut rng = Rng(8);
    m.write_at(1000, &rng.bytes(9000)).unwrap();
    m.trim(2000, 100).unwrap();
    m.flush().unwrap();
    assert_eq!(c.unflushed_writes(), 0);
    let flushed = snapshot(&m);
    // Overlapping writes and trims, unaligned.
    m.write_at(500, &rng.bytes(3000)).unwrap();
    m.write_at(1500, &rng.bytes(5000)).unwrap();
    m.trim(0, 4096).unwrap();
    m.write_at(60_000, &rng.bytes(5536)).unwrap();
    m.write_at(3, &rng.bytes(1)).unwrap();
    assert_eq!(c.unflushed_writes(), 5);
    assert_eq!(c.unflushed_bytes(), 3000 + 5000 + 4096 + 5536 + 1);
    let report = c.crash(CrashMode::DropAll).unwrap();
    assert_eq!(report.writes.len(), 5);
    assert_eq!(report.count(|f| *f == Fate::Dropped), 5);
    assert_eq!(report.writes[2].op, Op::Trim);
    assert!(
        snapshot(&m) == flushed,
        "the member is back at the last flush"
    );
    assert!(c.is_crashed());
    assert_eq!(c.unflushed_writes(), 0);
    assert_dead(&m);
    assert!(snapshot(&m) == flushed, "I/O while crashed changed nothing");
    c.revive();
    let mut b = vec![0u8; size as usize];
    m.read_at(0, &mut b).unwrap();
    assert!(b == flushed);
    m.write_at(0, &[7u8; 10]).unwrap();
    m.flush().unwrap();
}

/// `base` with the kept part of each write of `report` applied in order,
/// the data taken from `writes` (zeros for trims).
fn replay(base: &[u8], report: &CrashReport, writes: &[Vec<u8>]) -> Vec<u8> {
    let mut v = base.to_vec();
    assert_eq!(report.writes.len(), writes.len());
    for (w, data) in report.writes.iter().zip(writes) {
        let keep = match w.fate {
            Fate::Kept => w.len_bytes,
            Fate::Dropped => 0,
            Fate::Torn { kept_bytes } => {
                assert!(kept_bytes > 0 && kept_bytes < w.len_bytes, "{w:?}");
                assert_eq!((w.offset_bytes + kept_bytes) % SECTOR, 0, "{w:?}");
                kept_bytes
            }
        } as usize;
        let at = w.offset_bytes as usize;
        v[at..at + keep].copy_from_slice(&data[..keep]);
    }
    v
}

/// Disjoint writes since the last flush; after a `DropSome` crash each is
/// fully there or fully not (or, with tearing, a sector prefix of it), and
/// the flushed data around them stays.
fn crash_drop_some_disjoint(tear_rate: f64, seed: u64) -> (usize, usize, usize) {
    let size = 1024 * 1024;
    let m = faulty(size, undo_spec(seed));
    let c = m.controls();
    let mut rng = Rng(seed);
    m.write_at(0, &rng.bytes(size as usize)).unwrap();
    m.flush().unwrap();
    let flushed = snapshot(&m);
    c.set_undo_limit(DEFAULT_UNDO_LIMIT_BYTES);
    let mut spans = Vec::new();
    let mut at = 0u64;
    while spans.len() < 60 {
        let gap = rng.below(3000);
        let len = 1 + rng.below(8 * SECTOR);
        if at + gap + len > size {
            break;
        }
        let off = at + gap;
        let data: Vec<u8> = flushed[off as usize..(off + len) as usize]
            .iter()
            .map(|b| !b)
            .collect();
        m.write_at(off, &data).unwrap();
        spans.push((off, data));
        at = off + len;
    }
    // Tearing at crash time only (the writes above went in whole); a new
    // spec with the undo log still on keeps the log.
    c.set(FaultSpec {
        tear_rate,
        ..undo_spec(seed)
    });
    assert_eq!(c.unflushed_writes(), spans.len());
    let report = c.crash(CrashMode::DropSome).unwrap();
    let held = snapshot(&m);
    let (mut kept, mut dropped, mut torn) = (0, 0, 0);
    for ((off, data), w) in spans.iter().zip(&report.writes) {
        let (s, e) = (*off as usize, *off as usize + data.len());
        let old = &flushed[s..e];
        let now = &held[s..e];
        if now == &data[..] {
            kept += 1;
            assert_eq!(w.fate, Fate::Kept);
        } else if now == old {
            dropped += 1;
            assert_eq!(w.fate, Fate::Dropped);
        } else {
            assert!(
                tear_rate > 0.0,
                "write at {off} is half there without tearing"
            );
            let p = torn_prefix(now, old, data, *off);
            assert!(p > 0 && p < data.len());
            assert!(now[..p] == data[..p]);
            assert_eq!(
                w.fate,
                Fate::Torn {
                    kept_bytes: p as u64
                }
            );
            torn += 1;
        }
    }
    // Outside the writes, the flushed bytes.
    let mut mask = vec![false; size as usize];
    for (off, data) in &spans {
        mask[*off as usize..*off as usize + data.len()].fill(true);
    }
    for i in 0..size as usize {
        if !mask[i] {
            assert_eq!(held[i], flushed[i], "byte {i} outside the writes changed");
        }
    }
    let datas: Vec<Vec<u8>> = spans.iter().map(|(_, d)| d.clone()).collect();
    assert!(replay(&flushed, &report, &datas) == held);
    assert_dead(&m);
    (kept, dropped, torn)
}

#[test]
fn crash_drop_some_keeps_each_write_whole_or_not_at_all() {
    let mut totals = (0, 0);
    for seed in 1..=4 {
        let (kept, dropped, torn) = crash_drop_some_disjoint(0.0, seed);
        assert_eq!(torn, 0);
        totals.0 += kept;
        totals.1 += dropped;
    }
    // Even odds over 240 writes: both happen, roughly equally.
    assert!(totals.0 > 80 && totals.1 > 80, "{totals:?}");
}

#[test]
fn crash_drop_some_with_tearing_tears_at_sector_boundaries() {
    let mut torn_total = 0;
    for seed in 1..=4 {
        let (kept, dropped, torn) = crash_drop_some_disjoint(0.5, seed);
        assert!(kept + dropped > 0);
        torn_total += torn;
    }
    assert!(torn_total > 20, "{torn_total} torn");
}

#[test]
fn crash_drop_some_with_overlapping_writes_is_a_subset_applied_in_order() {
    for seed in 1..=20u64 {
        let size = 32 * 1024;
        let m = faulty(size, undo_spec(seed));
        let c = m.controls();
        let mut rng = Rng(seed * 77);
        m.write_at(0, &rng.bytes(size as usize)).unwrap();
        m.flush().unwrap();
        let flushed = snapshot(&m);
        let mut datas = Vec::new();
        for _ in 0..30 {
            let off = rng.below(8 * 1024);
            let len = 1 + rng.below(6 * 1024);
            if rng.below(5) == 0 {
                m.trim(off, len).unwrap();
                datas.push(vec![0u8; len as usize]);
            } else {
                let d = rng.bytes(len as usize);
                m.write_at(off, &d).unwrap();
                datas.push(d);
            }
        }
        let report = c.crash(CrashMode::DropSome).unwrap();
        assert!(
            replay(&flushed, &report, &datas) == snapshot(&m),
            "seed {seed}: not the kept writes applied in order: {report:?}"
        );
        // The same seed crashes the same way.
        if seed == 1 {
            let again = faulty(size, undo_spec(seed));
            let mut rng = Rng(seed * 77);
            again.write_at(0, &rng.bytes(size as usize)).unwrap();
            again.flush().unwrap();
            for _ in 0..30 {
                let off = rng.below(8 * 1024);
                let len = 1 + rng.below(6 * 1024);
                if rng.below(5) == 0 {
                    again.trim(off, len).unwrap();
                } else {
                    again.write_at(off, &rng.bytes(len as usize)).unwrap();
                }
            }
            assert_eq!(again.controls().crash(CrashMode::DropSome).unwrap(), report);
            assert!(snapshot(&again) == snapshot(&m));
        }
    }
}

#[test]
fn a_failed_flush_keeps_the_undo_log() {
    let m = faulty(8192, undo_spec(1));
    let c = m.controls();
    m.write_at(0, &[1u8; 100]).unwrap();
    m.flush().unwrap();
    m.write_at(0, &[2u8; 100]).unwrap();
    c.set(FaultSpec {
        fail_nth: Some(1),
        ..undo_spec(1)
    });
    // set() with the log still on keeps it.
    assert_eq!(c.unflushed_writes(), 1);
    assert_injected(&m.flush().unwrap_err(), "flush");
    assert_eq!(c.unflushed_writes(), 1);
    c.crash(CrashMode::DropAll).unwrap();
    assert!(snapshot(&m)[..100] == [1u8; 100]);
}

#[test]
fn the_undo_log_is_bounded() {
    let m = faulty(64 * 1024, undo_spec(1));
    let c = m.controls();
    c.set_undo_limit(8192);
    m.write_at(0, &[1u8; 4096]).unwrap();
    m.trim(4096, 4096).unwrap();
    let e = m.write_at(100, &[2u8; 1]).unwrap_err();
    assert_eq!(e.kind, MemberErrorKind::Io);
    assert!(e.to_string().contains("undo log is full"), "{e}");
    assert!(!e.to_string().contains("injected"), "{e}");
    assert!(snapshot(&m)[100] == 1, "a refused write changes nothing");
    m.flush().unwrap();
    assert_eq!(c.unflushed_bytes(), 0);
    m.write_at(100, &[2u8; 8192]).unwrap();
    // Turning the log off forgets it.
    c.set(FaultSpec::default());
    assert_eq!(c.unflushed_writes(), 0);
}

#[test]
#[should_panic(expected = "undo_log")]
fn crash_without_the_undo_log_is_a_mistake() {
    let m = faulty(4096, FaultSpec::default());
    m.write_at(0, &[1u8; 10]).unwrap();
    let _ = m.controls().crash(CrashMode::DropAll);
}

#[test]
fn concurrent_io_with_faults_and_a_crash() {
    // Threads write disjoint ranges with random failures, latency and the
    // undo log; every failure is injected and counted; a crash then undoes
    // exactly the writes that succeeded since the flush.
    let size = 4 * MIB;
    let m = Arc::new(faulty(
        size,
        FaultSpec {
            fail_rate: 0.05,
            latency_us: 20,
            ..undo_spec(3)
        },
    ));
    let c = m.controls();
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let m = Arc::clone(&m);
            std::thread::spawn(move || {
                let mut failures = 0u64;
                let mut rng = Rng(t);
                for i in 0..200u64 {
                    let off = t * MIB + i * 4096;
                    let r = match i % 10 {
                        0 => m.flush(),
                        1 => m.read_at(off, &mut [0u8; 4096]),
                        _ => m.write_at(off, &rng.bytes(4096)),
                    };
                    if let Err(e) = r {
                        assert_injected(&e, "concurrent");
                        failures += 1;
                    }
                }
                failures
            })
        })
        .collect();
    let failures: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(c.io_count(), 800);
    assert_eq!(c.injected_count(), failures);
    assert!(failures > 10 && failures < 100, "{failures}");
    c.set(undo_spec(3));
    m.flush().unwrap();
    let flushed = snapshot(&m);
    m.write_at(5, &[9u8; 3000]).unwrap();
    c.crash(CrashMode::DropAll).unwrap();
    assert!(snapshot(&m) == flushed);
}

// ---------------------------------------------------------------------------
// In a volume

#[test]
fn a_raid5_volume_survives_a_member_dying_mid_workload() {
    let data_offset = MIB;
    let member_size = data_offset + 4 * MIB;
    let il = 126 * SECTOR;
    let geometry = Geometry::new(GeometrySpec {
        level: Level::Raid5,
        parity_layout: ParityLayout::DEFAULT,
        copies: 1,
        interleave_bytes: il,
        data_offset_bytes: data_offset,
        member_data_bytes: vec![4 * MIB; 4],
    })
    .unwrap();
    let dying = Arc::new(FaultyMember::new(
        MemoryMember::new("m1", member_size),
        FaultSpec::default(),
    ));
    let members: Vec<Option<Arc<dyn Member>>> = (0..4)
        .map(|i| {
            Some(if i == 1 {
                Arc::clone(&dying) as Arc<dyn Member>
            } else {
                Arc::new(MemoryMember::new(format!("m{i}"), member_size)) as Arc<dyn Member>
            })
        })
        .collect();
    let volume = Volume::new(geometry, vec![Health::Online; 4], Limits::default());
    let size = volume.size_bytes();
    let mut ex = SyncExecutor::new(volume, members);
    let mut model = vec![0u8; size as usize];
    let mut rng = Rng(17);
    for step in 0..200 {
        if step == 60 {
            dying.controls().set(FaultSpec {
                fail_from_nth: Some(5),
                ..FaultSpec::default()
            });
        }
        let off = rng.below(size - 1);
        let len = 1 + rng.below((size - off).min(200_000));
        if rng.below(2) == 0 {
            let d = rng.bytes(len as usize);
            ex.write(off, Bytes::from(d.clone()))
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
            model[off as usize..(off + len) as usize].copy_from_slice(&d);
        } else {
            let got = ex
                .read(off, len)
                .unwrap_or_else(|e| panic!("step {step}: {e}"));
            assert!(
                got[..] == model[off as usize..(off + len) as usize],
                "step {step}: read {len} at {off} differs"
            );
        }
    }
    let all = ex.read(0, size).unwrap();
    assert!(all[..] == model[..]);
    assert_eq!(ex.volume().health()[1], Health::Faulty);
    let events = ex.take_events();
    assert!(
        events.iter().any(|e| matches!(e,
            Event::MemberFaulty { member: 1, reason } if reason.contains("injected fault"))),
        "{events:?}"
    );
}

// ---------------------------------------------------------------------------
// The text form

#[test]
fn parse_reads_every_key() {
    let s = FaultSpec::parse(
        "fail-nth=7,fail-from=100,fail-rate=0.001,latency=500us,latency-jitter=exp:2ms,\
         latency-from=9,tear-rate=0.01,seed=3",
    )
    .unwrap();
    assert_eq!(
        s,
        FaultSpec {
            fail_nth: Some(7),
            fail_from_nth: Some(100),
            fail_rate: 0.001,
            latency_us: 500,
            latency_jitter: Some(Jitter::Exponential { mean_us: 2000 }),
            latency_from_nth: Some(9),
            tear_rate: 0.01,
            seed: 3,
            undo_log: false,
            bad_ranges: vec![],
            drop_ranges: vec![],
        }
    );
    assert_eq!(FaultSpec::parse("none").unwrap(), FaultSpec::default());
    assert_eq!(FaultSpec::parse("").unwrap(), FaultSpec::default());
    assert_eq!(
        FaultSpec::parse(" seed=1 , undo-log=on ").unwrap(),
        FaultSpec {
            seed: 1,
            undo_log: true,
            ..FaultSpec::default()
        }
    );
    for (text, us) in [
        ("latency=7us", 7),
        ("latency=3ms", 3000),
        ("latency=2s", 2_000_000),
        ("latency=0ms", 0),
    ] {
        assert_eq!(FaultSpec::parse(text).unwrap().latency_us, us, "{text}");
    }
    let parsed: FaultSpec = "fail-rate=1".parse().unwrap();
    assert_eq!(parsed.fail_rate, 1.0);
}

#[test]
fn parse_refuses_bad_specs_in_one_line() {
    for (text, says) in [
        ("fial-nth=3", "unknown key \"fial-nth\""),
        ("fail-nth", "is not key=value"),
        ("fail-nth=0", "numbered from 1"),
        ("latency-from=0", "numbered from 1"),
        ("fail-nth=-1", "not a whole number"),
        ("fail-nth=7x", "not a whole number"),
        ("fail-from=", "not a whole number"),
        ("fail-rate=1.5", "between 0 and 1"),
        ("fail-rate=-0.1", "between 0 and 1"),
        ("fail-rate=NaN", "between 0 and 1"),
        ("tear-rate=abc", "between 0 and 1"),
        ("latency=500", "needs a unit"),
        ("latency=5min", "unknown unit \"min\""),
        ("latency=1.5ms", "not a whole number"),
        ("latency=99999999999999999s", "fits"),
        ("latency-jitter=1", "needs a unit"),
        ("latency-jitter=gauss:1ms", "unknown distribution \"gauss\""),
        ("latency-jitter=exp:1000000000000s", "too large"),
        ("seed=x", "seed=\"x\""),
        ("undo-log=maybe", "on or off"),
        ("seed=1,seed=2", "given twice"),
        ("seed=1,,seed=2", "is not key=value"),
        ("bad-range=2M", "is not OFFSET+LEN"),
        ("bad-range=2M,64k", "is not OFFSET+LEN"),
        ("bad-range=2M+", "the length: invalid size"),
        ("bad-range=x+1k", "the offset: invalid size"),
        ("bad-range=2M+64q", "unknown unit 'q'"),
        ("bad-range=1000+1k", "multiples of 512"),
        ("bad-range=1M+100", "multiples of 512"),
        ("bad-range=1M+0", "length is zero"),
        ("bad-range=16777215T+2T", "past 2^64"),
        ("drop-writes=1M", "is not OFFSET+LEN"),
        ("drop-writes=1000+1k", "multiples of 512"),
    ] {
        let FaultSpecError(msg) = FaultSpec::parse(text).expect_err(text);
        assert!(msg.contains(says), "{text}: {msg}");
        assert!(!msg.contains('\n'), "{text}: one line: {msg}");
        assert!(
            msg.contains(text) || text.contains(",,"),
            "{text}: names the spec: {msg}"
        );
    }
}

#[test]
fn parse_reads_bad_ranges_given_once_each() {
    let s =
        FaultSpec::parse("bad-range=2M+64k, seed=4,bad-range=8s+1s,bad-range=4096+512").unwrap();
    assert_eq!(
        s.bad_ranges,
        vec![
            BadRange {
                offset_bytes: 2 * MIB,
                len_bytes: 64 * 1024
            },
            BadRange {
                offset_bytes: 4096,
                len_bytes: SECTOR
            },
            BadRange {
                offset_bytes: 4096,
                len_bytes: SECTOR
            },
        ]
    );
    assert_eq!(s.seed, 4);
    assert!(s.is_active());
    assert_eq!(
        s.to_string(),
        "seed=4,bad-range=2M+64k,bad-range=4k+1s,bad-range=4k+1s"
    );
    // A spec built in code is checked the same way.
    let FaultSpecError(msg) = FaultSpec {
        bad_ranges: vec![BadRange {
            offset_bytes: 1000,
            len_bytes: 512,
        }],
        ..FaultSpec::default()
    }
    .validate()
    .expect_err("unaligned");
    assert!(
        msg.starts_with("bad-range=1000+1s: ") && msg.contains("multiples of 512"),
        "{msg}"
    );
}

#[test]
fn display_round_trips() {
    let mut rng = Rng(99);
    let mut samples = vec![
        FaultSpec::default(),
        FaultSpec::parse(
            "fail-nth=7,fail-from=100,fail-rate=0.001,latency=500us,tear-rate=0.01,seed=3",
        )
        .unwrap(),
    ];
    for _ in 0..500 {
        samples.push(FaultSpec {
            fail_nth: (rng.below(2) == 0).then(|| 1 + rng.below(1 << 40)),
            fail_from_nth: (rng.below(2) == 0).then(|| 1 + rng.next() / 2),
            fail_rate: [
                0.0,
                1.0,
                0.1,
                (rng.next() >> 11) as f64 / (1u64 << 53) as f64,
            ][rng.below(4) as usize],
            latency_us: [0, 1, 1000, 1500, 2_000_000, rng.next() >> 20][rng.below(6) as usize],
            latency_jitter: [
                None,
                Some(Jitter::Uniform { max_us: 1500 }),
                Some(Jitter::Exponential { mean_us: 2000 }),
                Some(Jitter::Uniform {
                    max_us: rng.next() >> 20,
                }),
            ][rng.below(4) as usize],
            latency_from_nth: (rng.below(2) == 0).then(|| 1 + rng.below(1 << 20)),
            tear_rate: [0.0, 0.5, 1e-9][rng.below(3) as usize],
            seed: [0, 3, rng.next()][rng.below(3) as usize],
            undo_log: rng.below(2) == 0,
            bad_ranges: (0..rng.below(3))
                .map(|_| BadRange {
                    offset_bytes: [0, MIB, rng.below(1 << 40) * SECTOR][rng.below(3) as usize],
                    len_bytes: [SECTOR, 64 * 1024, (1 + rng.below(1 << 20)) * SECTOR]
                        [rng.below(3) as usize],
                })
                .collect(),
            drop_ranges: (0..rng.below(2))
                .map(|_| BadRange {
                    offset_bytes: rng.below(1 << 30) * SECTOR,
                    len_bytes: (1 + rng.below(1 << 10)) * SECTOR,
                })
                .collect(),
        });
    }
    for s in samples {
        let text = s.to_string();
        assert!(!text.contains(' '), "{text}");
        assert_eq!(FaultSpec::parse(&text).unwrap(), s, "{text}");
    }
    assert_eq!(FaultSpec::default().to_string(), "none");
    assert_eq!(
        FaultSpec::parse("latency=3000us,seed=3,fail-nth=2")
            .unwrap()
            .to_string(),
        "fail-nth=2,latency=3ms,seed=3"
    );
}

/// `latency-jitter=` makes a member look like a disk rather than a
/// constant: uniform jitter spreads evenly up to its bound, exponential
/// jitter has its mean and a bounded tail, and both are the same for the
/// same seed and I/O number.
#[test]
fn latency_jitter_has_its_distribution_and_repeats_by_seed() {
    let spec = |text: &str| FaultSpec::parse(text).unwrap();
    let n = 20_000u64;
    let mean = |s: &FaultSpec| (1..=n).map(|i| s.latency_us_of(i)).sum::<u64>() as f64 / n as f64;

    let uniform = spec("latency=2ms,latency-jitter=1ms,seed=7");
    let all: Vec<u64> = (1..=n).map(|i| uniform.latency_us_of(i)).collect();
    assert!(all.iter().all(|&us| (2000..=3000).contains(&us)));
    assert!(all.iter().any(|&us| us < 2100) && all.iter().any(|&us| us > 2900));
    let m = mean(&uniform);
    assert!((2450.0..2550.0).contains(&m), "uniform mean {m}");

    let exp = spec("latency-jitter=exp:500us,seed=7");
    let m = mean(&exp);
    assert!((470.0..530.0).contains(&m), "exponential mean {m}");
    assert!((1..=n).all(|i| exp.latency_us_of(i) <= 500 * JITTER_EXP_CAP));
    let over_twice = (1..=n).filter(|&i| exp.latency_us_of(i) > 1000).count() as f64 / n as f64;
    // e^-2 of the I/Os take more than twice the mean.
    assert!((0.11..0.16).contains(&over_twice), "tail {over_twice}");

    assert_eq!(uniform.latency_us_of(41), uniform.clone().latency_us_of(41));
    let other_seed = spec("latency=2ms,latency-jitter=1ms,seed=8");
    assert!((1..=100).any(|i| other_seed.latency_us_of(i) != uniform.latency_us_of(i)));
    assert_eq!(spec("latency=2ms").latency_us_of(5), 2000);
}
