//! [`PageBitmap`]: one bit per page of a region, set and cleared by page or by run of pages.

/// A fixed-size bitmap, one bit per page.
#[derive(Debug, Clone)]
pub(crate) struct PageBitmap {
    words: Vec<u64>,
    bits: usize,
}

impl PageBitmap {
    /// A bitmap of `bits` bits, all clear.
    pub fn new(bits: usize) -> Self {
        Self {
            words: vec![0; bits.div_ceil(64)],
            bits,
        }
    }

    /// Bit `i`; `false` beyond the end.
    pub fn get(&self, i: usize) -> bool {
        i < self.bits && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Sets bit `i` to `value` (no-op beyond the end).
    #[cfg(test)]
    pub fn set(&mut self, i: usize, value: bool) {
        self.set_range(i, 1, value);
    }

    /// Sets bits `[first, first + n)` to `value`, clipped to the end.
    pub fn set_range(&mut self, first: usize, n: usize, value: bool) {
        for (word, mask) in word_masks(first, n, self.bits) {
            if value {
                self.words[word] |= mask;
            } else {
                self.words[word] &= !mask;
            }
        }
    }

    /// Sets bits `[first, first + n)` to those of `other` (a bitmap of the same size), clipped
    /// to the end of both.
    pub fn copy_range(&mut self, other: &PageBitmap, first: usize, n: usize) {
        for (word, mask) in word_masks(first, n, self.bits.min(other.bits)) {
            self.words[word] = (self.words[word] & !mask) | (other.words[word] & mask);
        }
    }

    /// How many of bits `[first, first + n)` are set (clipped to the end).
    pub fn count_range(&self, first: usize, n: usize) -> usize {
        word_masks(first, n, self.bits)
            .map(|(word, mask)| (self.words[word] & mask).count_ones() as usize)
            .sum()
    }
}

/// The (word index, mask) pairs of 64-bit words covering bits `[first, first + n)` of a
/// bitmap of `bits` bits, clipped to its end.
pub(crate) fn word_masks(
    first: usize,
    n: usize,
    bits: usize,
) -> impl Iterator<Item = (usize, u64)> {
    let end = first.saturating_add(n).min(bits);
    let mut i = first;
    std::iter::from_fn(move || {
        if i >= end {
            return None;
        }
        let bit = i % 64;
        let take = (64 - bit).min(end - i);
        let mask = if take == 64 {
            u64::MAX
        } else {
            ((1u64 << take) - 1) << bit
        };
        let out = (i / 64, mask);
        i += take;
        Some(out)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_cross_word_boundaries() {
        let mut b = PageBitmap::new(200);
        b.set_range(60, 10, true);
        assert_eq!(b.count_range(0, 200), 10);
        assert!(!b.get(59) && b.get(60) && b.get(69) && !b.get(70));
        b.set(64, false);
        assert_eq!(b.count_range(60, 10), 9);
        b.set_range(0, 200, true);
        assert_eq!(b.count_range(0, 200), 200);
        assert_eq!(b.count_range(128, 64), 64);
        b.set_range(190, 100, false);
        assert_eq!(b.count_range(0, 1000), 190);
        assert!(!b.get(500), "beyond the end reads clear");
        b.set(500, true);
        assert_eq!(b.count_range(0, 1000), 190);
    }

    #[test]
    fn a_copied_range_replaces_only_its_bits() {
        let mut from = PageBitmap::new(200);
        from.set_range(62, 4, true);
        from.set_range(150, 10, true);
        let mut to = PageBitmap::new(200);
        to.set_range(0, 200, true);
        to.copy_range(&from, 60, 70);
        assert_eq!(to.count_range(60, 70), 4, "bits 62 to 65 of the source");
        assert!(to.get(59) && to.get(130) && to.get(62) && !to.get(66));
        to.copy_range(&from, 190, 100);
        assert_eq!(to.count_range(190, 10), 0, "clipped to the end");
        assert_eq!(to.count_range(0, 200), 60 + 4 + 60);
    }
}
