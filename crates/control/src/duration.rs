//! Parsing of durations as the command lines spell them: `500ms`, `1s`, `2.5s`, `100us`, or
//! `off` / `none`.

use std::time::Duration;

/// The longest duration accepted: a year. No setting of memvisor's means more, and a time
/// this far ahead can be added to any clock reading without overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 24 * 3600);

/// Parses `500ms`, `1s`, `2.5s`, `100us` (a positive, finite amount with its unit, at most
/// [`MAX_DURATION`]) or `off` / `none` (`Ok(None)`). The error says what was expected.
pub fn parse_duration(text: &str) -> Result<Option<Duration>, &'static str> {
    const EXPECTED: &str = "expected a duration such as 1s, 100ms, 50us or off";
    let t = text.trim().to_ascii_lowercase();
    if t == "off" || t == "none" {
        return Ok(None);
    }
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(EXPECTED);
    };
    let v: f64 = num.trim().parse().map_err(|_| EXPECTED)?;
    if !(v.is_finite() && v > 0.0) {
        return Err(EXPECTED);
    }
    match Duration::try_from_secs_f64(v * scale) {
        Ok(d) if d <= MAX_DURATION => Ok(Some(d)),
        _ => Err("longer than a year"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("1s"), Ok(Some(Duration::from_secs(1))));
        assert_eq!(
            parse_duration("100ms"),
            Ok(Some(Duration::from_millis(100)))
        );
        assert_eq!(
            parse_duration(" 2.5S "),
            Ok(Some(Duration::from_millis(2500)))
        );
        assert_eq!(parse_duration("50us"), Ok(Some(Duration::from_micros(50))));
        assert_eq!(parse_duration("off"), Ok(None));
        assert_eq!(parse_duration("none"), Ok(None));
        for bad in ["1", "0s", "-1ms", "nans", "fast", ""] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        // Before, 1e300s panicked (Duration::from_secs_f64) and 1e19s passed, to overflow
        // the Instant it was added to.
        for long in ["1e300s", "1e19s", "366000000s", "1e20ms"] {
            assert_eq!(parse_duration(long), Err("longer than a year"), "{long}");
        }
        assert_eq!(parse_duration("31536000s"), Ok(Some(MAX_DURATION)));
    }
}
