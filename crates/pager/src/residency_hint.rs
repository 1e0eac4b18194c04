//! [`ResidencyHint`]: which pages of a region are resident, readable by any thread without
//! asking the fault handler.
//!
//! The chunk table (the handler thread's own) is the truth; this is a copy of its per-page
//! resident bits, updated in the same two places (pages made resident, a chunk leaving
//! memory). Another thread reading it may see a change late, so it is a hint: the preload
//! library's interposed `pread` into guest RAM uses it to skip the false-read preventer when
//! every page the read covers is resident. A page it wrongly takes for resident is paged in
//! by the read's own fault (what happens without the preventer); one it wrongly takes for
//! missing goes to the handler, which knows. It replaces a `mincore` call per read, about a
//! microsecond on this VM, half of what the interposition cost a cached 4 KiB read.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::page_bitmap::word_masks;

/// One bit per page of a region, set while the page is resident.
#[derive(Debug)]
pub(crate) struct ResidencyHint {
    words: Box<[AtomicU64]>,
    bits: usize,
}

impl ResidencyHint {
    /// A hint for `pages` pages, none resident.
    pub fn new(pages: usize) -> Self {
        Self {
            words: (0..pages.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            bits: pages,
        }
    }

    /// Pages `[first, first + n)` (clipped to the region) are resident (`true`) or not.
    pub fn set_range(&self, first: usize, n: usize, resident: bool) {
        for (word, mask) in self.masks(first, n) {
            if resident {
                self.words[word].fetch_or(mask, Ordering::Release);
            } else {
                self.words[word].fetch_and(!mask, Ordering::Release);
            }
        }
    }

    /// Whether every page of `[first, first + n)` was resident at the last update seen; false
    /// if the range leaves the region. An empty range is resident.
    pub fn all_resident(&self, first: usize, n: usize) -> bool {
        if first.saturating_add(n) > self.bits {
            return false;
        }
        self.masks(first, n)
            .all(|(word, mask)| self.words[word].load(Ordering::Acquire) & mask == mask)
    }

    /// Whether page `i` is resident (false beyond the end).
    #[cfg(test)]
    pub fn get(&self, i: usize) -> bool {
        i < self.bits && self.all_resident(i, 1)
    }

    /// How many pages of `[first, first + n)` are resident (clipped to the region).
    #[cfg(any(test, debug_assertions))]
    pub fn count(&self, first: usize, n: usize) -> usize {
        self.masks(first, n)
            .map(|(word, mask)| (self.words[word].load(Ordering::Acquire) & mask).count_ones())
            .sum::<u32>() as usize
    }

    fn masks(&self, first: usize, n: usize) -> impl Iterator<Item = (usize, u64)> {
        word_masks(first, n, self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::TestRng;

    #[test]
    fn ranges_across_words_are_set_checked_and_cleared() {
        let h = ResidencyHint::new(200);
        assert!(h.all_resident(0, 0));
        assert!(!h.all_resident(10, 1));
        h.set_range(10, 120, true);
        assert!(h.all_resident(10, 120) && h.all_resident(63, 2) && h.all_resident(64, 64));
        assert!(!h.all_resident(9, 2) && !h.all_resident(129, 2));
        assert!(h.get(10) && h.get(129) && !h.get(130) && !h.get(9));
        assert_eq!(
            (h.count(0, 200), h.count(60, 10), h.count(0, 10)),
            (120, 10, 0)
        );
        h.set_range(64, 64, false);
        assert!(h.all_resident(10, 54) && !h.all_resident(60, 10) && h.all_resident(128, 2));
        // Beyond the region: never resident; setting is clipped.
        h.set_range(190, 50, true);
        assert!(h.all_resident(190, 10) && !h.all_resident(190, 11) && !h.get(200));
    }

    #[test]
    fn agrees_with_a_shadow_bitmap_under_random_updates() {
        let pages = 777;
        let h = ResidencyHint::new(pages);
        let mut shadow = vec![false; pages];
        let mut rng = TestRng::new(0x9e37_79b9_7f4a_7c15);
        let mut next = |m: usize| rng.below(m);
        for _ in 0..5000 {
            let (first, n, on) = (next(pages), next(130), next(2) == 1);
            h.set_range(first, n, on);
            for s in shadow.iter_mut().skip(first).take(n) {
                *s = on;
            }
            let (a, m) = (next(pages), next(70));
            let expected = a + m <= pages && shadow[a..a + m].iter().all(|&r| r);
            assert_eq!(h.all_resident(a, m), expected, "[{a}, {}]", a + m);
        }
    }
}
