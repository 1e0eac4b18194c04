//! [`StraddledDrops`]: the page ranges of an image whose drop from the host page cache left
//! clean pages behind because a large folio straddled an end, kept to be merged with the next
//! adjacent drop.
//!
//! `posix_fadvise(DONTNEED)` drops only the page-cache folios a range covers whole: a drop of a
//! few pages inside a large folio (a 64 KiB write, readahead) leaves the whole folio cached.
//! Drops of neighbouring pieces one at a time (sequential small reads into guest RAM for the
//! exclusive host cache, the cache limit's victims evicted one block at a time) would then
//! never drop it. So such a range is kept, and the next drop of a range it overlaps or touches
//! takes it in: the merged range covers the folio once all of it is dropped. Both users keep
//! at most [`StraddledDrops::MAX`] ranges, forgetting the oldest (a forgotten range's folio
//! just stays cached until the kernel reclaims it).
//!
//! Used by the exact exclusive host cache ([`crate::host_cache`]; a range the guest no longer
//! holds is cut out with [`StraddledDrops::forget`]) and the per-image cache limit
//! ([`crate::image_cache_limit`], which cuts a merged range around the blocks its model holds
//! again before dropping it).

/// The largest folio the page cache makes with 4 KiB pages (PMD order): how far a folio
/// straddling an end of a dropped range can reach into it.
pub(crate) const MAX_FOLIO: u64 = 2 << 20;

/// Ranges `[start, end)` whose drop left clean pages cached (a large folio straddling an end),
/// oldest first.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StraddledDrops {
    ranges: Vec<(u64, u64)>,
}

impl StraddledDrops {
    /// Most ranges kept by [`StraddledDrops::keep`].
    pub const MAX: usize = 64;

    /// No range is kept.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The kept ranges `[start, end)`, oldest first.
    #[cfg(test)]
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// Takes out every kept range that overlaps or touches `[start, end)`, and those that
    /// overlap or touch what they add, and returns their union with `[start, end)`: the range
    /// to drop now. `None` (and nothing taken) when no kept range touches it.
    pub fn merge(&mut self, start: u64, end: u64) -> Option<(u64, u64)> {
        let (mut s, mut e) = (start, end);
        let mut merged = false;
        while let Some(i) = self.ranges.iter().position(|&(ks, ke)| ks <= e && ke >= s) {
            let (ks, ke) = self.ranges.remove(i);
            (s, e) = (s.min(ks), e.max(ke));
            merged = true;
        }
        merged.then_some((s, e))
    }

    /// Keeps `[start, end)`, whose drop left clean pages cached, as the newest range; when
    /// [`StraddledDrops::MAX`] or more are kept, the oldest is forgotten first. Of a range
    /// longer than two [`MAX_FOLIO`]s only its ends are kept, as two ranges: only a folio
    /// straddling an end leaves pages behind, and a kept range must not grow with every merge
    /// (a merged range hundreds of MiB long, dropped again, took the readahead of a stream
    /// that had come back to it since).
    pub fn keep(&mut self, start: u64, end: u64) {
        if end.saturating_sub(start) > 2 * MAX_FOLIO {
            self.ranges.push((start, start + MAX_FOLIO));
            self.ranges.push((end - MAX_FOLIO, end));
        } else {
            self.ranges.push((start, end));
        }
        self.forget_oldest_over_max();
    }

    /// `[start, end)` must no longer be dropped by a merge: it is cut out of the kept ranges.
    /// What is left of a range on either side stays (after the others, oldest first); a range
    /// cut in two may take the count over [`StraddledDrops::MAX`], and the oldest go then.
    pub fn forget(&mut self, start: u64, end: u64) {
        let mut left = Vec::new();
        self.ranges.retain(|&(ks, ke)| {
            if ke <= start || ks >= end {
                return true;
            }
            if ks < start {
                left.push((ks, start));
            }
            if ke > end {
                left.push((end, ke));
            }
            false
        });
        self.ranges.extend(left);
        self.forget_oldest_over_max();
    }

