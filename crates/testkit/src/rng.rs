//! The seeded generator of the test suites.

use platter_sim::rng::{mix64, GOLDEN_GAMMA};

/// splitmix64: small, seedable, good enough to pick test inputs.
///
/// The same sequence as the simulator's [`platter_sim::rng::Rng`] for a
/// seed, but [`Rng::below`] is a plain modulo (the tests' recorded seeds
/// were chosen with it), and the state is open so that a test can note it.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next output (the name the test suites have always called it).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(GOLDEN_GAMMA);
        mix64(self.0)
    }

    /// The same as [`Rng::next`].
    pub fn next_u64(&mut self) -> u64 {
        self.next()
    }

    /// In `0..n` (n > 0; a modulo, whose bias does not matter here).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next() % n
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// `len` random bytes: one draw per started 8 bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len + 8);
        while v.len() < len {
            v.extend_from_slice(&self.next().to_le_bytes());
        }
        v.truncate(len);
        v
    }

    /// Fills `buf`: one draw per whole 8 bytes, and one more for the rest
    /// (even when there is none, as the end-to-end images were made).
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        let last = self.next().to_le_bytes();
        let n = rest.len();
        rest.copy_from_slice(&last[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sequence_is_splitmix64() {
        // The first outputs of splitmix64 seeded with 0 (Vigna's reference).
        let mut r = Rng(0);
        assert_eq!(r.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next(), 0x6e78_9e6a_a1b9_65f4);
        let mut sim = platter_sim::rng::Rng::new(7);
        let mut kit = Rng::new(7);
        assert_eq!(sim.next_u64(), kit.next());
    }

    #[test]
    fn bytes_and_fill_draw_as_documented() {
        let mut a = Rng(3);
        let mut b = Rng(3);
        assert_eq!(a.bytes(13).len(), 13);
        let mut buf = [0u8; 13];
        b.fill(&mut buf);
        assert_eq!(a.next(), b.next());
        let mut c = Rng(3);
        c.fill(&mut [0u8; 8]);
        let mut d = Rng(3);
        d.next();
        d.next();
        assert_eq!(c.next(), d.next());
    }
}
