//! `O_DIRECT` I/O for callers that do not care about alignment.
//!
//! `O_DIRECT` needs the file offset, the length and the buffer address aligned
//! (to the logical block size for a block device, to the file system's block
//! for a file). Callers of [`crate::Member`] may pass any of them, so:
//!
//! - fully aligned requests in an aligned buffer go straight to the kernel;
//! - other aligned requests are copied through an aligned bounce buffer;
//! - a write whose ends are not aligned becomes a read-modify-write of the
//!   covering aligned range: the partial first and last blocks are read, the
//!   new bytes laid over them, and the whole range written back.
//!
//! The read-modify-write rewrites bytes the caller did not name. A concurrent
//! write to other bytes of the same block could land between our read and our
//! write and be undone, breaking the "disjoint writes never interfere" rule of
//! the contract. So every modification holds `rmw_lock`: shared for writes and
//! trims that touch only whole blocks, exclusive for read-modify-write. Aligned
//! I/O, the common case, never waits on another aligned write.

use std::fs::File;
use std::io;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::positioned::{read_exact_at, write_all_at};

/// The bounce buffer's largest size: big requests go through it in pieces.
/// A multiple of every supported alignment.
const BOUNCE_BYTES: u64 = 1 << 20;

/// Memory alignment for the bounce buffer: a page satisfies every device.
const MEMORY_ALIGN_BYTES: usize = 4096;

#[derive(Debug)]
pub(crate) struct DirectIo {
    /// Offsets and lengths must be multiples of this (a power of two).
    block_bytes: u64,
    /// Buffer addresses must be multiples of this.
    memory_align_bytes: usize,
    rmw_lock: RwLock<()>,
}

impl DirectIo {
    pub(crate) fn new(block_bytes: u32) -> DirectIo {
        assert!(
            block_bytes.is_power_of_two() && u64::from(block_bytes) <= BOUNCE_BYTES,
            "unsupported O_DIRECT alignment {block_bytes}"
        );
        DirectIo {
            block_bytes: u64::from(block_bytes),
            memory_align_bytes: MEMORY_ALIGN_BYTES.max(block_bytes as usize),
            rmw_lock: RwLock::new(()),
        }
    }

    pub(crate) fn block_bytes(&self) -> u64 {
        self.block_bytes
    }

    /// Held around kernel-side modifications (hole punching, zeroing) so they
    /// cannot fall inside a read-modify-write.
    pub(crate) fn shared(&self) -> RwLockReadGuard<'_, ()> {
        // The lock guards no data, so a poisoned lock is as good as any.
        self.rmw_lock
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.rmw_lock
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn round_down(&self, bytes: u64) -> u64 {
        bytes & !(self.block_bytes - 1)
    }

    fn round_up(&self, bytes: u64) -> u64 {
        self.round_down(bytes + self.block_bytes - 1)
    }

    fn is_aligned(&self, offset_bytes: u64, len_bytes: usize) -> bool {
        (offset_bytes | len_bytes as u64) & (self.block_bytes - 1) == 0
    }

    fn is_memory_aligned(&self, buf: &[u8]) -> bool {
        // memory_align_bytes is a power of two.
        buf.as_ptr() as usize & (self.memory_align_bytes - 1) == 0
    }

    /// Reads `buf.len()` bytes at `offset_bytes`. The covering aligned range
    /// must lie inside the file (the caller sees to that).
    pub(crate) fn read(&self, file: &File, offset_bytes: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.is_aligned(offset_bytes, buf.len()) && self.is_memory_aligned(buf) {
            return read_exact_at(file, buf, offset_bytes);
        }
        let end_bytes = offset_bytes + buf.len() as u64;
        let (first_bytes, last_bytes) = (self.round_down(offset_bytes), self.round_up(end_bytes));
        let mut bounce =
            AlignedBuf::new(chunk_len(first_bytes, last_bytes), self.memory_align_bytes);
        let mut pos_bytes = first_bytes;
        while pos_bytes < last_bytes {
            let chunk = bounce.first(chunk_len(pos_bytes, last_bytes));
            read_exact_at(file, chunk, pos_bytes)?;
            let (lo, hi) = overlap(pos_bytes, chunk.len(), offset_bytes, end_bytes);
            buf[(lo - offset_bytes) as usize..(hi - offset_bytes) as usize]
                .copy_from_slice(&chunk[(lo - pos_bytes) as usize..(hi - pos_bytes) as usize]);
            pos_bytes += chunk.len() as u64;
        }
        Ok(())
    }

