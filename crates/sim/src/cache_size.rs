//! [`CacheSize`]: a resident-set size, absolute or relative to the trace's footprint.

use std::fmt;
use std::str::FromStr;

use crate::sim_error::SimError;

/// A size in units (`1000`, `64K`, `4M`) or a percentage of the distinct units (`10%`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum CacheSize {
    /// A number of units.
    Units(u64),
    /// A fraction (0, 1] of the footprint.
    Fraction(f64),
}

/// Sizes a `--sweep` simulates: fractions of the footprint.
pub const SWEEP_FRACTIONS: &[f64] = &[
    0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0,
];

impl CacheSize {
    /// The size in units for a trace with `footprint` distinct units; never below 1.
    pub fn resolve(self, footprint: u64) -> u64 {
        match self {
            Self::Units(n) => n,
            Self::Fraction(f) => ((footprint as f64 * f).round() as u64).max(1),
        }
    }

    /// Parses a comma-separated list.
    pub fn parse_list(s: &str) -> Result<Vec<CacheSize>, SimError> {
        s.split(',')
            .filter(|p| !p.trim().is_empty())
            .map(str::parse)
            .collect()
    }
}

impl FromStr for CacheSize {
    type Err = SimError;

    fn from_str(s: &str) -> Result<Self, SimError> {
        let t = s.trim();
        let bad = |reason: &str| SimError::BadSize {
            spec: s.to_string(),
            reason: reason.to_string(),
        };
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| bad("expected a percentage such as 10%"))?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(bad("percentage must be in (0, 100]"));
            }
            return Ok(Self::Fraction(v / 100.0));
        }
        let (digits, mult) = match t.char_indices().last() {
            Some((i, 'K' | 'k')) => (&t[..i], 1u64 << 10),
            Some((i, 'M' | 'm')) => (&t[..i], 1 << 20),
            Some((i, 'G' | 'g')) => (&t[..i], 1 << 30),
            _ => (t, 1),
        };
        let n: u64 = digits
            .trim()
            .parse()
            .map_err(|_| bad("expected a unit count (1000, 64K, 4M) or a percentage"))?;
        let n = n.checked_mul(mult).ok_or_else(|| bad("too large"))?;
        if n == 0 {
            return Err(bad("must be at least 1 unit"));
        }
        Ok(Self::Units(n))
    }
}

impl fmt::Display for CacheSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Units(n) => write!(f, "{n}"),
            Self::Fraction(x) => write!(f, "{}%", x * 100.0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_suffixes_and_percentages() {
        assert_eq!(
            CacheSize::parse_list("1000, 64K,4M,10%").unwrap(),
            vec![
                CacheSize::Units(1000),
                CacheSize::Units(65536),
                CacheSize::Units(4 << 20),
                CacheSize::Fraction(0.1)
            ]
        );
        assert_eq!(CacheSize::Fraction(0.1).resolve(1234), 123);
        assert_eq!(CacheSize::Fraction(0.001).resolve(10), 1);
    }

    #[test]
    fn rejects_bad_sizes_with_the_input_named() {
        for bad in [
            "0",
            "x",
            "-1",
            "150%",
            "0%",
            "99999999999999999999",
            "20000000000000G",
        ] {
            let e = bad.parse::<CacheSize>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}
