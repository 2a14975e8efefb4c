//! A test driver for the engine: member I/O performed in a seeded random
//! order with optional failures, over the test kit's in-memory members
//! (`platter_testkit::member`), checked against its flat-array oracle
//! (`platter_testkit::oracle::Model`).
#![allow(dead_code)]

use bytes::Bytes;
use platter_core::geometry::{Geometry, GeometrySpec};
use platter_core::volume::{
    CacheLimits, CheckReport, Completion, ErrorKind, Health, Limits, Maintenance, MemberIo,
    MemberOp, Reply, Request, RequestId, Volume,
};
use platter_core::{Level, ParityLayout};
use platter_testkit::member::MemMember;
use std::collections::{BTreeMap, HashMap};

pub const DATA_OFFSET_BYTES: u64 = 4096;
#[allow(unused_imports)]
pub use platter_testkit::member::SECTOR_BYTES;

pub use platter_testkit::member::BadSector;
pub use platter_testkit::oracle::Model;
pub use platter_testkit::Rng;

#[derive(Clone, Debug)]
pub struct Config {
    pub level: Level,
    pub layout: ParityLayout,
    pub copies: u32,
    pub members: u32,
    pub interleave_bytes: u64,
    pub rows: u64,
}

impl Config {
    /// `level` over `members` (`copies`: raid10's, or the mirror's member
    /// count; 1 otherwise) in the default parity layout.
    pub fn of(level: Level, members: u32, copies: u32, interleave_bytes: u64, rows: u64) -> Config {
        Config {
            level,
            layout: ParityLayout::DEFAULT,
            copies,
            members,
            interleave_bytes,
            rows,
        }
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry_with_data_offset(DATA_OFFSET_BYTES)
    }

    /// [`Config::geometry`] with the data area at `data_offset_bytes` (room
    /// for a write-intent bitmap after the label).
    pub fn geometry_with_data_offset(&self, data_offset_bytes: u64) -> Geometry {
        Geometry::new(GeometrySpec {
            level: self.level,
            parity_layout: self.layout,
            copies: self.copies,
            interleave_bytes: self.interleave_bytes,
            data_offset_bytes,
            member_data_bytes: (0..self.members)
                .map(|m| self.interleave_bytes * self.rows + 512 * u64::from(m % 2))
                .collect(),
        })
        .expect("valid test geometry")
    }
}

/// A check run after every member I/O (see [`Harness::after_io`]).
pub type AfterIo = Box<dyn FnMut(&Volume)>;

pub struct Harness {
    pub volume: Volume,
    pub members: Vec<Vec<u8>>,
    /// Members whose every I/O fails (a dead disk).
    pub broken: Vec<bool>,
    /// Members with no room: writes and trims fail with `NoSpace` and
    /// change nothing (a sparse file on a full file system).
    pub full: Vec<bool>,
    /// Fail the Nth member I/O of the run (1-based, every member counted).
    pub fail_nth: Option<u64>,
    /// Per member, bad sectors by absolute sector number (see [`BadSector`]).
    pub bad: Vec<BTreeMap<u64, BadSector>>,
    /// Member I/Os performed so far.
    pub ios: u64,
    pub rng: Rng,
    /// Per member, what it was asked to do (every I/O performed, failed
    /// or not).
    pub received: Vec<Received>,
    /// Member I/Os handed out and not yet performed.
    pool: Vec<MemberIo>,
    /// The stripe cache's limits, when it is on (kept across reassembly).
    pub cache: Option<CacheLimits>,
    /// When set, every member I/O performed, in order: (member, op name).
    pub log: Option<Vec<(u32, &'static str)>>,
    /// Called with the volume after every member I/O it is told about.
    pub after_io: Option<AfterIo>,
    /// Record each member failure in the (imaginary) labels as soon as it
    /// happens, as a host with instant label writes would (default). Off,
    /// writes that complete after a failure stay held until the test calls
    /// [`Harness::record_failures`].
    pub record_failures: bool,
}

/// What a [`Harness`] member received.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    pub reads: u64,
    pub bytes_read: u64,
    pub writes: u64,
    pub bytes_written: u64,
    /// Of `bytes_written`, those in the data area (not label or bitmap).
    pub data_bytes_written: u64,
    pub trims: u64,
    pub bytes_trimmed: u64,
    pub flushes: u64,
}

