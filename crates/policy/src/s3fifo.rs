//! [`S3Fifo`]: a small probationary FIFO, a main FIFO with 2-bit counters, and a ghost FIFO.

use crate::eviction_policy::EvictionPolicy;
use crate::slot_lists::SlotLists;
use crate::unit_table::{Slot, UnitId, UnitTable};

/// The probationary queue S, where units not remembered by the ghost queue arrive.
const SMALL: usize = 0;
/// The main queue M.
const MAIN: usize = 1;
/// A frequency counter has two bits.
const MAX_FREQUENCY: u8 = 3;

/// S3-FIFO: three FIFO queues. New units enter a small queue S (by default 10% of the capacity);
/// units whose id is remembered by the ghost queue G enter the main queue M directly. Each
/// resident unit has a frequency counter of two bits (0 to 3) counting its hits.
///
/// Eviction takes from S while S holds at least its target share (or M is empty), otherwise
/// from M. From S: the oldest unit moves to M (counter reset) if it was hit at least
/// `threshold` times while in S, otherwise it is evicted and its id enters G; this repeats until
/// one unit leaves. From M: the oldest unit with a non-zero counter is decremented and reinserted
/// at the new end (a CLOCK with 2-bit counters); the first with a zero counter is evicted. G is a
/// FIFO of ids (by default 90% of the capacity, the size of M); a hit in G is a miss, and takes
/// the id out of G and the unit into M.
///
/// Exact model: a hit increments the counter. Sampled model: a hit only sets the reference bit;
/// [`on_sample`](EvictionPolicy::on_sample) adds one to the counter of each referenced unit and
/// clears the bits, and the eviction scan counts a bit still set as one more hit before it
/// decides, so that hits since the last sample are not lost.
///
/// Filling an empty set: by default (`fill_main`, libCacheSim's current `S3FIFO.c`), until the
/// first eviction, units that find S holding its share go to M, so the set fills M with the
/// first units seen. Without it (Algorithm 1 of the paper, libCacheSim's `S3FIFOv0.c`), every
/// unit enters S, and the first evictions push S's overflow through the S-to-M-or-G test. The
/// two differ only in the initial content of M, but that content lasts on loops: miss ratios
/// (unit-size objects, exact model; default fill vs the paper's) were 0.4712 vs 0.3570 on a loop
/// of 120 units with capacity 100, 0.9253 vs 1.0000 on a loop of 1200 with capacity 100, and
/// 0.4468 vs 0.3077 on that loop with capacity 1000; on Zipf-like traces (α 0.8 to 1.0,
/// capacities 100 and 1000) the paper's fill missed 0.0001 to 0.0015 more. With `fill=small`
/// this type matches libCacheSim's `S3FIFOv0` (low-level `S3FIFOv0_init`) exactly.
///
/// The `threshold` parameter means what libCacheSim's `move_to_main_threshold` means: a unit
/// moves from S to M when its counter is `>= threshold` (the paper's "freq > 1" is
/// `threshold=2`, the default).
///
/// Source: Yang, Zhang, Qiu, Yue, Vinayak, "FIFO queues are all you need for cache eviction",
/// SOSP 2023.
/// Cost: update O(1) (a counter increment); victim selection O(1) amortized (every unit moves
/// from S to M at most once, and each reinsertion in M spends one unit of counter), O(resident)
/// worst case; a sample is O(resident).
///
/// Agreement with libCacheSim (`libcachesim.S3FIFO`, Python binding 0.3.5, unit-size objects,
/// exact model, defaults small=0.1, ghost=0.9, threshold=2, and `fill_main`): identical hit/miss
/// sequence on every trace tried (Zipf-like, Zipf with scans, loops, and with removals mixed
/// in) for capacities of at least 20, including that a unit moved from S to M starts M with a zero counter and that an id is
/// looked up in G before the eviction that might push it out of G. Below 20 units they differ:
/// libCacheSim does not insert into S an object whose size is not below S's size, so with
/// unit-size objects and S of 0 or 1 units it caches nothing (miss ratio 1.0000, against 0.7381
/// here on a Zipf α=1.0 trace with capacity 10); here S always has room for at least one unit.
#[derive(Debug, Clone)]
pub struct S3Fifo {
    units: UnitTable,
    queues: SlotLists,
    /// Per slot: whether the unit is on M (else on S).
    in_main: Vec<bool>,
    /// Per slot: the 2-bit frequency counter.
    frequency: Vec<u8>,
    ghosts: UnitTable,
    ghost_queue: SlotLists,
    /// S's share of the capacity, in units (at least 1).
    small_target: usize,
    /// Hits in S a unit needs to move to M.
    threshold: u8,
    /// Whether, until the first eviction, units that find S holding its share go to M.
    fill_main: bool,
    /// Whether anything was evicted yet.
    has_evicted: bool,
}

