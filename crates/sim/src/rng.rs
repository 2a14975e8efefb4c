//! A small seedable PRNG (splitmix64) and the helpers the simulator needs.
//!
//! No external crates: the sequence for a seed must never change under us,
//! or every recorded failing seed stops replaying.

/// splitmix64 (Steele, Lea, Flood 2014): one `u64` of state, passes BigCrush,
/// and any seed (0 included) is fine.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

/// One RNG stream per concern, so that drawing one more number for one
/// concern (say, latency) does not shift every later draw of another
/// (say, the workload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stream {
    /// The random scenario: level, geometry, fault schedule.
    Scenario,
    /// Client requests: kinds, offsets, lengths, data.
    Workload,
    /// Member service times.
    Latency,
    /// Fault effects: which byte a corruption flips, which writes a crash keeps.
    Faults,
    /// Silent corruption of stored member bytes ([`crate::run::SilentCorruption`]):
    /// which stripes, members and bytes. Its own stream, drawn only in runs
    /// that have the fault, so every other seed replays as before.
    Corruption,
}

impl Stream {
    fn salt(self) -> u64 {
        match self {
            Stream::Scenario => 0x5ce7_a210_0000_0001,
            Stream::Workload => 0x3057_10ad_0000_0002,
            Stream::Latency => 0x1a7e_9c70_0000_0003,
            Stream::Faults => 0xfa01_7500_0000_0004,
            Stream::Corruption => 0xb175_0770_0000_0005,
        }
    }
}

/// splitmix64's increment: 2^64 over the golden ratio, odd.
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The splitmix64 output function: a bijective 64-bit mix.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng { state: seed }
    }

    /// The stream for one concern of the run with `seed`.
    pub fn stream(seed: u64, stream: Stream) -> Rng {
        Rng::new(mix64(seed ^ stream.salt()))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GOLDEN_GAMMA);
        mix64(self.state)
    }

    /// Uniform in `[0, n)` (Lemire's multiply-high; the bias is < n / 2^64).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[lo, hi]`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo <= hi, "empty range {lo}..={hi}");
        if hi - lo == u64::MAX {
            return self.next_u64();
        }
        lo + self.below(hi - lo + 1)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u32) -> bool {
        self.below(100) < u64::from(percent)
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }

    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let last = self.next_u64().to_le_bytes();
            rest.copy_from_slice(&last[..rest.len()]);
        }
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        self.fill(&mut v);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::stream(7, Stream::Workload);
                move |_| r.next_u64()
            })
            .collect();
        let mut r = Rng::stream(7, Stream::Workload);
        assert_eq!(a, (0..4).map(|_| r.next_u64()).collect::<Vec<_>>());
        let mut other = Rng::stream(7, Stream::Latency);
        assert_ne!(a[0], other.next_u64());
    }

    #[test]
    fn helpers_stay_in_bounds() {
        let mut r = Rng::new(1);
        for n in 1..200 {
            assert!(r.below(n) < n);
            let x = r.range(n, 2 * n);
            assert!((n..=2 * n).contains(&x));
        }
        assert!(!r.chance(0));
        assert!(r.chance(100));
        assert_eq!(r.bytes(13).len(), 13);
        assert_eq!(*r.pick(&[5]), 5);
    }
}