impl Harness {
    pub fn new(config: &Config, seed: u64) -> Harness {
        Harness::with_geometry(config.geometry(), seed)
    }

    /// A harness over any geometry (its members as long as it says).
    pub fn with_geometry(g: Geometry, seed: u64) -> Harness {
        let n = g.members() as usize;
        let members = (0..n)
            .map(|m| {
                vec![0u8; (g.spec().data_offset_bytes + g.spec().member_data_bytes[m]) as usize]
            })
            .collect();
        Harness {
            volume: Volume::new(g, vec![Health::Online; n], Limits::default()),
            members,
            broken: vec![false; n],
            full: vec![false; n],
            fail_nth: None,
            bad: vec![BTreeMap::new(); n],
            ios: 0,
            rng: Rng::new(seed),
            received: vec![Received::default(); n],
            pool: Vec::new(),
            cache: None,
            log: None,
            after_io: None,
            record_failures: true,
        }
    }

    /// Tells the volume that every failure so far is in the labels.
    pub fn record_failures(&mut self) {
        let unrecorded: Vec<u32> = self.volume.unrecorded_failures().collect();
        for m in unrecorded {
            self.volume.failure_recorded(m);
        }
    }

    /// A harness whose volume has the stripe cache on (parity levels).
    pub fn with_cache(config: &Config, seed: u64, limits: CacheLimits) -> Harness {
        let mut h = Harness::new(config, seed);
        h.enable_cache(limits);
        h
    }

    pub fn enable_cache(&mut self, limits: CacheLimits) {
        self.cache = Some(limits);
        self.volume.enable_stripe_cache(limits);
    }

    /// Flushes the volume (cached stripes go to the members first).
    pub fn flush(&mut self) {
        self.one(Request::Flush).expect("flush");
        assert_eq!(
            self.volume.cached_stripes(),
            0,
            "a flush left cached stripes"
        );
    }

    /// Member `member` of a mirror replaced and rebuilt over its first
    /// `stripes` stripes, and preferred for reads: it serves the stripes
    /// below its rebuild's cursor.
    pub fn rebuild_partway_and_read_from(&mut self, member: u32, stripes: u64) {
        self.volume
            .set_read_policy(platter_core::balance::ReadPolicy::Prefer { slot: member })
            .unwrap();
        self.volume.mark_faulty(member, "test: replaced".into());
        self.volume.start_rebuild(member, 0).unwrap();
        for _ in 0..stripes {
            self.volume.rebuild_step(1).unwrap();
            self.run();
        }
    }

    /// A new volume over the same member bytes, with some members absent.
    pub fn reassemble(&mut self, missing: &[u32]) {
        let g = self.volume.geometry().clone();
        let health = (0..g.members())
            .map(|m| {
                if missing.contains(&m) {
                    Health::Missing
                } else {
                    Health::Online
                }
            })
            .collect();
        self.volume = Volume::new(g, health, Limits::default());
        if let Some(limits) = self.cache {
            self.volume.enable_stripe_cache(limits);
        }
        self.received = vec![Received::default(); self.members.len()];
    }

    /// Makes the sectors of `[offset, offset + len)` (absolute on the
    /// member, sector-aligned) bad, with garbage in them.
    pub fn add_bad_range(
        &mut self,
        member: u32,
        offset_bytes: u64,
        len_bytes: u64,
        kind: BadSector,
    ) {
        self.member(member as usize)
            .add_bad_range(offset_bytes, len_bytes, kind);
    }

