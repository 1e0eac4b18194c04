//! [`ChunkQueues`]: VMemDirect's chunk queues, an aging algorithm kept as 2^m recency queues.

use crate::eviction_policy::EvictionPolicy;
use crate::slot_lists::SlotLists;
use crate::unit_table::{Slot, UnitId, UnitTable, NO_SLOT};

// A unit's placement word: `period << PERIOD_SHIFT | MOVED_BY_HIT (if set) | queue`.

/// Bits that hold the queue index (m is at most 12).
const QUEUE_MASK: u64 = 0xffff;
/// Set when an exact-model hit placed the unit (so it moves at most once per period).
const MOVED_BY_HIT: u64 = 1 << 16;
/// Where the sample period of the placement starts (47 bits: 10^14 samples).
const PERIOD_SHIFT: u32 = 17;

/// Chunk queues: 2^m queues ordered by recency, queue 0 holding the least recently used units.
///
/// The rule, from seed 003 (VMemDirect, section 4.2):
/// - a unit brought in goes to the tail of the last queue (2^m - 1);
/// - an accessed unit in queue i moves to the tail of queue min(i + 2^(m-1), 2^m - 1);
/// - an aging step merges queues 2i and 2i+1 into queue i (2i's units first, as they are
///   older) and empties the upper half;
/// - the victim is the head of the first non-empty queue.
///
/// Sampled model: at [`on_sample`](EvictionPolicy::on_sample) every referenced unit moves once
/// (queues walked from 0 up, each from head to tail) and its bit clears, then the aging step
/// runs. Exact model: [`on_hit`](EvictionPolicy::on_hit) moves the unit at once, at most once
/// per sample period, and the sample then only ages. The aging step runs every `age_every`
/// samples (1 in the paper).
///
/// Aging costs O(2^m), not O(units): it is 2^m list concatenations, and a unit's queue is
/// derived lazily from the queue and sample period stored when it was last placed (every aging
/// step maps queue j to j >> 1, so the current queue is the stored one shifted right by the
/// steps since, which is 0 after m steps). The same word remembers whether a hit placed the
/// unit, so one word per unit serves both the lazy queue and the once-per-period rule. A bitmap
/// of non-empty queues, with a summary word, finds the first non-empty queue with two
/// find-first-set instructions.
///
/// Source: Muraoka and Kourai, VMemDirect, "Memory-virtualizing and -devirtualizing VM
/// Migration with Private Virtual Memory" (seed 003, section 4.2), which replaces S-memV's 8-bit
/// aging counters (see [`crate::Aging`]) to make page-out decisions independent of memory size.
/// Cost: victim selection O(1) (two find-first-set instructions and a list head); update O(1)
/// (exact hit: unlink and append; sampled hit: set a bit); a sample O(2^m) in the exact model
/// and O(resident) in the sampled one (reading the reference bits, stopping after the last set
/// one).
#[derive(Debug, Clone)]
pub struct ChunkQueues {
    units: UnitTable,
    queues: SlotLists,
    /// Per slot: the queue it was placed in, the period when, and whether by a hit.
    placement: Vec<u64>,
    non_empty: QueueBitmap,
    /// Scratch for the sampled walk: each queue's tail when the walk started.
    walk_ends: Vec<Slot>,
    /// How many resident units have their reference bit set.
    referenced: usize,
    m: u32,
    age_every: u64,
    /// Sample periods completed.
    period: u64,
    /// Aging steps taken: `period / age_every`.
    epoch: u64,
}

impl ChunkQueues {
    /// Default number of queue bits: 256 queues, as in VMemDirect.
    pub const DEFAULT_M: u32 = 8;
    /// Largest supported m (4096 queues).
    pub const MAX_M: u32 = 12;

    /// A resident set of `capacity` units over 2^`m` queues (m clamped to 1..=12), aging every
    /// `age_every` samples (at least 1).
    pub fn new(capacity: usize, m: u32, age_every: u32) -> Self {
        let m = m.clamp(1, Self::MAX_M);
        let queues = 1usize << m;
        Self {
            units: UnitTable::new(capacity),
            queues: SlotLists::new(queues, capacity),
            placement: vec![0; capacity],
            non_empty: QueueBitmap::new(queues),
            walk_ends: vec![NO_SLOT; queues],
            referenced: 0,
            m,
            age_every: u64::from(age_every.max(1)),
            period: 0,
            epoch: 0,
        }
    }

    fn last_queue(&self) -> usize {
        (1 << self.m) - 1
    }

