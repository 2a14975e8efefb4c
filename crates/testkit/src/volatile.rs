//! A member with a volatile write cache, for the engine's crash tests:
//! writes land in what the member serves at once and reach what survives a
//! power cut only at a flush; a crash keeps a random subset of the rest,
//! some torn at sector granularity. Holds only the pages written once the
//! member is large (a member of TiBs costs what was written).

use crate::Rng;
use bytes::Bytes;
use platter_core::geometry::Geometry;
use platter_core::intent::{IntentLayout, RegionSet, INTENT_OFFSET_BYTES};
use platter_core::volume::{
    Completion, Health, IoError, IoErrorKind, Limits, MemberIo, MemberOp, Reply, Request, Volume,
};
use platter_sim::sparse::Pages;

/// The sector at which an unflushed write may be torn by a crash.
const SECTOR_BYTES: usize = 512;

#[derive(Clone, Debug)]
pub struct VolatileDisk {
    /// What the member serves now.
    current: Pages<u8>,
    /// What a crash leaves, before the unflushed writes it keeps.
    durable: Pages<u8>,
    /// Writes and trims since the last flush, in order.
    unflushed: Vec<(u64, Bytes)>,
}

impl VolatileDisk {
    /// A member of `size_bytes` zeros.
    pub fn new(size_bytes: u64) -> VolatileDisk {
        VolatileDisk {
            current: Pages::new(size_bytes),
            durable: Pages::new(size_bytes),
            unflushed: Vec::new(),
        }
    }

    pub fn size_bytes(&self) -> u64 {
        self.current.len()
    }

    /// Performs `op`: a read's bytes, nothing for the rest. Panics on a
    /// request past the end (the engine never sends one).
    pub fn perform(&mut self, op: &MemberOp) -> Option<Bytes> {
        let (offset, len) = op.range();
        assert!(
            offset
                .checked_add(len)
                .is_some_and(|end| end <= self.size_bytes()),
            "{} of {len} bytes at {offset} past the end of a {}-byte member",
            op.name(),
            self.size_bytes()
        );
        match op {
            MemberOp::Read { .. } => return Some(Bytes::from(self.read(offset, len))),
            MemberOp::Write { data, .. } => {
                let data = data.to_bytes();
                self.current.set(offset, &data);
                self.unflushed.push((offset, data));
            }
            MemberOp::Trim { .. } => {
                let zeros = Bytes::from(vec![0u8; len as usize]);
                self.current.set(offset, &zeros);
                self.unflushed.push((offset, zeros));
            }
            MemberOp::Flush => {
                for (at, data) in self.unflushed.drain(..) {
                    self.durable.set(at, &data);
                }
            }
        }
        None
    }

    /// What the member serves at `[offset, offset + len)`.
    pub fn read(&self, offset_bytes: u64, len_bytes: u64) -> Vec<u8> {
        self.current.get(offset_bytes..offset_bytes + len_bytes)
    }

    /// What a crash now would leave there at least (the flushed bytes).
    pub fn durable(&self, offset_bytes: u64, len_bytes: u64) -> Vec<u8> {
        self.durable.get(offset_bytes..offset_bytes + len_bytes)
    }

    /// Bytes held in memory.
    pub fn bytes_held(&self) -> u64 {
        self.current.held()
    }

    /// A power cut: each unflushed write, in order, is lost, kept whole or
    /// torn (each of its sectors kept with even odds), a third each.
    pub fn crash(&mut self, rng: &mut Rng) {
        let mut kept = self.durable.clone();
        for (at, data) in self.unflushed.drain(..) {
            match rng.below(3) {
                0 => {}
                1 => kept.set(at, &data),
                _ => {
                    for s in (0..data.len()).step_by(SECTOR_BYTES) {
                        if rng.below(2) == 0 {
                            let e = (s + SECTOR_BYTES).min(data.len());
                            kept.set(at + s as u64, &data[s..e]);
                        }
                    }
                }
            }
        }
        self.current = kept.clone();
        self.durable = kept;
    }
}

/// A volume with a write-intent bitmap over [`VolatileDisk`]s, its member
/// I/O performed one at a time in random order: the crash tests of the
/// bitmap (`crates/core/tests/intent.rs` at a few hundred KiB,
/// `large_volumes.rs` at TiBs).
pub struct BitmapRig {
    pub volume: Volume,
    pub disks: Vec<VolatileDisk>,
    pub layout: IntentLayout,
    pub rng: Rng,
    pub pool: Vec<MemberIo>,
    /// Every member I/O performed, in order.
    pub log: Vec<(u32, MemberOp)>,
    /// A member with no room: its data writes fail with `NoSpace` (a
    /// sparse file on a full file system) and change nothing.
    pub full: Option<u32>,
}

