//! RAID-5 and RAID-6 parity, byte-for-byte compatible with Linux md.
//!
//! # Compatibility with md
//!
//! P is the XOR of the data blocks. Q is the Reed-Solomon syndrome md uses:
//! `Q = sum over i of g^i * D_i` in GF(2^8) with generator `g = 2` and
//! reduction polynomial `x^8 + x^4 + x^3 + x^2 + 1` (0x11d). `i` is a block's
//! position in the `data` slice, its *syndrome order*; mapping member slots to
//! syndrome order is the layout's job, not this crate's. Given md's order, P
//! and Q here are md's, byte for byte.
//!
//! # Two backends
//!
//! - `isal` (built when `build.rs` finds Intel's ISA-L, unless
//!   `PLATTER_NO_ISAL=1`) calls ISA-L's SIMD kernels, for speed: parity runs
//!   on every RAID-5/6 write and every degraded read.
//! - [`reference`](mod@crate::reference) is plain Rust written to be
//!   checked against the definitions. It is the oracle the tests hold ISA-L
//!   to, and the fallback both when ISA-L is absent and for any call whose
//!   buffers ISA-L cannot take (alignment, length, counts); see `isal` for
//!   those rules.
//!
//! The functions at the top level are those of the backend compiled in
//! ([`backend_name`] says which). Both modules expose the same functions so
//! tests can compare them directly. Results never depend on the backend.
//!
//! All blocks passed to one call must have the same length (asserted); any
//! length is accepted.

use std::mem::MaybeUninit;

mod gf;
#[cfg(has_isal)]
pub mod isal;
mod locate;
mod recover;
pub mod reference;

pub use gf::{GENERATOR, POLY};
pub use locate::{correct_data, culprit, locate, p_syndrome, Culprit};
pub use recover::RecoverError;

#[cfg(has_isal)]
use isal as backend;
#[cfg(not(has_isal))]
use reference as backend;

/// Most data blocks a RAID-6 stripe may have. Data, P and Q then fit within
/// the 255 nonzero elements of GF(2^8), the usual bound for a Reed-Solomon
/// code over bytes; stripes in practice are far narrower.
pub const MAX_DATA_BLOCKS: usize = 253;

/// `"isa-l"` or `"reference"`: the backend behind the top-level functions.
pub fn backend_name() -> &'static str {
    backend::backend_name()
}

/// `dst ^= src`.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    backend::xor_into(dst, src)
}

/// `dst = a ^ b`, into a separate destination: the change a
/// read-modify-write folds into parity (`old ^ new`). ISA-L's `xor_gen`
/// with two sources when all three blocks are 32-byte aligned.
pub fn xor2(a: &[u8], b: &[u8], dst: &mut [u8]) {
    gen_p(&[a, b], dst)
}

/// How many P and P+Q generations ran on the vector kernels and how many
/// fell back to the reference loops (unaligned blocks, lengths ISA-L
/// cannot take, or no ISA-L at all), since the process started. Callers
/// check with it that their buffers reach the fast path; it costs one
/// relaxed atomic add per call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounts {
    pub accelerated: u64,
    pub fallback: u64,
}

static ACCELERATED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
static FALLBACK: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// See [`KernelCounts`].
pub fn kernel_counts() -> KernelCounts {
    use std::sync::atomic::Ordering::Relaxed;
    KernelCounts {
        accelerated: ACCELERATED.load(Relaxed),
        fallback: FALLBACK.load(Relaxed),
    }
}

#[allow(dead_code)] // unused when built without ISA-L
pub(crate) fn count_accelerated() {
    ACCELERATED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

pub(crate) fn count_fallback() {
    FALLBACK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// `p` = XOR of all `data` blocks (at least one).
pub fn gen_p(data: &[&[u8]], p: &mut [u8]) {
    #[cfg(not(has_isal))]
    count_fallback();
    backend::gen_p(data, p)
}

/// [`gen_p`] into a buffer not yet initialised (a fresh parity block:
/// zeroing it first would be a wasted pass over it). Writes every byte of
/// `p` and returns it, initialised.
pub fn gen_p_uninit<'a>(data: &[&[u8]], p: &'a mut [MaybeUninit<u8>]) -> &'a mut [u8] {
    #[cfg(has_isal)]
    if backend::gen_p_uninit(data, p) {
        // SAFETY: the kernel wrote every byte of `p`.
        return unsafe { assume_init_mut(p) };
    }
    p.fill(MaybeUninit::new(0));
    // SAFETY: just zeroed.
    let p = unsafe { assume_init_mut(p) };
    gen_p(data, p);
    p
}

