//! Parsing of sizes (`1G`, `256M`, `64K`, `4096`) and durations (`1s`, `100ms`, `off`; the
//! duration syntax is `memvisor_control::parse_duration`'s).

use std::time::Duration;

use crate::bench_error::BenchError;

/// Parses a byte count with an optional binary suffix `K`, `M`, `G`, `T` (also `KiB`, ...).
pub fn parse_bytes(what: &'static str, text: &str) -> Result<usize, BenchError> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let stripped = lower.trim_end_matches("ib").trim_end_matches('b');
    let (digits, shift) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 10),
        Some('m') => (&stripped[..stripped.len() - 1], 20),
        Some('g') => (&stripped[..stripped.len() - 1], 30),
        Some('t') => (&stripped[..stripped.len() - 1], 40),
        _ => (stripped, 0),
    };
    let n: usize = digits.trim().parse().map_err(|_| {
        BenchError::bad(what, text, "expected a size such as 4096, 64K, 256M or 1G")
    })?;
    n.checked_mul(1usize << shift)
        .ok_or_else(|| BenchError::bad(what, text, "too large"))
}

/// Formats bytes as the shortest exact binary size (`1G`, `256M`, `64K`, `4097`).
pub fn format_bytes(bytes: usize) -> String {
    for (shift, suffix) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1 << shift && bytes % (1 << shift) == 0 {
            return format!("{}{suffix}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// Parses a duration `500ms`, `1s`, `2.5s`, `100us`, or `off` / `none` (`None`).
pub fn parse_interval(what: &'static str, text: &str) -> Result<Option<Duration>, BenchError> {
    memvisor_control::parse_duration(text).map_err(|reason| BenchError::bad(what, text, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_format() {
        assert_eq!(parse_bytes("size", "4096").unwrap(), 4096);
        assert_eq!(parse_bytes("size", "64K").unwrap(), 64 << 10);
        assert_eq!(parse_bytes("size", "256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_bytes("size", "1g").unwrap(), 1 << 30);
        assert!(parse_bytes("size", "1X").is_err());
        assert!(parse_bytes("size", "").is_err());
        assert_eq!(format_bytes(1 << 30), "1G");
        assert_eq!(format_bytes(256 << 20), "256M");
        assert_eq!(format_bytes(4097), "4097");
    }

    #[test]
    fn intervals_parse() {
        assert_eq!(
            parse_interval("sample", "1s").unwrap(),
            Some(Duration::from_secs(1))
        );
        assert_eq!(
            parse_interval("sample", "100ms").unwrap(),
            Some(Duration::from_millis(100))
        );
        assert_eq!(parse_interval("sample", "off").unwrap(), None);
        assert!(parse_interval("sample", "1").is_err());
        assert!(parse_interval("sample", "0s").is_err());
    }
}
