//! A member held in memory, for tests and for the executor's own checks.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::error::{MemberError, Op};
use crate::member::{check_range, Member};

/// A member whose bytes live in a `Vec<u8>`. Writes are "durable" at once, so
/// `flush` does nothing; trim zeroes the range.
#[derive(Debug)]
pub struct MemoryMember {
    name: String,
    bytes: RwLock<Vec<u8>>,
}

impl MemoryMember {
    /// A zero-filled member of `size_bytes`, named `name` in messages.
    ///
    /// # Panics
    /// If `size_bytes` does not fit in memory's address space.
    pub fn new(name: impl Into<String>, size_bytes: u64) -> MemoryMember {
        let size =
            usize::try_from(size_bytes).expect("memory member larger than the address space");
        MemoryMember {
            name: name.into(),
            bytes: RwLock::new(vec![0; size]),
        }
    }

    /// A copy of the whole contents.
    pub fn snapshot(&self) -> Vec<u8> {
        self.read_lock().clone()
    }

    // A panic in another thread while it held the lock can at worst leave a
    // torn write behind, which the contract allows after a failure anyway, so
    // poisoning is ignored rather than turned into a second panic.
    fn read_lock(&self) -> RwLockReadGuard<'_, Vec<u8>> {
        self.bytes
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_lock(&self) -> RwLockWriteGuard<'_, Vec<u8>> {
        self.bytes
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The in-memory index range of a checked request.
    fn span(
        &self,
        op: Op,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<std::ops::Range<usize>, MemberError> {
        check_range(&self.name, self.size_bytes(), op, offset_bytes, len_bytes)?;
        // Both fit in usize: they are bounded by the Vec's length.
        let start = offset_bytes as usize;
        Ok(start..start + len_bytes as usize)
    }
}

impl Member for MemoryMember {
    fn describe(&self) -> &str {
        &self.name
    }

    fn size_bytes(&self) -> u64 {
        self.read_lock().len() as u64
    }

    fn read_at(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MemberError> {
        let span = self.span(Op::Read, offset_bytes, buf.len() as u64)?;
        buf.copy_from_slice(&self.read_lock()[span]);
        Ok(())
    }

    fn write_at(&self, offset_bytes: u64, data: &[u8]) -> Result<(), MemberError> {
        let span = self.span(Op::Write, offset_bytes, data.len() as u64)?;
        self.write_lock()[span].copy_from_slice(data);
        Ok(())
    }

    fn flush(&self) -> Result<(), MemberError> {
        Ok(())
    }

    fn trim(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MemberError> {
        let span = self.span(Op::Trim, offset_bytes, len_bytes)?;
        self.write_lock()[span].fill(0);
        Ok(())
    }
}
