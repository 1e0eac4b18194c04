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
//! In an exclusive host cache ([`HostCache::Exclusive`](crate::host_cache::HostCache)) the
//! blocks the guest reads into its RAM are held too, apart from CAR's lists
//! ([`GuestHeldBlocks`]): they count against the limit and go first when room is needed, as
//! long as CAR holds at most three quarters of it (else CAR's victim goes); a block the guest
//! lets go while still held joins CAR's lists, as a block only the host caches.
//!
//! Blocks are one page for images up to 1 GiB, and larger for larger images (a power of two,
//! so that the refault stamps stay under [`MAX_STAMPS`] entries).

use memvisor_policy::{Car, EvictionPolicy, RefaultHistory, RefaultScale};

use crate::guest_held_blocks::GuestHeldBlocks;

/// Most per-block refault stamps kept per image (8 bytes each).
pub const MAX_STAMPS: u64 = 1 << 18;
/// Refault buckets: one block wide up to 32 blocks, then 16 per doubling (as regions).
const SUB_BUCKETS: u64 = 16;
/// Until the guest has let enough blocks go to measure how long it keeps them, a block it
/// holds counts as kept for good (the first to go) once this many model capacities of blocks
/// were read after it: a guest whose blocks are never seen let go (the swap mapper off) would
/// otherwise hold the first blocks it read in the cache for ever.
const FALLBACK_EXPIRY: u64 = 4;

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
    /// Of `resident_bytes`, the bytes the guest holds too (an exclusive cache).
    pub guest_held_bytes: u64,
    /// Bytes the guest let go while the model held them (cumulative; an exclusive cache):
    /// blocks the host cache kept for when the guest reads them again.
    pub guest_released_bytes: u64,
}

/// A CAR model of one image's host cache under a limit.
#[derive(Debug, Clone)]
pub struct ImageCacheModel {
    block: u64,
    limit: u64,
    /// Blocks the model holds, at most.
    capacity: usize,
    /// The blocks only the host cache holds.
    car: Car,
    /// The blocks the guest holds too.
    guest_held: GuestHeldBlocks,
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
            capacity,
            car: Car::new(capacity),
            guest_held: GuestHeldBlocks::default(),
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
        let from = victims.len();
        for b in self.blocks(off, len) {
            if self.guest_held.contains(b) {
                self.hits += 1;
                continue;
            }
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
        // After the range, so that no block of it is a victim and then taken in again.
        self.make_room(victims);
        self.spare_held(victims, from);
    }

    /// The guest read bytes `[off, off + len)` into its RAM through the host cache (an
    /// exclusive cache under a limit): each block is a hit or a miss, and is held as a block
    /// the guest holds too; the blocks the model evicts for them are added to `victims`.
    pub fn guest_read(&mut self, off: u64, len: u64, victims: &mut Victims) {
        if len == 0 {
            return;
        }
        let from = victims.len();
        for b in self.blocks(off, len) {
            if self.guest_held.contains(b) || self.car.remove(b) {
                self.hits += 1;
            } else {
                self.misses += 1;
                self.history.refault(b as usize);
            }
            self.guest_held.stage(b);
        }
        self.make_room(victims);
        self.spare_held(victims, from);
    }

    /// Cuts the blocks the model holds out of `victims[from..]`: a block CAR evicted for an
    /// earlier block of a range and took in again for a later one is in the host cache and
    /// stays there.
    fn spare_held(&self, victims: &mut Victims, from: usize) {
        let added = victims.split_off(from);
        for (o, l) in added {
            let mut b = o;
            while b < o + l {
                if !self.holds(b) {
                    push_range(victims, b, self.block);
                }
                b += self.block;
            }
        }
    }

