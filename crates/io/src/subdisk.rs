//! A subdisk: a window of a pool's drive, as a [`Member`] of its own.
//!
//! Offsets are the subdisk's (0 is its first byte); every I/O is moved by
//! the subdisk's offset on the drive and must lie inside the window, so a
//! volume's array never touches another's bytes or the pool area. Several
//! subdisks share one drive handle (and its one descriptor or connection).

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use platter_core::volume::MemberOp;

use crate::error::{MemberError, Op};
use crate::member::{check_range, Member, MemberDone, RingTarget};

/// `len_bytes` of `drive` from `offset_bytes`.
pub struct SubdiskMember {
    drive: Arc<dyn Member>,
    offset_bytes: u64,
    /// Grows when its volume is extended while served ([`Self::widen`]);
    /// never shrinks, so an I/O checked against it stays inside.
    len_bytes: AtomicU64,
    name: String,
}

impl SubdiskMember {
    /// The window must lie inside the drive; `name` is what messages call
    /// it (the subdisk's name and its drive's path).
    pub fn new(
        drive: Arc<dyn Member>,
        offset_bytes: u64,
        len_bytes: u64,
        name: String,
    ) -> Result<SubdiskMember, MemberError> {
        check_range(
            drive.describe(),
            drive.size_bytes(),
            Op::Open,
            offset_bytes,
            len_bytes,
        )?;
        Ok(SubdiskMember {
            drive,
            offset_bytes,
            len_bytes: AtomicU64::new(len_bytes),
            name,
        })
    }

    /// Makes the window `len_bytes` long (at least its length now), still
    /// inside the drive: the pool gave it the space after it.
    pub fn widen(&self, len_bytes: u64) -> Result<(), MemberError> {
        assert!(
            len_bytes >= self.len_bytes.load(Ordering::Acquire),
            "a subdisk never shrinks while served"
        );
        check_range(
            self.drive.describe(),
            self.drive.size_bytes(),
            Op::Open,
            self.offset_bytes,
            len_bytes,
        )?;
        self.len_bytes.store(len_bytes, Ordering::Release);
        Ok(())
    }

    /// The drive's error, told of the subdisk and at the subdisk's offset.
    fn ours(&self, mut e: MemberError) -> MemberError {
        e.member = self.name.clone();
        e.offset_bytes = e.offset_bytes.saturating_sub(self.offset_bytes);
        e
    }

    fn check(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Result<u64, MemberError> {
        check_range(
            &self.name,
            self.len_bytes.load(Ordering::Acquire),
            op,
            offset_bytes,
            len_bytes,
        )?;
        Ok(self.offset_bytes + offset_bytes)
    }
}

impl Member for SubdiskMember {
    fn describe(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.len_bytes.load(Ordering::Acquire)
    }

    fn logical_block_bytes(&self) -> u32 {
        self.drive.logical_block_bytes()
    }

    fn rotational(&self) -> Option<bool> {
        self.drive.rotational()
    }

    /// None: subdisks of one drive are different members, and the pool's
    /// rules already keep any two apart.
    fn identity(&self) -> Option<(u64, u64)> {
        None
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        let at = self.check(Op::Read, offset_bytes, buf.len() as u64)?;
        self.drive.read_at(at, buf).map_err(|e| self.ours(e))
    }

