//! [`Permutation`]: a keyed pseudo-random bijection of `0..n`, in O(1) memory.
//!
//! A balanced Feistel network permutes the smallest even-bit power-of-two domain covering `n`
//! (at most 4n); cycle walking (re-applying until the value falls below `n`) restricts it to
//! `0..n`. Expected work per call is below four network evaluations, for any `n` up to 2^64 - 1.

use crate::rng::{mix64, SplitMix64};

const ROUNDS: usize = 4;

/// A fixed shuffle of `0..n`, chosen by a key.
#[derive(Debug, Clone)]
pub(crate) struct Permutation {
    n: u64,
    half_bits: u32,
    mask: u64,
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `0..n` (`n >= 1`) selected by `key`.
    pub(crate) fn new(n: u64, key: u64) -> Self {
        debug_assert!(n >= 1);
        let bits = if n <= 1 {
            0
        } else {
            64 - (n - 1).leading_zeros()
        };
        let bits = bits.max(2).next_multiple_of(2);
        let half_bits = bits / 2;
        let mut sm = SplitMix64::new(key);
        let keys = std::array::from_fn(|_| sm.next_u64());
        Self {
            n,
            half_bits,
            mask: (1u64 << half_bits) - 1,
            keys,
        }
    }

    fn network(&self, x: u64) -> u64 {
        let mut left = x >> self.half_bits;
        let mut right = x & self.mask;
        for key in self.keys {
            let f = mix64(right ^ key) & self.mask;
            (left, right) = (right, left ^ f);
        }
        (left << self.half_bits) | right
    }

    /// The image of `x`, which must be below `n`.
    pub(crate) fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        let mut y = self.network(x);
        while y >= self.n {
            y = self.network(y);
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_a_bijection() {
        for n in (1..300).chain([1000, 4096, 4097, 65_537]) {
            let p = Permutation::new(n, n * 7);
            let mut seen = vec![false; n as usize];
            for x in 0..n {
                let y = p.apply(x);
                assert!(y < n && !seen[y as usize], "n={n} x={x} y={y}");
                seen[y as usize] = true;
            }
        }
    }

    #[test]
    fn scatters_and_depends_on_the_key() {
        let p = Permutation::new(1_000_000, 1);
        let q = Permutation::new(1_000_000, 2);
        let a: Vec<u64> = (0..10).map(|x| p.apply(x)).collect();
        let b: Vec<u64> = (0..10).map(|x| q.apply(x)).collect();
        assert_ne!(a, b);
        // Consecutive inputs do not land next to each other.
        assert!(a.windows(2).all(|w| w[0].abs_diff(w[1]) > 1), "{a:?}");
        let big = Permutation::new(u64::MAX, 3);
        for x in [0, 1, u64::MAX - 1] {
            assert!(big.apply(x) < u64::MAX);
        }
    }
}
