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
//! Sizes are in the caller's unit (the pager counts pages, the simulator units). The stamp
//! array is indexed by a dense unit index `0..units` and allocated at construction; nothing is
//! allocated afterwards. A refault does not clear the stamp: a pager that brings a unit back
//! in several page-ins counts each as saved by the same distance; the next eviction of the
//! unit stamps it anew.

/// Refault distances of a resident set, counted in buckets of equal width.
#[derive(Debug, Clone)]
pub struct RefaultHistory {
    /// Per unit: the evicted total before its last eviction, plus one; 0 for no ghost.
    stamps: Vec<u64>,
    /// Total size evicted so far.
    evicted: u64,
    /// Width of one distance bucket.
    width: u64,
    /// Refaults by distance: bucket `k` holds distances in `(k * width, (k + 1) * width]`.
    buckets: Vec<u64>,
    /// Refaults at a distance of more than `buckets.len() * width`.
    beyond: u64,
}

/// Where a refault was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refault {
    /// In bucket `k`: saved by `(k + 1) * width` more memory, not by `k * width`.
    Bucket(usize),
    /// Farther than the last bucket.
    Beyond,
}

impl RefaultHistory {
    /// A history for units `0..units`, with `buckets` buckets of `width` each (at least 1).
    pub fn new(units: usize, width: u64, buckets: usize) -> Self {
        Self {
            stamps: vec![0; units],
            evicted: 0,
            width: width.max(1),
            buckets: vec![0; buckets.max(1)],
            beyond: 0,
        }
    }

    /// Width of one bucket.
    pub fn width(&self) -> u64 {
        self.width
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
        let k = distance.saturating_sub(1) / self.width;
        match self.buckets.get_mut(k as usize) {
            Some(b) => {
                *b += 1;
                Some(Refault::Bucket(k as usize))
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
        saved_with(&self.buckets, self.width, extra)
    }
}

/// Refaults in the buckets of `width` that lie wholly within `extra` (what `extra` more memory
/// saves, a lower bound), for any copy of a [`RefaultHistory`]'s buckets. A width of 0 saves
/// nothing.
pub fn saved_with(buckets: &[u64], width: u64, extra: u64) -> u64 {
    if width == 0 {
        return 0;
    }
    buckets.iter().take((extra / width) as usize).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_is_what_was_evicted_in_between() {
        let mut h = RefaultHistory::new(8, 2, 4);
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
        assert_eq!(h.saved_with(6), 3);
        assert_eq!(h.saved_with(100), 3);
    }

    #[test]
    fn forgotten_and_out_of_range_units_are_not_refaults() {
        let mut h = RefaultHistory::new(2, 1, 2);
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
        let mut h = RefaultHistory::new(2, 1, 8);
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
}