impl S3Fifo {
    /// The defaults of the paper and of libCacheSim: S is 10% of the capacity.
    pub const DEFAULT_SMALL: f64 = 0.1;
    /// G remembers as many ids as 90% of the capacity (the size of M).
    pub const DEFAULT_GHOST: f64 = 0.9;
    /// A unit moves from S to M when it was hit at least twice while in S.
    pub const DEFAULT_THRESHOLD: u8 = 2;

    /// An S3-FIFO resident set of `capacity` units with the default parameters.
    pub fn new(capacity: usize) -> Self {
        Self::with_parameters(
            capacity,
            Self::DEFAULT_SMALL,
            Self::DEFAULT_GHOST,
            Self::DEFAULT_THRESHOLD,
            true,
        )
    }

    /// An S3-FIFO resident set of `capacity` units: S holds the fraction `small` of the
    /// capacity (rounded down, at least one unit), G remembers `ghost` times the capacity ids
    /// (rounded down), a unit moves from S to M when its counter is at least `threshold`
    /// (at most 3, the counter's maximum), and `fill_main` chooses libCacheSim's way of filling
    /// an empty set (true) or the paper's (false).
    pub fn with_parameters(
        capacity: usize,
        small: f64,
        ghost: f64,
        threshold: u8,
        fill_main: bool,
    ) -> Self {
        // Rounded down as libCacheSim does, in the same floating-point arithmetic.
        let small_target = ((capacity as f64 * small) as usize).clamp(1, capacity.max(1));
        let ghost_capacity = (capacity as f64 * ghost) as usize;
        Self {
            units: UnitTable::new(capacity),
            queues: SlotLists::new(2, capacity),
            in_main: vec![false; capacity],
            frequency: vec![0; capacity],
            ghosts: UnitTable::new(ghost_capacity),
            ghost_queue: SlotLists::new(1, ghost_capacity),
            small_target,
            threshold,
            fill_main,
            has_evicted: false,
        }
    }

    fn queue_of(&self, slot: Slot) -> usize {
        if self.in_main[slot as usize] {
            MAIN
        } else {
            SMALL
        }
    }

    /// The counter of `slot`, after counting a reference bit still set as one more hit.
    fn take_frequency(&mut self, slot: Slot) -> u8 {
        let f = &mut self.frequency[slot as usize];
        if self.units.take_referenced(slot) {
            *f = (*f + 1).min(MAX_FREQUENCY);
        }
        *f
    }

    /// Remembers `unit` in G, forgetting G's oldest id if G is full.
    fn remember(&mut self, unit: UnitId) {
        if self.ghosts.capacity() == 0 {
            return;
        }
        if self.ghosts.is_full() {
            let oldest = self
                .ghost_queue
                .pop_front(0)
                .expect("a full G is not empty");
            self.ghosts.remove_slot(oldest);
        }
        let slot = self.ghosts.insert(unit).expect("room in G");
        self.ghost_queue.push_back(0, slot);
    }

    /// Forgets `unit` if G remembers it; returns whether it did.
    fn forget(&mut self, unit: UnitId) -> bool {
        match self.ghosts.remove(unit) {
            Some(slot) => {
                self.ghost_queue.unlink(0, slot);
                true
            }
            None => false,
        }
    }

