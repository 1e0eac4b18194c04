//! [`KsmTuner`]: steers ksmd's scan rate from the rate at which new duplicate pages appear, in
//! the spirit of ksmtuned (which steers from free memory instead).
//!
//! The loop, once per interval of `dt` seconds:
//! 1. Measure the arrival rate of duplicates `r` (pages/s): the growth of the duplicates memvisor
//!    found that do not share a frame yet (KSM has not merged them), plus the pages KSM merged in
//!    the interval (growth of `pages_sharing`), divided by `dt`.
//! 2. ksmd scans at `S = pages_to_scan * 1000 / sleep_millisecs` pages/s, so a new duplicate in
//!    `M` mergeable pages waits about `M / S` seconds, and about `r * M / S` duplicates wait at any
//!    time. The target rate keeps that backlog at `max_backlog` pages: `S* = r * M / max_backlog`.
//! 3. Move up at once (`S = S*` when `S* > S`) and down gently (`S = max(S*, S / 2)`), within
//!    `[min_pages_to_scan * 1000 / max_sleep, max_pages_to_scan * 1000 / min_sleep]`.
//! 4. Express `S` as settings: `sleep_millisecs = default_sleep`, `pages_to_scan = S * sleep /
//!    1000`; below `min_pages_to_scan` the sleep grows instead, above `max_pages_to_scan` it
//!    shrinks (to `min_sleep`).

use std::time::Duration;

use crate::ksm_control::KsmSettings;

/// Bounds and targets of the tuner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KsmTunerConfig {
    /// Fewest pages per wake-up.
    pub min_pages_to_scan: u64,
    /// Most pages per wake-up.
    pub max_pages_to_scan: u64,
    /// Shortest sleep (ms).
    pub min_sleep_ms: u64,
    /// Longest sleep (ms).
    pub max_sleep_ms: u64,
    /// Sleep used when the rate fits the page bounds (ms).
    pub default_sleep_ms: u64,
    /// Duplicates allowed to wait for ksmd at any time (pages).
    pub max_backlog: u64,
}

impl Default for KsmTunerConfig {
    fn default() -> Self {
        Self {
            min_pages_to_scan: 64,
            max_pages_to_scan: 16_384,
            min_sleep_ms: 10,
            max_sleep_ms: 2_000,
            default_sleep_ms: 20,
            max_backlog: 1_024,
        }
    }
}

/// One decision of the tuner, with the numbers behind it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TunerStep {
    /// Measured arrival rate of duplicates (pages/s).
    pub duplicate_rate: f64,
    /// Target scan rate (pages/s) before smoothing and bounds.
    pub target_rate: f64,
    /// Chosen scan rate (pages/s).
    pub scan_rate: f64,
    /// Settings expressing the chosen rate.
    pub settings: KsmSettings,
}

/// The control loop's state; pure (reads nothing, writes nothing).
#[derive(Debug, Clone)]
pub struct KsmTuner {
    config: KsmTunerConfig,
    rate: f64,
    last_unmerged: Option<u64>,
}

impl KsmTuner {
    /// Starts at the slowest rate.
    pub fn new(config: KsmTunerConfig) -> Self {
        let mut t = Self {
            config,
            rate: 0.0,
            last_unmerged: None,
        };
        t.rate = t.min_rate();
        t
    }

    fn min_rate(&self) -> f64 {
        self.config.min_pages_to_scan as f64 * 1000.0 / self.config.max_sleep_ms.max(1) as f64
    }

    fn max_rate(&self) -> f64 {
        self.config.max_pages_to_scan as f64 * 1000.0 / self.config.min_sleep_ms.max(1) as f64
    }

