//! [`RefaultHistory`]: a ghost list of evicted units that measures, online, how many misses
//! more memory would have saved: the upper part of a miss-ratio curve.
//!
//! The technique is the kernel's *refault distance* (Linux `mm/workingset.c`, Johannes Weiner,
//! 2014): when a unit is evicted, remember how much had been evicted before it (a stamp); when
//! it is needed again (a refault), the size evicted since the eviction began, its own
//! included, is its distance `d`. For an LRU
//! cache of capacity `C`, the unit's stack distance at the refault is at most `C + d` (every
//! unit that pushed it out or came in since is counted in `d`, repeats included), so a cache
//! larger by `d` would have kept it: a refault at distance `d` is a hit gained with `d` more
//! memory. Counting refaults by distance (in buckets) gives, for every extra size `x`, a lower
//! bound of the misses saved with `x` more: a ghost list in the sense of ARC's B lists or the
//! shadow queues of utility-based partitioning, in one `u64` per unit and a few counters.
//!
//! Distances are counted in log-linear buckets ([`RefaultScale`], as HdrHistogram does):
//! `2 * sub` buckets one `unit` wide, then `sub` buckets per doubling, so the relative
//! resolution is `1 / sub` at every distance and a region of any size (a 48 GiB arena, a 1 GiB
//! guest) needs a few hundred buckets.
//!
//! Sizes are in the caller's unit (the pager counts pages, the simulator units). The stamp
//! array is indexed by a dense unit index `0..units` and allocated at construction; nothing is
//! allocated afterwards. A refault does not clear the stamp: a pager that brings a unit back
//! in several page-ins counts each at the distance from the unit's eviction to that page-in,
//! which grows with what is evicted in between (each page's own refault distance, as the
//! kernel counts it); the next eviction of the unit stamps it anew. Which page-ins are
//! refaults is the caller's to know: a page that was not in memory when its unit was evicted
//! left earlier, farther away than this stamp says, so the pager counts only page-ins of pages
//! its chunk held at its eviction (a bit per page in its chunk table). With it, a density run
//! of guests reading uniformly counted what such reads save within about a tenth. Counting
//! every page-in of a unit at the distance of its first refault instead (a larger cache would
//! have kept the whole unit) was measured and dropped: five times what those reads save, as a
//! chunk that comes back with one page and grows again in memory is not the whole unit LRU's
//! argument is about (`docs/benchmarks.md`, "Refault distances of chunks paged in a page at a
//! time").

/// Log-linear distance buckets: `2 * sub` buckets of width `unit`, then `sub` buckets per
/// doubling of the distance. Bucket `k` holds distances in `(lower(k), upper(k)]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefaultScale {
    /// Width of the first buckets (at least 1).
    pub unit: u64,
    /// Buckets per doubling (at least 1).
    pub sub: u64,
}

impl RefaultScale {
    /// A scale with first buckets `unit` wide and `sub` buckets per doubling.
    pub fn new(unit: u64, sub: u64) -> Self {
        Self {
            unit: unit.max(1),
            sub: sub.max(1),
        }
    }

    /// The bucket of distance `d` (at least 1; 0 counts as 1).
    pub fn bucket(&self, d: u64) -> usize {
        // v: 0-based distance in units, rounded up.
        let v = d.max(1).div_ceil(self.unit) - 1;
        let sub = self.sub;
        if v < sub.saturating_mul(2) {
            return v as usize;
        }
        // Group g >= 1 covers [sub * 2^g, sub * 2^(g+1)) with buckets 2^g units wide.
        let g = (v / sub).ilog2() as u64;
        let offset = (v - (sub << g)) >> g;
        (2 * sub + (g - 1) * sub + offset) as usize
    }

    /// The largest distance of bucket `k`.
    ///
    /// Saturates at `u64::MAX` for buckets past the range of distances (a scale or a bucket
    /// count from another process's answer need not be sane).
    pub fn upper(&self, k: usize) -> u64 {
        let (k, sub) = (k as u64, self.sub);
        let two_sub = sub.saturating_mul(2);
        let v_max = if k < two_sub {
            k
        } else {
            let g = 1 + (k - two_sub) / sub;
            let o = (k - two_sub) % sub;
            shl_saturating(sub, g)
                .saturating_add(shl_saturating(o, g))
                .saturating_add(shl_saturating(1, g) - 1)
        };
        v_max.saturating_add(1).saturating_mul(self.unit)
    }

