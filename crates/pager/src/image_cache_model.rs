//! [`ImageCacheModel`]: a CAR cache of one disk image's blocks, run on the program's exact
//! read/write stream, that says which blocks the host page cache should hold under a limit
//! (seed 001 chapter 5: a cache per image, sized by its miss-ratio curve).
//!
//! The model sees every interposed access of the image, block by block: a block it holds is a
//! hit, any other a miss that brings it in and, when the model is full, pushes out CAR's
//! victim. The victims are what [`ImageHostCache`](crate::host_cache::ImageHostCache) drops
//! from the host page cache, so the kernel caches what CAR would and no more than the limit.
//! Each miss of a block the model evicted earlier is a refault, counted at its distance (the
//! bytes evicted since, as in [`RefaultHistory`]): the image's curve, the misses that a larger
//! limit would have saved, for the broker.
//!
//! Blocks are one page for images up to 1 GiB, and larger for larger images (a power of two,
//! so that the refault stamps stay under [`MAX_STAMPS`] entries).

use memvisor_policy::{Car, EvictionPolicy, RefaultHistory, RefaultScale};

/// Most per-block refault stamps kept per image (8 bytes each).
pub const MAX_STAMPS: u64 = 1 << 18;
/// Refault buckets: one block wide up to 32 blocks, then 16 per doubling (as regions).
const SUB_BUCKETS: u64 = 16;

/// Hits, misses and the curve of an [`ImageCacheModel`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageCacheFigures {
    /// The limit (bytes).
    pub limit_bytes: u64,
    /// Bytes per block.
    pub block_bytes: u64,
    /// Bytes the model holds now.
    pub resident_bytes: u64,
    /// Block accesses that found the block in the model.
    pub hits: u64,
    /// Block accesses that did not.
    pub misses: u64,
    /// Misses of blocks the model had evicted, by distance bucket (see
    /// [`RefaultScale::new`]`(block_bytes, sub_buckets)`).
    pub refaults: Vec<u64>,
    /// Refaults farther than the last bucket.
    pub beyond: u64,
    /// Sub-buckets per doubling of the scale.
    pub sub_buckets: u64,
    /// Bytes the model evicted so far.
    pub evicted_bytes: u64,
}

/// A CAR model of one image's host cache under a limit.
#[derive(Debug, Clone)]
pub struct ImageCacheModel {
    block: u64,
    limit: u64,
    car: Car,
    history: RefaultHistory,
    hits: u64,
    misses: u64,
}

/// Byte ranges `(offset, length)`, adjacent ones merged, that the host cache should drop.
pub type Victims = Vec<(u64, u64)>;

