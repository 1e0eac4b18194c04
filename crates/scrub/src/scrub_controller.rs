//! [`ScrubController`]: the seed's scrubbing frequency control (Singleton, Algorithm 2).
//!
//! Called once per tick with the host's memory totals. It scrubs when its countdown of `t`
//! ticks expires (case 1) or under memory pressure: cached memory above `th_frac_cached` of the
//! total, or free memory below `th_frac_free` (case 2). After a scrub that dropped `D` pages
//! out of `C` cached, the period becomes `t * (C + D) / C` after a timer scrub (it grows: the
//! cache is not filling up faster than the timer) and `t * (C - D) / C` after a pressure scrub
//! (it shrinks the more a scrub finds to drop), within `[min_period, max_period]`.
//!
//! Two deviations from the printed pseudo-code, both needed for it to run: the countdown is
//! reset to `t` after a scrub only (the pseudo-code resets it on every call, so the timer case
//! could never fire), and pressure scrubs are at least `min_period` apart (under pressure that
//! scrubbing cannot relieve, e.g. low free memory with little cache, the pseudo-code would scrub
//! on every call).

use std::time::Duration;

use crate::MemInfo;

/// Thresholds and bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScrubControlConfig {
    /// Scrub when cached memory exceeds this fraction of the total (seed: 0.5).
    pub th_frac_cached: f64,
    /// Scrub when free memory falls below this fraction of the total (seed: 0.1).
    pub th_frac_free: f64,
    /// Time between calls to [`ScrubController::tick`].
    pub tick: Duration,
    /// Starting period.
    pub initial_period: Duration,
    /// Shortest period (and least time between pressure scrubs).
    pub min_period: Duration,
    /// Longest period.
    pub max_period: Duration,
}

impl Default for ScrubControlConfig {
    fn default() -> Self {
        Self {
            th_frac_cached: 0.5,
            th_frac_free: 0.1,
            tick: Duration::from_secs(1),
            initial_period: Duration::from_secs(30),
            min_period: Duration::from_secs(5),
            max_period: Duration::from_secs(300),
        }
    }
}

impl ScrubControlConfig {
    /// Checks the fractions and bounds; the error names the bad value.
    pub fn validate(&self) -> Result<(), String> {
        for (name, v) in [
            ("th_frac_cached", self.th_frac_cached),
            ("th_frac_free", self.th_frac_free),
        ] {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} {v} is not a fraction in [0, 1]"));
            }
        }
        if self.tick.is_zero() {
            return Err("tick must be positive".into());
        }
        if self.min_period < self.tick || self.min_period > self.max_period {
            return Err(format!(
                "periods must satisfy tick ({:?}) <= min ({:?}) <= max ({:?})",
                self.tick, self.min_period, self.max_period
            ));
        }
        Ok(())
    }
}

/// Why a scrub runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScrubReason {
    /// The period expired (case 1).
    Timer,
    /// Cached memory too high or free memory too low (case 2).
    Pressure,
}

/// The controller's state; pure (reads nothing, writes nothing).
#[derive(Debug, Clone)]
pub struct ScrubController {
    config: ScrubControlConfig,
    period_ticks: f64,
    countdown: f64,
    since_scrub: f64,
}

impl ScrubController {
    /// A controller at its initial period.
    pub fn new(config: ScrubControlConfig) -> Self {
        let period_ticks = Self::ticks(&config, config.initial_period).clamp(
            Self::ticks(&config, config.min_period),
            Self::ticks(&config, config.max_period),
        );
        Self {
            config,
            period_ticks,
            countdown: period_ticks,
            since_scrub: f64::INFINITY,
        }
    }

    fn ticks(c: &ScrubControlConfig, d: Duration) -> f64 {
        d.as_secs_f64() / c.tick.as_secs_f64()
    }

    /// The current period.
    pub fn period(&self) -> Duration {
        self.config.tick.mul_f64(self.period_ticks)
    }

    /// Whether memory is under pressure by the thresholds.
    pub fn under_pressure(&self, m: &MemInfo) -> bool {
        let total = m.total as f64;
        m.cached as f64 > total * self.config.th_frac_cached
            || (m.free as f64) < total * self.config.th_frac_free
    }