    /// One step: `unmerged_duplicates` found by memvisor's scan now, `merged_in_interval` pages
    /// KSM merged meanwhile, `mergeable_pages` in ksmd's scope, over an interval `dt`.
    pub fn step(
        &mut self,
        unmerged_duplicates: u64,
        merged_in_interval: u64,
        mergeable_pages: u64,
        dt: Duration,
    ) -> TunerStep {
        let secs = dt.as_secs_f64().max(1e-3);
        let growth = match self.last_unmerged {
            Some(prev) => unmerged_duplicates.saturating_sub(prev),
            None => unmerged_duplicates,
        };
        self.last_unmerged = Some(unmerged_duplicates);
        let duplicate_rate = (growth + merged_in_interval) as f64 / secs;
        let target_rate =
            duplicate_rate * mergeable_pages as f64 / self.config.max_backlog.max(1) as f64;
        let smoothed = if target_rate > self.rate {
            target_rate
        } else {
            target_rate.max(self.rate / 2.0)
        };
        self.rate = smoothed.clamp(self.min_rate(), self.max_rate());
        TunerStep {
            duplicate_rate,
            target_rate,
            scan_rate: self.rate,
            settings: self.settings(),
        }
    }

    /// The current rate as KSM settings (`run = 1`).
    pub fn settings(&self) -> KsmSettings {
        let c = &self.config;
        let mut sleep = c.default_sleep_ms.clamp(c.min_sleep_ms, c.max_sleep_ms);
        let mut pages = (self.rate * sleep as f64 / 1000.0).round() as u64;
        if pages < c.min_pages_to_scan {
            pages = c.min_pages_to_scan;
            sleep = ((pages as f64 * 1000.0 / self.rate).round() as u64)
                .clamp(c.min_sleep_ms, c.max_sleep_ms);
        } else if pages > c.max_pages_to_scan {
            pages = c.max_pages_to_scan;
            sleep = ((pages as f64 * 1000.0 / self.rate).round() as u64)
                .clamp(c.min_sleep_ms, c.max_sleep_ms);
        }
        KsmSettings {
            run: 1,
            pages_to_scan: pages,
            sleep_millisecs: sleep,
        }
    }

    /// The current scan rate (pages/s).
    pub fn scan_rate(&self) -> f64 {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(s: KsmSettings) -> f64 {
        s.pages_to_scan as f64 * 1000.0 / s.sleep_millisecs as f64
    }

    #[test]
    fn speeds_up_on_new_duplicates_and_decays_when_quiet() {
        let c = KsmTunerConfig::default();
        let mut t = KsmTuner::new(c);
        // Slowest at start: 64 pages every 2 s.
        assert_eq!(
            t.settings(),
            KsmSettings {
                run: 1,
                pages_to_scan: 64,
                sleep_millisecs: 2000
            }
        );
        // 1000 new duplicates in 10 s over 262144 mergeable pages: r = 100/s,
        // S* = 100 * 262144 / 1024 = 25600 pages/s -> 512 pages every 20 ms.
        let s = t.step(1000, 0, 262_144, Duration::from_secs(10));
        assert_eq!(s.duplicate_rate, 100.0);
        assert_eq!(s.target_rate, 25_600.0);
        assert_eq!(
            s.settings,
            KsmSettings {
                run: 1,
                pages_to_scan: 512,
                sleep_millisecs: 20
            }
        );
        // KSM merged 500 of them and nothing new arrived: r = 50/s, target halves, S follows.
        let s = t.step(500, 500, 262_144, Duration::from_secs(10));
        assert_eq!(s.duplicate_rate, 50.0);
        assert_eq!(rate(s.settings), 12_800.0);
        // Quiet: halves each step, down to the floor of 32 pages/s, never below.
        let mut last = f64::MAX;
        for _ in 0..20 {
            let s = t.step(0, 0, 262_144, Duration::from_secs(10));
            assert!(s.scan_rate <= last);
            last = s.scan_rate;
        }
        assert_eq!(last, 32.0);
        // A burst beyond the ceiling is capped at 16384 pages every 10 ms.
        let s = t.step(10_000_000, 0, 1 << 30, Duration::from_secs(1));
        assert_eq!(
            s.settings,
            KsmSettings {
                run: 1,
                pages_to_scan: 16_384,
                sleep_millisecs: 10
            }
        );
    }
}
