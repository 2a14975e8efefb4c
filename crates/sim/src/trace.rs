//! The trace hash: every event of a run folded into 64 bits, so that "same
//! seed, same run" is one comparison.

use crate::rng::mix64;

#[derive(Clone, Debug)]
pub struct TraceHash(u64);

impl TraceHash {
    pub fn new(seed: u64) -> TraceHash {
        TraceHash(seed)
    }

    /// Folds one event, given as words (kind first).
    pub fn fold(&mut self, words: &[u64]) {
        for &w in words {
            self.0 = mix64(self.0.rotate_left(5) ^ w);
        }
        self.0 = mix64(self.0 ^ words.len() as u64);
    }

    pub fn fold_bytes(&mut self, bytes: &[u8]) {
        self.fold(&[hash_bytes(bytes)]);
    }

    pub fn finish(&self) -> u64 {
        self.0
    }
}

/// FNV-1a over 8-byte words, mixed: fast, and stable forever.
pub fn hash_bytes(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ bytes.len() as u64;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0000_0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}