    /// Scans S from its oldest unit: units hit often enough move to M, the first other one is
    /// evicted (into G) and returned. `None` if S ran empty first.
    fn evict_from_small(&mut self) -> Option<UnitId> {
        while let Some(slot) = self.queues.front(SMALL) {
            if self.take_frequency(slot) >= self.threshold {
                self.queues.move_to_back(SMALL, MAIN, slot);
                self.in_main[slot as usize] = true;
                self.frequency[slot as usize] = 0;
            } else {
                self.queues.unlink(SMALL, slot);
                let unit = self.units.remove_slot(slot);
                self.remember(unit);
                return Some(unit);
            }
        }
        None
    }

    /// Scans M from its oldest unit as a CLOCK with 2-bit counters: evicts and returns the first
    /// unit whose counter is zero. `None` if M is empty.
    fn evict_from_main(&mut self) -> Option<UnitId> {
        // Each reinsertion spends one unit of counter, so this ends within three turns.
        while let Some(slot) = self.queues.front(MAIN) {
            let f = self.take_frequency(slot);
            if f > 0 {
                self.frequency[slot as usize] = f - 1;
                self.queues.move_to_back(MAIN, MAIN, slot);
            } else {
                self.queues.unlink(MAIN, slot);
                return Some(self.units.remove_slot(slot));
            }
        }
        None
    }
}