    fn read_uninit_at<'a>(
        &self,
        offset_bytes: u64,
        buf: &'a mut [MaybeUninit<u8>],
    ) -> Result<&'a mut [u8], MemberError> {
        let at = self.check(Op::Read, offset_bytes, buf.len() as u64)?;
        self.drive.read_uninit_at(at, buf).map_err(|e| self.ours(e))
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        let at = self.check(Op::Write, offset_bytes, data.len() as u64)?;
        self.drive.write_at(at, data).map_err(|e| self.ours(e))
    }

    fn write_parts_at(&self, offset_bytes: u64, parts: &[&[u8]]) -> Result<(), MemberError> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let at = self.check(Op::Write, offset_bytes, len)?;
        self.drive
            .write_parts_at(at, parts)
            .map_err(|e| self.ours(e))
    }

    /// Flushes the whole drive: a drive's cache has no windows.
    fn flush(&self) -> Result<(), MemberError> {
        self.drive.flush().map_err(|e| self.ours(e))
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        let at = self.check(Op::Trim, offset_bytes, len_bytes)?;
        self.drive.trim(at, len_bytes).map_err(|e| self.ours(e))
    }

    fn check_size(&self) -> Result<(), MemberError> {
        self.drive.check_size().map_err(|e| self.ours(e))
    }

    fn reserve(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        let at = self.check(Op::Write, offset_bytes, len_bytes)?;
        self.drive.reserve(at, len_bytes).map_err(|e| self.ours(e))
    }

    fn ring_target(&self) -> Option<&dyn RingTarget> {
        self.drive.ring_target().map(|_| self as &dyn RingTarget)
    }

    fn connection_lost(&self) -> bool {
        self.drive.connection_lost()
    }

    fn abandon(&self, why: &str) {
        self.drive.abandon(why);
    }

    /// Nothing: the drive's connections carry the other volumes' subdisks
    /// too, which are not out of use because this one is.
    fn close_connections(&self) {}

    fn start(&self, op: &MemberOp, done: MemberDone) -> Result<(), MemberDone> {
        let at =
            |kind, offset_bytes: u64, len_bytes| self.check(kind, offset_bytes, len_bytes).ok();
        let moved = match op {
            MemberOp::Read {
                offset_bytes,
                len_bytes,
            } => at(Op::Read, *offset_bytes, *len_bytes).map(|offset_bytes| MemberOp::Read {
                offset_bytes,
                len_bytes: *len_bytes,
            }),
            MemberOp::Write { offset_bytes, data } => {
                at(Op::Write, *offset_bytes, data.len() as u64).map(|offset_bytes| {
                    MemberOp::Write {
                        offset_bytes,
                        data: data.clone(),
                    }
                })
            }
            MemberOp::Trim {
                offset_bytes,
                len_bytes,
            } => at(Op::Trim, *offset_bytes, *len_bytes).map(|offset_bytes| MemberOp::Trim {
                offset_bytes,
                len_bytes: *len_bytes,
            }),
            MemberOp::Flush => Some(MemberOp::Flush),
        };
        // Outside the window: handed back, so that the blocking call
        // refuses it (`done` is never called from inside `start`).
        let Some(moved) = moved else {
            return Err(done);
        };
        let name = self.name.clone();
        let base = self.offset_bytes;
        self.drive.start(
            &moved,
            Box::new(move |r| {
                done(r.map_err(|mut e| {
                    e.member = name;
                    e.offset_bytes = e.offset_bytes.saturating_sub(base);
                    e
                }))
            }),
        )
    }

    fn starts_requests(&self) -> bool {
        self.drive.starts_requests()
    }
}

impl RingTarget for SubdiskMember {
    fn fd(&self) -> std::os::fd::RawFd {
        self.drive.ring_target().expect("offered").fd()
    }

    fn base_offset_bytes(&self) -> u64 {
        self.drive
            .ring_target()
            .expect("offered")
            .base_offset_bytes()
            + self.offset_bytes
    }

    fn direct_block_bytes(&self) -> Option<u64> {
        self.drive
            .ring_target()
            .expect("offered")
            .direct_block_bytes()
    }

    fn check_before(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        let at = self.check(op, offset_bytes, len_bytes)?;
        let target = self.drive.ring_target().expect("offered");
        target
            .check_before(op, at, len_bytes)
            .map_err(|e| self.ours(e))
    }

    fn check_after(&self, op: Op, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        let target = self.drive.ring_target().expect("offered");
        target
            .check_after(op, self.offset_bytes + offset_bytes, len_bytes)
            .map_err(|e| self.ours(e))
    }

    fn error(&self, err: std::io::Error, op: Op, offset_bytes: u64, len_bytes: u64) -> MemberError {
        let target = self.drive.ring_target().expect("offered");
        self.ours(target.error(err, op, self.offset_bytes + offset_bytes, len_bytes))
    }
}
