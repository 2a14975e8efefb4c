//! A member with a volatile write cache, for the engine's crash tests:
//! writes land in what the member serves at once and reach what survives a
//! power cut only at a flush; a crash keeps a random subset of the rest,
//! some torn at sector granularity. Holds only the pages written once the
//! member is large (a member of TiBs costs what was written).

use crate::Rng;
use bytes::Bytes;
use platter_core::volume::MemberOp;
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
        let (offset, len) = match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            }
            | MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => (*offset_bytes, *len_bytes),
            MemberOp::Write { offset_bytes, data } => (*offset_bytes, data.len() as u64),
            MemberOp::Flush => (0, 0),
        };
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
