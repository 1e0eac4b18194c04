//! What a region does when its swap filesystem is full, and how it says so.
//!
//! A page-out that fails for lack of space (`ENOSPC`, `EDQUOT`) keeps the chunk in memory, over
//! the budget (an overrun chunk, retried at the next page-in). That loses nothing, but a full
//! disk then silently breaks the budget, and printing every failed write floods the log (one
//! line per page-out attempt: thousands a second). So failures for lack of space are grouped
//! into **episodes**: the first failure starts one and is reported once, with figures (swap
//! file, free space, resident memory against the budget); further failures are only counted;
//! the next successful write ends it, reported once too. [`OnSwapFull`] chooses what happens to
//! the program meanwhile: it keeps running over its budget ([`OnSwapFull::Overrun`], the
//! default), or it is stopped with `SIGSTOP` until someone frees space and continues it
//! ([`OnSwapFull::Stop`]; `memvisor run --on-swap-full fail`).
//!
//! During an episode an overrun chunk's page-out is retried at most once per
//! [`RETRY_INTERVAL`], not at every page-in: each attempt checksums a chunk and writes it, most
//! likely in vain. Retried at every page-in, it made each page-in cost 0.5 to 1 ms, and a
//! program reading back what swap still held slowed to a crawl.

use std::fmt;
use std::io;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::region_stats::{add, StatsCounters};
use crate::swap_file::SwapFile;

/// What a region does while its swap filesystem is full.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnSwapFull {
    /// Keep the chunks that could not be written in memory, over the budget, and retry.
    #[default]
    Overrun,
    /// Stop the whole process (`SIGSTOP`) with a message; after `SIGCONT` the write is retried,
    /// and the process stops again if the disk is still full.
    Stop,
}

impl FromStr for OnSwapFull {
    type Err = String;

    /// `overrun`, or `fail` (also spelled `stop`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "overrun" => Ok(Self::Overrun),
            "fail" | "stop" => Ok(Self::Stop),
            other => Err(format!(
                "unknown action '{other}' (expected overrun or fail)"
            )),
        }
    }
}

impl fmt::Display for OnSwapFull {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Overrun => "overrun",
            Self::Stop => "fail",
        })
    }
}

/// Whether a failed write failed for lack of space on the swap filesystem.
pub(crate) fn is_out_of_space(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
}

/// During an episode, the shortest time between a failed write and the next retry of an overrun
/// chunk's page-out.
pub(crate) const RETRY_INTERVAL: Duration = Duration::from_millis(100);

/// The figures an episode's messages give.
pub(crate) struct SwapFigures<'a> {
    /// The region's name.
    pub region: &'a str,
    /// The swap file (its name in messages, its filesystem's free space).
    pub swap: &'a SwapFile,
    /// Bytes resident now and the budget.
    pub resident: u64,
    pub budget: u64,
    /// The bytes one page-out writes at most (a chunk).
    pub chunk: u64,
}

/// The episode state of one region (owned by its fault handler).
#[derive(Debug, Default)]
pub(crate) struct SwapFullEpisodes {
    action: OnSwapFull,
    /// When the current episode started; `None` outside an episode.
    since: Option<Instant>,
    /// Writes failed for lack of space in the current episode.
    failures: u64,
    /// When the last write failed for lack of space.
    last_failure: Option<Instant>,
}

impl SwapFullEpisodes {
    pub fn new(action: OnSwapFull) -> Self {
        Self {
            action,
            ..Self::default()
        }
    }