    /// The guest let bytes `[off, off + len)` go (its page was read over, discarded, found
    /// changed, or evicted by memvisor): each block still held as one the guest holds joins
    /// CAR's lists, as a block only the host caches. Returns the byte ranges of the blocks of
    /// `[off, off + len)` that were not held (empty: all of it is still in the host cache).
    pub fn guest_released(&mut self, off: u64, len: u64) -> Victims {
        let mut not_held = Victims::new();
        for b in self.blocks(off, len) {
            if self.guest_held.release(b) {
                // Room was counted for it: CAR holds fewer than its capacity and evicts
                // nothing.
                let v = self.car.admit(b);
                debug_assert!(v.is_none(), "CAR evicted {v:?} for released block {b}");
            } else {
                push_range(&mut not_held, b * self.block, self.block);
            }
        }
        not_held
    }

    /// The byte ranges of the blocks the guest holds too, in ascending order, adjacent ones
    /// merged.
    pub fn guest_held_ranges(&self) -> Victims {
        let mut blocks: Vec<u64> = self.guest_held.blocks().collect();
        blocks.sort_unstable();
        let mut out = Victims::new();
        for b in blocks {
            push_range(&mut out, b * self.block, self.block);
        }
        out
    }

    /// Evicts until the model holds at most its capacity: a block the guest holds too
    /// ([`GuestHeldBlocks::take_victim`]; [`FALLBACK_EXPIRY`] capacities of reads as its
    /// expiry until one is measured) while CAR holds at most three quarters of the capacity
    /// (the guest-held blocks keep a quarter at least, where the guest's let-go blocks come
    /// from), else CAR's victim.
    fn make_room(&mut self, victims: &mut Victims) {
        while self.car.len() + self.guest_held.len() > self.capacity {
            let car_share = self.capacity - self.capacity / 4;
            let v = if self.car.len() <= car_share || self.car.is_empty() {
                self.guest_held
                    .take_victim(self.capacity as u64 * FALLBACK_EXPIRY)
            } else {
                self.car.evict()
            };
            match v {
                Some(v) => self.evicted(v, victims),
                None => break,
            }
        }
    }