    /// The largest distance of the bucket before `k` (0 for the first).
    pub fn lower(&self, k: usize) -> u64 {
        if k == 0 {
            0
        } else {
            self.upper(k - 1)
        }
    }

    /// Buckets needed for distances up to `max`.
    pub fn buckets_for(&self, max: u64) -> usize {
        self.bucket(max) + 1
    }
}

/// Refault distances of a resident set, counted in log-linear buckets.
#[derive(Debug, Clone)]
pub struct RefaultHistory {
    /// Per unit: the evicted total before its last eviction, plus one; 0 for no ghost.
    stamps: Vec<u64>,
    /// Total size evicted so far.
    evicted: u64,
    /// The distance buckets.
    scale: RefaultScale,
    /// Refaults by distance bucket.
    buckets: Vec<u64>,
    /// Refaults farther than the last bucket.
    beyond: u64,
}

/// Where a refault was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refault {
    /// In bucket `k`: saved by `scale.upper(k)` more memory, not by `scale.lower(k)`.
    Bucket(usize),
    /// Farther than the last bucket.
    Beyond,
}

impl RefaultHistory {
    /// A history for units `0..units`, with buckets of `scale` for distances up to `max`.
    pub fn new(units: usize, scale: RefaultScale, max: u64) -> Self {
        Self {
            stamps: vec![0; units],
            evicted: 0,
            scale,
            buckets: vec![0; scale.buckets_for(max)],
            beyond: 0,
        }
    }

    /// The distance buckets.
    pub fn scale(&self) -> RefaultScale {
        self.scale
    }

    /// Number of buckets.
    pub fn bucket_count(&self) -> usize {
        self.buckets.len()
    }

    /// Unit `unit` leaves memory with `size` of it resident. Out-of-range units are ignored.
    pub fn evicted(&mut self, unit: usize, size: u64) {
        if let Some(s) = self.stamps.get_mut(unit) {
            *s = self.evicted + 1;
            self.evicted += size;
        }
    }

    /// Unit `unit` is read back in: returns where the refault was counted, or `None` if the
    /// unit has no ghost (never evicted, forgotten, or out of range).
    pub fn refault(&mut self, unit: usize) -> Option<Refault> {
        let stamp = *self.stamps.get(unit)?;
        if stamp == 0 {
            return None;
        }
        let distance = self.evicted - (stamp - 1);
        let k = self.scale.bucket(distance);
        match self.buckets.get_mut(k) {
            Some(b) => {
                *b += 1;
                Some(Refault::Bucket(k))
            }
            None => {
                self.beyond += 1;
                Some(Refault::Beyond)
            }
        }
    }

    /// Drops unit `unit`'s ghost (its content was discarded: a later miss is not a refault).
    pub fn forget(&mut self, unit: usize) {
        if let Some(s) = self.stamps.get_mut(unit) {
            *s = 0;
        }
    }

    /// Refaults counted in each bucket so far.
    pub fn buckets(&self) -> &[u64] {
        &self.buckets
    }

    /// Refaults farther than the last bucket so far.
    pub fn beyond(&self) -> u64 {
        self.beyond
    }

    /// Total size evicted so far.
    pub fn evicted_total(&self) -> u64 {
        self.evicted
    }

    /// Misses that `extra` more memory would have saved so far (a lower bound for LRU): the
    /// refaults in every bucket that lies wholly within `extra`.
    pub fn saved_with(&self, extra: u64) -> u64 {
        saved_with(&self.buckets, self.scale, extra)
    }
}

/// Refaults in the buckets of `scale` that lie wholly within `extra` (what `extra` more memory
/// saves, a lower bound), for any copy of a [`RefaultHistory`]'s buckets.
pub fn saved_with(buckets: &[u64], scale: RefaultScale, extra: u64) -> u64 {
    buckets
        .iter()
        .enumerate()
        .take_while(|&(k, _)| scale.upper(k) <= extra)
        .map(|(_, &n)| n)
        .sum()
}

