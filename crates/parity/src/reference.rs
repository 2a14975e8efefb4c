//! Pure-Rust parity: the oracle the ISA-L backend is tested against, and the
//! fallback wherever ISA-L is absent or a call falls outside its
//! constraints. Written to be checked by eye against the definitions
//! (P = sum of D_i, Q = sum of g^i * D_i) rather than to be fast, though
//! the XOR loops are plain slice loops the compiler can vectorise.

use crate::recover::{self, Kernels};
use crate::{assert_stripe, gf, RecoverError, MAX_DATA_BLOCKS};

pub fn backend_name() -> &'static str {
    "reference"
}

/// `dst ^= src`.
pub fn xor_into(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "xor_into: blocks differ in length");
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= *s;
    }
}

/// `p = D_0 + D_1 + ...` (XOR).
pub fn gen_p(data: &[&[u8]], p: &mut [u8]) {
    assert_stripe(data, p.len());
    p.copy_from_slice(data[0]);
    for d in &data[1..] {
        xor_into(p, d);
    }
}

/// P as in [`gen_p`], and `q = sum of g^i * D_i` with `i` the position in `data`.
pub fn gen_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    assert_stripe(data, p.len());
    assert_eq!(q.len(), p.len(), "gen_pq: P and Q differ in length");
    gen_p(data, p);
    gen_q(data, q);
}

/// Q alone, for recovery when only Q was lost.
pub(crate) fn gen_q(data: &[&[u8]], q: &mut [u8]) {
    assert_stripe(data, q.len());
    assert!(
        data.len() <= MAX_DATA_BLOCKS,
        "gen_pq: {} data blocks, at most {MAX_DATA_BLOCKS} allowed",
        data.len()
    );
    q.fill(0);
    for (i, d) in data.iter().enumerate() {
        mul_xor_into(gf_exp2(i as u32), d, q);
    }
}

/// `dst ^= coef * src` in GF(2^8).
pub fn mul_xor_into(coef: u8, src: &[u8], dst: &mut [u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "mul_xor_into: blocks differ in length"
    );
    if coef == 0 {
        return;
    }
    let row = gf::mul_row(coef);
    for (d, s) in dst.iter_mut().zip(src) {
        *d ^= row[*s as usize];
    }
}

pub fn gf_mul(a: u8, b: u8) -> u8 {
    gf::mul(a, b)
}

/// Panics on 0.
pub fn gf_inv(a: u8) -> u8 {
    gf::inv(a)
}

/// g^i with g = 2.
pub fn gf_exp2(i: u32) -> u8 {
    gf::exp2(i)
}

/// See [`crate::recover`].
pub fn recover(
    blocks: &mut [&mut [u8]],
    data_count: usize,
    missing: &[usize],
) -> Result<(), RecoverError> {
    recover::recover::<Reference>(blocks, data_count, missing)
}

pub(crate) struct Reference;

impl Kernels for Reference {
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
        // With D_x taken as zero the partial syndrome is Q_x; then
        // Q + Q_x = g^x * D_x (md's raid6_datap_recov).
        let mut qx = q.to_vec();
        for &(i, d) in others {
            mul_xor_into(gf_exp2(i as u32), d, &mut qx);
        }
        dx.fill(0);
        mul_xor_into(gf_inv(gf_exp2(x as u32)), &qx, dx);
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
        // md's raid6_2data_recov: with D_x and D_y taken as zero, the partial
        // syndromes give Pxy = P + P_xy = D_x + D_y and
        // Qxy = Q + Q_xy = g^x D_x + g^y D_y.
        let mut pxy = p.to_vec();
        let mut qxy = q.to_vec();
        for &(i, d) in others {
            xor_into(&mut pxy, d);
            mul_xor_into(gf_exp2(i as u32), d, &mut qxy);
        }
        // Eliminating D_y: D_x = (Qxy + g^y Pxy) / (g^x + g^y), then
        // D_y = Pxy + D_x. g^x != g^y because x != y and both are < 255.
        let gy = gf_exp2(y as u32);
        let denom_inv = gf_inv(gf_exp2(x as u32) ^ gy);
        for (((bx, by), &pb), &qb) in dx.iter_mut().zip(dy.iter_mut()).zip(&pxy).zip(&qxy) {
            let vx = gf_mul(denom_inv, qb ^ gf_mul(gy, pb));
            *bx = vx;
            *by = pb ^ vx;
        }
    }
}
