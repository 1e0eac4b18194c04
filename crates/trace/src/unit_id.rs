//! Unit ids in text: decimal or `0x` hexadecimal numbers, or arbitrary strings hashed to `u64`.

use crate::rng::mix64;

/// Parses a decimal (`123`) or `0x`-hexadecimal (`0x7b`) number; the reason on failure.
pub(crate) fn parse_number(s: &str) -> Result<u64, String> {
    if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        parse_hex(hex).map_err(|why| format!("bad hex number {}: {why}", excerpt(s)))
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse()
            .map_err(|_| format!("number {} overflows u64", excerpt(s)))
    } else {
        Err(format!(
            "expected a decimal or 0x-hexadecimal number, found {}",
            excerpt(s)
        ))
    }
}

/// Parses hexadecimal digits (no prefix) into a `u64`; the reason on failure.
pub(crate) fn parse_hex(hex: &str) -> Result<u64, &'static str> {
    if hex.is_empty() {
        return Err("no digits");
    }
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("not a hex digit");
    }
    u64::from_str_radix(hex, 16).map_err(|_| "overflows u64")
}

/// An id from a CSV field: a number if the field looks like one (all decimal digits, or `0x`
/// followed by anything), else the [`hash_unit_id`] of the field's text.
pub(crate) fn parse_or_hash(s: &str) -> Result<u64, String> {
    let numeric = s.starts_with("0x")
        || s.starts_with("0X")
        || (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()));
    if numeric {
        parse_number(s)
    } else {
        Ok(hash_unit_id(s))
    }
}

/// The fixed hash that maps a non-numeric unit name to a `u64` id: 64-bit FNV-1a of the UTF-8
/// bytes, then the SplitMix64 finalizer. Stable across runs, platforms and versions.
pub fn hash_unit_id(name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in name.as_bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix64(h)
}

/// `s` quoted for an error message, cut to 40 characters.
pub(crate) fn excerpt(s: &str) -> String {
    const MAX: usize = 40;
    match s.char_indices().nth(MAX) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}...", &s[..cut]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers() {
        assert_eq!(parse_number("0"), Ok(0));
        assert_eq!(parse_number("18446744073709551615"), Ok(u64::MAX));
        assert_eq!(parse_number("0xffffffffffffffff"), Ok(u64::MAX));
        assert_eq!(parse_number("0XaB"), Ok(0xab));
        for (s, needle) in [
            ("18446744073709551616", "overflows"),
            ("0x1ffffffffffffffff", "overflows"),
            ("0x", "no digits"),
            ("0xg", "not a hex digit"),
            ("+1", "expected a decimal"),
            ("-1", "expected a decimal"),
            ("1.5", "expected a decimal"),
            ("", "expected a decimal"),
        ] {
            let e = parse_number(s).unwrap_err();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn csv_ids_hash_non_numbers() {
        assert_eq!(parse_or_hash("42"), Ok(42));
        assert_eq!(parse_or_hash("0x10"), Ok(16));
        assert!(parse_or_hash("0xzz").is_err());
        assert!(parse_or_hash("99999999999999999999").is_err());
        let a = parse_or_hash("/tmp/a").unwrap();
        assert_eq!(a, hash_unit_id("/tmp/a"));
        assert_ne!(a, hash_unit_id("/tmp/b"));
        // Pinned: the hash must never change.
        assert_eq!(hash_unit_id(""), mix64(0xcbf2_9ce4_8422_2325));
        assert_eq!(hash_unit_id("a"), mix64(0xaf63_dc4c_8601_ec8c));
    }

    #[test]
    fn excerpts_are_cut() {
        assert_eq!(excerpt("ab"), "\"ab\"");
        let long = "é".repeat(50);
        assert_eq!(excerpt(&long), format!("{:?}...", "é".repeat(40)));
    }
}
