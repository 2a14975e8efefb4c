//! The engine on real members: a `Volume` driven by `SyncExecutor` over
//! temporary files, memory and (where `losetup` works) loop devices.
//!
//! Every check compares with a flat `Vec<u8>` model. Besides reading back
//! through the engine, the stored bytes are read straight from the members'
//! backing storage and checked against an independent statement of each
//! layout (including md's left-symmetric P and Q), so a bug that the engine's
//! own read path would mirror still shows.

use std::fs;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{ErrorKind, Event, Health, Limits, Volume};
use platter_core::{Level, ParityLayout};
use platter_io::{
    open_member, Member, MemberError, MemberErrorKind, MemoryMember, Op, OpenOptions,
};
use platter_testkit::check::assert_same;
use platter_testkit::dirs::LoopDevice;
use platter_testkit::executor::SyncExecutor;
use platter_testkit::Rng;
use tempfile::TempDir;

const SECTOR: u64 = 512;
const MIB: u64 = 1 << 20;
const DATA_OFFSET: u64 = MIB;
/// Data bytes per member in the main harness: small, several stripes deep.
const MEMBER_DATA: u64 = 4 * MIB;
/// 126 sectors (not a power of two), 8 sectors, 64 KiB.
const INTERLEAVES: [u64; 3] = [126 * SECTOR, 8 * SECTOR, 64 << 10];

/// The volumes every harness run builds: (level, members, copies).
const SHAPES: [(Level, usize, u32); 6] = [
    (Level::Concat, 3, 1),
    (Level::Stripe, 3, 1),
    (Level::Mirror, 3, 3),
    // md's near layout with a member count that copies does not divide.
    (Level::Raid10, 3, 2),
    (Level::Raid5, 4, 1),
    (Level::Raid6, 5, 1),
];

// ---------------------------------------------------------------------------
// Fixtures

/// A temporary directory under the target directory (not /tmp, often tmpfs).
fn temp_dir() -> TempDir {
    platter_testkit::temp_dir!("platter-executor-")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    File,
    Memory,
    Loop,
}

/// Where a member's bytes can be read without going through the member.
enum Store {
    /// A regular file: the member itself, or a loop device's backing file.
    File(PathBuf),
    /// A `MemoryMember` is its own storage.
    Memory,
}

/// A set of members plus whatever keeps them alive. Fields drop in order:
/// handles close, then loop devices detach, then the directory goes.
struct Members {
    members: Vec<Arc<dyn Member>>,
    /// The name to reopen each member by (file path or loop device), if any.
    open_paths: Vec<Option<PathBuf>>,
    stores: Vec<Store>,
    loops: Vec<LoopDevice>,
    dir: TempDir,
}

impl Members {
    /// Members of the given sizes, or `None` after saying why the machine
    /// cannot provide this kind.
    fn new(kind: Kind, sizes: &[u64]) -> Option<Members> {
        let dir = temp_dir();
        let mut m = Members {
            members: Vec::new(),
            open_paths: Vec::new(),
            stores: Vec::new(),
            loops: Vec::new(),
            dir,
        };
        for (i, &size) in sizes.iter().enumerate() {
            match kind {
                Kind::Memory => {
                    m.members
                        .push(Arc::new(MemoryMember::new(format!("memory{i}"), size)));
                    m.open_paths.push(None);
                    m.stores.push(Store::Memory);
                }
                Kind::File => {
                    let path = m.dir.path().join(format!("m{i}.img"));
                    let opts = OpenOptions {
                        create_size_bytes: Some(size),
                        ..OpenOptions::default()
                    };
                    let member = open_member(path.to_str().unwrap(), opts)
                        .unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
                    assert_eq!(member.size_bytes(), size);
                    assert_eq!(fs::metadata(&path).unwrap().len(), size);
                    m.members.push(Arc::from(member));
                    m.open_paths.push(Some(path.clone()));
                    m.stores.push(Store::File(path));
                }
                Kind::Loop => {
                    let backing = m.dir.path().join(format!("backing{i}.img"));
                    fs::File::create(&backing)
                        .and_then(|f| f.set_len(size))
                        .expect("create a loop device's backing file");
                    let lo = match LoopDevice::attach(&backing, 512) {
                        Ok(lo) => lo,
                        Err(reason) => {
                            platter_testkit::skips::skipped("a loop-device test", reason);
                            return None;
                        }
                    };
                    let member =
                        match open_member(lo.path.to_str().unwrap(), OpenOptions::default()) {
                            Ok(member) => member,
                            Err(e) => {
                                platter_testkit::skips::skipped(
                                    "a loop-device test",
                                    format!("cannot open {}: {e}", lo.path.display()),
                                );
                                return None;
                            }
                        };
                    assert_eq!(member.size_bytes(), size, "{}", lo.path.display());
                    m.members.push(Arc::from(member));
                    m.open_paths.push(Some(lo.path.clone()));
                    m.stores.push(Store::File(backing));
                    m.loops.push(lo);
                }
            }
        }
        Some(m)
    }

