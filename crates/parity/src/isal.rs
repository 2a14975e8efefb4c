//! Parity through Intel's ISA-L (Debian's `libisal-dev`), which picks SSE,
//! AVX2 or AVX-512 code at run time.
//!
//! ISA-L's entry points have preconditions that, when unmet, either fail
//! silently or fault (aligned SIMD loads), so every call checks them first.
//! The constraints, from the ISA-L 2.30 headers and checked against its
//! assembly:
//!
//! - `xor_gen`: at least 2 sources; every buffer 32-byte aligned (the SSE
//!   and AVX paths use aligned loads); any length.
//! - `pq_gen`: at least 2 sources; length a multiple of 32; every buffer
//!   32-byte aligned.
//! - `gf_vect_mad`: length at least 64 (shorter returns without writing);
//!   any alignment.
//! - `ec_init_tables` + `ec_encode_data`: any length >= 1 and any alignment
//!   (short lengths go to ISA-L's own scalar code).
//! - all lengths and counts are C `int`s.
//!
//! So P+Q uses `pq_gen` on aligned buffers and `ec_encode_data` (a two-row
//! dot product) on the rest; recovery is one `ec_encode_data` dot product
//! over the surviving blocks. Whatever ISA-L cannot take (short or unaligned
//! XOR, short multiply-accumulate, lengths beyond `int`) goes to
//! [`reference`](mod@crate::reference). Results are identical either way, which the tests check.

use std::ffi::{c_int, c_uchar, c_void};
use std::mem::MaybeUninit;

use crate::recover::{self, Kernels};
use crate::{assert_stripe, reference, RecoverError, MAX_DATA_BLOCKS};

mod ffi {
    use std::ffi::{c_int, c_uchar, c_void};

    // Linked by build.rs (`cargo::rustc-link-lib=isal`) only when it found
    // the library, so this module exists only under `cfg(has_isal)`.
    extern "C" {
        pub fn xor_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
        pub fn pq_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
        pub fn gf_vect_mul_init(c: c_uchar, gftbl: *mut c_uchar);
        pub fn gf_vect_mad(
            len: c_int,
            vec: c_int,
            vec_i: c_int,
            gftbls: *mut c_uchar,
            src: *mut c_uchar,
            dest: *mut c_uchar,
        );
        pub fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
        pub fn ec_encode_data(
            len: c_int,
            k: c_int,
            rows: c_int,
            gftbls: *mut c_uchar,
            data: *mut *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        pub fn gf_mul(a: c_uchar, b: c_uchar) -> c_uchar;
        pub fn gf_inv(a: c_uchar) -> c_uchar;
    }
}

/// `gf_vect_mad`'s documented minimum; the AVX-512 version does nothing
/// below it, the AVX2 and SSE versions below 32 and 16.
const MAD_MIN_LEN: usize = 64;

/// ISA-L's expanded form of one coefficient.
const TABLE_LEN: usize = 32;

/// A block length as ISA-L's `int`, or `None` where ISA-L cannot take it.
fn c_len(len: usize) -> Option<c_int> {
    c_int::try_from(len).ok().filter(|&l| l > 0)
}

/// ISA-L's SSE, AVX and AVX2 `xor_gen` and `pq_gen` write parity with
/// non-temporal stores and return without a fence. Such stores are weakly
/// ordered even on x86, and a lock-prefixed instruction (what a mutex or
/// channel uses to hand the buffer to another thread) is not guaranteed to
/// order them, so fence here rather than trust every caller to.
fn order_streaming_stores() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE only orders earlier stores; SSE is part of the x86_64
    // baseline, so the instruction always exists.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

fn aligned32(block: &[u8]) -> bool {
    (block.as_ptr() as usize).is_multiple_of(32)
}

pub fn backend_name() -> &'static str {
    "isa-l"
}

/// `dst ^= src`. This is the reference loop: ISA-L has no in-place XOR
/// (`xor_gen` writes a separate destination and does not document aliasing
/// it with a source), and a plain slice loop is what the compiler vectorises
/// anyway.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    reference::xor_into(dst, src);
}

/// `p = D_0 + D_1 + ...` (XOR).
pub fn gen_p(data: &[&[u8]], p: &mut [u8]) {
    assert_stripe(data, p.len());
    // SAFETY: `p` is an exclusive borrow of `p.len()` bytes, so it is
    // valid for writes and aliases no source.
    if unsafe { xor_gen_raw(data, p.as_mut_ptr(), p.len()) } {
        return;
    }
    crate::count_fallback();
    reference::gen_p(data, p);
}