impl ImageCacheModel {
    /// A model of at most `limit` bytes (at least one block) for an image of `file_len`
    /// bytes, with pages of `page` bytes.
    pub fn new(limit: u64, file_len: u64, page: u64) -> Self {
        let block = block_size(file_len, page);
        let capacity = capacity(limit, block);
        let units = file_len.div_ceil(block).min(MAX_STAMPS) as usize;
        let scale = RefaultScale::new(block, SUB_BUCKETS);
        Self {
            block,
            limit,
            car: Car::new(capacity),
            // Distances up to the image's size (at most 2 * 16 + 16 * 18 buckets: the image has
            // at most 2^18 blocks), whatever the limit is later set to.
            history: RefaultHistory::new(units, scale, file_len.max(block)),
            hits: 0,
            misses: 0,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(&self) -> u64 {
        self.block
    }

    /// The limit (bytes).
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Blocks `[first, end)` covering bytes `[off, off + len)`.
    fn blocks(&self, off: u64, len: u64) -> std::ops::Range<u64> {
        off / self.block..off.saturating_add(len).div_ceil(self.block)
    }

    fn evicted(&mut self, b: u64, victims: &mut Victims) {
        self.history.evicted(b as usize, self.block);
        push_range(victims, b * self.block, self.block);
    }

    /// The program read or wrote bytes `[off, off + len)` through the host cache: each block
    /// is a hit or a miss; the blocks the model evicts for them are added to `victims`.
    pub fn access(&mut self, off: u64, len: u64, victims: &mut Victims) {
        if len == 0 {
            return;
        }
        for b in self.blocks(off, len) {
            if self.car.contains(b) {
                self.hits += 1;
                self.car.on_hit(b);
                continue;
            }
            self.misses += 1;
            self.history.refault(b as usize);
            match self.car.admit(b) {
                Some(v) if v == b => {} // declined (CAR never does)
                Some(v) => self.evicted(v, victims),
                None => {}
            }
        }
    }

    /// Bytes `[off, off + len)` left the host cache for another reason (the guest holds them,
    /// in an exclusive cache): the blocks it covers whole leave the model, not as evictions.
    pub fn remove(&mut self, off: u64, len: u64) {
        let first = off.div_ceil(self.block);
        let end = off.saturating_add(len) / self.block;
        for b in first..end {
            self.car.remove(b);
            self.history.forget(b as usize);
        }
    }

    /// Changes the limit: a smaller one evicts down to it (the victims are added to `victims`).
    /// CAR's lists start again with the blocks held (their recency order is kept), the
    /// refault history stays.
    pub fn set_limit(&mut self, limit: u64, victims: &mut Victims) {
        let capacity = capacity(limit, self.block);
        while self.car.len() > capacity {
            match self.car.evict() {
                Some(v) => self.evicted(v, victims),
                None => break,
            }
        }
        let mut kept = Vec::with_capacity(self.car.len());
        while let Some(v) = self.car.evict() {
            kept.push(v);
        }
        self.car = Car::new(capacity);
        // Oldest victims first: the last ones evicted are re-admitted last (most recent).
        for v in kept {
            self.car.admit(v);
        }
        self.limit = limit;
    }

    /// The byte offsets of the blocks the model holds, in ascending order.
    pub fn held_blocks(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .car
            .units()
            .iter()
            .map(|(_, b)| b * self.block)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether the model holds the block at byte `off`.
    pub fn holds(&self, off: u64) -> bool {
        self.car.contains(off / self.block)
    }

    /// Block accesses that missed so far.
    pub fn figures_misses(&self) -> u64 {
        self.misses
    }

    /// Its counters and curve.
    pub fn figures(&self) -> ImageCacheFigures {
        ImageCacheFigures {
            limit_bytes: self.limit,
            block_bytes: self.block,
            resident_bytes: self.car.len() as u64 * self.block,
            hits: self.hits,
            misses: self.misses,
            refaults: self.history.buckets().to_vec(),
            beyond: self.history.beyond(),
            sub_buckets: SUB_BUCKETS,
            evicted_bytes: self.history.evicted_total(),
        }
    }
}

/// The block size for an image of `file_len` bytes: a page, or the smallest power of two that
/// keeps the image within [`MAX_STAMPS`] blocks.
pub fn block_size(file_len: u64, page: u64) -> u64 {
    let page = page.max(1);
    file_len
        .div_ceil(MAX_STAMPS)
        .next_power_of_two()
        .max(page.next_power_of_two())
}

/// Blocks a model of `limit` bytes holds: at least one, and no more than an image has blocks
/// ([`MAX_STAMPS`]): a limit far above the image's size (up to the host's memory, as a
/// request may ask) must not size the model's tables by it.
fn capacity(limit: u64, block: u64) -> usize {
    (limit / block.max(1)).clamp(1, MAX_STAMPS) as usize
}

/// Appends `[off, off + len)` to `ranges`, merged with the last one if adjacent.
fn push_range(ranges: &mut Victims, off: u64, len: u64) {
    match ranges.last_mut() {
        Some((o, l)) if *o + *l == off => *l += len,
        _ => ranges.push((off, len)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PG: u64 = 4096;

    #[test]
    fn blocks_are_pages_up_to_one_gib_then_grow() {
        assert_eq!(block_size(0, PG), PG);
        assert_eq!(block_size(1 << 30, PG), PG);
        assert_eq!(block_size((1 << 30) + 1, PG), 2 * PG);
        assert_eq!(block_size(64 << 30, PG), 64 * PG);
        let m = ImageCacheModel::new(1 << 20, 64 << 30, PG);
        assert_eq!(m.block_bytes(), 256 << 10);
    }

    #[test]
    fn a_limit_far_above_the_image_sizes_the_model_by_the_image() {
        // 16 TiB for a 1 MiB image: before, 2^32 blocks of tables (an allocation abort, or
        // the unit table's capacity assertion, inside the program's read).
        let mut m = ImageCacheModel::new(16 << 40, 1 << 20, PG);
        let mut v = Vec::new();
        m.set_limit(u64::MAX, &mut v);
        assert!(v.is_empty());
        assert_eq!(capacity(u64::MAX, PG), MAX_STAMPS as usize);
        assert_eq!(capacity(0, PG), 1);
    }

    #[test]
    fn holds_at_most_the_limit_and_names_its_victims() {
        let mut m = ImageCacheModel::new(16 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        // A 64-page sequential read through a 16-page model: 48 victims, merged into runs.
        m.access(0, 64 * PG, &mut v);
        let f = m.figures();
        assert_eq!((f.hits, f.misses), (0, 64));
        assert_eq!(f.resident_bytes, 16 * PG);
        let victim_bytes: u64 = v.iter().map(|r| r.1).sum();
        assert_eq!(victim_bytes, 48 * PG);
        assert!(v.len() < 48, "adjacent victims merged: {v:?}");
        // What is held and what was evicted do not overlap.
        let held = m.held_blocks();
        assert_eq!(held.len(), 16);
        for h in held {
            assert!(
                !v.iter().any(|&(o, l)| h >= o && h < o + l),
                "{h} held and evicted"
            );
        }
    }

    #[test]
    fn a_loop_that_fits_hits_and_one_that_does_not_refaults_at_its_distance() {
        let mut m = ImageCacheModel::new(32 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        for _ in 0..4 {
            m.access(0, 16 * PG, &mut v);
        }
        let f = m.figures();
        assert_eq!((f.hits, f.misses), (48, 16));
        assert!(v.is_empty());
        // 48 pages looped through 32: every later miss is a refault 16 to 48 pages away.
        let mut m = ImageCacheModel::new(32 * PG, 1 << 20, PG);
        for _ in 0..4 {
            for p in 0..48 {
                m.access(p * PG, PG, &mut v);
            }
        }
        let f = m.figures();
        let refaults: u64 = f.refaults.iter().sum::<u64>() + f.beyond;
        assert!(refaults > 0 && refaults <= f.misses - 48, "{f:?}");
        let scale = RefaultScale::new(f.block_bytes, f.sub_buckets);
        // 48 pages of cache would have saved every refault; 16 more pages save none.
        assert_eq!(
            memvisor_policy::saved_with(&f.refaults, scale, 48 * PG),
            refaults
        );
        assert_eq!(memvisor_policy::saved_with(&f.refaults, scale, 8 * PG), 0);
    }

    #[test]
    fn a_smaller_limit_evicts_down_to_it_and_a_larger_one_keeps_everything() {
        let mut m = ImageCacheModel::new(32 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        m.access(0, 32 * PG, &mut v);
        assert!(v.is_empty());
        m.set_limit(8 * PG, &mut v);
        assert_eq!(v.iter().map(|r| r.1).sum::<u64>(), 24 * PG);
        assert_eq!(m.figures().resident_bytes, 8 * PG);
        // The most recent blocks stayed.
        assert_eq!(
            m.held_blocks(),
            (24..32).map(|p| p * PG).collect::<Vec<_>>()
        );
        v.clear();
        m.set_limit(64 * PG, &mut v);
        assert!(v.is_empty());
        assert_eq!(m.held_blocks().len(), 8);
        assert_eq!(m.limit(), 64 * PG);
    }

    #[test]
    fn removed_blocks_leave_without_a_victim_or_a_refault() {
        let mut m = ImageCacheModel::new(8 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        m.access(0, 4 * PG, &mut v);
        // Bytes 100 .. 3 pages + 100 cover pages 1 and 2 whole.
        m.remove(100, 3 * PG);
        assert_eq!(m.held_blocks(), vec![0, 3 * PG]);
        m.access(PG, PG, &mut v);
        let f = m.figures();
        assert_eq!(f.refaults.iter().sum::<u64>() + f.beyond, 0);
        assert!(v.is_empty());
    }
}