    /// The member's whole contents, read from its storage, not through it.
    fn stored(&self, i: usize) -> Vec<u8> {
        match &self.stores[i] {
            Store::File(path) => fs::read(path).expect("read a member's storage"),
            Store::Memory => {
                let m = &self.members[i];
                let mut buf = vec![0; m.size_bytes() as usize];
                m.read_at(0, &mut buf).unwrap();
                buf
            }
        }
    }

    /// Zeroes every member, so a new volume starts from zeros on all of them.
    fn wipe(&self) {
        for m in &self.members {
            m.trim(0, m.size_bytes())
                .unwrap_or_else(|e| panic!("wipe: {e}"));
        }
    }
}

// ---------------------------------------------------------------------------
// Volumes and the model

fn geometry(level: Level, copies: u32, il: u64, member_sizes: &[u64]) -> Geometry {
    Geometry::new(GeometrySpec {
        level,
        parity_layout: ParityLayout::DEFAULT,
        copies,
        interleave_bytes: il,
        data_offset_bytes: DATA_OFFSET,
        // Floored to whole sectors, as `platter create` does.
        member_data_bytes: member_sizes
            .iter()
            .map(|s| (s - DATA_OFFSET) / SECTOR * SECTOR)
            .collect(),
    })
    .unwrap_or_else(|e| panic!("{level} over {member_sizes:?} at interleave {il}: {e}"))
}

fn executor(geometry: Geometry, members: Vec<Option<Arc<dyn Member>>>) -> SyncExecutor {
    let health = members
        .iter()
        .map(|m| {
            if m.is_some() {
                Health::Online
            } else {
                Health::Missing
            }
        })
        .collect();
    SyncExecutor::new(Volume::new(geometry, health, Limits::default()), members)
}

fn all_present(members: &[Arc<dyn Member>]) -> Vec<Option<Arc<dyn Member>>> {
    members.iter().cloned().map(Some).collect()
}

fn write(exec: &mut SyncExecutor, model: &mut [u8], offset: u64, data: Vec<u8>, what: &str) {
    let end = offset as usize + data.len();
    model[offset as usize..end].copy_from_slice(&data);
    exec.write(offset, Bytes::from(data))
        .unwrap_or_else(|e| panic!("{what}: write at {offset}: {e}"));
}

fn check_read(exec: &mut SyncExecutor, model: &[u8], offset: u64, len: u64, what: &str) {
    let got = exec
        .read(offset, len)
        .unwrap_or_else(|e| panic!("{what}: read of {len} at {offset}: {e}"));
    assert_same(
        &got,
        &model[offset as usize..(offset + len) as usize],
        &format!("{what}: read of {len} at {offset}"),
    );
}

/// A random range of the volume: any offset and length, biased towards
/// chunk and stripe boundaries and the ends, sometimes spanning stripes.
fn random_range(rng: &mut Rng, size: u64, il: u64, stripe: u64) -> (u64, u64) {
    let offset = match rng.below(4) {
        0 => rng.below(size),
        // Just before or after a chunk boundary.
        1 => (rng.below(size / il) * il + rng.below(16)).saturating_sub(8),
        2 => size - 1 - rng.below(size.min(3 * il)),
        _ => rng.below(size / stripe) * stripe + rng.below(il),
    };
    let offset = offset.min(size - 1);
    let max_len = match rng.below(5) {
        0 => 16,
        1 | 2 => il + 17,
        3 => 2 * stripe + 3,
        _ => 6 * stripe + il,
    };
    let len = 1 + rng.below(max_len);
    (offset, len.min(size - offset))
}

