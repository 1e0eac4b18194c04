//! [`SamplePacer`]: how long the fault loop waits between access samples, so that sampling
//! never costs the program more than a bounded rate of minor faults.
//!
//! A sample drops the page-table entries of every resident chunk; the first touch of each run
//! of resident pages afterwards is a userfaultfd minor fault, a round trip through the
//! handler of 25 to 35 µs of the program's time here (`docs/benchmarks.md`, Run J). A stream
//! touches a few hundred chunks a second, one run each: sampling every second costs it
//! nothing measurable. A program reading scattered pages touches thousands of one-page runs:
//! a Zipf reader under a 256 MiB budget took 14,500 minor faults a second with a sample a
//! second, 15% of its speed, and the reference bits they set saved no page-in (Zipf over
//! 384 MiB: 244k to 268k page-ins in 9.5 s with them, 261k without).
//!
//! So the interval adapts, like TCP's retransmission timer backs off: after each sample the
//! minor faults taken since the last one are a rate; above [`MAX_MINOR_FAULT_RATE`] the
//! interval doubles (up to [`MAX_STRETCH`] times the configured one), below a quarter of it
//! it halves (down to the configured one). The policy still gets reference bits from every
//! chunk touched since the last sample, only less often when they are expensive.
//!
//! A sample is taken only while it can inform an eviction soon ([`samples_can_inform_eviction`]):
//! the region can hold more than its budget and already holds at least half of it. A region
//! that fits its budget (a guest whose budget covers its RAM) never needs a victim, and each
//! sample cost it minor faults and then write-protect faults on every page it wrote again: a
//! TCG guest reading its disk under `memvisor run` with nothing paged took 11,000 page faults
//! a second in its vCPU thread (none without memvisor) and ran 4 to 10% slower. The kernel
//! likewise scans no LRU while memory is free.
//!
//! The count is the region's faults on resident pages, whatever dropped their entries: besides
//! samples, a page-out attempt that gave up on its victim, and a second fault message for a
//! page already mapped (threads faulting together). Both are rare beside the samples' (0 in
//! the Zipf reader's 9.5 s with sampling off).

use std::time::{Duration, Instant};

/// Minor faults a second sampling may cost a region before its samples are spaced out: about
/// 3% of one thread's time at 30 µs each.
pub(crate) const MAX_MINOR_FAULT_RATE: f64 = 1_000.0;

/// The longest interval, as a multiple of the configured one.
pub(crate) const MAX_STRETCH: u32 = 16;

/// The sampling schedule of one fault loop.
#[derive(Debug, Clone)]
pub(crate) struct SamplePacer {
    /// The configured interval: the shortest.
    base: Duration,
    /// The interval now.
    interval: Duration,
    /// The region's resident-fault count at the last sample, and when it was taken.
    last: Option<(u64, Instant)>,
    /// When the next sample is due.
    due: Instant,
}

impl SamplePacer {
    /// Samples every `base` while minor faults stay cheap, the first `base` after `now`.
    pub fn new(base: Duration, now: Instant) -> Self {
        Self {
            base,
            interval: base,
            last: None,
            due: now + base,
        }
    }

    /// When the next sample is due.
    pub fn due(&self) -> Instant {
        self.due
    }

    /// A sample was just taken at `now`, when the region had taken `resident_faults` faults on
    /// resident pages in all: the interval until the next one (due then).
    pub fn after_sample(&mut self, resident_faults: u64, now: Instant) -> Duration {
        if let Some((faults, at)) = self.last {
            let seconds = now.saturating_duration_since(at).as_secs_f64();
            if seconds > 0.0 {
                let rate = resident_faults.saturating_sub(faults) as f64 / seconds;
                if rate > MAX_MINOR_FAULT_RATE {
                    self.interval = (self.interval * 2).min(self.base * MAX_STRETCH);
                } else if rate < MAX_MINOR_FAULT_RATE / 4.0 {
                    self.interval = (self.interval / 2).max(self.base);
                }
            }
        }
        self.last = Some((resident_faults, now));
        self.due = now + self.interval;
        self.interval
    }

