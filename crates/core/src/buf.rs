//! Stripe buffers that start on a 64-byte boundary.
//!
//! ISA-L's XOR and P+Q kernels take only 32-byte aligned blocks and the
//! parity crate falls back to its reference loops for anything else (see
//! `platter_parity::kernel_counts`). An ordinary `Vec<u8>` promises no
//! alignment, so the engine's per-stripe buffers are [`AlignedBuf`]s: a
//! `Vec<u8>` allocated 63 bytes longer than asked, used from its first
//! 64-byte boundary. It becomes [`Bytes`] without a copy (`Bytes` keeps the
//! vector's allocation and slices it), so parity computed in it goes to the
//! members as it is.

use bytes::Bytes;
use std::fmt;
use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};

/// The alignment of every [`AlignedBuf`] (a cache line; ISA-L needs 32).
pub const BUF_ALIGN: usize = 64;
const _: () = assert!(BUF_ALIGN.is_power_of_two() && BUF_ALIGN.is_multiple_of(32));

/// A zero-initialised byte buffer whose first byte is [`BUF_ALIGN`]-aligned.
#[derive(Default)]
pub struct AlignedBuf {
    raw: Vec<u8>,
    at: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes at a 64-byte boundary. Large buffers come from
    /// `calloc`, so the zeroing is usually free.
    pub fn zeroed(len: usize) -> AlignedBuf {
        if len == 0 {
            return AlignedBuf::default();
        }
        let raw = vec![0u8; len + BUF_ALIGN - 1];
        let at = raw.as_ptr().align_offset(BUF_ALIGN);
        assert!(at < BUF_ALIGN, "no 64-byte boundary in the allocation");
        AlignedBuf { raw, at, len }
    }

    /// `len` bytes at a 64-byte boundary, filled by `fill` instead of being
    /// zeroed first (a received payload: the zeroing would be a second
    /// pass over every byte). Only the bytes around the `len` are zeroed.
    ///
    /// # Safety
    ///
    /// When `fill` returns `Ok`, it must have written every byte of the
    /// slice it was given.
    pub unsafe fn filled<E>(
        len: usize,
        fill: impl FnOnce(&mut [MaybeUninit<u8>]) -> Result<(), E>,
    ) -> Result<AlignedBuf, E> {
        if len == 0 {
            return Ok(AlignedBuf::default());
        }
        let mut raw: Vec<u8> = Vec::with_capacity(len + BUF_ALIGN - 1);
        let at = raw.as_ptr().align_offset(BUF_ALIGN);
        assert!(at < BUF_ALIGN, "no 64-byte boundary in the allocation");
        let cap = raw.capacity();
        let spare = raw.spare_capacity_mut();
        spare[..at].fill(MaybeUninit::new(0));
        spare[at + len..].fill(MaybeUninit::new(0));
        fill(&mut spare[at..at + len])?;
        // SAFETY: the bytes before `at` and after `at + len` were zeroed
        // above, and `fill` wrote the rest (the caller's promise). The
        // length is the capacity, so `into_bytes` keeps the allocation.
        unsafe { raw.set_len(cap) };
        Ok(AlignedBuf { raw, at, len })
    }

    /// `len` bytes at a 64-byte boundary, written by `init` and not zeroed
    /// first: `init` must hand back the slice it was given, initialised
    /// (only safe code that wrote every byte can, e.g.
    /// `platter_parity::gen_p_uninit`). Panics if it hands back another.
    pub fn init_with(
        len: usize,
        init: impl for<'a> FnOnce(&'a mut [MaybeUninit<u8>]) -> &'a mut [u8],
    ) -> AlignedBuf {
        // SAFETY: the slice `init` returns is initialised (it is a `&mut
        // [u8]`), and it is checked to be the one it was given.
        let r = unsafe {
            AlignedBuf::filled(len, |dst| {
                let (at, n) = (dst.as_ptr() as usize, dst.len());
                let out = init(dst);
                if out.as_ptr() as usize == at && out.len() == n {
                    Ok(())
                } else {
                    Err(())
                }
            })
        };
        r.expect("AlignedBuf::init_with: the closure returned another slice")
    }

    /// A copy of `src` at a 64-byte boundary.
    pub fn copy_from(src: &[u8]) -> AlignedBuf {
        let mut b = AlignedBuf::zeroed(src.len());
        b.copy_from_slice(src);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes as [`Bytes`], without copying them.
    pub fn into_bytes(self) -> Bytes {
        if self.len == 0 {
            return Bytes::new();
        }
        // The vector's length is its capacity (`vec![0; n]`, `filled`), so
        // `Bytes` takes the allocation as it is: the slice keeps its
        // address and alignment.
        Bytes::from(self.raw).slice(self.at..self.at + self.len)
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.raw[self.at..self.at + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.raw[self.at..self.at + self.len]
    }
}

impl Clone for AlignedBuf {
    /// A new allocation, aligned in its own right (cloning the vector
    /// would keep the old offset in a new, differently placed, allocation).
    fn clone(&self) -> AlignedBuf {
        AlignedBuf::copy_from(self)
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &AlignedBuf) -> bool {
        **self == **other
    }
}

impl Eq for AlignedBuf {}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

/// Whether a block starts where ISA-L's aligned kernels can take it.
pub fn aligned32(block: &[u8]) -> bool {
    (block.as_ptr() as usize).is_multiple_of(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_zeroed_and_kept_aligned_as_bytes() {
        for len in [1usize, 63, 64, 512, 65536, 196_608, 1 << 20] {
            let mut b = AlignedBuf::zeroed(len);
            assert_eq!(b.len(), len);
            assert!(b.iter().all(|&x| x == 0));
            assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0);
            b[len - 1] = 7;
            let c = b.clone();
            assert_eq!(c.as_ptr() as usize % BUF_ALIGN, 0);
            assert_eq!(c, b);
            let ptr = b.as_ptr();
            let bytes = b.into_bytes();
            assert_eq!(bytes.as_ptr(), ptr, "into_bytes copied");
            assert_eq!(bytes.len(), len);
            assert_eq!(bytes[len - 1], 7);
        }
        assert!(AlignedBuf::zeroed(0).into_bytes().is_empty());
    }

    #[test]
    fn filled_is_aligned_holds_what_was_written_and_stays_in_place() {
        for len in [1usize, 63, 64, 4096, 196_608, 1 << 20] {
            // SAFETY: the closure writes every byte it is given.
            let b = unsafe {
                AlignedBuf::filled(len, |dst| {
                    for (i, x) in dst.iter_mut().enumerate() {
                        x.write((i % 251) as u8);
                    }
                    Ok::<(), ()>(())
                })
            }
            .expect("filled");
            assert_eq!(b.len(), len);
            assert_eq!(b.as_ptr() as usize % BUF_ALIGN, 0);
            assert!(b.iter().enumerate().all(|(i, &x)| x == (i % 251) as u8));
            let ptr = b.as_ptr();
            let bytes = b.into_bytes();
            assert_eq!(bytes.as_ptr(), ptr, "into_bytes copied");
        }
        // SAFETY: it fails, so nothing need be written.
        let failed = unsafe { AlignedBuf::filled(100, |_| Err("no")) };
        assert_eq!(failed.err(), Some("no"));
    }
}