/// Random unaligned writes checked by random reads, then a flush and a
/// read of everything.
fn workload(exec: &mut SyncExecutor, model: &mut [u8], rng: &mut Rng, ops: usize, what: &str) {
    let size = model.len() as u64;
    assert_eq!(exec.volume().size_bytes(), size, "{what}");
    let il = exec.volume().geometry().interleave_bytes();
    let stripe = exec.volume().geometry().stripe_data_bytes();
    // The very first and very last bytes, alone.
    write(exec, model, 0, rng.bytes(1), what);
    write(exec, model, size - 1, rng.bytes(1), what);
    for i in 0..ops {
        let (offset, len) = random_range(rng, size, il, stripe);
        if i % 3 == 2 {
            check_read(exec, model, offset, len, what);
        } else {
            let data = rng.bytes(len as usize);
            write(exec, model, offset, data, what);
        }
    }
    exec.flush()
        .unwrap_or_else(|e| panic!("{what}: flush: {e}"));
    check_read(exec, model, 0, size, what);
}

/// Fills the whole volume with random bytes in pieces of random sizes.
fn fill(exec: &mut SyncExecutor, model: &mut [u8], rng: &mut Rng, what: &str) {
    let size = model.len() as u64;
    let mut at = 0;
    while at < size {
        let len = (1 + rng.below(3 * MIB / 2)).min(size - at);
        write(exec, model, at, rng.bytes(len as usize), what);
        at += len;
    }
}

// ---------------------------------------------------------------------------
// An independent statement of every layout, checked on the stored bytes.

/// Multiplies by the generator 2 in GF(2^8) with polynomial 0x11d.
fn gf_mul2(x: u8) -> u8 {
    (x << 1) ^ if x & 0x80 != 0 { 0x1d } else { 0 }
}

/// Checks that the members' stored bytes hold the model where the layout
/// says (and that parity is right), using nothing of the engine.
fn check_stored_layout(
    level: Level,
    copies: u32,
    il: u64,
    member_data: &[u64],
    stored: &[Vec<u8>],
    model: &[u8],
    what: &str,
) {
    let n = stored.len() as u64;
    let chunk_of = |m: u64, row: u64| -> &[u8] {
        let at = (DATA_OFFSET + row * il) as usize;
        &stored[m as usize][at..at + il as usize]
    };
    let rows: Vec<u64> = member_data.iter().map(|d| d / il).collect();
    let chunks = model.len() as u64 / il;
    assert_eq!(chunks * il, model.len() as u64, "{what}: whole chunks");
    let mut parity_stripes = 0;
    for c in 0..chunks {
        let expect = &model[(c * il) as usize..((c + 1) * il) as usize];
        let copies_of: Vec<(u64, u64)> = match level {
            Level::Concat => {
                let mut first = 0;
                let mut m = 0;
                while c >= first + rows[m] {
                    first += rows[m];
                    m += 1;
                }
                vec![(m as u64, c - first)]
            }
            Level::Stripe => vec![(c % n, c / n)],
            Level::Mirror => (0..n).map(|m| (m, c)).collect(),
            Level::Raid10 => (0..u64::from(copies))
                .map(|j| {
                    let slot = c * u64::from(copies) + j;
                    (slot % n, slot / n)
                })
                .collect(),
            Level::Raid5 | Level::Raid6 => {
                // md's left-symmetric: P walks down from the last data
                // disk (raid5) or the last disk (raid6); Q follows P; data
                // starts after the parity and wraps.
                let k = n - u64::from(level.parity_members());
                let (s, d) = (c / k, c % k);
                let p = if level == Level::Raid5 {
                    k - s % n
                } else {
                    n - 1 - s % n
                };
                let first_data = p + 1 + u64::from(level == Level::Raid6);
                if d == k - 1 {
                    parity_stripes += 1;
                    let data: Vec<&[u8]> = (0..k)
                        .map(|dd| chunk_of((first_data + dd) % n, s))
                        .collect();
                    let mut pp = vec![0u8; il as usize];
                    let mut qq = vec![0u8; il as usize];
                    // Horner: Q = sum of g^d * D_d.
                    for dd in (0..k as usize).rev() {
                        for (i, b) in data[dd].iter().enumerate() {
                            pp[i] ^= b;
                            qq[i] = gf_mul2(qq[i]) ^ b;
                        }
                    }
                    assert_same(chunk_of(p, s), &pp, &format!("{what}: P of stripe {s}"));
                    if level == Level::Raid6 {
                        assert_same(
                            chunk_of((p + 1) % n, s),
                            &qq,
                            &format!("{what}: Q of stripe {s}"),
                        );
                    }
                }
                vec![((first_data + d) % n, s)]
            }
        };
        for (m, row) in copies_of {
            assert_same(
                chunk_of(m, row),
                expect,
                &format!("{what}: chunk {c} on member {m} row {row}"),
            );
        }
    }
    if level.is_parity() {
        assert!(parity_stripes > 0, "{what}: no parity checked");
    }
}