    /// One tick: whether to scrub now, and why.
    pub fn tick(&mut self, m: &MemInfo) -> Option<ScrubReason> {
        self.countdown -= 1.0;
        self.since_scrub += 1.0;
        if self.countdown <= 0.0 {
            Some(ScrubReason::Timer)
        } else if self.under_pressure(m)
            && self.since_scrub >= Self::ticks(&self.config, self.config.min_period)
        {
            Some(ScrubReason::Pressure)
        } else {
            None
        }
    }

    /// Adapts the period after a scrub for `reason` that dropped `dropped` pages out of `cached`
    /// pages cached before it, and restarts the countdown.
    pub fn scrubbed(&mut self, reason: ScrubReason, cached: u64, dropped: u64) {
        if cached > 0 {
            let c = cached as f64;
            let d = dropped.min(cached) as f64;
            self.period_ticks *= match reason {
                ScrubReason::Timer => (c + d) / c,
                ScrubReason::Pressure => (c - d) / c,
            };
        }
        self.period_ticks = self.period_ticks.clamp(
            Self::ticks(&self.config, self.config.min_period),
            Self::ticks(&self.config, self.config.max_period),
        );
        self.countdown = self.period_ticks;
        self.since_scrub = 0.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1 << 30;

    fn mem(cached: u64, free: u64) -> MemInfo {
        MemInfo {
            total: 10 * GB,
            free,
            cached,
            dirty: 0,
        }
    }

    fn cfg() -> ScrubControlConfig {
        ScrubControlConfig {
            tick: Duration::from_secs(1),
            initial_period: Duration::from_secs(10),
            min_period: Duration::from_secs(2),
            max_period: Duration::from_secs(40),
            ..Default::default()
        }
    }

    #[test]
    fn timer_fires_after_the_period_and_grows_it() {
        let mut c = ScrubController::new(cfg());
        let calm = mem(GB, 5 * GB);
        for _ in 0..9 {
            assert_eq!(c.tick(&calm), None);
        }
        assert_eq!(c.tick(&calm), Some(ScrubReason::Timer));
        // Dropped 500 of 1000 cached pages: t = 10 * 1500 / 1000 = 15.
        c.scrubbed(ScrubReason::Timer, 1000, 500);
        assert_eq!(c.period(), Duration::from_secs(15));
        for _ in 0..14 {
            assert_eq!(c.tick(&calm), None);
        }
        assert_eq!(c.tick(&calm), Some(ScrubReason::Timer));
        // Growth stops at the maximum.
        c.scrubbed(ScrubReason::Timer, 1000, 1000);
        c.scrubbed(ScrubReason::Timer, 1000, 1000);
        assert_eq!(c.period(), Duration::from_secs(40));
    }

    #[test]
    fn pressure_scrubs_early_and_shrinks_the_period() {
        let mut c = ScrubController::new(cfg());
        // Cached above half of memory: scrub on the first tick.
        assert_eq!(c.tick(&mem(6 * GB, 2 * GB)), Some(ScrubReason::Pressure));
        // Dropped 250 of 1000: t = 10 * 750 / 1000 = 7.5.
        c.scrubbed(ScrubReason::Pressure, 1000, 250);
        assert_eq!(c.period(), Duration::from_millis(7500));
        // Free memory below 10%: pressure again, but not before min_period (2 ticks).
        assert_eq!(c.tick(&mem(GB, GB / 2)), None);
        assert_eq!(c.tick(&mem(GB, GB / 2)), Some(ScrubReason::Pressure));
        // Shrinking stops at the minimum.
        c.scrubbed(ScrubReason::Pressure, 1000, 990);
        assert_eq!(c.period(), Duration::from_secs(2));
        // Nothing dropped, nothing cached: the period holds.
        c.scrubbed(ScrubReason::Pressure, 0, 0);
        assert_eq!(c.period(), Duration::from_secs(2));
        assert!(!c.under_pressure(&mem(GB, 5 * GB)));
    }

    #[test]
    fn config_validation_names_the_value() {
        let bad = ScrubControlConfig {
            th_frac_cached: 1.5,
            ..cfg()
        };
        assert!(bad.validate().unwrap_err().contains("th_frac_cached 1.5"));
        let bad = ScrubControlConfig {
            min_period: Duration::from_secs(50),
            ..cfg()
        };
        assert!(bad.validate().is_err());
        assert!(cfg().validate().is_ok());
    }
}