/// [`gen_p`]'s vector path into memory that need not be initialised: true
/// when it ran and wrote every byte of `p`; false (nothing written) when it
/// does not apply (unaligned blocks, fewer than two sources).
pub fn gen_p_uninit(data: &[&[u8]], p: &mut [MaybeUninit<u8>]) -> bool {
    assert_stripe(data, p.len());
    // SAFETY: as in `gen_p`: an exclusive borrow of `p.len()` bytes.
    unsafe { xor_gen_raw(data, p.as_mut_ptr().cast(), p.len()) }
}

/// ISA-L's `xor_gen` of `data` into the `len` bytes at `p`, when it
/// applies; false (nothing written) otherwise.
///
/// # Safety
///
/// `p` must be valid for writes of `len` bytes and overlap no source.
unsafe fn xor_gen_raw(data: &[&[u8]], p: *mut u8, len: usize) -> bool {
    if data.len() >= 2 && (p as usize).is_multiple_of(32) && data.iter().all(|d| aligned32(d)) {
        if let (Some(clen), Ok(vects)) = (c_len(len), c_int::try_from(data.len() + 1)) {
            let mut array: Vec<*mut c_void> = data
                .iter()
                .map(|d| d.as_ptr() as *mut c_void)
                .chain(std::iter::once(p.cast()))
                .collect();
            // SAFETY: `array` holds `vects` pointers: the sources, then `p`.
            // Each buffer is `len` bytes long and 32-byte aligned, and there
            // are at least two sources, as xor_gen requires; it only reads the
            // sources (the `*mut` is C's signature, not a write), and `p` is
            // writable and aliases none of them (the caller's promise).
            let rc = unsafe { ffi::xor_gen(vects, clen, array.as_mut_ptr()) };
            order_streaming_stores();
            if rc == 0 {
                crate::count_accelerated();
                return true;
            }
        }
    }
    false
}

/// P and Q, `q = sum of g^i * D_i` with `i` the position in `data`.
pub fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    assert_stripe(data, p.len());
    assert_eq!(q.len(), p.len(), "gen_pq: P and Q differ in length");
    // SAFETY: `p` and `q` are distinct exclusive borrows of `p.len()` bytes.
    if unsafe { pq_gen_raw(data, p.as_mut_ptr(), q.as_mut_ptr(), p.len()) } {
        return;
    }
    crate::count_fallback();
    let coefs: Vec<u8> = (0..data.len())
        .map(|_| 1)
        .chain((0..data.len()).map(|i| gf_exp2(i as u32)))
        .collect();
    if !encode(&coefs, data, &mut [&mut *p, &mut *q]) {
        reference::gen_pq(data, p, q);
    }
}

/// [`gen_pq`]'s vector path into memory that need not be initialised:
/// true when it ran and wrote every byte of `p` and `q`; false (nothing
/// written) when it does not apply.
pub fn gen_pq_uninit(data: &[&[u8]], p: &mut [MaybeUninit<u8>], q: &mut [MaybeUninit<u8>]) -> bool {
    assert_stripe(data, p.len());
    assert_eq!(q.len(), p.len(), "gen_pq: P and Q differ in length");
    // SAFETY: as in `gen_pq`.
    unsafe { pq_gen_raw(data, p.as_mut_ptr().cast(), q.as_mut_ptr().cast(), p.len()) }
}