/// The volume size the geometry docs promise, computed from scratch.
fn expected_size(level: Level, n: u64, copies: u64, il: u64, member_data: &[u64]) -> u64 {
    let rows: Vec<u64> = member_data.iter().map(|d| d / il).collect();
    let min = *rows.iter().min().unwrap();
    let chunks = match level {
        Level::Concat => rows.iter().sum(),
        Level::Stripe => n * min,
        Level::Mirror => min,
        Level::Raid10 => n * min / copies,
        Level::Raid5 => (n - 1) * min,
        Level::Raid6 => (n - 2) * min,
    };
    chunks * il
}

/// Reopens file and loop-device members read-only with fresh handles and
/// reads the whole volume through a new engine.
fn reread_from_fresh_handles(
    members: &Members,
    n: usize,
    geometry: Geometry,
    model: &[u8],
    what: &str,
) {
    let opts = OpenOptions {
        read_only: true,
        ..OpenOptions::default()
    };
    let fresh: Vec<Option<Arc<dyn Member>>> = members.open_paths[..n]
        .iter()
        .map(|p| {
            let p = p.as_ref().expect("a member with a path");
            Some(Arc::from(open_member(p.to_str().unwrap(), opts).unwrap()))
        })
        .collect();
    let mut exec = executor(geometry, fresh);
    check_read(
        &mut exec,
        model,
        0,
        model.len() as u64,
        &format!("{what}, reopened"),
    );
}

// ---------------------------------------------------------------------------
// The harness: every level and interleave on every member kind.

fn harness(kind: Kind, seed: u64) {
    let size = DATA_OFFSET + MEMBER_DATA;
    let most = SHAPES.iter().map(|s| s.1).max().unwrap();
    let Some(pool) = Members::new(kind, &vec![size; most]) else {
        return;
    };
    let mut rng = Rng(seed);
    let mut runs = 0;
    for (level, n, copies) in SHAPES {
        for il in INTERLEAVES {
            let what = format!("{kind:?} {level} x{n} interleave {il}");
            pool.wipe();
            let sizes = vec![size; n];
            let g = geometry(level, copies, il, &sizes);
            let data = vec![MEMBER_DATA; n];
            assert_eq!(
                g.volume_size_bytes(),
                expected_size(level, n as u64, u64::from(copies), il, &data),
                "{what}"
            );
            let mut exec = executor(g.clone(), all_present(&pool.members[..n]));
            let mut model = vec![0u8; g.volume_size_bytes() as usize];
            // Unwritten space reads as zeros.
            check_read(&mut exec, &model, 0, model.len() as u64, &what);
            workload(&mut exec, &mut model, &mut rng, 45, &what);
            assert!(exec.take_events().is_empty(), "{what}: no member failed");
            assert!(exec.volume().health().iter().all(|h| *h == Health::Online));
            let stored: Vec<Vec<u8>> = (0..n).map(|i| pool.stored(i)).collect();
            check_stored_layout(level, copies, il, &data, &stored, &model, &what);
            if kind != Kind::Memory {
                drop(exec);
                reread_from_fresh_handles(&pool, n, g, &model, &what);
            }
            runs += 1;
        }
    }
    assert_eq!(runs, SHAPES.len() * INTERLEAVES.len());
}

#[test]
fn every_level_and_interleave_on_files() {
    harness(Kind::File, 1);
}

#[test]
fn every_level_and_interleave_in_memory() {
    harness(Kind::Memory, 2);
}

#[test]
fn every_level_and_interleave_on_loop_devices() {
    harness(Kind::Loop, 3);
}

// ---------------------------------------------------------------------------
// Members of unequal size.