/// [`gen_pq`] into buffers not yet initialised; writes every byte of both
/// and returns them, initialised.
pub fn gen_pq_uninit<'a, 'b>(
    data: &[&[u8]],
    p: &'a mut [MaybeUninit<u8>],
    q: &'b mut [MaybeUninit<u8>],
) -> (&'a mut [u8], &'b mut [u8]) {
    #[cfg(has_isal)]
    if backend::gen_pq_uninit(data, p, q) {
        // SAFETY: the kernel wrote every byte of `p` and `q`.
        return unsafe { (assume_init_mut(p), assume_init_mut(q)) };
    }
    p.fill(MaybeUninit::new(0));
    q.fill(MaybeUninit::new(0));
    // SAFETY: just zeroed.
    let (p, q) = unsafe { (assume_init_mut(p), assume_init_mut(q)) };
    gen_pq(data, p, q);
    (p, q)
}

/// # Safety
///
/// Every byte of `b` must be initialised.
unsafe fn assume_init_mut(b: &mut [MaybeUninit<u8>]) -> &mut [u8] {
    // SAFETY: `MaybeUninit<u8>` has the layout of `u8`, and the caller
    // promises the bytes are initialised.
    unsafe { &mut *(b as *mut [MaybeUninit<u8>] as *mut [u8]) }
}

/// P as [`gen_p`], and `q = sum of g^i * D_i` over GF(2^8), `i` being the
/// block's position in `data`. Takes 1 to [`MAX_DATA_BLOCKS`] data blocks
/// and panics outside that range.
pub fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    #[cfg(not(has_isal))]
    count_fallback();
    backend::gen_pq(data, p, q)
}

/// `dst ^= coef * src` over GF(2^8): the update of Q when one data block
/// changes (with `coef = g^i` and `src = old ^ new`).
pub fn mul_xor_into(coef: u8, src: &[u8], dst: &mut [u8]) {
    backend::mul_xor_into(coef, src, dst)
}

/// Product in GF(2^8) (polynomial 0x11d).
pub fn gf_mul(a: u8, b: u8) -> u8 {
    backend::gf_mul(a, b)
}

/// Multiplicative inverse in GF(2^8). Panics on 0.
pub fn gf_inv(a: u8) -> u8 {
    backend::gf_inv(a)
}

/// `g^i` for the generator `g = 2`: the Q coefficient of data block `i`.
pub fn gf_exp2(i: u32) -> u8 {
    backend::gf_exp2(i)
}

/// Rebuilds lost blocks of one stripe in place.
///
/// `blocks` holds the data blocks in syndrome order, then P, then (RAID-6
/// only) Q: `blocks.len()` is `data_count + 1` or `data_count + 2`.
/// `missing` lists the indices (into `blocks`) whose content is garbage on
/// entry; they are rebuilt on return, and no other block is written.
///
/// RAID-5 rebuilds any one block. RAID-6 rebuilds any one or two: data, P,
/// Q, two data blocks, data and P (through Q), data and Q (through P), or P
/// and Q (regenerated). An empty `missing` does nothing.
///
/// Returns `Err`, having written nothing, if more blocks are missing than
/// the parity allows, an index is out of range or repeated, or the stripe's
/// shape is impossible. Panics if the blocks differ in length.
pub fn recover(
    blocks: &mut [&mut [u8]],
    data_count: usize,
    missing: &[usize],
) -> Result<(), RecoverError> {
    backend::recover(blocks, data_count, missing)
}

/// The shape every generator checks: at least one data block, all `len` long.
fn assert_stripe(data: &[&[u8]], len: usize) {
    assert!(!data.is_empty(), "parity needs at least one data block");
    assert!(
        data.iter().all(|d| d.len() == len),
        "all blocks of a stripe must have the same length"
    );
}
