//! An in-memory member of the sans-I/O engine, with faults: a dead disk, a
//! full one, and bad sectors.
//!
//! The member's parts (its bytes, its bad sectors, whether it is dead or
//! full) live wherever the test keeps them (the core harness keeps one
//! vector of each, which its tests set directly); [`MemMember`] borrows them
//! to perform one member I/O.

use std::collections::BTreeMap;

use bytes::Bytes;
use platter_core::volume::{IoError, IoErrorKind, IoResult, MemberOp};

pub const SECTOR_BYTES: u64 = 512;

/// What a bad sector of a member does. Every read that touches it fails; a
/// write that covers only part of it fails too (a device reads the rest of
/// the sector first, as `O_DIRECT` members do).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadSector {
    /// A write of the whole sector heals it (the disk remaps it).
    HealsOnWrite,
    /// Writes fail as well.
    Unwritable,
    /// Writes succeed, and reads still fail.
    StaysBad,
}

/// One member, borrowed: `bytes` from offset 0 (labels included), I/O
/// below `data_offset_bytes` is a bug of the engine.
pub struct MemMember<'a> {
    /// The member's number, for error messages.
    pub index: usize,
    pub bytes: &'a mut [u8],
    /// Bad sectors by absolute sector number (see [`BadSector`]).
    pub bad: &'a mut BTreeMap<u64, BadSector>,
    /// Every I/O fails (a dead disk).
    pub broken: bool,
    /// Writes and trims fail with `NoSpace` and change nothing (a sparse
    /// file on a full file system).
    pub full: bool,
    pub data_offset_bytes: u64,
}

impl MemMember<'_> {
    /// Makes the sectors of `[offset, offset + len)` (absolute on the
    /// member, sector-aligned) bad, with garbage in them.
    pub fn add_bad_range(&mut self, offset_bytes: u64, len_bytes: u64, kind: BadSector) {
        assert!(
            offset_bytes.is_multiple_of(SECTOR_BYTES)
                && len_bytes.is_multiple_of(SECTOR_BYTES)
                && len_bytes > 0
        );
        self.bytes[offset_bytes as usize..(offset_bytes + len_bytes) as usize].fill(0xee);
        for s in offset_bytes / SECTOR_BYTES..(offset_bytes + len_bytes) / SECTOR_BYTES {
            self.bad.insert(s, kind);
        }
    }

    /// The bad sectors that `[offset, offset + len)` touches.
    fn bad_in(&self, offset_bytes: u64, len_bytes: u64) -> Vec<(u64, BadSector)> {
        if len_bytes == 0 {
            return Vec::new();
        }
        let (a, b) = (
            offset_bytes / SECTOR_BYTES,
            (offset_bytes + len_bytes - 1) / SECTOR_BYTES,
        );
        self.bad.range(a..=b).map(|(s, k)| (*s, *k)).collect()
    }

    /// Whether a write or trim of the range may go ahead; heals what it covers.
    fn write_bad_sectors(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<(), String> {
        let member = self.index;
        let end = offset_bytes + len_bytes;
        let bad = self.bad_in(offset_bytes, len_bytes);
        for &(s, kind) in &bad {
            let whole = s * SECTOR_BYTES >= offset_bytes && (s + 1) * SECTOR_BYTES <= end;
            if kind == BadSector::Unwritable || !whole {
                return Err(format!("member {member}: write error at sector {s}"));
            }
        }
        for (s, kind) in bad {
            if kind == BadSector::HealsOnWrite {
                self.bad.remove(&s);
            }
        }
        Ok(())
    }

    /// Performs one member I/O, faults first.
    pub fn perform(&mut self, op: MemberOp) -> IoResult {
        let m = self.index;
        if self.broken {
            return Err(format!("member {m} is broken").into());
        }
        if self.full && matches!(op, MemberOp::Write { .. } | MemberOp::Trim { .. }) {
            return Err(IoError::new(
                IoErrorKind::NoSpace,
                format!("member {m}: no space left"),
            ));
        }
        let bad = match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => match self.bad_in(offset_bytes, len_bytes).first() {
                Some((s, _)) => Err(format!("member {m}: read error at sector {s}")),
                None => Ok(()),
            },
            MemberOp::Write {
                offset_bytes,
                ref data,
            } => self.write_bad_sectors(offset_bytes, data.len() as u64),
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => self.write_bad_sectors(offset_bytes, len_bytes),
            MemberOp::Flush => Ok(()),
        };
        bad?;
        let start = self.data_offset_bytes as usize;
        let mem = &mut *self.bytes;
        match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => {
                let (a, b) = (offset_bytes as usize, (offset_bytes + len_bytes) as usize);
                assert!(a >= start && b <= mem.len(), "read outside member");
                Ok(Some(Bytes::copy_from_slice(&mem[a..b])))
            }
            MemberOp::Write { offset_bytes, data } => {
                let a = offset_bytes as usize;
                assert!(a >= start && a + data.len() <= mem.len());
                mem[a..a + data.len()].copy_from_slice(&data.to_bytes());
                Ok(None)
            }
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => {
                let (a, b) = (offset_bytes as usize, (offset_bytes + len_bytes) as usize);
                assert!(a >= start && b <= mem.len());
                mem[a..b].fill(0);
                Ok(None)
            }
            MemberOp::Flush => Ok(None),
        }
    }
}