    fn forget_oldest_over_max(&mut self) {
        let over = self.ranges.len().saturating_sub(Self::MAX);
        self.ranges.drain(..over);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_takes_in_every_kept_range_it_overlaps_or_touches() {
        let mut d = StraddledDrops::default();
        assert!(d.is_empty());
        assert_eq!(d.merge(0, 10), None, "nothing kept");
        d.keep(0, 10);
        d.keep(20, 30);
        d.keep(40, 50);
        d.keep(60, 70);
        // Apart from every kept range: nothing taken.
        assert_eq!(d.merge(12, 18), None);
        assert_eq!(d.ranges(), [(0, 10), (20, 30), (40, 50), (60, 70)]);
        // Touching 0..10 and 40..50, overlapping 20..30: the three go; 60..70 stays.
        assert_eq!(d.merge(10, 40), Some((0, 50)));
        assert_eq!(d.ranges(), [(60, 70)]);
        // Inside a kept range: its union is that range.
        assert_eq!(d.merge(62, 64), Some((60, 70)));
        assert!(d.is_empty());
    }

    #[test]
    fn merging_follows_a_chain_of_kept_ranges() {
        // 30..40 touches only what 20..30 adds, 40..45 only what 30..40 adds.
        let mut d = StraddledDrops::default();
        d.keep(40, 45);
        d.keep(30, 40);
        d.keep(20, 30);
        d.keep(50, 60);
        assert_eq!(d.merge(15, 20), Some((15, 45)));
        assert_eq!(d.ranges(), [(50, 60)]);
    }

    #[test]
    fn sequential_pieces_add_up_to_one_range() {
        // Each piece's drop leaves the folio: kept, merged with the next one.
        let mut d = StraddledDrops::default();
        let (mut s, mut e) = (0, 4);
        for p in 1..16 {
            d.keep(s, e);
            (s, e) = d.merge(p * 4, p * 4 + 4).unwrap();
            assert_eq!((s, e), (0, p * 4 + 4));
            assert!(d.is_empty());
        }
    }

    #[test]
    fn a_long_range_keeps_only_its_ends() {
        let mut d = StraddledDrops::default();
        let m = MAX_FOLIO;
        d.keep(10 * m, 12 * m);
        d.keep(20 * m, 30 * m);
        assert_eq!(
            d.ranges(),
            [(10 * m, 12 * m), (20 * m, 21 * m), (29 * m, 30 * m)]
        );
        // The next piece takes in the end it touches, not the middle.
        assert_eq!(d.merge(30 * m, 31 * m), Some((29 * m, 31 * m)));
        assert_eq!(d.merge(25 * m, 26 * m), None);
    }

    #[test]
    fn at_most_max_ranges_are_kept_the_oldest_forgotten() {
        let mut d = StraddledDrops::default();
        let n = StraddledDrops::MAX as u64 + 10;
        for i in 0..n {
            d.keep(i * 100, i * 100 + 10);
        }
        assert_eq!(d.ranges().len(), StraddledDrops::MAX);
        assert_eq!(d.ranges()[0], (1000, 1010), "the ten oldest went");
        assert_eq!(
            d.ranges().last(),
            Some(&((n - 1) * 100, (n - 1) * 100 + 10))
        );
        // A forgotten range no longer merges.
        assert_eq!(d.merge(0, 5), None);
        assert_eq!(d.merge(1005, 1020), Some((1000, 1020)));
        assert_eq!(d.ranges().len(), StraddledDrops::MAX - 1);
    }

    #[test]
    fn a_forgotten_range_is_cut_out() {
        let mut d = StraddledDrops::default();
        d.keep(0, 40);
        d.keep(50, 60);
        d.keep(70, 80);
        // Cuts 0..40 in two and 50..60 on its left; 70..80 is apart (touching is not
        // overlapping).
        d.forget(10, 20);
        d.forget(45, 55);
        d.forget(80, 90);
        assert_eq!(d.ranges(), [(70, 80), (0, 10), (20, 40), (55, 60)]);
        // Covering a range whole takes it out.
        d.forget(0, 10);
        assert_eq!(d.ranges(), [(70, 80), (20, 40), (55, 60)]);
        // What was cut out no longer merges; a range touching what is left takes it in.
        assert_eq!(d.merge(12, 18), None);
        assert_eq!(d.merge(10, 20), Some((10, 40)));
    }

    #[test]
    fn a_cut_never_takes_the_count_over_max() {
        let mut d = StraddledDrops::default();
        for i in 0..StraddledDrops::MAX as u64 {
            d.keep(i * 100, i * 100 + 50);
        }
        // Cutting 0..50 in two: the oldest (what is left of it keeps its place after the
        // others) goes.
        d.forget(10, 20);
        assert_eq!(d.ranges().len(), StraddledDrops::MAX);
        assert_eq!(d.ranges()[0], (200, 250));
        assert_eq!(d.ranges()[StraddledDrops::MAX - 2..], [(0, 10), (20, 50)]);
        d.keep(10_000, 10_010);
        assert_eq!(d.ranges().len(), StraddledDrops::MAX);
        assert_eq!(d.merge(0, 10), Some((0, 10)));
        assert_eq!(d.ranges().len(), StraddledDrops::MAX - 1);
    }
}
