//! [`ByteSize`]: sizes on the command line (`512M`, `2G`, `1048576`, `25%`) and their display.

use crate::control_error::ControlError;

/// A size as given: absolute bytes or a percentage of something the caller names.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ByteSize {
    /// Bytes.
    Bytes(u64),
    /// Percent (0 < p <= 100) of a reference size.
    Percent(f64),
}

impl ByteSize {
    /// Parses `N`, `N[KMGT][iB|B]` (binary units) or `P%`.
    pub fn parse(input: &str) -> Result<Self, ControlError> {
        let err = |reason: &str| ControlError::Size {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let s = input.trim();
        if let Some(p) = s.strip_suffix('%') {
            let v: f64 = p.trim().parse().map_err(|_| err("not a percentage"))?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(err("percentage must be in (0, 100]"));
            }
            return Ok(Self::Percent(v));
        }
        let upper = s.to_ascii_uppercase();
        let body = upper
            .strip_suffix("IB")
            .or_else(|| upper.strip_suffix('B'))
            .unwrap_or(&upper);
        let (digits, shift) = match body.chars().last() {
            Some('K') => (&body[..body.len() - 1], 10),
            Some('M') => (&body[..body.len() - 1], 20),
            Some('G') => (&body[..body.len() - 1], 30),
            Some('T') => (&body[..body.len() - 1], 40),
            _ => (body, 0),
        };
        let digits = digits.trim();
        if digits.is_empty() {
            return Err(err("no number"));
        }
        let bytes = if let Ok(n) = digits.parse::<u64>() {
            n.checked_mul(1u64 << shift)
                .ok_or_else(|| err("too large"))?
        } else {
            let f: f64 = digits.parse().map_err(|_| {
                err("expected a number with an optional K, M, G or T suffix, or a percentage")
            })?;
            if !f.is_finite() || f < 0.0 {
                return Err(err("not a non-negative number"));
            }
            let b = f * (1u64 << shift) as f64;
            if b >= u64::MAX as f64 {
                return Err(err("too large"));
            }
            b as u64
        };
        Ok(Self::Bytes(bytes))
    }

    /// Bytes, with percentages taken of `reference`.
    pub fn resolve(self, reference: u64) -> u64 {
        match self {
            Self::Bytes(b) => b,
            Self::Percent(p) => (reference as f64 * p / 100.0) as u64,
        }
    }
}

/// `bytes` in binary units with one decimal (`1.5G`, `512M`, `0`).
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("T", 1 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (u, scale) in UNITS {
        if bytes >= scale {
            let v = bytes as f64 / scale as f64;
            return if bytes % scale == 0 {
                format!("{}{u}", bytes / scale)
            } else {
                format!("{v:.1}{u}")
            };
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(ByteSize::parse("4096").unwrap(), ByteSize::Bytes(4096));
        assert_eq!(ByteSize::parse("64K").unwrap(), ByteSize::Bytes(64 << 10));
        assert_eq!(ByteSize::parse("512m").unwrap(), ByteSize::Bytes(512 << 20));
        assert_eq!(ByteSize::parse("2GiB").unwrap(), ByteSize::Bytes(2 << 30));
        assert_eq!(ByteSize::parse("1.5G").unwrap(), ByteSize::Bytes(3 << 29));
        assert_eq!(ByteSize::parse("1T").unwrap(), ByteSize::Bytes(1 << 40));
        assert_eq!(ByteSize::parse("25%").unwrap(), ByteSize::Percent(25.0));
        assert_eq!(ByteSize::Percent(25.0).resolve(1000), 250);
        for bad in [
            "",
            "G",
            "x",
            "-1",
            "1Q",
            "0%",
            "101%",
            "nan%",
            "99999999999T",
            "1e400",
        ] {
            assert!(ByteSize::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(format_bytes(0), "0");
        assert_eq!(format_bytes(1023), "1023");
        assert_eq!(format_bytes(1 << 20), "1M");
        assert_eq!(format_bytes(3 << 29), "1.5G");
    }
}
