//! The field and the syndromes against values worked out by hand and against
//! independent computations (bitwise multiplication, md's own algorithm), so
//! that the reference deserves its role as oracle. Run through the top-level
//! functions too, whichever backend is compiled in.

mod common;

use common::{block_len, contents};
use platter_parity::{self as parity, reference};
use proptest::prelude::*;

/// Schoolbook carry-less multiplication reduced by 0x11d, one bit at a time:
/// no tables shared with the code under test.
fn slow_mul(a: u8, b: u8) -> u8 {
    let (mut a, mut b, mut product) = (a as u16, b, 0u16);
    while b != 0 {
        if b & 1 == 1 {
            product ^= a;
        }
        a <<= 1;
        if a & 0x100 != 0 {
            a ^= 0x11d;
        }
        b >>= 1;
    }
    product as u8
}

#[test]
fn powers_of_the_generator() {
    for f in [reference::gf_exp2, parity::gf_exp2] {
        assert_eq!(f(0), 1);
        assert_eq!(f(1), 2);
        assert_eq!(f(7), 0x80);
        // x^8 = x^4 + x^3 + x^2 + 1 modulo 0x11d.
        assert_eq!(f(8), 0x1d);
        assert_eq!(f(9), 0x3a);
        // g has order 255: g^255 = 1 and no smaller power is 1.
        assert_eq!(f(255), 1);
        assert_eq!(f(256), 2);
        assert!((1..255).all(|i| f(i) != 1));
    }
}

#[test]
fn multiplication_spot_checks() {
    for mul in [reference::gf_mul, parity::gf_mul] {
        assert_eq!(mul(0, 0x53), 0);
        assert_eq!(mul(0x53, 0), 0);
        assert_eq!(mul(1, 0xa7), 0xa7);
        assert_eq!(mul(3, 7), 9); // no reduction: (x+1)(x^2+x+1) = x^3+1
        assert_eq!(mul(0x80, 2), 0x1d);
        assert_eq!(mul(0x10, 0x10), 0x1d);
        assert_eq!(mul(2, 0x8e), 1);
        assert_eq!(mul(0xff, 0xff), slow_mul(0xff, 0xff));
    }
}

#[test]
fn multiplication_matches_bitwise_reduction_everywhere() {
    for a in 0..=255u8 {
        for b in 0..=255u8 {
            assert_eq!(reference::gf_mul(a, b), slow_mul(a, b), "{a:#x} * {b:#x}");
            assert_eq!(parity::gf_mul(a, b), slow_mul(a, b), "{a:#x} * {b:#x}");
        }
    }
}

#[test]
fn inverses() {
    assert_eq!(reference::gf_inv(1), 1);
    assert_eq!(reference::gf_inv(2), 0x8e);
    for a in 1..=255u8 {
        assert_eq!(slow_mul(a, reference::gf_inv(a)), 1, "inverse of {a:#x}");
        assert_eq!(slow_mul(a, parity::gf_inv(a)), 1, "inverse of {a:#x}");
    }
}

#[test]
#[should_panic(expected = "no inverse")]
fn inverse_of_zero_panics() {
    reference::gf_inv(0);
}

#[test]
#[should_panic(expected = "no inverse")]
fn inverse_of_zero_panics_in_the_dispatched_backend() {
    parity::gf_inv(0);
}

/// P and Q of single-byte blocks.
fn pq_of(bytes: &[u8], gen: fn(&[&[u8]], &mut [u8], &mut [u8])) -> (u8, u8) {
    let blocks: Vec<[u8; 1]> = bytes.iter().map(|&b| [b]).collect();
    let data: Vec<&[u8]> = blocks.iter().map(|b| &b[..]).collect();
    let (mut p, mut q) = ([0u8], [0u8]);
    gen(&data, &mut p, &mut q);
    (p[0], q[0])
}

#[test]
fn syndromes_of_hand_computed_stripes() {
    for gen in [
        reference::gen_pq as fn(&[&[u8]], &mut [u8], &mut [u8]),
        parity::gen_pq,
    ] {
        assert_eq!(pq_of(&[0x5a], gen), (0x5a, 0x5a));
        // Q = 1 + 2*1.
        assert_eq!(pq_of(&[1, 1], gen), (0, 3));
        assert_eq!(pq_of(&[1, 1, 1], gen), (1, 7));
        assert_eq!(pq_of(&[0, 0, 1], gen), (1, 4));
        // 0x80 + 2 * 0x80 = 0x80 + 0x1d.
        assert_eq!(pq_of(&[0x80, 0x80], gen), (0, 0x9d));
        // 1 + 2 + ... + 0x80 = 0xff, plus g^8 = 0x1d.
        assert_eq!(pq_of(&[1; 9], gen), (1, 0xe2));
        assert_eq!(pq_of(&[1, 2, 4], gen), (7, 1 ^ 4 ^ 0x10));
    }
    let data: [&[u8]; 3] = [&[1], &[2], &[4]];
    let mut p = [0u8];
    parity::gen_p(&data, &mut p);
    assert_eq!(p, [7]);
}

/// md's `raid6_int1` gen_syndrome (lib/raid6/int.uc), one byte at a time:
/// Horner's rule from the highest block down, multiplying by 2 as a shift
/// and a conditional XOR of 0x1d.
fn md_gen_syndrome(data: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    let len = data[0].len();
    let z0 = data.len() - 1;
    let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
    for d in 0..len {
        let mut wp = data[z0][d];
        let mut wq = wp;
        for z in (0..z0).rev() {
            let wd = data[z][d];
            wp ^= wd;
            let w2 = if wq & 0x80 != 0 { 0x1d } else { 0 };
            wq = (wq << 1) ^ w2 ^ wd;
        }
        p[d] = wp;
        q[d] = wq;
    }
    (p, q)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn reference_q_matches_md(
        (count, data) in (1..=30usize, block_len())
            .prop_flat_map(|(count, len)| (Just(count), contents(count, len)))
    ) {
        let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let len = data[0].len();
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        reference::gen_pq(&refs, &mut p, &mut q);
        let (md_p, md_q) = md_gen_syndrome(&data);
        prop_assert_eq!(p, md_p, "P, {} blocks", count);
        prop_assert_eq!(q, md_q, "Q, {} blocks", count);
    }

    #[test]
    fn q_update_through_mul_xor_into(
        (index, data, new) in (2..=12usize, block_len())
            .prop_flat_map(|(count, len)| (0..count, contents(count, len), contents(1, len)))
    ) {
        // The read-modify-write identity the engine relies on:
        // Q_new = Q_old + g^i (D_old + D_new).
        let len = data[0].len();
        let mut refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        let (mut p, mut q) = (vec![0u8; len], vec![0u8; len]);
        parity::gen_pq(&refs, &mut p, &mut q);
        let mut delta = data[index].clone();
        parity::xor_into(&mut delta, &new[0]);
        parity::xor_into(&mut p, &delta);
        parity::mul_xor_into(parity::gf_exp2(index as u32), &delta, &mut q);
        refs[index] = &new[0];
        let (want_p, want_q) = md_gen_syndrome(
            &refs.iter().map(|r| r.to_vec()).collect::<Vec<_>>(),
        );
        prop_assert_eq!(p, want_p);
        prop_assert_eq!(q, want_q);
    }
}

#[test]
fn dispatch_names_the_backend() {
    let expected = if cfg!(has_isal) { "isa-l" } else { "reference" };
    assert_eq!(parity::backend_name(), expected);
}