#[test]
fn unequal_member_sizes_follow_the_size_rule() {
    // Data areas of 4M, 3M+1000 (not even a sector multiple), 5M-1536,
    // 2M+64k+512 and 4M+3*126s: the smallest is not the first.
    let sizes = [
        DATA_OFFSET + 4 * MIB,
        DATA_OFFSET + 3 * MIB + 1000,
        DATA_OFFSET + 5 * MIB - 1536,
        DATA_OFFSET + 2 * MIB + (64 << 10) + 512,
        DATA_OFFSET + 4 * MIB + 3 * 126 * SECTOR,
    ];
    let mut rng = Rng(4);
    for (level, n, copies) in SHAPES {
        for il in [126 * SECTOR, 64 << 10] {
            let what = format!("unequal {level} x{n} interleave {il}");
            let sizes = &sizes[..n];
            let members = Members::new(Kind::File, sizes).unwrap();
            for (i, &s) in sizes.iter().enumerate() {
                let len = fs::metadata(members.open_paths[i].as_ref().unwrap())
                    .unwrap()
                    .len();
                assert_eq!(len, s, "{what}: file {i} has its own length");
            }
            let data: Vec<u64> = sizes
                .iter()
                .map(|s| (s - DATA_OFFSET) / SECTOR * SECTOR)
                .collect();
            let g = geometry(level, copies, il, sizes);
            let want = expected_size(level, n as u64, u64::from(copies), il, &data);
            assert_eq!(g.volume_size_bytes(), want, "{what}");
            // Concat gains from the larger members; the rest cut to the smallest.
            let min_rows = data.iter().map(|d| d / il).min().unwrap();
            if level == Level::Concat {
                assert!(want > n as u64 * min_rows * il, "{what}");
            }
            let mut exec = executor(g.clone(), all_present(&members.members));
            let mut model = vec![0u8; want as usize];
            fill(&mut exec, &mut model, &mut rng, &what);
            workload(&mut exec, &mut model, &mut rng, 30, &what);
            // Past the end is refused, not wrapped onto a larger member.
            let err = exec.read(want - 1, 2).unwrap_err();
            assert_eq!(err.kind, ErrorKind::OutOfRange, "{what}: {err}");
            let stored: Vec<Vec<u8>> = (0..n).map(|i| members.stored(i)).collect();
            check_stored_layout(level, copies, il, &data, &stored, &model, &what);
            drop(exec);
            reread_from_fresh_handles(&members, n, g, &model, &what);
        }
    }
}

// ---------------------------------------------------------------------------
// Degraded volumes: members missing at assembly.

