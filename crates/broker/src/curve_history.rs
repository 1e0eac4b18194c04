//! [`CurveHistory`]: what the broker remembers of one claimant's curve between decisions: the
//! snapshot the next curve is measured from, the last curve, and the last curve measured at a
//! smaller size (what the top of its memory saves, [`Claimant::below`](crate::Claimant)).
//!
//! The same for a process's budget (snapshots: [`ProcessStatus`]) and an image's cache limit
//! ([`ImageStatus`]): refaults counted under one size say nothing about another, so a change
//! of size restarts the measurement from the new snapshot, and the curve measured lower down
//! is kept as `below`. A claimant that did nothing at all in an interval loses nothing by
//! giving memory back: `below` is forgotten.

use std::time::Instant;

use memvisor_control::{ImageStatus, ProcessStatus};

use crate::utility_curve::UtilityCurve;

/// Points of each curve.
const CURVE_POINTS: usize = 64;
/// The shortest interval a curve is measured over.
const MIN_SECONDS: f64 = 0.2;

/// A snapshot of a claimant's counters, as the broker reads them.
pub trait Measured: Clone {
    /// The memory the claimant had (budget, or cache limit) when the snapshot was taken.
    fn size(&self) -> u64;
    /// A cumulative count that moves whenever the claimant uses its memory at all (faults,
    /// block accesses).
    fn activity(&self) -> u64;
    /// Its curve from `before` to this snapshot, `seconds` apart.
    fn curve_since(&self, before: &Self, seconds: f64, step: u64) -> UtilityCurve;
}

impl Measured for ProcessStatus {
    fn size(&self) -> u64 {
        self.budget_bytes
    }
    fn activity(&self) -> u64 {
        self.faults()
    }
    fn curve_since(&self, before: &Self, seconds: f64, step: u64) -> UtilityCurve {
        UtilityCurve::between(before, self, seconds, step, CURVE_POINTS)
    }
}

impl Measured for ImageStatus {
    fn size(&self) -> u64 {
        self.cache_limit_bytes.unwrap_or(0)
    }
    fn activity(&self) -> u64 {
        self.cache_hits.saturating_add(self.cache_misses)
    }
    fn curve_since(&self, before: &Self, seconds: f64, step: u64) -> UtilityCurve {
        UtilityCurve::image_between(before, self, seconds, step, CURVE_POINTS)
    }
}

/// One claimant's measurements between decisions.
#[derive(Debug, Clone)]
pub struct CurveHistory<S> {
    /// The snapshot the next curve is measured from, and when it was taken.
    since: S,
    since_at: Instant,
    /// The last curve measured, and the size it was measured at.
    curve: Option<UtilityCurve>,
    measured_at: u64,
    /// The last curve measured at a size lower than now, and that size.
    below: Option<(u64, UtilityCurve)>,
}

impl<S: Measured> CurveHistory<S> {
    /// Starts measuring from `first`, taken at `at`.
    pub fn new(first: S, at: Instant) -> Self {
        Self {
            since: first,
            since_at: at,
            curve: None,
            measured_at: 0,
            below: None,
        }
    }

    /// A new snapshot `now`, taken at `at`: a new curve if the size stayed and enough time
    /// passed, a new start if the size changed. `step`: the curve's spacing.
    pub fn observe(&mut self, now: &S, at: Instant, step: u64) {
        let size = now.size();
        if size != self.since.size() {
            // Refaults measured under another size say nothing about this one: start
            // measuring again from here. A curve measured lower down says what the memory
            // added since then saves.
            if let Some(c) = self.curve.take() {
                if self.measured_at < size {
                    self.below = Some((self.measured_at, c));
                }
            }
            if self.below.as_ref().is_some_and(|(b, _)| *b >= size) {
                self.below = None;
            }
            self.since = now.clone();
            self.since_at = at;
            return;
        }
        let seconds = at.duration_since(self.since_at).as_secs_f64();
        if seconds < MIN_SECONDS {
            return;
        }
        // Idle (no access at all): it loses nothing by giving memory back.
        if now.activity() == self.since.activity() {
            self.below = None;
        }
        self.curve = Some(now.curve_since(&self.since, seconds, step));
        self.measured_at = size;
        self.since = now.clone();
        self.since_at = at;
    }

    /// The last curve measured (`None`: none yet at this size).
    pub fn curve(&self) -> Option<&UtilityCurve> {
        self.curve.as_ref()
    }

    /// The curve measured lower down, as `(how much lower than size, curve)`.
    pub fn below(&self, size: u64) -> Option<(u64, UtilityCurve)> {
        self.below
            .as_ref()
            .map(|(b, c)| (size.saturating_sub(*b), c.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use memvisor_control::RefaultStatus;

    const M: u64 = 1 << 20;

    /// An image under `limit` after `misses` misses, all refaults 1 MiB away, 1 ms each.
    fn image(limit: u64, misses: u64) -> ImageStatus {
        ImageStatus {
            cache_limit_bytes: Some(limit),
            cache_misses: misses,
            cache_timed_misses: misses,
            cache_miss_read_nanos: misses * 1_000_000,
            cache_refaults: RefaultStatus {
                unit_bytes: M,
                sub_buckets: 16,
                refaults: vec![misses],
                beyond: 0,
                evicted_bytes: 0,
            },
            ..Default::default()
        }
    }

    #[test]
    fn a_new_limit_restarts_the_curve_and_keeps_the_one_from_below() {
        let t0 = Instant::now();
        let s = |secs: u64| t0 + Duration::from_secs(secs);
        let mut h = CurveHistory::new(image(4 * M, 0), t0);
        assert!(h.curve().is_none());
        // 100 misses in a second under 4 MiB, each saved by 1 MiB more.
        h.observe(&image(4 * M, 100), s(1), M);
        assert_eq!(h.curve().map(|c| c.saved_with(M)), Some(100.0));
        // Too soon for another curve.
        h.observe(&image(4 * M, 150), s(1) + Duration::from_millis(100), M);
        assert_eq!(h.curve().map(|c| c.saved_with(M)), Some(100.0));
        // The broker grew the limit to 20 MiB: no curve until measured there; the one from
        // 4 MiB is what the top 16 MiB save.
        h.observe(&image(20 * M, 200), s(2), M);
        assert!(h.curve().is_none());
        let (offset, below) = h.below(20 * M).unwrap();
        assert_eq!((offset, below.saved_with(M)), (16 * M, 100.0));
        // Measured at 20 MiB: nothing refaults any more, the curve from below stays.
        let mut fits = image(20 * M, 200);
        fits.cache_hits = 5000;
        h.observe(&fits, s(3), M);
        assert_eq!(h.curve().map(|c| c.saved_with(M)), Some(0.0));
        assert!(h.below(20 * M).is_some());
        // Idle for a second: the memory is free to take.
        h.observe(&fits, s(4), M);
        assert!(h.below(20 * M).is_none());
    }

    #[test]
    fn a_smaller_limit_forgets_a_curve_from_above_it() {
        let t0 = Instant::now();
        let mut h = CurveHistory::new(image(8 * M, 0), t0);
        h.observe(&image(8 * M, 10), t0 + Duration::from_secs(1), M);
        h.observe(&image(16 * M, 10), t0 + Duration::from_secs(2), M);
        assert!(h.below(16 * M).is_some());
        // Back down to 8 MiB: what was measured at 8 MiB is not below any more.
        h.observe(&image(8 * M, 20), t0 + Duration::from_secs(3), M);
        assert!(h.below(8 * M).is_none() && h.curve().is_none());
    }
}