impl BitmapRig {
    /// Every member online and blank, the bitmap clean.
    pub fn new(geometry: Geometry, layout: IntentLayout, seed: u64) -> BitmapRig {
        let n = geometry.members();
        let disks = (0..n)
            .map(|m| {
                VolatileDisk::new(
                    geometry.spec().data_offset_bytes
                        + geometry.spec().member_data_bytes[m as usize],
                )
            })
            .collect();
        let mut volume = Volume::new(
            geometry,
            vec![Health::Online; n as usize],
            Limits::default(),
        );
        volume.enable_intent(layout, RegionSet::new(&layout), false);
        BitmapRig {
            volume,
            disks,
            layout,
            rng: Rng(seed),
            pool: Vec::new(),
            log: Vec::new(),
            full: None,
        }
    }

    pub fn perform(&mut self, io: MemberIo) {
        let data_write = matches!(&io.op, MemberOp::Write { offset_bytes, .. }
            if *offset_bytes >= self.volume.geometry().spec().data_offset_bytes);
        let result = if self.full == Some(io.member) && data_write {
            Err(IoError::new(IoErrorKind::NoSpace, "no space left"))
        } else {
            Ok(self.disks[io.member as usize].perform(&io.op))
        };
        self.log.push((io.member, io.op.clone()));
        self.volume.io_done(io.id, result);
    }

    pub fn take_ios(&mut self) {
        while let Some(io) = self.volume.next_io() {
            self.pool.push(io);
        }
    }

    /// Performs one pending member I/O chosen at random; false when none.
    pub fn step(&mut self) -> bool {
        self.take_ios();
        if self.pool.is_empty() {
            return false;
        }
        let i = self.rng.below(self.pool.len() as u64) as usize;
        let io = self.pool.swap_remove(i);
        self.perform(io);
        self.take_ios();
        true
    }

    /// Performs member I/O until the volume is idle; returns what completed.
    pub fn settle(&mut self) -> Vec<Completion> {
        let mut done = Vec::new();
        for _ in 0..1_000_000 {
            if !self.step() {
                assert!(self.volume.is_idle());
                while let Some(c) = self.volume.next_completion() {
                    done.push(c);
                }
                return done;
            }
        }
        panic!("did not settle");
    }

    /// [`BitmapRig::settle`], every request succeeding.
    pub fn settle_ok(&mut self) {
        for c in self.settle() {
            c.result.expect("request succeeds");
        }
    }

    /// Runs `req` and whatever else is pending to the end; its reply.
    /// Every request must succeed.
    pub fn one(&mut self, req: Request) -> Reply {
        let id = self.volume.submit(req);
        let mut out = None;
        for c in self.settle() {
            let r = c.result.expect("request succeeds");
            if c.id == id {
                out = Some(r);
            }
        }
        out.expect("completed")
    }

    /// The bitmap as the durable bytes of `member` hold it.
    pub fn durable_bits(&self, member: usize) -> RegionSet {
        RegionSet::from_bytes(
            &self.layout,
            &self.disks[member].durable(INTENT_OFFSET_BYTES, self.layout.area_bytes()),
        )
    }

    /// Every region some member's durable bitmap marks.
    pub fn durable_union(&self) -> RegionSet {
        let mut all = RegionSet::new(&self.layout);
        for m in 0..self.disks.len() {
            all.union_with(&self.durable_bits(m));
        }
        all
    }

    /// A crash: every member loses, keeps or tears each unflushed write
    /// ([`VolatileDisk::crash`]); the I/O in flight is gone.
    pub fn crash(&mut self) {
        self.pool.clear();
        for d in &mut self.disks {
            d.crash(&mut self.rng);
        }
    }

    /// After a crash: a new volume over the members, the bitmap read back
    /// from them and owed a resync; returns it.
    pub fn restart(&mut self) -> RegionSet {
        let g = self.volume.geometry().clone();
        let n = g.members() as usize;
        let bits = self.durable_union();
        self.volume = Volume::new(g, vec![Health::Online; n], Limits::default());
        self.volume.enable_intent(self.layout, bits.clone(), true);
        bits
    }

    /// `member`'s writes below the data area (its label and bitmap) since
    /// log entry `since`, as (offset, length), in order.
    pub fn metadata_writes(&self, since: usize, member: u32) -> Vec<(u64, u64)> {
        let data_offset = self.volume.geometry().spec().data_offset_bytes;
        self.log[since..]
            .iter()
            .filter_map(|(m, op)| match op {
                MemberOp::Write { offset_bytes, data }
                    if *m == member && *offset_bytes < data_offset =>
                {
                    Some((*offset_bytes, data.len() as u64))
                }
                _ => None,
            })
            .collect()
    }
}