    /// Writes `data` at `offset_bytes`, read-modify-writing partial blocks at
    /// the ends. The covering aligned range must lie inside the file.
    pub(crate) fn write(&self, file: &File, offset_bytes: u64, data: &[u8]) -> io::Result<()> {
        let aligned = self.is_aligned(offset_bytes, data.len());
        if aligned && self.is_memory_aligned(data) {
            let _shared = self.shared();
            return write_all_at(file, data, offset_bytes);
        }
        let (_shared, _exclusive) = if aligned {
            (Some(self.shared()), None)
        } else {
            (None, Some(self.exclusive()))
        };
        let end_bytes = offset_bytes + data.len() as u64;
        let (first_bytes, last_bytes) = (self.round_down(offset_bytes), self.round_up(end_bytes));
        let mut bounce =
            AlignedBuf::new(chunk_len(first_bytes, last_bytes), self.memory_align_bytes);
        let block = self.block_bytes as usize;
        let mut pos_bytes = first_bytes;
        while pos_bytes < last_bytes {
            let chunk = bounce.first(chunk_len(pos_bytes, last_bytes));
            let chunk_end_bytes = pos_bytes + chunk.len() as u64;
            // Only the first and last blocks of the whole range can be partial.
            if pos_bytes < offset_bytes {
                read_exact_at(file, &mut chunk[..block], pos_bytes)?;
            }
            if chunk_end_bytes > end_bytes {
                let tail = chunk.len() - block;
                read_exact_at(file, &mut chunk[tail..], chunk_end_bytes - block as u64)?;
            }
            let (lo, hi) = overlap(pos_bytes, chunk.len(), offset_bytes, end_bytes);
            chunk[(lo - pos_bytes) as usize..(hi - pos_bytes) as usize]
                .copy_from_slice(&data[(lo - offset_bytes) as usize..(hi - offset_bytes) as usize]);
            write_all_at(file, chunk, pos_bytes)?;
            pos_bytes = chunk_end_bytes;
        }
        Ok(())
    }
}

/// The length of the next bounce-buffer piece of `[pos_bytes, last_bytes)`.
fn chunk_len(pos_bytes: u64, last_bytes: u64) -> usize {
    (last_bytes - pos_bytes).min(BOUNCE_BYTES) as usize
}

/// The intersection of `[pos, pos + len)` and `[start, end)`, known to be
/// non-empty.
fn overlap(pos_bytes: u64, len: usize, start_bytes: u64, end_bytes: u64) -> (u64, u64) {
    let lo = pos_bytes.max(start_bytes);
    let hi = (pos_bytes + len as u64).min(end_bytes);
    assert!(lo < hi, "bounce piece outside the request");
    (lo, hi)
}

/// A zeroed buffer whose start is aligned, carved out of a slightly larger
/// `Vec` so no unsafe allocation code is needed.
struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    fn new(len: usize, align: usize) -> AlignedBuf {
        let storage = vec![0; len + align - 1];
        let misalign = storage.as_ptr() as usize % align;
        let start = if misalign == 0 { 0 } else { align - misalign };
        AlignedBuf {
            storage,
            start,
            len,
        }
    }

    fn first(&mut self, len: usize) -> &mut [u8] {
        assert!(len <= self.len);
        &mut self.storage[self.start..self.start + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buf_is_aligned() {
        for len in [1, 511, 4096, 1 << 20] {
            let mut buf = AlignedBuf::new(len, 4096);
            let slice = buf.first(len);
            assert_eq!(slice.as_ptr() as usize % 4096, 0);
            assert_eq!(slice.len(), len);
            assert!(slice.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn rounding_and_alignment() {
        let direct = DirectIo::new(4096);
        assert_eq!(direct.round_down(4097), 4096);
        assert_eq!(direct.round_up(4097), 8192);
        assert_eq!(direct.round_up(8192), 8192);
        assert!(direct.is_aligned(8192, 4096));
        assert!(!direct.is_aligned(8192, 512));
        assert!(!direct.is_aligned(512, 4096));
    }

    #[test]
    fn overlap_clips_to_request() {
        assert_eq!(overlap(0, 4096, 100, 200), (100, 200));
        assert_eq!(overlap(4096, 4096, 100, 5000), (4096, 5000));
        assert_eq!(overlap(0, 4096, 0, 4096), (0, 4096));
    }
}
