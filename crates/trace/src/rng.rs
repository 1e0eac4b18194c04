//! [`Rng`]: a small deterministic pseudo-random generator (xoshiro256**, seeded by SplitMix64).
//!
//! Only integer operations, so a seed gives the same stream on every platform and in every
//! build. The generators are the public-domain designs of Blackman and Vigna (SplitMix64:
//! Steele, Lea and Flood 2014; xoshiro256**: Blackman and Vigna 2018).

/// The SplitMix64 output function: a bijective 64-bit mixer with good avalanche.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The SplitMix64 generator: a Weyl sequence passed through [`mix64`].
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(Self::GAMMA);
        mix64(self.state)
    }
}

/// xoshiro256**: 256 bits of state, period 2^256 - 1, passes BigCrush.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    s: [u64; 4],
}

impl Rng {
    /// A generator whose state is four SplitMix64 outputs of `seed` (never all zero).
    pub(crate) fn new(seed: u64) -> Self {
        let mut sm = SplitMix64::new(seed);
        let s = [sm.next_u64(), sm.next_u64(), sm.next_u64(), sm.next_u64()];
        // Four consecutive SplitMix64 outputs are never all zero (mix64 is a bijection of
        // distinct inputs), so the state is valid.
        Self { s }
    }

    /// A generator for stream `stream` of `seed`, independent of other streams.
    pub(crate) fn with_stream(seed: u64, stream: u64) -> Self {
        Self::new(mix64(
            seed ^ mix64(stream.wrapping_add(0x6a09_e667_f3bc_c909)),
        ))
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// A uniform integer in `0..n` without modulo bias (Lemire's multiply-and-reject).
    /// `n` must be at least 1.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        debug_assert!(n > 0);
        let threshold = n.wrapping_neg() % n; // (2^64 - n) mod n
        loop {
            let m = u128::from(self.next_u64()) * u128::from(n);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// 53 uniform random bits, as an integer in `0..2^53`.
    pub(crate) fn next_53(&mut self) -> u64 {
        self.next_u64() >> 11
    }

    /// A uniform float in `[0, 1)` with 53 bits of precision.
    pub(crate) fn next_f64(&mut self) -> f64 {
        self.next_53() as f64 * (1.0 / (1u64 << 53) as f64)
    }
}

/// `p` in `[0, 1]` as a threshold for [`Rng::next_53`]: `next_53() < threshold` has
/// probability `p` (to within 2^-53).
pub(crate) fn probability_threshold(p: f64) -> u64 {
    if p >= 1.0 {
        1u64 << 53
    } else if p > 0.0 {
        (p * (1u64 << 53) as f64) as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_reference_values() {
        // Well-known first outputs of SplitMix64 seeded with 0.
        let mut sm = SplitMix64::new(0);
        assert_eq!(sm.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(sm.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(sm.next_u64(), 0x06c4_5d18_8009_454f);
    }

    #[test]
    fn streams_are_deterministic_and_distinct() {
        let a: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let b: Vec<u64> = (0..5)
            .scan(Rng::new(7), |r, _| Some(r.next_u64()))
            .collect();
        let c: Vec<u64> = (0..5)
            .scan(Rng::with_stream(7, 1), |r, _| Some(r.next_u64()))
            .collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn below_is_in_range_and_roughly_uniform() {
        let mut r = Rng::new(3);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[r.below(10) as usize] += 1;
        }
        for c in counts {
            assert!((9_500..10_500).contains(&c), "{counts:?}");
        }
        assert_eq!(r.below(1), 0);
        for _ in 0..1000 {
            assert!(r.below(u64::MAX) < u64::MAX);
            assert!(r.next_f64() < 1.0);
        }
    }

    #[test]
    fn probability_thresholds() {
        assert_eq!(probability_threshold(0.0), 0);
        assert_eq!(probability_threshold(1.0), 1 << 53);
        assert_eq!(probability_threshold(0.5), 1 << 52);
        let mut r = Rng::new(9);
        let t = probability_threshold(0.25);
        let hits = (0..100_000).filter(|_| r.next_53() < t).count();
        assert!((24_000..26_000).contains(&hits), "{hits}");
    }
}