    /// Changes the limit: a smaller one evicts down to it (the victims are added to `victims`).
    /// CAR's lists start again with the blocks held (their recency order is kept), the
    /// refault history stays.
    pub fn set_limit(&mut self, limit: u64, victims: &mut Victims) {
        let capacity = capacity(limit, self.block);
        // Every block the guest holds too goes before any of CAR's (a smaller limit is no
        // time to keep blocks for later), in `take_victim`'s order, then CAR's victims.
        while self.car.len() + self.guest_held.len() > capacity {
            let v = match self
                .guest_held
                .take_victim(capacity as u64 * FALLBACK_EXPIRY)
            {
                Some(v) => Some(v),
                None => self.car.evict(),
            };
            match v {
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
        self.capacity = capacity;
        self.limit = limit;
    }

    /// The host cache dropped bytes `[off, off + len)` whatever the model held there (a large
    /// folio holding some of its blocks, [`crate::image_cache_limit`]): each block held, by CAR
    /// or as the guest's, counts as evicted. Returns how many were held.
    pub fn forget(&mut self, off: u64, len: u64) -> u64 {
        let mut forgotten = 0;
        for b in self.blocks(off, len) {
            if self.car.remove(b) || self.guest_held.remove(b) {
                self.history.evicted(b as usize, self.block);
                forgotten += 1;
            }
        }
        forgotten
    }

    /// The byte offsets of the blocks of bytes `[off, off + len)` the model holds, in
    /// ascending order.
    pub fn held_in(&self, off: u64, len: u64) -> Vec<u64> {
        self.blocks(off, len)
            .filter(|&b| self.car.contains(b) || self.guest_held.contains(b))
            .map(|b| b * self.block)
            .collect()
    }

    /// The byte offsets of the blocks the model holds, in ascending order.
    pub fn held_blocks(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self
            .car
            .units()
            .iter()
            .map(|(_, b)| b)
            .chain(self.guest_held.blocks())
            .map(|b| b * self.block)
            .collect();
        v.sort_unstable();
        v
    }

    /// Whether the model holds the block at byte `off`.
    pub fn holds(&self, off: u64) -> bool {
        let b = off / self.block;
        self.car.contains(b) || self.guest_held.contains(b)
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
            resident_bytes: (self.car.len() + self.guest_held.len()) as u64 * self.block,
            hits: self.hits,
            misses: self.misses,
            refaults: self.history.buckets().to_vec(),
            beyond: self.history.beyond(),
            sub_buckets: SUB_BUCKETS,
            evicted_bytes: self.history.evicted_total(),
            guest_held_bytes: self.guest_held.len() as u64 * self.block,
            guest_released_bytes: self.guest_held.released() * self.block,
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

    fn victim_pages(v: &Victims) -> Vec<u64> {
        let mut out: Vec<u64> = v
            .iter()
            .flat_map(|&(o, l)| (o / PG..(o + l) / PG).collect::<Vec<_>>())
            .collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn blocks_the_guest_holds_count_against_the_limit_and_go_first_newest_first() {
        let mut m = ImageCacheModel::new(16 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        m.access(0, 8 * PG, &mut v);
        // 20 pages into guest RAM: 8 fit beside CAR's 8; the 12 newest go again at once.
        m.guest_read(100 * PG, 20 * PG, &mut v);
        assert_eq!(victim_pages(&v), (108..120).collect::<Vec<_>>());
        let f = m.figures();
        assert_eq!(f.resident_bytes, 16 * PG);
        assert_eq!(f.guest_held_bytes, 8 * PG);
        assert_eq!((f.hits, f.misses), (0, 28));
        // The guest lets five go: they stay, as blocks only the host holds; of a range partly
        // held, what was not is returned.
        assert!(m.guest_released(100 * PG, 4 * PG).is_empty());
        assert_eq!(m.guest_released(107 * PG, 2 * PG), vec![(108 * PG, PG)]);
        assert_eq!(m.guest_held_ranges(), vec![(104 * PG, 3 * PG)]);
        let f = m.figures();
        assert_eq!(f.guest_held_bytes, 3 * PG);
        assert_eq!(f.guest_released_bytes, 5 * PG);
        assert_eq!(f.resident_bytes, 16 * PG);
        // The guest reads one of CAR's blocks: a hit, held as the guest's again.
        v.clear();
        m.guest_read(0, PG, &mut v);
        assert!(v.is_empty());
        assert_eq!(m.figures().hits, 1);
        assert_eq!(m.figures().guest_held_bytes, 4 * PG);
        // A read through the host cache of a block the guest holds is a hit and changes
        // nothing.
        m.access(104 * PG, PG, &mut v);
        assert_eq!(m.figures().hits, 2);
        assert!(v.is_empty());
        assert_eq!(m.held_blocks().len(), 16);
    }

    #[test]
    fn without_blocks_let_go_the_guest_s_oldest_go_after_four_capacities_of_reads() {
        let mut m = ImageCacheModel::new(4 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        m.guest_read(0, 4 * PG, &mut v);
        // Twelve reads later (16 blocks read in all) the first blocks are still within four
        // capacities: each new block is the newest and goes at once.
        for i in 0..12 {
            m.guest_read((100 + i) * PG, PG, &mut v);
        }
        assert_eq!(victim_pages(&v), (100..112).collect::<Vec<_>>());
        assert_eq!(m.guest_held_ranges(), vec![(0, 4 * PG)]);
        // The next one: block 0 was read 17 blocks ago, past 16: it goes, the new one stays.
        v.clear();
        m.guest_read(112 * PG, PG, &mut v);
        assert_eq!(victim_pages(&v), vec![0]);
        assert_eq!(m.guest_held_ranges(), vec![(PG, 3 * PG), (112 * PG, PG)]);
    }

    #[test]
    fn car_gives_way_down_to_three_quarters_for_blocks_the_guest_reads() {
        let mut m = ImageCacheModel::new(16 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        m.access(0, 16 * PG, &mut v);
        assert!(v.is_empty());
        // CAR is full: each of the first four guest reads pushes one of CAR's blocks out.
        for p in 100..104 {
            m.guest_read(p * PG, PG, &mut v);
        }
        assert_eq!(victim_pages(&v).len(), 4);
        assert!(victim_pages(&v).iter().all(|&p| p < 16), "{v:?}");
        assert_eq!(m.figures().guest_held_bytes, 4 * PG);
        // CAR holds 12, three quarters: the next guest read goes again at once.
        v.clear();
        m.guest_read(104 * PG, PG, &mut v);
        assert_eq!(victim_pages(&v), vec![104]);
        assert_eq!(m.figures().guest_held_bytes, 4 * PG);
    }

    #[test]
    fn a_smaller_limit_drops_the_blocks_the_guest_holds_first() {
        let mut m = ImageCacheModel::new(16 * PG, 1 << 20, PG);
        let mut v = Vec::new();
        m.access(0, 8 * PG, &mut v);
        m.guest_read(100 * PG, 8 * PG, &mut v);
        assert!(v.is_empty());
        m.set_limit(10 * PG, &mut v);
        assert_eq!(victim_pages(&v), (102..108).collect::<Vec<_>>());
        m.set_limit(4 * PG, &mut v);
        let f = m.figures();
        assert_eq!((f.resident_bytes, f.guest_held_bytes), (4 * PG, 0));
    }

    #[test]
    fn what_the_model_holds_is_what_it_took_in_less_its_victims_under_random_operations() {
        let mut rng = crate::test_rng::TestRng::new(0xcafe_f00d);
        let mut m = ImageCacheModel::new(24 * PG, 1 << 20, PG);
        let mut shadow = std::collections::BTreeSet::new();
        let mut limit = 24;
        for step in 0..20_000 {
            let first = rng.below(96) as u64;
            let n = 1 + rng.below(6) as u64;
            let (off, len) = (first * PG, n * PG);
            let mut v = Vec::new();
            match rng.below(9) {
                0..=2 => {
                    shadow.extend(first..first + n);
                    m.access(off, len, &mut v);
                }
                8 => {
                    // A large folio went with the blocks in it.
                    let held = shadow.range(first..first + n).count() as u64;
                    assert_eq!(m.held_in(off, len).len() as u64, held, "step {step}");
                    assert_eq!(m.forget(off, len), held, "step {step}");
                    assert!(m.held_in(off, len).is_empty(), "step {step}");
                    for p in first..first + n {
                        shadow.remove(&p);
                    }
                }
                3..=5 => {
                    shadow.extend(first..first + n);
                    m.guest_read(off, len, &mut v);
                }
                6 => {
                    let before = m.figures().guest_held_bytes;
                    let not_held = m.guest_released(off, len);
                    let after = m.figures().guest_held_bytes;
                    let rest: u64 = not_held.iter().map(|r| r.1).sum();
                    assert_eq!(before - after + rest, len, "step {step}");
                    assert_eq!(
                        after,
                        m.guest_held_ranges().iter().map(|r| r.1).sum::<u64>()
                    );
                }
                _ => {
                    limit = 4 + rng.below(40) as u64;
                    m.set_limit(limit * PG, &mut v);
                }
            }
            for p in victim_pages(&v) {
                shadow.remove(&p);
            }
            let held: Vec<u64> = m.held_blocks().iter().map(|b| b / PG).collect();
            assert_eq!(
                held,
                shadow.iter().copied().collect::<Vec<_>>(),
                "step {step}"
            );
            let f = m.figures();
            assert!(f.resident_bytes <= limit * PG, "step {step}: {f:?}");
            assert!(f.guest_held_bytes <= f.resident_bytes);
        }
    }
}
