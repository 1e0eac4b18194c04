//! [`UtilityCurve`]: what more budget is worth to one managed process, in page-in time saved
//! (milliseconds per second), measured between two of its status snapshots.
//!
//! Each region reports cumulative refault counts by distance
//! ([`RefaultStatus`]): the page-ins that a budget larger by so many bytes would have saved.
//! The difference of two snapshots over the seconds between them is a rate; each page-in saved
//! is worth the region's mean page-in time over the interval (a chunk read by a stream costs
//! more than one page read at random, and the time is what the program waits). A process budget
//! is divided among its regions in proportion to their weight, so `x` more bytes for the
//! process give each region `x` times its share of the budget; the process curve adds the
//! regions' curves at those sizes, interpolating linearly inside a bucket.

use memvisor_control::{ProcessStatus, RefaultStatus, RegionStatus};

/// Page-ins per second that more budget would save, at evenly spaced extra sizes.
#[derive(Debug, Clone, PartialEq)]
pub struct UtilityCurve {
    /// Extra budget between two points, in bytes.
    pub step_bytes: u64,
    /// `saved[k]`: milliseconds of page-in time per second that `(k + 1) * step_bytes` more
    /// would have saved (non-decreasing).
    pub saved: Vec<f64>,
    /// Page-ins per second over the interval, all of them.
    pub page_ins: f64,
}

impl UtilityCurve {
    /// A curve of `points` points `step` apart from recorded rates (tests, recorded runs):
    /// `saved[k]` at `(k + 1) * step`; made non-decreasing.
    pub fn from_points(step: u64, saved: &[f64], page_ins: f64) -> Self {
        let mut best: f64 = 0.0;
        let saved = saved
            .iter()
            .map(|&s| {
                best = best.max(s.max(0.0));
                best
            })
            .collect();
        Self {
            step_bytes: step.max(1),
            saved,
            page_ins,
        }
    }

    /// The curve of a process between snapshots `before` and `after`, `seconds` apart, at
    /// `points` points `step` apart. Regions are matched by name; a region missing from
    /// `before` (new) counts from zero.
    pub fn between(
        before: &ProcessStatus,
        after: &ProcessStatus,
        seconds: f64,
        step: u64,
        points: usize,
    ) -> Self {
        let step = step.max(1);
        let seconds = seconds.max(1e-3);
        let mut saved = vec![0.0; points];
        let mut page_ins = 0.0;
        let budget = after.budget_bytes.max(1) as f64;
        for r in &after.regions {
            let old = before.regions.iter().find(|o| o.name == r.name);
            let ins = r.page_ins.saturating_sub(old.map_or(0, |o| o.page_ins));
            page_ins += ins as f64 / seconds;
            // Mean page-in cost over the interval (over the region's life if none happened).
            let nanos = r
                .page_in_nanos
                .saturating_sub(old.map_or(0, |o| o.page_in_nanos));
            let cost_ms = if ins > 0 {
                nanos as f64 / ins as f64 / 1e6
            } else {
                r.page_in_nanos as f64 / r.page_ins.max(1) as f64 / 1e6
            };
            let share = r.budget_bytes as f64 / budget;
            let delta = refault_delta(old, r);
            for (k, s) in saved.iter_mut().enumerate() {
                let extra = (k + 1) as f64 * step as f64 * share;
                *s += interpolated(&delta, extra) * cost_ms / seconds;
            }
        }
        Self::from_points(step, &saved, page_ins)
    }

    /// Milliseconds of page-in time per second that `extra` more bytes would save (linear
    /// between points, flat after the last).
    pub fn saved_with(&self, extra: u64) -> f64 {
        if extra == 0 || self.saved.is_empty() {
            return 0.0;
        }
        let pos = extra as f64 / self.step_bytes as f64;
        let k = pos.floor() as usize;
        let at = |i: usize| -> f64 {
            if i == 0 {
                0.0
            } else {
                self.saved[(i - 1).min(self.saved.len() - 1)]
            }
        };
        let frac = pos - k as f64;
        at(k) + (at(k + 1) - at(k)) * frac
    }

    /// Milliseconds per second saved per MiB of the first step: the marginal utility at the
    /// current budget.
    pub fn marginal_per_mib(&self) -> f64 {
        self.saved.first().copied().unwrap_or(0.0) / (self.step_bytes as f64 / (1 << 20) as f64)
    }

    /// The curve as seen from `given` bytes further up: what `x` more saves beyond `given`.
    pub fn gain_beyond(&self, given: u64, x: u64) -> f64 {
        self.saved_with(given + x) - self.saved_with(given)
    }

    /// Utility-based partitioning's lookahead (Qureshi and Patt 2006): among the extra sizes
    /// `k * step` beyond `given` up to `limit`, the one that saves the most time per byte,
    /// so a cliff further up is seen past a flat stretch. `(bytes, milliseconds saved per
    /// second)`;
    /// `None` if nothing within `limit` saves anything.
    pub fn best_step(&self, given: u64, limit: u64) -> Option<(u64, f64)> {
        let mut best: Option<(u64, f64)> = None;
        let mut x = self.step_bytes;
        while x <= limit {
            let g = self.gain_beyond(given, x);
            let better = match best {
                None => g > 0.0,
                Some((bx, bg)) => g / x as f64 > bg / bx as f64,
            };
            if better {
                best = Some((x, g));
            }
            x += self.step_bytes;
        }
        best
    }
}

