//! Deterministic elementary functions: `ln`, `exp`, `ln_1p`, `exp_m1` built only from IEEE 754
//! `+ - * /` (each correctly rounded, so bit-identical on every platform), unlike the platform
//! `libm` behind `f64::ln` and friends, whose last bit may differ between C libraries.
//!
//! Accuracy is a few ulps, ample for sampling; what matters is that a workload seed produces the
//! same requests everywhere.

/// ln(2) split so that `k * LN2_HI` is exact for |k| < 2^11 (the classic fdlibm split).
const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
const LOG2_E: f64 = std::f64::consts::LOG2_E;

/// `1 / k!` for k in `0..N`, evaluated at compile time (IEEE arithmetic, so the same values
/// everywhere).
const fn inverse_factorials<const N: usize>() -> [f64; N] {
    let mut c = [1.0; N];
    let mut k = 1;
    while k < N {
        c[k] = c[k - 1] / k as f64;
        k += 1;
    }
    c
}

/// `1 / (2k + 1)` for k in `0..N`.
const fn inverse_odds<const N: usize>() -> [f64; N] {
    let mut c = [1.0; N];
    let mut k = 0;
    while k < N {
        c[k] = 1.0 / (2 * k + 1) as f64;
        k += 1;
    }
    c
}

/// Taylor coefficients of e^x to degree 14 (remainder < 1e-18 for |x| < 0.35).
const EXP_COEFFS: [f64; 15] = inverse_factorials();
/// Taylor coefficients of e^x to degree 21, for e^x - 1 with |x| < 0.5 (remainder < 1e-21).
const EXPM1_COEFFS: [f64; 22] = inverse_factorials();
/// Coefficients of atanh(s) / s = sum z^k / (2k + 1), z = s^2, to z^12.
const ATANH_COEFFS: [f64; 13] = inverse_odds();

/// `sum c[k] x^k` by Horner's rule.
fn polynomial(c: &[f64], x: f64) -> f64 {
    c.iter().rev().fold(0.0, |acc, &ck| acc * x + ck)
}

/// 2^k for k in -1022..=1023, exactly.
fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// e^x.
pub(crate) fn exp(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x > 709.782_712_893_384 {
        return f64::INFINITY;
    }
    if x < -745.2 {
        return 0.0;
    }
    // x = k ln2 + r with |r| <= ln2 / 2.
    let k = (x * LOG2_E).round();
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let t = polynomial(&EXP_COEFFS, r);
    let k = k as i32;
    if k > 1023 {
        t * pow2(1023) * pow2(k - 1023)
    } else if k < -1022 {
        t * pow2(-1022) * pow2(k + 1022)
    } else {
        t * pow2(k)
    }
}

/// e^x - 1, accurate near 0.
pub(crate) fn exp_m1(x: f64) -> f64 {
    if x.abs() < 0.5 {
        // x * (1/1! + x/2! + x^2/3! + ...).
        x * polynomial(&EXPM1_COEFFS[1..], x)
    } else {
        exp(x) - 1.0
    }
}

/// The natural logarithm.
pub(crate) fn ln(x: f64) -> f64 {
    if x.is_nan() || x < 0.0 {
        return f64::NAN;
    }
    if x == 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_infinite() {
        return x;
    }
    let mut x = x;
    let mut e: i32 = 0;
    if x < f64::MIN_POSITIVE {
        x *= pow2(54);
        e -= 54;
    }
    let bits = x.to_bits();
    e += ((bits >> 52) & 0x7ff) as i32 - 1023;
    let mut m = f64::from_bits((bits & ((1u64 << 52) - 1)) | (1023u64 << 52));
    if m > std::f64::consts::SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // ln m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.172: odd series to s^25.
    let s = (m - 1.0) / (m + 1.0);
    let t = polynomial(&ATANH_COEFFS, s * s);
    let e = f64::from(e);
    e * LN2_HI + (e * LN2_LO + 2.0 * s * t)
}

/// ln(1 + x), accurate near 0.
pub(crate) fn ln_1p(x: f64) -> f64 {
    if x.is_nan() || x < -1.0 {
        return f64::NAN;
    }
    if x.is_infinite() {
        return x;
    }
    let u = 1.0 + x;
    if u == 1.0 {
        x
    } else {
        // The rounding error of 1 + x cancels in x / (u - 1) (Goldberg's trick).
        ln(u) * (x / (u - 1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64) -> bool {
        a == b || (a - b).abs() <= 4.0 * f64::EPSILON * b.abs().max(f64::MIN_POSITIVE)
    }

    #[test]
    fn agrees_with_libm() {
        let mut x = 1e-300;
        while x < 1e300 {
            assert!(close(ln(x), x.ln()), "ln {x}: {} vs {}", ln(x), x.ln());
            x *= 1.37;
        }
        assert!(close(ln(5e-324), 5e-324f64.ln()));
        let mut x = -700.0;
        while x < 700.0 {
            assert!(close(exp(x), x.exp()), "exp {x}: {} vs {}", exp(x), x.exp());
            x += 0.731;
        }
        for &x in &[
            -0.9, -0.49, -0.3, -1e-5, -1e-12, 0.0, 1e-12, 1e-5, 0.2, 0.49, 0.5, 3.0, 40.0,
        ] {
            assert!(close(exp_m1(x), x.exp_m1()), "expm1 {x}");
            assert!(close(ln_1p(x), x.ln_1p()), "ln1p {x}");
        }
    }

    #[test]
    fn ln2_split_is_exact_enough() {
        assert_eq!(LN2_HI + LN2_LO, std::f64::consts::LN_2);
        assert_eq!(LN2_HI.to_bits() & 0x1f_ffff, 0, "k * LN2_HI must be exact");
    }

    #[test]
    fn coefficients() {
        assert_eq!(EXP_COEFFS[..4], [1.0, 1.0, 0.5, 1.0 / 6.0]);
        assert_eq!(ATANH_COEFFS[..3], [1.0, 1.0 / 3.0, 0.2]);
        assert_eq!(EXPM1_COEFFS[21], EXPM1_COEFFS[20] / 21.0);
    }

    #[test]
    fn edge_cases() {
        assert!(ln(-1.0).is_nan());
        assert_eq!(ln(0.0), f64::NEG_INFINITY);
        assert_eq!(ln(1.0), 0.0);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(1000.0), f64::INFINITY);
        assert_eq!(exp(-1000.0), 0.0);
        assert_eq!(ln_1p(-1.0), f64::NEG_INFINITY);
        assert!(ln_1p(-2.0).is_nan());
    }
}