/// `x << g`, or `u64::MAX` when bits would be lost.
fn shl_saturating(x: u64, g: u64) -> u64 {
    if x == 0 {
        0
    } else if g >= 64 || x > u64::MAX >> g {
        u64::MAX
    } else {
        x << g
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_from_an_untrusted_answer_saturate_instead_of_overflowing() {
        // A scale and bucket numbers as a lying process might report them: before, `2 * sub`
        // and the shifts overflowed (a panic in debug builds, wrapped bounds in release).
        let s = RefaultScale::new(4096, u64::MAX / 2 + 7);
        assert_eq!(s.upper(usize::MAX), u64::MAX);
        assert_eq!(s.bucket(u64::MAX), (u64::MAX / 4096) as usize);
        let s = RefaultScale::new(4096, 16);
        assert_eq!(s.upper(100_000), u64::MAX);
        assert!(s.upper(40) < s.upper(41));
        assert_eq!(shl_saturating(3, 63), u64::MAX);
        assert_eq!(shl_saturating(1, 63), 1 << 63);
        assert_eq!(shl_saturating(0, 200), 0);
    }

    /// Linear buckets of `width` (a `sub` large enough that no doubling is reached).
    fn linear(width: u64) -> RefaultScale {
        RefaultScale::new(width, 1 << 20)
    }

    #[test]
    fn distance_is_what_was_evicted_in_between() {
        let mut h = RefaultHistory::new(8, linear(2), 8);
        assert_eq!(h.buckets().len(), 4);
        assert_eq!(h.refault(0), None, "never evicted");
        h.evicted(0, 1);
        assert_eq!(
            h.refault(0),
            Some(Refault::Bucket(0)),
            "distance 1: its own size"
        );
        h.evicted(1, 1); // stamp 1
        h.evicted(2, 3); // total 5
        assert_eq!(h.refault(1), Some(Refault::Bucket(1)), "distance 4");
        assert_eq!(h.refault(2), Some(Refault::Bucket(1)), "distance 3");
        h.evicted(3, 1);
        h.evicted(4, 10);
        assert_eq!(h.refault(3), Some(Refault::Beyond), "distance 11");
        assert_eq!(h.buckets(), &[1, 2, 0, 0]);
        assert_eq!(h.beyond(), 1);
        assert_eq!(h.evicted_total(), 16);
        assert_eq!(h.saved_with(0), 0);
        assert_eq!(
            h.saved_with(3),
            1,
            "distances 3 and 4 share a bucket: not within 3"
        );
        assert_eq!(h.saved_with(4), 3);
        assert_eq!(h.saved_with(100), 3);
    }

    #[test]
    fn forgotten_and_out_of_range_units_are_not_refaults() {
        let mut h = RefaultHistory::new(2, linear(1), 2);
        h.evicted(1, 1);
        h.forget(1);
        assert_eq!(h.refault(1), None);
        h.evicted(9, 5);
        assert_eq!(h.evicted_total(), 1, "an unknown unit evicts nothing");
        assert_eq!(h.refault(9), None);
        h.forget(9);
    }

    #[test]
    fn a_refault_keeps_the_stamp_until_the_next_eviction() {
        let mut h = RefaultHistory::new(2, linear(1), 8);
        h.evicted(0, 1);
        h.evicted(1, 2);
        assert_eq!(h.refault(0), Some(Refault::Bucket(2)));
        assert_eq!(
            h.refault(0),
            Some(Refault::Bucket(2)),
            "a second page-in, same eviction"
        );
        h.evicted(0, 1);
        assert_eq!(h.refault(0), Some(Refault::Bucket(0)), "its own size only");
    }

    #[test]
    fn log_linear_buckets_tile_the_distances() {
        let s = RefaultScale::new(256, 4);
        // 8 buckets of 256, then 4 per doubling: 512 wide up to 4096, 1024 wide up to 8192.
        let uppers: Vec<u64> = (0..14).map(|k| s.upper(k)).collect();
        assert_eq!(
            uppers,
            [256, 512, 768, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 5120, 6144]
        );
        // Every distance falls in the bucket whose bounds hold it, bounds never overlap.
        for d in 1..20_000u64 {
            let k = s.bucket(d);
            assert!(s.lower(k) < d && d <= s.upper(k), "d {d} bucket {k}");
        }
        assert_eq!(s.bucket(0), 0);
        // A 48 GiB region in pages with 1 MiB units, 16 per doubling: a few hundred buckets.
        let pages = RefaultScale::new(256, 16);
        let n = pages.buckets_for(48 << 18);
        assert!(n < 250, "{n}");
        assert!(pages.upper(n - 1) >= 48 << 18);
        // Relative width at most 1/sub past the linear part.
        for k in 32..n {
            let width = pages.upper(k) - pages.lower(k);
            assert!(width * 16 <= pages.upper(k), "bucket {k}");
        }
    }
}
