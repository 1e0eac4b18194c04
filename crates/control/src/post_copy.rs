//! [`PostCopy`]: when a live migration names the pages changed last instead of sending them
//! while the guest is paused. One definition for the `memvisor migrate` option, the control
//! request that carries it and the sender that applies it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// When the last round becomes post-copy.
///
/// Post-copy shortens the pause to the naming of the changed pages (a few milliseconds),
/// whatever their number; in exchange, the destination's guest runs before they all arrived,
/// so losing the source process during the push loses the VM (a lost connection does not: the
/// source reconnects and resumes). `Auto` takes that exchange only where it buys a shorter
/// pause: when the last round would keep the guest paused longer than naming its pages does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PostCopy {
    /// Never: the last round sends every changed page while the guest is paused (precopy).
    Never,
    /// When the last round's pages would take longer to send than
    /// [`AUTO_POST_COPY_ABOVE`](crate::AUTO_POST_COPY_ABOVE) at the rate measured.
    #[default]
    Auto,
    /// Always, whatever the number of pages changed last.
    Always,
}

/// `Auto` turns to post-copy when the last round would take longer than this. Naming the pages
/// instead costs about 3 ms of the pause (reading the change bits at the source, marking the
/// pages at the destination, one acknowledgement), so below this precopy pauses about as
/// briefly and nothing is left at the source after the switch-over.
pub const AUTO_POST_COPY_ABOVE: std::time::Duration = std::time::Duration::from_millis(5);

impl PostCopy {
    /// The names [`FromStr`] takes and [`fmt::Display`] gives.
    pub const NAMES: [&'static str; 3] = ["never", "auto", "always"];

    /// Whether a last round of `pages` pages, which would take `last_round` to send, goes as
    /// post-copy.
    pub fn applies(self, pages: u64, last_round: std::time::Duration) -> bool {
        match self {
            PostCopy::Never => false,
            PostCopy::Always => pages > 0,
            PostCopy::Auto => pages > 0 && last_round > AUTO_POST_COPY_ABOVE,
        }
    }
}

impl FromStr for PostCopy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "never" => Ok(PostCopy::Never),
            "auto" => Ok(PostCopy::Auto),
            "always" => Ok(PostCopy::Always),
            other => Err(format!(
                "'{other}' is not a post-copy mode: expected one of {}",
                Self::NAMES.join(", ")
            )),
        }
    }
}

impl fmt::Display for PostCopy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PostCopy::Never => "never",
            PostCopy::Auto => "auto",
            PostCopy::Always => "always",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn names_round_trip_and_bad_ones_are_named() {
        for name in PostCopy::NAMES {
            assert_eq!(name.parse::<PostCopy>().unwrap().to_string(), name);
        }
        let error = "yes".parse::<PostCopy>().unwrap_err();
        assert_eq!(
            error,
            "'yes' is not a post-copy mode: expected one of never, auto, always"
        );
        assert_eq!(PostCopy::default(), PostCopy::Auto);
    }

    #[test]
    fn auto_applies_only_to_a_long_last_round() {
        let (short, long) = (Duration::from_millis(1), Duration::from_millis(20));
        assert!(!PostCopy::Auto.applies(100, short));
        assert!(PostCopy::Auto.applies(5000, long));
        assert!(!PostCopy::Auto.applies(0, long));
        assert!(PostCopy::Always.applies(1, short));
        assert!(!PostCopy::Always.applies(0, short));
        assert!(!PostCopy::Never.applies(5000, long));
    }
}