    /// Member `m` as the test kit's in-memory member with faults.
    fn member(&mut self, m: usize) -> MemMember<'_> {
        MemMember {
            index: m,
            bytes: &mut self.members[m],
            bad: &mut self.bad[m],
            broken: self.broken[m],
            full: self.full[m],
            data_offset_bytes: DATA_OFFSET_BYTES,
        }
    }

    pub fn perform(&mut self, io: MemberIo) {
        self.perform_io(io);
        if self.record_failures {
            self.record_failures();
        }
        if let Some(f) = self.after_io.as_mut() {
            f(&self.volume);
        }
    }

    fn perform_io(&mut self, io: MemberIo) {
        let m = io.member as usize;
        self.ios += 1;
        if let Some(log) = self.log.as_mut() {
            log.push((io.member, io.op.name()));
        }
        let r = &mut self.received[m];
        match &io.op {
            MemberOp::Read { len_bytes, .. } => {
                r.reads += 1;
                r.bytes_read += len_bytes;
            }
            MemberOp::Write { data, offset_bytes } => {
                r.writes += 1;
                r.bytes_written += data.len() as u64;
                if *offset_bytes >= self.volume.geometry().spec().data_offset_bytes {
                    r.data_bytes_written += data.len() as u64;
                }
            }
            MemberOp::Trim { len_bytes, .. } => {
                r.trims += 1;
                r.bytes_trimmed += len_bytes;
            }
            MemberOp::Flush => r.flushes += 1,
        }
        if self.fail_nth == Some(self.ios) {
            self.volume
                .io_done(io.id, Err(format!("injected: I/O {}", self.ios).into()));
            return;
        }
        let result = self.member(m).perform(io.op);
        self.volume.io_done(io.id, result);
    }

    /// Performs member I/O in random order until the volume is idle.
    pub fn run(&mut self) -> Vec<Completion> {
        let mut done = Vec::new();
        for _ in 0..10_000_000u64 {
            // Every step: the volume's invariants hold between calls.
            self.volume.check_invariants();
            while let Some(io) = self.volume.next_io() {
                self.pool.push(io);
            }
            while let Some(c) = self.volume.next_completion() {
                done.push(c);
            }
            if self.pool.is_empty() {
                assert!(
                    self.volume.is_idle(),
                    "volume stalled with requests in flight"
                );
                return done;
            }
            let i = self.rng.below(self.pool.len() as u64) as usize;
            let io = self.pool.swap_remove(i);
            self.perform(io);
        }
        panic!("volume did not settle");
    }

    pub fn one(&mut self, req: Request) -> Result<Reply, platter_core::volume::VolumeError> {
        let id = self.volume.submit(req);
        let mut done = self.run();
        assert_eq!(done.len(), 1);
        let c = done.pop().unwrap();
        assert_eq!(c.id, id);
        c.result
    }

    /// A check or repair of every stripe.
    pub fn scrub(&mut self, action: Maintenance) -> CheckReport {
        let stripe_count = self.volume.geometry().stripes();
        match self.one(Request::Maintain {
            first_stripe: 0,
            stripe_count,
            action,
        }) {
            Ok(Reply::Checked(r)) => r,
            other => panic!("scrub answered {other:?}"),
        }
    }

    pub fn read(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<Vec<u8>, ErrorKind> {
        match self.one(Request::Read {
            offset_bytes,
            len_bytes,
        }) {
            Ok(Reply::Data(d)) => Ok(d.to_vec()),
            Ok(other) => panic!("read without data: {other:?}"),
            Err(e) => Err(e.kind),
        }
    }

    pub fn write(&mut self, offset_bytes: u64, data: &[u8]) -> Result<(), ErrorKind> {
        self.one(Request::Write {
            offset_bytes,
            data: Bytes::copy_from_slice(data),
            fua: false,
        })
        .map(|_| ())
        .map_err(|e| e.kind)
    }
}

/// Runs `ops` random requests in batches of up to `concurrency`, checking
/// every read against the model as of its submission.
pub fn random_workload(h: &mut Harness, model: &mut Model, ops: usize, concurrency: u64) {
    random_workload_with(h, model, ops, concurrency, &mut |_| {});
}