    /// The unit [`evict`](EvictionPolicy::evict) would take now, without taking it: the head of
    /// the first non-empty queue. A pager can lock it before paging it out. O(1).
    pub fn next_victim(&self) -> Option<UnitId> {
        let queue = self.non_empty.first()?;
        self.queues.front(queue).map(|slot| self.units.id(slot))
    }

    /// The queue resident `unit` is in.
    pub fn queue_of(&self, unit: UnitId) -> Option<usize> {
        self.units.slot(unit).map(|s| self.queue(s))
    }

    /// The queue of occupied `slot`, derived from where and when it was placed.
    #[inline]
    fn queue(&self, slot: Slot) -> usize {
        let placed = self.placement[slot as usize];
        let queue = (placed & QUEUE_MASK) as usize;
        let placed_period = placed >> PERIOD_SHIFT;
        let placed_epoch = if self.age_every == 1 {
            placed_period
        } else {
            placed_period / self.age_every
        };
        let steps = self.epoch - placed_epoch;
        if steps >= u64::from(self.m) {
            0
        } else {
            queue >> steps
        }
    }

    /// Appends `slot` (on no queue) to the tail of `queue`; `by_hit` if an exact-model hit
    /// moves it.
    #[inline]
    fn place(&mut self, slot: Slot, queue: usize, by_hit: bool) {
        self.queues.push_back(queue, slot);
        self.non_empty.set(queue);
        let flag = if by_hit { MOVED_BY_HIT } else { 0 };
        self.placement[slot as usize] = (self.period << PERIOD_SHIFT) | flag | queue as u64;
    }

    /// Whether a hit already moved occupied `slot` in the current sample period.
    #[inline]
    fn moved_this_period(&self, slot: Slot) -> bool {
        let placed = self.placement[slot as usize];
        placed & MOVED_BY_HIT != 0 && placed >> PERIOD_SHIFT == self.period
    }

    /// Unlinks occupied `slot` from `queue`, where it is.
    #[inline]
    fn unlink(&mut self, slot: Slot, queue: usize) {
        self.queues.unlink(queue, slot);
        if self.queues.is_empty(queue) {
            self.non_empty.clear(queue);
        }
    }

    /// The access rule: from `queue` to the tail of min(queue + 2^(m-1), 2^m - 1).
    #[inline]
    fn promote(&mut self, slot: Slot, queue: usize, by_hit: bool) {
        self.unlink(slot, queue);
        let to = (queue + (1 << (self.m - 1))).min(self.last_queue());
        self.place(slot, to, by_hit);
    }

    /// Sampled model: moves every referenced unit once, walking queues from 0 up.
    fn move_referenced(&mut self) {
        for q in 0..self.walk_ends.len() {
            self.walk_ends[q] = self.queues.back(q).unwrap_or(NO_SLOT);
        }
        for q in 0..self.walk_ends.len() {
            let end = self.walk_ends[q];
            let mut cur = if end == NO_SLOT {
                None
            } else {
                self.queues.front(q)
            };
            while let Some(slot) = cur {
                cur = if slot == end {
                    None
                } else {
                    self.queues.next(slot)
                };
                if self.units.take_referenced(slot) {
                    self.referenced -= 1;
                    // A hit (exact model) may already have moved it this period.
                    if !self.moved_this_period(slot) {
                        self.promote(slot, q, false);
                    }
                    if self.referenced == 0 {
                        return;
                    }
                }
            }
        }
    }

    /// The aging step: queues 2i and 2i+1 merge into queue i, the upper half empties.
    fn age(&mut self) {
        let half = 1usize << (self.m - 1);
        for i in 0..half {
            if i != 2 * i {
                self.queues.append(i, 2 * i);
            }
            self.queues.append(i, 2 * i + 1);
        }
        self.epoch += 1;
        self.non_empty.clear_all();
        for q in 0..half {
            if !self.queues.is_empty(q) {
                self.non_empty.set(q);
            }
        }
    }

    /// Forgets the reference bit of occupied `slot`, which is leaving.
    #[inline]
    fn drop_reference(&mut self, slot: Slot) {
        if self.units.take_referenced(slot) {
            self.referenced -= 1;
        }
    }
}