/// `after`'s refault counts minus `before`'s, bucket by bucket (all of `after` if the buckets
/// changed or `before` is absent).
fn refault_delta(before: Option<&RegionStatus>, after: &RegionStatus) -> RefaultStatus {
    let a = &after.refaults;
    let b = before
        .map(|r| &r.refaults)
        .filter(|b| b.unit_bytes == a.unit_bytes && b.sub_buckets == a.sub_buckets);
    RefaultStatus {
        unit_bytes: a.unit_bytes,
        sub_buckets: a.sub_buckets,
        refaults: a
            .refaults
            .iter()
            .enumerate()
            .map(|(k, &n)| {
                n.saturating_sub(b.and_then(|b| b.refaults.get(k).copied()).unwrap_or(0))
            })
            .collect(),
        beyond: a.beyond.saturating_sub(b.map_or(0, |b| b.beyond)),
        evicted_bytes: a
            .evicted_bytes
            .saturating_sub(b.map_or(0, |b| b.evicted_bytes)),
    }
}

/// Refaults that `extra` more bytes save, the bucket `extra` ends in counted in proportion.
fn interpolated(curve: &RefaultStatus, extra: f64) -> f64 {
    if curve.unit_bytes == 0 || extra <= 0.0 {
        return 0.0;
    }
    let scale = curve.scale();
    let mut total = 0.0;
    for (k, &n) in curve.refaults.iter().enumerate() {
        let (lo, hi) = (scale.lower(k) as f64, scale.upper(k) as f64);
        if hi <= extra {
            total += n as f64;
        } else {
            if extra > lo {
                total += n as f64 * (extra - lo) / (hi - lo);
            }
            break;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A region whose page-ins cost 1 ms each.
    fn region(name: &str, budget: u64, page_ins: u64, refaults: Vec<u64>) -> RegionStatus {
        RegionStatus {
            name: name.into(),
            budget_bytes: budget,
            page_ins,
            page_in_nanos: page_ins * 1_000_000,
            refaults: RefaultStatus {
                unit_bytes: 1 << 20,
                sub_buckets: 16,
                refaults,
                beyond: 0,
                evicted_bytes: 0,
            },
            ..Default::default()
        }
    }

    fn process(budget: u64, regions: Vec<RegionStatus>) -> ProcessStatus {
        ProcessStatus {
            budget_bytes: budget,
            regions,
            ..Default::default()
        }
    }

    #[test]
    fn rates_between_snapshots_with_regions_weighted_by_budget() {
        let before = process(
            4 << 20,
            vec![
                region("ram", 3 << 20, 10, vec![0, 0, 0, 0]),
                region("arena", 1 << 20, 0, vec![0, 0, 0, 0]),
            ],
        );
        let after = process(
            4 << 20,
            vec![
                region("ram", 3 << 20, 110, vec![20, 40, 0, 40]),
                region("arena", 1 << 20, 20, vec![20, 0, 0, 0]),
            ],
        );
        let c = UtilityCurve::between(&before, &after, 2.0, 4 << 20, 2);
        assert_eq!(c.page_ins, 60.0);
        // +4 MiB: ram gets 3 MiB (buckets 0..3: 60 refaults), arena 1 MiB (20): 80 in 2 s.
        assert_eq!(c.saved[0], 40.0);
        // +8 MiB: ram 6 MiB (all 100), arena 2 MiB (20).
        assert_eq!(c.saved[1], 60.0);
        assert_eq!(c.saved_with(2 << 20), 20.0, "half way to the first point");
        assert_eq!(c.saved_with(100 << 20), 60.0, "flat after the last point");
        assert_eq!(c.marginal_per_mib(), 10.0);
    }

    #[test]
    fn page_ins_are_weighted_by_their_cost() {
        let before = process(1 << 20, vec![region("ram", 1 << 20, 10, vec![0])]);
        let mut after = process(1 << 20, vec![region("ram", 1 << 20, 20, vec![10])]);
        // The ten page-ins of the interval took 50 ms: 5 ms each.
        after.regions[0].page_in_nanos = before.regions[0].page_in_nanos + 50_000_000;
        let c = UtilityCurve::between(&before, &after, 1.0, 1 << 20, 1);
        assert_eq!(c.saved, vec![50.0]);
        assert_eq!(c.page_ins, 10.0);
    }

    #[test]
    fn a_new_region_counts_from_zero_and_a_changed_width_from_scratch() {
        let before = process(1 << 20, vec![]);
        let after = process(1 << 20, vec![region("ram", 1 << 20, 5, vec![5])]);
        let c = UtilityCurve::between(&before, &after, 1.0, 1 << 20, 1);
        assert_eq!(c.saved, vec![5.0]);
    }

    #[test]
    fn lookahead_sees_past_a_flat_stretch() {
        // Nothing for 3 steps, then 90 at the fourth: 22.5 per step beats a steady 10.
        let cliff = UtilityCurve::from_points(1, &[0.0, 0.0, 0.0, 90.0], 100.0);
        let steady = UtilityCurve::from_points(1, &[10.0, 20.0, 30.0, 40.0], 100.0);
        assert_eq!(cliff.best_step(0, 4), Some((4, 90.0)));
        assert_eq!(steady.best_step(0, 4), Some((1, 10.0)));
        assert_eq!(cliff.best_step(0, 3), None, "the cliff is out of reach");
        assert_eq!(steady.best_step(2, 4), Some((1, 10.0)), "from 2 on");
        assert_eq!(
            UtilityCurve::from_points(1, &[5.0, 3.0], 0.0).saved,
            vec![5.0, 5.0],
            "made non-decreasing"
        );
    }
}