impl EvictionPolicy for S3Fifo {
    fn name(&self) -> &'static str {
        "s3-fifo"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, unit: UnitId) {
        if let Some(slot) = self.units.slot(unit) {
            let f = &mut self.frequency[slot as usize];
            *f = (*f + 1).min(MAX_FREQUENCY);
        }
    }
    fn mark_referenced(&mut self, unit: UnitId) {
        self.units.mark_referenced(unit);
    }
    fn on_sample(&mut self) {
        for queue in [SMALL, MAIN] {
            let mut cur = self.queues.front(queue);
            while let Some(slot) = cur {
                cur = self.queues.next(slot);
                self.take_frequency(slot);
            }
        }
    }
    fn admit(&mut self, unit: UnitId) -> Option<UnitId> {
        // Look in G before evicting: the eviction may push G's oldest id, `unit` itself, out.
        let remembered = self.forget(unit);
        let victim = if self.units.is_full() {
            self.evict()
        } else {
            None
        };
        let to_main = remembered
            || (self.fill_main && !self.has_evicted && self.queues.len(SMALL) >= self.small_target);
        let slot = self.units.insert(unit).expect("room after eviction");
        self.frequency[slot as usize] = 0;
        self.in_main[slot as usize] = to_main;
        self.queues
            .push_back(if to_main { MAIN } else { SMALL }, slot);
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        if self.units.is_empty() {
            return None;
        }
        self.has_evicted = true;
        loop {
            // S gives up a unit while it holds its share; scanning S may move all of it to M,
            // and then M gives one up.
            let victim =
                if self.queues.len(SMALL) >= self.small_target || self.queues.is_empty(MAIN) {
                    self.evict_from_small()
                } else {
                    self.evict_from_main()
                };
            if victim.is_some() {
                return victim;
            }
        }
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        // Released memory has no history worth remembering.
        self.forget(unit);
        match self.units.remove(unit) {
            Some(slot) => {
                self.queues.unlink(self.queue_of(slot), slot);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Capacity 10: S holds 1 unit, M 9, G remembers 9 ids.
    fn ten() -> S3Fifo {
        S3Fifo::new(10)
    }

    fn main_units(p: &S3Fifo) -> Vec<UnitId> {
        p.queues.iter(MAIN).map(|s| p.units.id(s)).collect()
    }

    fn small_units(p: &S3Fifo) -> Vec<UnitId> {
        p.queues.iter(SMALL).map(|s| p.units.id(s)).collect()
    }

    #[test]
    fn parameters_round_down_like_libcachesim() {
        let p = S3Fifo::new(1000);
        assert_eq!((p.small_target, p.ghosts.capacity()), (100, 900));
        let p = S3Fifo::new(5);
        assert_eq!((p.small_target, p.ghosts.capacity()), (1, 4));
    }

    #[test]
    fn one_hit_wonders_leave_through_small_into_ghost() {
        let mut p = ten();
        for u in 0..10 {
            assert_eq!(p.admit(u), None);
        }
        // Before any eviction, S fills to its share and the rest goes to M.
        assert_eq!(small_units(&p), [0]);
        assert_eq!(main_units(&p), (1..10).collect::<Vec<_>>());
        // Every new unit passes through S; unreferenced, it leaves into G, never touching M.
        assert_eq!(p.admit(100), Some(0));
        assert_eq!(p.admit(101), Some(100));
        assert_eq!(p.admit(102), Some(101));
        assert_eq!(main_units(&p), (1..10).collect::<Vec<_>>());
        assert!(p.ghosts.contains(100) && p.ghosts.contains(101));
    }

    #[test]
    fn the_paper_fill_rule_sends_every_new_unit_through_small() {
        let mut p = S3Fifo::with_parameters(10, 0.1, 0.9, 2, false);
        for u in 0..10 {
            assert_eq!(p.admit(u), None);
        }
        assert_eq!(small_units(&p), (0..10).collect::<Vec<_>>());
        // S is over its share: the oldest unreferenced unit leaves into G.
        p.on_hit(0);
        p.on_hit(0);
        assert_eq!(p.admit(10), Some(1));
        assert_eq!(main_units(&p), [0]);
        assert!(p.ghosts.contains(1));
    }

    #[test]
    fn a_ghost_hit_goes_to_main() {
        let mut p = ten();
        for u in 0..11 {
            p.admit(u);
        }
        assert!(p.ghosts.contains(0));
        // 0 comes back: it is remembered, so it enters M, and G forgets it.
        p.admit(0);
        assert!(!p.ghosts.contains(0));
        assert_eq!(main_units(&p).last(), Some(&0));
    }

    #[test]
    fn units_hit_enough_in_small_move_to_main_with_a_fresh_counter() {
        let mut p = S3Fifo::new(20); // S holds 2
        for u in 0..20 {
            p.admit(u);
        }
        assert_eq!(small_units(&p), [0, 1]);
        p.on_hit(0);
        p.on_hit(0);
        p.on_hit(1);
        // 0 was hit twice (threshold 2): it moves to M; 1 was hit once: it is evicted.
        assert_eq!(p.admit(50), Some(1));
        assert_eq!(main_units(&p).last(), Some(&0));
        let slot = p.units.slot(0).unwrap();
        assert_eq!(p.frequency[slot as usize], 0);
    }

    #[test]
    fn main_is_a_clock_with_two_bit_counters() {
        let mut p = S3Fifo::new(20);
        for u in 0..20 {
            p.admit(u);
        }
        // M holds 2..19; drain S so that evictions come from M.
        assert!(p.remove(0) && p.remove(1));
        for _ in 0..5 {
            p.on_hit(2); // saturates at 3
        }
        p.on_hit(3);
        assert_eq!(p.evict(), Some(4));
        // 2 and 3 were reinserted at M's new end, with counters 2 and 0.
        assert_eq!(&main_units(&p)[15..], [2, 3]);
        let f = |p: &S3Fifo, u| p.frequency[p.units.slot(u).unwrap() as usize];
        assert_eq!((f(&p, 2), f(&p, 3)), (2, 0));
    }

    #[test]
    fn sampled_bits_count_at_samples_and_at_eviction() {
        let mut p = S3Fifo::new(20);
        for u in 0..20 {
            p.admit(u);
        }
        p.mark_referenced(0);
        p.on_sample(); // 0's counter: 1
        p.mark_referenced(0); // not sampled yet: counted by the eviction scan
        assert_eq!(p.admit(50), Some(1));
        assert_eq!(main_units(&p).last(), Some(&0));
    }
}