impl EvictionPolicy for ChunkQueues {
    fn name(&self) -> &'static str {
        "chunk-queues"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, unit: UnitId) {
        let Some(slot) = self.units.slot(unit) else {
            return;
        };
        if !self.moved_this_period(slot) {
            let queue = self.queue(slot);
            self.promote(slot, queue, true);
        }
    }
    fn mark_referenced(&mut self, unit: UnitId) {
        if let Some(slot) = self.units.slot(unit) {
            if !self.units.is_referenced(slot) {
                self.units.set_referenced(slot, true);
                self.referenced += 1;
            }
        }
    }
    fn on_sample(&mut self) {
        if self.referenced > 0 {
            self.move_referenced();
        }
        self.period += 1;
        if self.period / self.age_every != self.epoch {
            self.age();
        }
    }
    fn admit(&mut self, unit: UnitId) -> Option<UnitId> {
        let victim = if self.units.is_full() {
            self.evict()
        } else {
            None
        };
        let slot = self.units.insert(unit).expect("room after eviction");
        let last = self.last_queue();
        self.place(slot, last, false);
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        let queue = self.non_empty.first()?;
        let slot = self.queues.front(queue)?;
        self.unlink(slot, queue);
        self.drop_reference(slot);
        Some(self.units.remove_slot(slot))
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        let Some(slot) = self.units.slot(unit) else {
            return false;
        };
        let queue = self.queue(slot);
        self.unlink(slot, queue);
        self.drop_reference(slot);
        self.units.remove_slot(slot);
        true
    }
}

/// One bit per queue, set when the queue is non-empty, with a summary word whose bit w is set
/// when word w has any bit set: the first non-empty queue is two trailing-zero counts away.
#[derive(Debug, Clone)]
struct QueueBitmap {
    words: Vec<u64>,
    summary: u64,
}

impl QueueBitmap {
    /// A bitmap for `queues` queues (at most 64 * 64).
    fn new(queues: usize) -> Self {
        debug_assert!(queues <= 64 * 64);
        Self {
            words: vec![0; queues.div_ceil(64)],
            summary: 0,
        }
    }

    #[inline]
    fn set(&mut self, queue: usize) {
        let w = queue / 64;
        self.words[w] |= 1 << (queue % 64);
        self.summary |= 1 << w;
    }

    #[inline]
    fn clear(&mut self, queue: usize) {
        let w = queue / 64;
        self.words[w] &= !(1 << (queue % 64));
        if self.words[w] == 0 {
            self.summary &= !(1 << w);
        }
    }

    fn clear_all(&mut self) {
        self.words.fill(0);
        self.summary = 0;
    }

