//! [`Zipf`]: Zipf-distributed ranks by rejection-inversion.
//!
//! Method: W. Hörmann and G. Derflinger, "Rejection-inversion to generate variates from
//! monotone discrete distributions", ACM TOMACS 6(3), 1996. The continuous density
//! `h(x) = x^-s` dominates the probabilities `k^-s`; a uniform variate is mapped through the
//! inverse of the integral `H` of `h`, rounded to the nearest integer `k`, and accepted if it
//! falls under the step of width 1 around `k`. Setup and sampling are O(1) for any `n` and any
//! exponent `s >= 0` (below 1, at 1, above 1), with an expected number of trials close to 1.
//!
//! All floating point goes through [`crate::detmath`], so samples are identical on every
//! platform.

use crate::detmath::{exp, exp_m1, ln, ln_1p};
use crate::rng::Rng;

/// The largest exponent accepted; beyond it virtually every sample is rank 1 anyway.
pub(crate) const MAX_EXPONENT: f64 = 100.0;

/// A sampler of ranks `1..=n` with `P(k)` proportional to `k^-s`.
#[derive(Debug, Clone)]
pub(crate) struct Zipf {
    n: u64,
    s: f64,
    /// `H(1.5) - h(1)`: the lower end of the integral range.
    h_x1: f64,
    /// `H(n + 0.5)`: the upper end.
    h_n: f64,
    /// Squeeze: `k - x <= squeeze` accepts without evaluating `H`.
    squeeze: f64,
}

impl Zipf {
    /// A sampler over `1..=n` (`n >= 1`) with exponent `s` in `0..=MAX_EXPONENT`.
    pub(crate) fn new(n: u64, s: f64) -> Self {
        debug_assert!(n >= 1 && (0.0..=MAX_EXPONENT).contains(&s));
        let mut z = Self {
            n,
            s,
            h_x1: 0.0,
            h_n: 0.0,
            squeeze: 0.0,
        };
        z.h_x1 = z.big_h(1.5) - 1.0;
        z.h_n = z.big_h(n as f64 + 0.5);
        z.squeeze = 2.0 - z.big_h_inv(z.big_h(2.5) - z.h(2.0));
        z
    }

    /// The number of ranks.
    pub(crate) fn n(&self) -> u64 {
        self.n
    }

    /// `h(x) = x^-s`.
    fn h(&self, x: f64) -> f64 {
        exp(-self.s * ln(x))
    }

    /// `H(x) = (x^(1-s) - 1) / (1 - s)`, or `ln x` when `s = 1`: an antiderivative of `h`.
    fn big_h(&self, x: f64) -> f64 {
        let log_x = ln(x);
        expm1_over_x((1.0 - self.s) * log_x) * log_x
    }

    /// The inverse of `H`.
    fn big_h_inv(&self, y: f64) -> f64 {
        let t = (y * (1.0 - self.s)).max(-1.0);
        exp(ln1p_over_x(t) * y)
    }

    /// A rank in `1..=n`.
    pub(crate) fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_n + rng.next_f64() * (self.h_x1 - self.h_n);
            let x = self.big_h_inv(u);
            let k = (x + 0.5).floor();
            // `as` saturates (NaN to 0); clamp into range.
            let k = (k as u64).clamp(1, self.n);
            let kf = k as f64;
            if kf - x <= self.squeeze || u >= self.big_h(kf + 0.5) - self.h(kf) {
                return k;
            }
        }
    }
}

/// `(e^x - 1) / x`, continuous at 0.
fn expm1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        exp_m1(x) / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// `ln(1 + x) / x`, continuous at 0.
fn ln1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        ln_1p(x) / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frequencies(n: u64, s: f64, draws: usize, seed: u64) -> Vec<f64> {
        let z = Zipf::new(n, s);
        let mut rng = Rng::new(seed);
        let mut counts = vec![0u64; n as usize + 1];
        for _ in 0..draws {
            let k = z.sample(&mut rng);
            assert!((1..=n).contains(&k));
            counts[k as usize] += 1;
        }
        counts.iter().map(|&c| c as f64 / draws as f64).collect()
    }

    fn expected(n: u64, s: f64, k: u64) -> f64 {
        let norm: f64 = (1..=n).map(|i| (i as f64).powf(-s)).sum();
        (k as f64).powf(-s) / norm
    }

    #[test]
    fn matches_theory_for_several_exponents() {
        let draws = 400_000;
        for &s in &[0.0, 0.5, 0.99, 1.0, 1.01, 1.5, 3.0] {
            let n = 1000;
            let f = frequencies(n, s, draws, 42);
            for k in [1u64, 2, 3, 10, 100] {
                let p = expected(n, s, k);
                // Binomial standard deviation; allow 5 sigma plus a little slack.
                let sd = (p * (1.0 - p) / draws as f64).sqrt();
                assert!(
                    (f[k as usize] - p).abs() <= 5.0 * sd + 1e-4,
                    "s={s} k={k}: observed {} expected {p}",
                    f[k as usize]
                );
            }
        }
    }

    #[test]
    fn extreme_parameters_terminate() {
        let mut rng = Rng::new(1);
        for &(n, s) in &[
            (1u64, 0.99),
            (1, 0.0),
            (2, 100.0),
            (u64::MAX, 0.99),
            (u64::MAX, 1.0),
            (u64::MAX, 0.0),
            (u64::MAX, 100.0),
            (1 << 40, 1e-9),
            (1 << 40, 1.0 + 1e-12),
        ] {
            let z = Zipf::new(n, s);
            for _ in 0..10_000 {
                let k = z.sample(&mut rng);
                assert!((1..=n).contains(&k), "n={n} s={s} k={k}");
            }
        }
        let z = Zipf::new(1_000_000, 100.0);
        assert!((0..1000).all(|_| z.sample(&mut rng) == 1));
    }
}