#[test]
fn degraded_volumes_read_and_write_every_byte() {
    let shapes: [(Level, usize, u32, usize); 5] = [
        (Level::Mirror, 3, 3, 1),
        (Level::Raid10, 3, 2, 1),
        (Level::Raid10, 4, 2, 1),
        (Level::Raid5, 4, 1, 1),
        (Level::Raid6, 5, 1, 2),
    ];
    let il = 126 * SECTOR;
    let size = DATA_OFFSET + 3 * MIB;
    let mut rng = Rng(5);
    for (level, n, copies, lost) in shapes {
        let what = format!("{level} x{n}");
        let members = Members::new(Kind::File, &vec![size; n]).unwrap();
        let g = geometry(level, copies, il, &vec![size; n]);
        let mut model = vec![0u8; g.volume_size_bytes() as usize];
        {
            let mut exec = executor(g.clone(), all_present(&members.members));
            fill(&mut exec, &mut model, &mut rng, &what);
            workload(&mut exec, &mut model, &mut rng, 20, &what);
        }
        let paths: Vec<PathBuf> = members
            .open_paths
            .iter()
            .map(|p| p.clone().unwrap())
            .collect();
        drop(members.members);
        // A pristine copy, to undo each scenario's degraded writes.
        let backup = temp_dir();
        let backups: Vec<PathBuf> = (0..n)
            .map(|i| {
                let b = backup.path().join(format!("b{i}"));
                fs::copy(&paths[i], &b).unwrap();
                b
            })
            .collect();
        let mut missing_sets: Vec<Vec<usize>> = (0..n).map(|i| vec![i]).collect();
        if lost == 2 {
            for a in 0..n {
                for b in a + 1..n {
                    missing_sets.push(vec![a, b]);
                }
            }
        }
        for missing in missing_sets {
            let what = format!("{what} without {missing:?}");
            let present: Vec<Option<Arc<dyn Member>>> = (0..n)
                .map(|i| {
                    (!missing.contains(&i)).then(|| {
                        let m = open_member(paths[i].to_str().unwrap(), OpenOptions::default())
                            .unwrap();
                        Arc::<dyn Member>::from(m)
                    })
                })
                .collect();
            let mut exec = executor(g.clone(), present);
            for &m in &missing {
                assert_eq!(exec.volume().health()[m], Health::Missing);
            }
            // Every byte, in one request and in random pieces.
            check_read(&mut exec, &model, 0, model.len() as u64, &what);
            let stripe = g.stripe_data_bytes();
            for _ in 0..20 {
                let (o, l) = random_range(&mut rng, model.len() as u64, il, stripe);
                check_read(&mut exec, &model, o, l, &what);
            }
            // Writes while degraded read back (from the survivors).
            let mut degraded_model = model.clone();
            workload(&mut exec, &mut degraded_model, &mut rng, 20, &what);
            assert!(exec.take_events().is_empty(), "{what}: no member failed");
            drop(exec);
            // The missing members were never touched.
            for &m in &missing {
                assert!(
                    fs::read(&paths[m]).unwrap() == fs::read(&backups[m]).unwrap(),
                    "{what}: missing member {m} was written"
                );
            }
            for i in 0..n {
                fs::copy(&backups[i], &paths[i]).unwrap();
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Members that fail.

/// A member that fails every I/O once its switch is flipped, counting the
/// calls it fails.
struct Dying {
    inner: Arc<dyn Member>,
    dead: AtomicBool,
    failed_calls: AtomicU64,
}

impl Dying {
    fn new(inner: Arc<dyn Member>) -> Arc<Dying> {
        Arc::new(Dying {
            inner,
            dead: AtomicBool::new(false),
            failed_calls: AtomicU64::new(0),
        })
    }

    fn kill(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn failed_calls(&self) -> u64 {
        self.failed_calls.load(Ordering::SeqCst)
    }

    fn check(&self, op: Op, offset: u64, len: u64) -> Result<(), MemberError> {
        if !self.dead.load(Ordering::SeqCst) {
            return Ok(());
        }
        self.failed_calls.fetch_add(1, Ordering::SeqCst);
        Err(MemberError::with_message(
            MemberErrorKind::Io,
            self.inner.describe(),
            op,
            offset,
            len,
            "injected failure",
        ))
    }
}

impl Member for Dying {
    fn describe(&self) -> &str {
        self.inner.describe()
    }
    fn size_bytes(&self) -> u64 {
        self.inner.size_bytes()
    }
    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        self.check(Op::Read, offset_bytes, buf.len() as u64)?;
        self.inner.read_at(offset_bytes, buf)
    }
    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        self.check(Op::Write, offset_bytes, data.len() as u64)?;
        self.inner.write_at(offset_bytes, data)
    }
    fn flush(&self) -> Result<(), MemberError> {
        self.check(Op::Flush, 0, 0)?;
        self.inner.flush()
    }
    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        self.check(Op::Trim, offset_bytes, len_bytes)?;
        self.inner.trim(offset_bytes, len_bytes)
    }
}

/// File members with member `victim` wrapped in a `Dying`.
fn with_victim(members: &Members, victim: usize) -> (Vec<Option<Arc<dyn Member>>>, Arc<Dying>) {
    let dying = Dying::new(members.members[victim].clone());
    let list = members
        .members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            Some(if i == victim {
                dying.clone() as Arc<dyn Member>
            } else {
                m.clone()
            })
        })
        .collect();
    (list, dying)
}

fn assert_faulty_event(events: &[Event], member: u32, path: &str, what: &str) {
    assert_eq!(events.len(), 1, "{what}: one event, got {events:?}");
    match &events[0] {
        Event::MemberFaulty { member: m, reason } => {
            assert_eq!(*m, member, "{what}: {events:?}");
            assert!(reason.contains("injected failure"), "{what}: {reason}");
            assert!(
                reason.contains(path),
                "{what}: reason names the member: {reason}"
            );
        }
        other => panic!("{what}: expected a faulty member, got {other:?}"),
    }
}