    /// The lowest non-empty queue.
    #[inline]
    fn first(&self) -> Option<usize> {
        if self.summary == 0 {
            return None;
        }
        let w = self.summary.trailing_zeros() as usize;
        Some(w * 64 + self.words[w].trailing_zeros() as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deterministic_rng::DeterministicRng as Rng;
    use std::collections::{HashSet, VecDeque};

    /// The rule, literally: a vector of 2^m queues of unit ids.
    struct Reference {
        queues: Vec<VecDeque<u64>>,
        referenced: HashSet<u64>,
        moved: HashSet<u64>,
        capacity: usize,
        age_every: u64,
        samples: u64,
    }

    impl Reference {
        fn new(capacity: usize, m: u32, age_every: u64) -> Self {
            Self {
                queues: vec![VecDeque::new(); 1 << m],
                referenced: HashSet::new(),
                moved: HashSet::new(),
                capacity,
                age_every,
                samples: 0,
            }
        }
        fn len(&self) -> usize {
            self.queues.iter().map(VecDeque::len).sum()
        }
        fn find(&self, u: u64) -> Option<(usize, usize)> {
            self.queues
                .iter()
                .enumerate()
                .find_map(|(q, list)| list.iter().position(|&x| x == u).map(|i| (q, i)))
        }
        fn take(&mut self, u: u64) -> Option<usize> {
            let (q, i) = self.find(u)?;
            self.queues[q].remove(i);
            self.referenced.remove(&u);
            self.moved.remove(&u);
            Some(q)
        }
        fn promote(&mut self, u: u64) {
            let (q, i) = self.find(u).unwrap();
            self.queues[q].remove(i);
            let n = self.queues.len();
            self.queues[(q + n / 2).min(n - 1)].push_back(u);
        }
        fn evict(&mut self) -> Option<u64> {
            let q = self.queues.iter().position(|l| !l.is_empty())?;
            let u = self.queues[q][0];
            self.take(u);
            Some(u)
        }
        fn admit(&mut self, u: u64) -> Option<u64> {
            let v = if self.len() == self.capacity {
                self.evict()
            } else {
                None
            };
            self.queues.last_mut().unwrap().push_back(u);
            v
        }
        fn hit(&mut self, u: u64) {
            if self.moved.insert(u) {
                self.promote(u);
            }
        }
        fn sample(&mut self) {
            let snapshot = self.queues.clone();
            for list in snapshot {
                for u in list {
                    if self.referenced.remove(&u) && !self.moved.contains(&u) {
                        self.promote(u);
                    }
                }
            }
            self.moved.clear();
            self.samples += 1;
            if self.samples.checked_rem(self.age_every) == Some(0) {
                let n = self.queues.len();
                let mut aged = vec![VecDeque::new(); n];
                for (q, list) in self.queues.drain(..).enumerate() {
                    aged[q / 2].extend(list);
                }
                self.queues = aged;
            }
        }
    }

    fn assert_same_queues(p: &ChunkQueues, r: &Reference, ctx: &str) {
        for (q, list) in r.queues.iter().enumerate() {
            let got: Vec<u64> = p.queues.iter(q).map(|s| p.units.id(s)).collect();
            assert_eq!(got, Vec::from(list.clone()), "{ctx} queue {q}");
            for s in p.queues.iter(q) {
                assert_eq!(p.queue(s), q, "{ctx}: derived queue of slot {s}");
            }
            assert_eq!(
                p.non_empty.words[q / 64] >> (q % 64) & 1 == 1,
                !list.is_empty()
            );
        }
    }

    fn run(m: u32, age_every: u32, mode: u64, seed: u64, steps: usize) {
        let cap = 40;
        let universe = 120;
        let mut p = ChunkQueues::new(cap, m, age_every);
        let mut r = Reference::new(cap, m, u64::from(age_every));
        let mut rng = Rng::new(seed);
        for step in 0..steps {
            let ctx = format!("m={m} age_every={age_every} mode={mode} seed={seed} step={step}");
            let u = if rng.below(2) == 0 {
                rng.below(universe / 6)
            } else {
                rng.below(universe)
            };
            let hit = r.find(u).is_some();
            assert_eq!(p.contains(u), hit, "{ctx}");
            if hit {
                // mode 0: exact, 1: sampled, 2: both mixed.
                let exact = mode == 0 || (mode == 2 && rng.below(2) == 0);
                if exact {
                    p.on_hit(u);
                    r.hit(u);
                } else {
                    p.mark_referenced(u);
                    r.referenced.insert(u);
                }
            } else {
                assert_eq!(p.admit(u), r.admit(u), "{ctx}");
            }
            if rng.below(9) == 0 {
                p.on_sample();
                r.sample();
                assert_same_queues(&p, &r, &ctx);
            }
            if rng.below(50) == 0 {
                let next = p.next_victim();
                assert_eq!(p.evict(), next, "{ctx}");
                assert_eq!(next, r.evict(), "{ctx}");
                let x = rng.below(universe);
                assert_eq!(p.remove(x), r.take(x).is_some(), "{ctx}");
            }
            assert_eq!(p.referenced, r.referenced.len(), "{ctx}");
        }
        assert_same_queues(&p, &r, "end");
    }

    #[test]
    fn matches_the_literal_rule() {
        for m in [1, 2, 3, 5, 8] {
            for mode in 0..3 {
                run(m, 1, mode, 0x5eed + u64::from(m) * 3 + mode, 20_000);
            }
        }
        run(3, 3, 1, 77, 20_000);
        run(4, 2, 0, 78, 20_000);
        run(12, 1, 2, 79, 2_000);
    }

    #[test]
    fn paper_example() {
        // m = 2: queues 0..3. Units enter queue 3; aging moves them to 1, then 0.
        let mut p = ChunkQueues::new(4, 2, 1);
        for u in [1, 2, 3, 4] {
            p.admit(u);
        }
        p.on_sample();
        assert_eq!(p.queue_of(1), Some(1));
        p.on_hit(2); // 1 -> 3
        p.on_hit(2); // once per period
        assert_eq!(p.queue_of(2), Some(3));
        p.on_sample(); // 1, 3, 4 -> 0; 2 -> 1
        assert_eq!(p.queue_of(2), Some(1));
        assert_eq!(p.queue_of(4), Some(0));
        p.mark_referenced(3);
        p.on_sample(); // 3: 0 -> 2, then aging: 3 -> 1, 2 -> 0
        assert_eq!(p.queue_of(3), Some(1));
        assert_eq!(p.next_victim(), Some(1));
        assert_eq!(p.admit(5), Some(1));
        assert_eq!(p.admit(6), Some(4));
        assert_eq!(p.admit(7), Some(2));
        assert_eq!(p.admit(8), Some(3));
    }
}
