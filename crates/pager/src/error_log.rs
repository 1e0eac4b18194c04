//! [`ErrorLog`]: prints a region's recorded errors to stderr at a bounded rate.
//!
//! A failing disk or a broken mapping can make every fault fail the same way, thousands of
//! times a second; printing each one buries the first (the one that explains the rest) and
//! fills the disk the log goes to. So at most [`BURST`] lines are printed per [`WINDOW`]; the
//! rest are counted, and the count is printed once the window is over. Every error is still
//! recorded ([`Region::take_errors`](crate::Region::take_errors)) and counted in the stats.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines printed per window at most.
pub const BURST: u32 = 5;
/// The rate-limiting window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// A rate-limited stderr log of one region's errors.
#[derive(Debug)]
pub(crate) struct ErrorLog {
    region: String,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    start: Instant,
    printed: u32,
    suppressed: u64,
}

impl ErrorLog {
    pub fn new(region: &str) -> Self {
        Self {
            region: region.to_string(),
            state: Mutex::new(Window {
                start: Instant::now(),
                printed: 0,
                suppressed: 0,
            }),
        }
    }

    /// Prints `line` unless this window's lines are used up (then counts it).
    pub fn print(&self, line: &dyn std::fmt::Display) {
        if let Some(text) = self.admit(Instant::now(), line) {
            eprint!("{text}");
        }
    }

    /// What to print for `line` at time `now` (with the count of lines suppressed in the last
    /// window, once it is over), or `None` to print nothing.
    fn admit(&self, now: Instant, line: &dyn std::fmt::Display) -> Option<String> {
        let Ok(mut w) = self.state.lock() else {
            return None;
        };
        let mut out = String::new();
        if now.duration_since(w.start) >= WINDOW {
            if w.suppressed > 0 {
                out.push_str(&format!(
                    "memvisor-pager: region {}: {} more errors not printed in the last {} s \
                     (counted in memvisor stat)\n",
                    self.region,
                    w.suppressed,
                    WINDOW.as_secs()
                ));
            }
            *w = Window {
                start: now,
                printed: 0,
                suppressed: 0,
            };
        }
        if w.printed < BURST {
            w.printed += 1;
            out.push_str(&format!("memvisor-pager: {line}\n"));
        } else {
            w.suppressed += 1;
        }
        (!out.is_empty()).then_some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_a_count_per_window() {
        let log = ErrorLog::new("r");
        let t0 = Instant::now();
        let printed = (0..1000)
            .filter(|i| log.admit(t0, &format!("error {i}")).is_some())
            .count();
        assert_eq!(printed, BURST as usize);
        let next = log.admit(t0 + WINDOW, &"later").unwrap();
        assert!(
            next.contains(&format!("{} more errors", 1000 - BURST)),
            "{next}"
        );
        assert!(next.ends_with("memvisor-pager: later\n"), "{next}");
    }
}
