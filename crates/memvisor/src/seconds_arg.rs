//! [`seconds`]: a command-line number of seconds (`--interval 2.5`), checked when the
//! arguments are parsed: a positive, finite number no larger than
//! [`memvisor_control::MAX_DURATION`], so that turning it into a `Duration` or adding it to a
//! clock reading cannot panic.

use memvisor_control::MAX_DURATION;

/// Parses a number of seconds, or says what is wrong with it.
pub fn seconds(text: &str) -> Result<f64, String> {
    let v: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("'{text}' is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("'{text}' must be a positive number of seconds"));
    }
    if v > MAX_DURATION.as_secs_f64() {
        return Err(format!("'{text}' is longer than a year"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_finite_and_at_most_a_year() {
        assert_eq!(seconds("2.5"), Ok(2.5));
        assert_eq!(seconds(" 10 "), Ok(10.0));
        for bad in ["0", "-1", "NaN", "inf", "1e300", "3.2e7", "x", ""] {
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