/// ISA-L's `pq_gen` of `data` into the `len` bytes at `p` and at `q`,
/// when it applies; false (nothing written) otherwise.
///
/// # Safety
///
/// `p` and `q` must be valid for writes of `len` bytes, and overlap
/// neither each other nor any source.
unsafe fn pq_gen_raw(data: &[&[u8]], p: *mut u8, q: *mut u8, len: usize) -> bool {
    assert!(
        data.len() <= MAX_DATA_BLOCKS,
        "gen_pq: {} data blocks, at most {MAX_DATA_BLOCKS} allowed",
        data.len()
    );
    let aligned = (p as usize).is_multiple_of(32)
        && (q as usize).is_multiple_of(32)
        && data.iter().all(|d| aligned32(d));
    if data.len() >= 2 && len.is_multiple_of(32) && aligned {
        if let (Some(clen), Ok(vects)) = (c_len(len), c_int::try_from(data.len() + 2)) {
            let mut array: Vec<*mut c_void> = data
                .iter()
                .map(|d| d.as_ptr() as *mut c_void)
                .chain([p.cast(), q.cast()])
                .collect();
            // SAFETY: `array` holds `vects` pointers: the sources, then P, then
            // Q, each to `len` bytes, 32-byte aligned, `len` a multiple of 32,
            // at least two sources: everything pq_gen requires. It only reads
            // the sources; P and Q are writable and distinct (the caller's
            // promise).
            let rc = unsafe { ffi::pq_gen(vects, clen, array.as_mut_ptr()) };
            order_streaming_stores();
            if rc == 0 {
                crate::count_accelerated();
                return true;
            }
        }
    }
    false
}

/// Q alone, for recovery when only Q was lost.
fn gen_q(data: &[&[u8]], q: &mut [u8]) {
    assert_stripe(data, q.len());
    assert!(data.len() <= MAX_DATA_BLOCKS, "gen_q: too many data blocks");
    let coefs: Vec<u8> = (0..data.len()).map(|i| gf_exp2(i as u32)).collect();
    if !encode(&coefs, data, &mut [&mut *q]) {
        reference::gen_q(data, q);
    }
}

/// `dst ^= coef * src` in GF(2^8).
pub fn mul_xor_into(coef: u8, src: &[u8], dst: &mut [u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "mul_xor_into: blocks differ in length"
    );
    let len = match c_len(dst.len()) {
        Some(len) if dst.len() >= MAD_MIN_LEN => len,
        _ => return reference::mul_xor_into(coef, src, dst),
    };
    let mut table = [0u8; TABLE_LEN];
    // SAFETY: gf_vect_mul_init writes exactly 32 bytes, the size of `table`.
    unsafe { ffi::gf_vect_mul_init(coef, table.as_mut_ptr()) };
    // SAFETY: with vec = 1 and vec_i = 0 gf_vect_mad reads the one 32-byte
    // table; it reads `len` bytes of `src` and reads and writes `len` bytes of
    // `dst`, both that long; len >= 64, its minimum; unaligned buffers are
    // fine (unaligned loads). `src` is only read, and cannot overlap `dst`.
    unsafe {
        ffi::gf_vect_mad(
            len,
            1,
            0,
            table.as_mut_ptr(),
            src.as_ptr() as *mut c_uchar,
            dst.as_mut_ptr(),
        )
    };
}

/// ISA-L's own multiply (its tables, not ours), so that comparing backends
/// checks the field definition as well as the kernels.
pub fn gf_mul(a: u8, b: u8) -> u8 {
    // SAFETY: a pure function of two bytes.
    unsafe { ffi::gf_mul(a, b) }
}

/// Panics on 0 (ISA-L would return 0).
pub fn gf_inv(a: u8) -> u8 {
    assert!(a != 0, "gf_inv: 0 has no inverse in GF(2^8)");
    // SAFETY: a pure function of one byte.
    unsafe { ffi::gf_inv(a) }
}

/// g^i with g = 2, by square-and-multiply over ISA-L's [`gf_mul`]: ISA-L has
/// no exponent function, and building it from ISA-L's multiply keeps it
/// independent of the reference tables.
pub fn gf_exp2(i: u32) -> u8 {
    let (mut result, mut base, mut e) = (1u8, 2u8, i % 255);
    while e > 0 {
        if e & 1 == 1 {
            result = gf_mul(result, base);
        }
        base = gf_mul(base, base);
        e >>= 1;
    }
    result
}

/// See [`crate::recover`].
pub fn recover(
    blocks: &mut [&mut [u8]],
    data_count: usize,
    missing: &[usize],
) -> Result<(), RecoverError> {
    recover::recover::<Isal>(blocks, data_count, missing)
}

