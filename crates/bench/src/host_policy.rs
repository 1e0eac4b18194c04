//! [`HostPolicy`]: what the host does about the page cache of the guests' disk images while
//! they run, the three variants of the scrub evaluation.

use std::fmt;

use crate::bench_error::BenchError;

/// A host-side page-cache policy for the images of running guests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HostPolicy {
    /// Nothing: the kernel's page cache as QEMU's `cache=writeback` leaves it.
    Default,
    /// `posix_fadvise(DONTNEED)` over each whole image every period (the blunt alternative).
    DropAll,
    /// memvisor's scrubber under its frequency control (Singleton's Algorithms 1 and 2).
    Scrub,
}

impl HostPolicy {
    /// Every policy, in the order runs and tables use.
    pub const ALL: [HostPolicy; 3] = [HostPolicy::Default, HostPolicy::DropAll, HostPolicy::Scrub];

    /// The name used on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            HostPolicy::Default => "default",
            HostPolicy::DropAll => "drop-all",
            HostPolicy::Scrub => "scrub",
        }
    }

    /// Parses a name printed by [`HostPolicy::as_str`].
    pub fn parse(text: &str) -> Result<Self, BenchError> {
        Self::ALL
            .into_iter()
            .find(|p| p.as_str() == text)
            .ok_or_else(|| BenchError::bad("policy", text, "expected default, drop-all or scrub"))
    }
}

impl fmt::Display for HostPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_names_are_refused() {
        for p in HostPolicy::ALL {
            assert_eq!(HostPolicy::parse(p.as_str()).unwrap(), p);
        }
        let err = HostPolicy::parse("scrubbed").unwrap_err().to_string();
        assert_eq!(
            err,
            "bad policy \"scrubbed\": expected default, drop-all or scrub"
        );
    }
}