/// [`random_workload`], calling `before_batch` at the start of every batch
/// (to put volume upkeep such as rebuild steps among the client requests).
pub fn random_workload_with(
    h: &mut Harness,
    model: &mut Model,
    ops: usize,
    concurrency: u64,
    before_batch: &mut dyn FnMut(&mut Volume),
) {
    let size = h.volume.size_bytes();
    let max_len = (2 * h.volume.geometry().stripe_data_bytes() + 1000)
        .min(size)
        .min(3 << 20);
    let mut remaining = ops;
    let cache = h.volume.cache_status().is_some();
    while remaining > 0 {
        let batch = (1 + h.rng.below(concurrency)) as usize;
        let mut expect: HashMap<RequestId, Vec<u8>> = HashMap::new();
        before_batch(&mut h.volume);
        for _ in 0..batch.min(remaining) {
            remaining -= 1;
            // With the stripe cache, its clock ticks now and then.
            if cache && h.rng.chance(15) {
                let all = h.rng.chance(20);
                h.volume.submit(Request::CacheTick { all });
            }
            let len = 1 + h.rng.below(max_len);
            let offset = h.rng.below(size - len + 1);
            // Bias half the requests to sector alignment, as real clients do.
            let (offset, len) = if h.rng.chance(50) && len >= 512 {
                (offset / 512 * 512, len / 512 * 512)
            } else {
                (offset, len)
            };
            let req = match h.rng.below(100) {
                0..=44 => Request::Write {
                    offset_bytes: offset,
                    data: Bytes::from(h.rng.bytes(len as usize)),
                    fua: h.rng.chance(10),
                },
                45..=84 => Request::Read {
                    offset_bytes: offset,
                    len_bytes: len,
                },
                85..=91 => Request::WriteZeroes {
                    offset_bytes: offset,
                    len_bytes: len,
                    fua: h.rng.chance(10),
                },
                92..=96 => Request::Trim {
                    offset_bytes: offset,
                    len_bytes: len,
                },
                _ => Request::Flush,
            };
            let id = h.volume.submit(req.clone());
            if let Request::Read {
                offset_bytes,
                len_bytes,
            } = req
            {
                expect.insert(
                    id,
                    model.bytes[offset_bytes as usize..(offset_bytes + len_bytes) as usize]
                        .to_vec(),
                );
            }
            model.apply(&req);
        }
        for c in h.run() {
            let reply = c.result.unwrap_or_else(|e| panic!("request failed: {e}"));
            if let Some(want) = expect.remove(&c.id) {
                match reply {
                    Reply::Data(got) => assert!(got.to_vec() == want, "read returned wrong bytes"),
                    other => panic!("read completed without data: {other:?}"),
                }
            }
        }
        assert!(expect.is_empty(), "reads never completed");
    }
}

/// Reads the whole volume in random-sized pieces and compares with the model.
pub fn verify_all(h: &mut Harness, model: &Model) {
    let size = h.volume.size_bytes();
    let mut at = 0;
    while at < size {
        let len = (1 + h.rng.below(300_000)).min(size - at);
        let got = h
            .read(at, len)
            .unwrap_or_else(|e| panic!("read at {at} failed: {e:?}"));
        assert!(
            got[..] == model.bytes[at as usize..(at + len) as usize],
            "bytes at {at}+{len} differ"
        );
        at += len;
    }
}

pub fn all_configs(interleaves: &[u64], member_counts: &[u32]) -> Vec<Config> {
    let mut v = Vec::new();
    for &il in interleaves {
        let rows = (4 * 65536 / il).clamp(2, 8);
        for &n in member_counts {
            let mut add = |level, layout, copies| {
                v.push(Config {
                    level,
                    layout,
                    copies,
                    members: n,
                    interleave_bytes: il,
                    rows,
                })
            };
            add(Level::Concat, ParityLayout::DEFAULT, 1);
            add(Level::Stripe, ParityLayout::DEFAULT, 1);
            if n >= 2 {
                add(Level::Mirror, ParityLayout::DEFAULT, n);
                add(Level::Raid10, ParityLayout::DEFAULT, 2);
            }
            if n >= 3 {
                add(Level::Raid10, ParityLayout::DEFAULT, 3);
                add(
                    Level::Raid5,
                    ParityLayout::ALL[(n as usize + il as usize / 512) % 4],
                    1,
                );
            }
            if n >= 4 {
                add(
                    Level::Raid6,
                    ParityLayout::ALL[(n as usize * 3 + il as usize / 512) % 4],
                    1,
                );
            }
        }
    }
    v
}