#[test]
fn raid5_keeps_serving_after_a_member_dies() {
    let il = 126 * SECTOR;
    let n = 4;
    let size = DATA_OFFSET + 2 * MIB;
    // The death found by a read, then by a write.
    for found_by_read in [true, false] {
        let what = format!(
            "raid5, death found by a {}",
            if found_by_read { "read" } else { "write" }
        );
        let members = Members::new(Kind::File, &vec![size; n]).unwrap();
        let victim = 2;
        let path = members.open_paths[victim].clone().unwrap();
        let (list, dying) = with_victim(&members, victim);
        let g = geometry(Level::Raid5, 1, il, &vec![size; n]);
        let mut exec = executor(g.clone(), list);
        let mut model = vec![0u8; g.volume_size_bytes() as usize];
        let mut rng = Rng(6 + u64::from(found_by_read));
        fill(&mut exec, &mut model, &mut rng, &what);
        exec.flush().unwrap();

        dying.kill();
        if found_by_read {
            check_read(&mut exec, &model, 0, model.len() as u64, &what);
        } else {
            // Writes over every member's chunks, unaligned.
            let stripe = g.stripe_data_bytes();
            for s in 0..4 {
                let data = rng.bytes((stripe + 1000) as usize);
                write(&mut exec, &mut model, s * stripe + 333, data, &what);
            }
        }
        assert!(dying.failed_calls() >= 1, "{what}: the victim was used");
        assert_faulty_event(
            &exec.take_events(),
            victim as u32,
            path.to_str().unwrap(),
            &what,
        );
        assert_eq!(exec.volume().health()[victim], Health::Faulty, "{what}");
        let failed = dying.failed_calls();

        // From now on the volume works without it and never asks it again.
        check_read(&mut exec, &model, 0, model.len() as u64, &what);
        workload(&mut exec, &mut model, &mut rng, 30, &what);
        assert!(exec.take_events().is_empty(), "{what}: one event only");
        assert_eq!(
            dying.failed_calls(),
            failed,
            "{what}: a faulty member is not retried"
        );
    }
}

#[test]
fn stripe_fails_reads_that_need_a_dead_member() {
    let il = 64 << 10;
    let n = 3;
    let size = DATA_OFFSET + 2 * MIB;
    let members = Members::new(Kind::File, &vec![size; n]).unwrap();
    let victim = 1;
    let path = members.open_paths[victim].clone().unwrap();
    let (list, dying) = with_victim(&members, victim);
    let g = geometry(Level::Stripe, 1, il, &vec![size; n]);
    let mut exec = executor(g.clone(), list);
    let mut model = vec![0u8; g.volume_size_bytes() as usize];
    let mut rng = Rng(8);
    fill(&mut exec, &mut model, &mut rng, "stripe");
    dying.kill();

    // Chunk 1 (and 4, 7, ...) lives on member 1.
    let err = exec.read(il + 100, 1000).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io, "{err}");
    assert_faulty_event(
        &exec.take_events(),
        victim as u32,
        path.to_str().unwrap(),
        "stripe",
    );
    assert_eq!(exec.volume().health()[victim], Health::Faulty);
    let failed = dying.failed_calls();
    assert!(failed >= 1);
    // Again, now known to be faulty; and a read spanning chunks 0..=2.
    for (o, l) in [(4 * il, il), (il - 10, 20), (0, 3 * il)] {
        let err = exec.read(o, l).unwrap_err();
        assert_eq!(err.kind, ErrorKind::Io, "read of {l} at {o}: {err}");
    }
    // Writes that need it fail the same way.
    let err = exec
        .write(7 * il + 5, Bytes::from(vec![1u8; 10]))
        .unwrap_err();
    assert_eq!(err.kind, ErrorKind::Io, "{err}");

    // The other members' chunks still read, whole or in part, and take writes.
    for c in [0u64, 2, 3, 5, 6, 8] {
        check_read(&mut exec, &model, c * il, il, "stripe, surviving chunk");
        check_read(
            &mut exec,
            &model,
            c * il + 1,
            il - 7,
            "stripe, surviving chunk",
        );
        let data = rng.bytes(999);
        write(
            &mut exec,
            &mut model,
            c * il + 17,
            data,
            "stripe, surviving chunk",
        );
        check_read(&mut exec, &model, c * il, il, "stripe, rewritten chunk");
    }
    assert_eq!(
        dying.failed_calls(),
        failed,
        "a faulty member is not retried"
    );
    assert!(exec.take_events().is_empty());
}