    /// A sample was due at `now` and not taken (it could inform no eviction): the next is due
    /// one interval later. The interval stays; the next sample's fault rate counts from the
    /// last one taken.
    pub fn skipped(&mut self, now: Instant) -> Duration {
        self.due = now + self.interval;
        self.interval
    }
}

/// Whether an access sample of a region of `region_pages` pages with a budget of
/// `budget_pages`, `resident_pages` of them in memory now, can inform an eviction soon: the
/// region can outgrow its budget and holds at least half of it. Under pressure a region holds
/// at least three quarters (the page-out headroom is at most a quarter of the budget), so no
/// sample is skipped there; skipped are those of a region that fits, is still filling, or had
/// its budget raised far above its use.
pub(crate) fn samples_can_inform_eviction(
    region_pages: usize,
    budget_pages: usize,
    resident_pages: usize,
) -> bool {
    region_pages > budget_pages && resident_pages.saturating_mul(2) >= budget_pages
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rounds` samples, each after one interval with `rate` minor faults a second; the
    /// intervals after each, in seconds.
    fn rounds(p: &mut SamplePacer, rate: u64, rounds: usize, faults: &mut u64) -> Vec<u64> {
        (0..rounds)
            .map(|_| {
                let i = p.interval;
                *faults += rate * i.as_secs();
                let now = p.due();
                p.after_sample(*faults, now).as_secs()
            })
            .collect()
    }

    #[test]
    fn expensive_samples_are_spaced_out_and_cheap_ones_come_back() {
        let s = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut p = SamplePacer::new(s, t0);
        assert_eq!(p.due(), t0 + s);
        // The first sample has nothing to compare with.
        assert_eq!(p.after_sample(0, t0 + s), s);
        assert_eq!(p.due(), t0 + 2 * s);
        // 14,500 minor faults in a second: double, each time, up to 16 s.
        let mut faults = 0;
        assert_eq!(
            rounds(&mut p, 14_500, 6, &mut faults),
            vec![2, 4, 8, 16, 16, 16]
        );
        // Between a quarter and all of the budget: kept.
        assert_eq!(rounds(&mut p, 500, 1, &mut faults), vec![16]);
        // A stream's few hundred a second: back down, halving, to the configured interval.
        assert_eq!(rounds(&mut p, 200, 6, &mut faults), vec![8, 4, 2, 1, 1, 1]);
    }

    #[test]
    fn a_skipped_sample_keeps_the_interval_and_its_rate_window() {
        let s = Duration::from_secs(1);
        let t0 = Instant::now();
        let mut p = SamplePacer::new(s, t0);
        p.after_sample(0, t0 + s);
        assert_eq!(p.skipped(t0 + 2 * s), s);
        assert_eq!(p.due(), t0 + 3 * s);
        // 3,000 faults over the two seconds since the last sample taken: 1,500 a second,
        // above the limit, so the interval doubles.
        assert_eq!(p.after_sample(3_000, t0 + 3 * s), 2 * s);
    }

    #[test]
    fn samples_inform_evictions_only_of_a_region_near_a_budget_it_can_outgrow() {
        // A guest whose budget covers its RAM: never, however full.
        assert!(!samples_can_inform_eviction(65_536, 65_536, 65_536));
        assert!(!samples_can_inform_eviction(65_536, 73_728, 65_536));
        // A region larger than its budget, still filling: not yet.
        assert!(!samples_can_inform_eviction(262_144, 65_536, 0));
        assert!(!samples_can_inform_eviction(262_144, 65_536, 32_767));
        // Half full and more, and under pressure (a quarter of headroom at most): yes.
        assert!(samples_can_inform_eviction(262_144, 65_536, 32_768));
        assert!(samples_can_inform_eviction(262_144, 65_536, 49_152));
        assert!(samples_can_inform_eviction(262_144, 65_536, 65_536));
    }

    #[test]
    fn a_short_configured_interval_stretches_to_sixteen_times_it() {
        let base = Duration::from_millis(100);
        let t0 = Instant::now();
        let mut p = SamplePacer::new(base, t0);
        p.after_sample(0, t0);
        let mut faults = 0;
        for _ in 0..10 {
            faults += 1_000_000;
            let now = p.due();
            p.after_sample(faults, now);
        }
        assert_eq!(p.interval, base * MAX_STRETCH);
    }
}
