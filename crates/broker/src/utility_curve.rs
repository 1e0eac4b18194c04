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
//!
//! An image's host cache limit has a curve of its own ([`UtilityCurve::image_between`]), in the
//! same unit: its CAR model counts the block misses that a larger limit would have saved, by
//! distance, and each is worth what one miss cost the program's reads over the interval.

use memvisor_control::{ImageStatus, ProcessStatus, RefaultStatus};

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
            let delta = refault_delta(old.map(|o| &o.refaults), &r.refaults);
            for (k, s) in saved.iter_mut().enumerate() {
                let extra = (k + 1) as f64 * step as f64 * share;
                *s += interpolated(&delta, extra) * cost_ms / seconds;
            }
        }
        Self::from_points(step, &saved, page_ins)
    }

    /// The curve of an image's host cache limit between snapshots `before` and `after` of its
    /// status, `seconds` apart, at `points` points `step` apart: the block misses each extra
    /// limit would have saved (`cache_refaults`, interpolated inside a bucket) per second, times
    /// what one miss cost the program's reads over the interval (over the image's life if no
    /// timed read missed in it; nothing if none ever did). `page_ins` counts its misses per
    /// second. A model started afresh since `before` (its limit lifted and set again) counts
    /// from zero.
    pub fn image_between(
        before: &ImageStatus,
        after: &ImageStatus,
        seconds: f64,
        step: u64,
        points: usize,
    ) -> Self {
        let step = step.max(1);
        let seconds = seconds.max(1e-3);
        let fresh_model = after.cache_misses < before.cache_misses;
        let old_refaults = (!fresh_model).then_some(&before.cache_refaults);
        let misses =
            after
                .cache_misses
                .saturating_sub(if fresh_model { 0 } else { before.cache_misses });
        let timed = after
            .cache_timed_misses
            .saturating_sub(before.cache_timed_misses);
        let nanos = after
            .cache_miss_read_nanos
            .saturating_sub(before.cache_miss_read_nanos);
        let cost_ms = if timed > 0 {
            nanos as f64 / timed as f64 / 1e6
        } else if after.cache_timed_misses > 0 {
            after.cache_miss_read_nanos as f64 / after.cache_timed_misses as f64 / 1e6
        } else {
            0.0
        };
        let delta = refault_delta(old_refaults, &after.cache_refaults);
        let saved: Vec<f64> = (1..=points)
            .map(|k| interpolated(&delta, k as f64 * step as f64) * cost_ms / seconds)
            .collect();
        Self::from_points(step, &saved, misses as f64 / seconds)
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
fn refault_delta(before: Option<&RefaultStatus>, after: &RefaultStatus) -> RefaultStatus {
    let a = after;
    let b = before.filter(|b| b.unit_bytes == a.unit_bytes && b.sub_buckets == a.sub_buckets);
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
    use memvisor_control::RegionStatus;

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

    /// An image's cache status with 4 KiB blocks: `misses` block misses, `timed` of them in
    /// reads that took `nanos` in all, and refault counts by bucket.
    fn image(misses: u64, timed: u64, nanos: u64, refaults: Vec<u64>) -> ImageStatus {
        ImageStatus {
            path: "/var/lib/a.img".into(),
            cache_limit_bytes: Some(4 << 20),
            cache_misses: misses,
            cache_timed_misses: timed,
            cache_miss_read_nanos: nanos,
            cache_refaults: RefaultStatus {
                unit_bytes: 4096,
                sub_buckets: 16,
                refaults,
                beyond: 0,
                evicted_bytes: 0,
            },
            ..Default::default()
        }
    }

    #[test]
    fn an_image_cache_saves_its_refaults_at_the_cost_of_a_miss() {
        // 32 one-block buckets (128 KiB), then 16 per doubling.
        let before = image(100, 100, 100_000_000, vec![0; 40]);
        let mut refaults = vec![0; 40];
        // 16 KiB more would have saved 200; bucket 35 (152 to 160 KiB more) holds 400.
        refaults[3] = 200;
        refaults[35] = 400;
        // 1000 misses in 2 s, 500 of them in timed reads that took 1 s: 2 ms each.
        let after = image(1100, 600, 1_100_000_000, refaults);
        let c = UtilityCurve::image_between(&before, &after, 2.0, 64 << 10, 4);
        assert_eq!(c.page_ins, 500.0, "misses per second");
        // +64K and +128K: the 200 (400 ms over 2 s); +192K: all 600 (1200 ms in 2 s).
        assert_eq!(c.saved, vec![200.0, 200.0, 600.0, 600.0]);
    }

    #[test]
    fn an_image_cache_without_timed_misses_uses_its_life_or_saves_nothing() {
        let before = image(100, 50, 100_000_000, vec![0; 4]);
        let after = image(200, 50, 100_000_000, vec![0, 100, 0, 0]);
        // No timed miss in the interval: 2 ms each over the image's life.
        let c = UtilityCurve::image_between(&before, &after, 1.0, 8 << 10, 1);
        assert_eq!(c.saved, vec![200.0]);
        // Never timed: what a miss costs is unknown, so nothing is saved.
        let never = |s: &ImageStatus| ImageStatus {
            cache_timed_misses: 0,
            cache_miss_read_nanos: 0,
            ..s.clone()
        };
        let c = UtilityCurve::image_between(&never(&before), &never(&after), 1.0, 8 << 10, 1);
        assert_eq!((c.saved.clone(), c.page_ins), (vec![0.0], 100.0));
    }

    #[test]
    fn a_fresh_image_model_counts_from_zero() {
        // The limit was lifted and set again: the model's counters started over.
        let before = image(5000, 10, 10_000_000, vec![900, 0]);
        let after = image(30, 20, 20_000_000, vec![30, 0]);
        let c = UtilityCurve::image_between(&before, &after, 1.0, 4096, 1);
        assert_eq!((c.saved.clone(), c.page_ins), (vec![30.0], 30.0));
    }

    #[test]
    fn a_recorded_image_cache_shows_its_hot_set_past_the_limit() {
        // Two status answers, 1.007 s apart, of `tests/c/image_broker_workload.c` looping over
        // the first 24 MiB of a 64 MiB image under `memvisor run --image-cache 4M`: every miss
        // is a refault 19 to 20 MiB away (the hot set less the limit); a miss cost 8.05 us.
        let recorded: Vec<ProcessStatus> = include_str!("../testdata/image_hot_24m_under_4m.jsonl")
            .lines()
            .map(
                |l| match memvisor_control::protocol::decode_response(l.as_bytes()) {
                    Ok(memvisor_control::Response::Status { status, .. }) => *status,
                    other => panic!("not a recorded status: {other:?}"),
                },
            )
            .collect();
        let seconds = (recorded[1].at_unix_ms - recorded[0].at_unix_ms) as f64 / 1000.0;
        assert_eq!(seconds, 1.007);
        let (before, after) = (&recorded[0].images[0], &recorded[1].images[0]);
        let c = UtilityCurve::image_between(before, after, seconds, 4 << 20, 8);
        assert_eq!(c.page_ins.round(), 103297.0, "misses per second");
        assert!(c.saved[..4].iter().all(|&s| s == 0.0), "{:?}", c.saved);
        assert!((c.saved[4] - 832.04).abs() < 0.01, "{:?}", c.saved);
        assert_eq!(c.saved[7], c.saved[4], "flat past the hot set");
        // The lookahead climbs straight to the cliff.
        let (x, g) = c.best_step(0, 64 << 20).expect("a step worth taking");
        assert_eq!((x, g.round()), (20 << 20, 832.0));
    }
}