/// `outputs[r] = sum over j of coefs[r * k + j] * sources[j]`, k =
/// `sources.len()`, through `ec_encode_data`. Returns false, having written
/// nothing, when the sizes do not fit ISA-L's `int`s.
fn encode(coefs: &[u8], sources: &[&[u8]], outputs: &mut [&mut [u8]]) -> bool {
    assert!(!sources.is_empty() && !outputs.is_empty());
    assert_eq!(coefs.len(), sources.len() * outputs.len());
    let len = outputs[0].len();
    assert!(
        sources.iter().all(|s| s.len() == len) && outputs.iter().all(|o| o.len() == len),
        "all blocks of a stripe must have the same length"
    );
    let (Some(c_len), Ok(k), Ok(rows)) = (
        c_len(len),
        c_int::try_from(sources.len()),
        c_int::try_from(outputs.len()),
    ) else {
        return false;
    };
    let mut tables = vec![0u8; TABLE_LEN * coefs.len()];
    // SAFETY: ec_init_tables reads k * rows coefficients from `coefs` (that
    // many, asserted above; read only despite the `*mut`) and writes 32 bytes
    // for each into `tables`, sized to match.
    unsafe { ffi::ec_init_tables(k, rows, coefs.as_ptr() as *mut c_uchar, tables.as_mut_ptr()) };
    let mut src: Vec<*mut c_uchar> = sources.iter().map(|s| s.as_ptr() as *mut c_uchar).collect();
    let mut dst: Vec<*mut c_uchar> = outputs.iter_mut().map(|o| o.as_mut_ptr()).collect();
    // SAFETY: `src` has k pointers and `dst` rows pointers, each to `len`
    // bytes; `tables` holds 32 * k * rows bytes from ec_init_tables.
    // ec_encode_data takes any length and alignment, only reads the sources,
    // and writes each output, all distinct exclusive borrows that cannot
    // overlap the sources.
    unsafe {
        ffi::ec_encode_data(
            c_len,
            k,
            rows,
            tables.as_mut_ptr(),
            src.as_mut_ptr(),
            dst.as_mut_ptr(),
        )
    };
    true
}

pub(crate) struct Isal;

impl Kernels for Isal {
    fn gen_p(data: &[&[u8]], p: &mut [u8]) {
        gen_p(data, p);
    }

    fn gen_q(data: &[&[u8]], q: &mut [u8]) {
        gen_q(data, q);
    }

    fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
        gen_pq(data, p, q);
    }

    fn data_from_q(x: usize, others: &[(usize, &[u8])], q: &[u8], dx: &mut [u8]) {
        // Q = sum g^i D_i, so D_x = g^-x Q + sum over i != x of g^(i-x) D_i:
        // one dot product over the survivors.
        let inv_gx = gf_inv(gf_exp2(x as u32));
        let coefs: Vec<u8> = others
            .iter()
            .map(|&(i, _)| gf_mul(gf_exp2(i as u32), inv_gx))
            .chain([inv_gx])
            .collect();
        let sources: Vec<&[u8]> = others.iter().map(|&(_, d)| d).chain([q]).collect();
        if !encode(&coefs, &sources, &mut [&mut *dx]) {
            reference::Reference::data_from_q(x, others, q, dx);
        }
    }

    fn two_data(
        x: usize,
        y: usize,
        others: &[(usize, &[u8])],
        p: &[u8],
        q: &[u8],
        dx: &mut [u8],
        dy: &mut [u8],
    ) {
        // md's solution D_x = (Qxy + g^y Pxy) / (g^x + g^y), D_y = Pxy + D_x,
        // expanded over the survivors. With B = 1 / (g^x + g^y), A = g^y B:
        //   D_x = A P + B Q + sum of (A + B g^i) D_i
        //   D_y = (1 + A) P + B Q + sum of (1 + A + B g^i) D_i
        // so both are one two-row dot product.
        let b = gf_inv(gf_exp2(x as u32) ^ gf_exp2(y as u32));
        let a = gf_mul(gf_exp2(y as u32), b);
        let row_x = others
            .iter()
            .map(|&(i, _)| a ^ gf_mul(b, gf_exp2(i as u32)))
            .chain([a, b]);
        let row_y = others
            .iter()
            .map(|&(i, _)| 1 ^ a ^ gf_mul(b, gf_exp2(i as u32)))
            .chain([1 ^ a, b]);
        let coefs: Vec<u8> = row_x.chain(row_y).collect();
        let sources: Vec<&[u8]> = others.iter().map(|&(_, d)| d).chain([p, q]).collect();
        if !encode(&coefs, &sources, &mut [&mut *dx, &mut *dy]) {
            reference::Reference::two_data(x, y, others, p, q, dx, dy);
        }
    }
}