    /// A write failed for lack of space: starts an episode (reported once) or counts the
    /// failure in the current one; with [`OnSwapFull::Stop`], stops the process.
    pub fn write_failed(
        &mut self,
        stats: &StatsCounters,
        figures: &SwapFigures<'_>,
        e: &io::Error,
    ) {
        add(&stats.swap_full_failures, 1);
        self.failures += 1;
        self.last_failure = Some(Instant::now());
        if self.since.is_none() {
            self.since = Some(Instant::now());
            add(&stats.swap_full_episodes, 1);
            stats
                .swap_full
                .store(1, std::sync::atomic::Ordering::Relaxed);
            let action = match self.action {
                OnSwapFull::Overrun => {
                    "keeping pages in memory over the budget until space is freed \
                     (--on-swap-full overrun)"
                }
                OnSwapFull::Stop => "stopping the program (--on-swap-full fail)",
            };
            eprintln!(
                "memvisor-pager: region {}: swap file {} is full ({e}; {} free on its \
                 filesystem); resident {} of a {} budget; {action}. Further failures are \
                 counted, not printed (memvisor stat: swap-full).",
                figures.region,
                figures.swap.path().display(),
                figures
                    .swap
                    .free_bytes()
                    .map(format_bytes)
                    .unwrap_or_else(|_| "unknown".into()),
                format_bytes(figures.resident),
                format_bytes(figures.budget),
            );
        }
        // A write submitted before the process was stopped and continued can report its
        // failure afterwards: stop only while the filesystem is still short of a chunk.
        let still_full = figures
            .swap
            .free_bytes()
            .map_or(true, |free| free < figures.chunk);
        if self.action == OnSwapFull::Stop && still_full {
            eprintln!(
                "memvisor-pager: region {}: stopping process {} (SIGSTOP) while swap is full; \
                 free space on the filesystem of {}, then send SIGCONT (kill -CONT {}) to go on, \
                 or SIGKILL to end it.",
                figures.region,
                std::process::id(),
                figures.swap.path().display(),
                std::process::id(),
            );
            // SAFETY: plain syscalls on this process; SIGSTOP stops every thread, this one
            // included, until SIGCONT. Nothing is held that another process needs.
            unsafe { libc::kill(libc::getpid(), libc::SIGSTOP) };
        }
    }

    /// Whether an overrun chunk's page-out may be retried at `now`: always outside an episode,
    /// during one once [`RETRY_INTERVAL`] has passed since the last failure.
    pub fn retry_due(&self, now: Instant) -> bool {
        match (self.since, self.last_failure) {
            (Some(_), Some(last)) => now.saturating_duration_since(last) >= RETRY_INTERVAL,
            _ => true,
        }
    }

    /// A write succeeded: ends the current episode, if any (reported once).
    pub fn write_succeeded(&mut self, stats: &StatsCounters, region: &str) {
        let Some(since) = self.since.take() else {
            return;
        };
        stats
            .swap_full
            .store(0, std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "memvisor-pager: region {region}: swap space available again after {:.1} s; {} \
             writes failed for lack of space meanwhile.",
            since.elapsed().as_secs_f64(),
            self.failures
        );
        self.failures = 0;
    }
}

/// `bytes` in the largest binary unit that keeps it at least 1 (`224M`, `1.5G`).
fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["", "K", "M", "G", "T"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0}{}", UNITS[u])
    } else {
        format!("{v:.1}{}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    fn actions_parse_and_print() {
        assert_eq!("overrun".parse(), Ok(OnSwapFull::Overrun));
        assert_eq!("fail".parse(), Ok(OnSwapFull::Stop));
        assert_eq!(OnSwapFull::Stop.to_string(), "fail");
        assert!("ignore".parse::<OnSwapFull>().is_err());
        assert_eq!(OnSwapFull::default(), OnSwapFull::Overrun);
    }

    #[test]
    fn failures_are_grouped_into_episodes() {
        let stats = StatsCounters::default();
        let dir = tempfile::tempdir().unwrap();
        let swap = SwapFile::create(dir.path(), "t", 4096, 1, None).unwrap();
        let figures = SwapFigures {
            region: "r",
            swap: &swap,
            resident: 3 << 20,
            budget: 1 << 20,
            chunk: 1 << 20,
        };
        let full = io::Error::from_raw_os_error(libc::ENOSPC);
        assert!(is_out_of_space(&full));
        assert!(!is_out_of_space(&io::Error::from_raw_os_error(libc::EIO)));
        let mut e = SwapFullEpisodes::new(OnSwapFull::Overrun);
        assert!(e.retry_due(Instant::now()), "no episode: retry at once");
        for _ in 0..5 {
            e.write_failed(&stats, &figures, &full);
        }
        let now = Instant::now();
        assert!(!e.retry_due(now), "just failed");
        assert!(e.retry_due(now + RETRY_INTERVAL), "an interval later");
        assert_eq!(stats.swap_full_episodes.load(Ordering::Relaxed), 1);
        assert_eq!(stats.swap_full_failures.load(Ordering::Relaxed), 5);
        assert_eq!(stats.swap_full.load(Ordering::Relaxed), 1);
        e.write_succeeded(&stats, "r");
        assert_eq!(stats.swap_full.load(Ordering::Relaxed), 0);
        assert!(e.retry_due(Instant::now()), "the episode is over");
        e.write_succeeded(&stats, "r");
        e.write_failed(&stats, &figures, &full);
        assert_eq!(stats.swap_full_episodes.load(Ordering::Relaxed), 2);
        assert_eq!(format_bytes(224 << 20), "224M");
        assert_eq!(format_bytes(3 << 29), "1.5G");
    }
}
