//! Scalar arithmetic in GF(2^8) as Linux md's RAID-6 defines it: reduction
//! polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d) and generator g = 2.
//!
//! Log/exp tables are built at compile time by a `const fn`, so there is no
//! start-up cost and no lazy-initialisation path to get wrong.

/// The reduction polynomial, bit 8 included.
pub const POLY: u16 = 0x11d;

/// The generator whose powers weight the data blocks in Q.
pub const GENERATOR: u8 = 2;

struct Tables {
    /// `exp[i] = g^i`, stored twice over (510 entries used) so that
    /// `log a + log b` never needs a `% 255`.
    exp: [u8; 512],
    /// `log[g^i] = i`; `log[0]` is never read.
    log: [u8; 256],
}

static TABLES: Tables = build_tables();

const fn build_tables() -> Tables {
    let mut exp = [0u8; 512];
    let mut log = [0u8; 256];
    let mut x: u16 = 1;
    let mut i = 0;
    while i < 255 {
        exp[i] = x as u8;
        exp[i + 255] = x as u8;
        log[x as usize] = i as u8;
        x <<= 1;
        if x & 0x100 != 0 {
            x ^= POLY;
        }
        i += 1;
    }
    Tables { exp, log }
}

pub fn mul(a: u8, b: u8) -> u8 {
    if a == 0 || b == 0 {
        return 0;
    }
    let t = &TABLES;
    t.exp[t.log[a as usize] as usize + t.log[b as usize] as usize]
}

/// Panics on 0, which has no inverse: a zero divisor here means a caller
/// built a singular recovery system, which is a bug, not an I/O condition.
pub fn inv(a: u8) -> u8 {
    assert!(a != 0, "gf_inv: 0 has no inverse in GF(2^8)");
    TABLES.exp[255 - TABLES.log[a as usize] as usize]
}

/// `i` such that g^i = a. Panics on 0, which is no power of g.
pub fn log2(a: u8) -> u8 {
    assert!(a != 0, "gf_log2: 0 is no power of the generator");
    TABLES.log[a as usize]
}

/// g^i; g has order 255, so the exponent wraps there.
pub fn exp2(i: u32) -> u8 {
    TABLES.exp[(i % 255) as usize]
}

/// The whole row `c * b` for every byte `b`: one lookup per byte in the
/// multiply-accumulate loop instead of two logs, an add and a zero test.
pub fn mul_row(c: u8) -> [u8; 256] {
    let mut row = [0u8; 256];
    for (b, out) in row.iter_mut().enumerate() {
        *out = mul(c, b as u8);
    }
    row
}
