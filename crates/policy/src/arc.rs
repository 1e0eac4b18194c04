//! [`Arc`]: the Adaptive Replacement Cache.

use crate::eviction_policy::EvictionPolicy;
use crate::slot_lists::SlotLists;
use crate::unit_table::{Slot, UnitId, UnitTable};

/// Resident units seen once since they entered the directory (recency).
const T1: usize = 0;
/// Resident units seen at least twice (frequency).
const T2: usize = 1;
/// Ids recently evicted from T1.
const B1: usize = 0;
/// Ids recently evicted from T2.
const B2: usize = 1;

/// ARC: two LRU lists of resident units, T1 (seen once recently) and T2 (seen at least twice),
/// and two LRU ghost lists of evicted ids, B1 (evicted from T1) and B2 (evicted from T2), which
/// together remember at most `capacity` ids (the directory holds at most twice the capacity).
/// A target size `p` for T1 adapts on ghost hits: a hit in B1 means T1 was too small and grows
/// `p` by `max(1, |B2| / |B1|)`; a hit in B2 shrinks it by `max(1, |B1| / |B2|)`. The victim is
/// the LRU unit of T1 if T1 exceeds `p` (or equals it on a B2 hit), else the LRU unit of T2.
/// A hit moves the unit to the MRU end of T2; a ghost hit brings it into T2; any other miss
/// brings it into T1.
///
/// Exact model: standard ARC. Sampled model: a hit only sets the reference bit; at
/// [`on_sample`](EvictionPolicy::on_sample), referenced units of T1 and then of T2 move to the
/// MRU end of T2 (their bits cleared), in LRU-to-MRU order.
///
/// `p` and the adaptation steps are real numbers, as in the paper (δ = `|B2| / |B1|` is a real
/// ratio) and in libCacheSim; integer versions (`|B2| / |B1|` rounded down) differ slightly.
///
/// Outside the paper's setting (a resident set that is always full once warm), the pager's
/// [`evict`](EvictionPolicy::evict) and [`remove`](EvictionPolicy::remove) can leave room: a
/// miss then trims the directory by the paper's rules but only replaces (demotes a resident
/// unit) when the set is full; `evict` demotes the unit REPLACE would (first forgetting, when
/// the ghosts hold the capacity, the LRU ghost of B1 if `|T1| + |B1|` reaches the capacity,
/// else of B2); `remove` forgets the unit entirely, ghost included.
///
/// Source: Megiddo, Modha, "ARC: A Self-Tuning, Low Overhead Replacement Cache", FAST 2003.
/// Cost: victim selection O(1), update O(1) (unlink and append); a sample is O(resident).
///
/// Agreement with libCacheSim (`libcachesim.ARC`, Python binding 0.3.5, unit-size objects,
/// exact model): identical hit/miss sequence on every trace tried (Zipf-like with α 0.8 to 1.2,
/// Zipf with scans, loops; capacities 10 to 1000): the same algorithm with the same arithmetic
/// (libCacheSim's current `ARC.c` has a real `p`). With an integer `p` instead, the miss ratio
/// was higher than libCacheSim's by 0.00001 to 0.00005 on Zipf-like traces (e.g. 0.77272 vs
/// 0.77267 at α 0.8, capacity 100). With removals mixed in the two differ by design:
/// libCacheSim trims the directory only when it must evict, and keeps a removed ghost in its
/// hash table; with every 7th request removing a recently used unit from a Zipf α=1.0 trace,
/// the miss ratio was 0.6240 here vs 0.6558 in libCacheSim at capacity 100.
#[derive(Debug, Clone)]
pub struct Arc {
    units: UnitTable,
    resident: SlotLists,
    /// Per resident slot: whether the unit is on T2 (else on T1).
    in_t2: Vec<bool>,
    ghosts: UnitTable,
    ghost_lists: SlotLists,
    /// Per ghost slot: whether the id is on B2 (else on B1).
    in_b2: Vec<bool>,
    /// Target size of T1, in `0..=capacity`.
    p: f64,
}

impl Arc {
    /// An ARC resident set of `capacity` units, remembering up to `capacity` evicted ids.
    pub fn new(capacity: usize) -> Self {
        Self {
            units: UnitTable::new(capacity),
            resident: SlotLists::new(2, capacity),
            in_t2: vec![false; capacity],
            ghosts: UnitTable::new(capacity),
            ghost_lists: SlotLists::new(2, capacity),
            in_b2: vec![false; capacity],
            p: 0.0,
        }
    }

    /// The current target size of T1.
    pub fn target_t1(&self) -> f64 {
        self.p
    }

    fn list_of(&self, slot: Slot) -> usize {
        if self.in_t2[slot as usize] {
            T2
        } else {
            T1
        }
    }

    fn ghost_list_of(&self, ghost: Slot) -> usize {
        if self.in_b2[ghost as usize] {
            B2
        } else {
            B1
        }
    }

    /// Forgets the LRU id of ghost list `list`, if any.
    fn forget_lru(&mut self, list: usize) {
        if let Some(ghost) = self.ghost_lists.pop_front(list) {
            self.ghosts.remove_slot(ghost);
        }
    }

    /// Forgets `unit` if it is a ghost.
    fn forget(&mut self, unit: UnitId) {
        if let Some(ghost) = self.ghosts.remove(unit) {
            let list = self.ghost_list_of(ghost);
            self.ghost_lists.unlink(list, ghost);
        }
    }

    /// Brings `unit` (on no list) in at the MRU end of `list`, its reference bit clear.
    fn insert_resident(&mut self, list: usize, unit: UnitId) {
        let slot = self.units.insert(unit).expect("room for a resident unit");
        self.in_t2[slot as usize] = list == T2;
        self.resident.push_back(list, slot);
    }

    /// Evicts the LRU unit of resident list `list` and remembers it on the matching ghost list.
    fn demote_lru(&mut self, list: usize) -> UnitId {
        if self.ghosts.is_full() {
            // Only when the pager evicted ahead of demand: make room as a miss would.
            let l1 = self.resident.len(T1) + self.ghost_lists.len(B1);
            if (l1 >= self.capacity() && !self.ghost_lists.is_empty(B1))
                || self.ghost_lists.is_empty(B2)
            {
                self.forget_lru(B1);
            } else {
                self.forget_lru(B2);
            }
        }
        let slot = self.resident.pop_front(list).expect("a non-empty list");
        let unit = self.units.remove_slot(slot);
        let ghost = self.ghosts.insert(unit).expect("room for a ghost");
        let ghost_list = if list == T2 { B2 } else { B1 };
        self.in_b2[ghost as usize] = ghost_list == B2;
        self.ghost_lists.push_back(ghost_list, ghost);
        unit
    }

    /// The paper's REPLACE: demotes the LRU unit of T1 if T1 exceeds its target (or meets it
    /// and the unit coming in was a B2 ghost), else the LRU unit of T2. The set is not empty.
    fn replace(&mut self, hit_in_b2: bool) -> UnitId {
        let t1 = self.resident.len(T1);
        let t1_size = t1 as f64;
        let from_t1 = t1 > 0
            && (t1_size > self.p || (hit_in_b2 && t1_size == self.p) || self.resident.is_empty(T2));
        self.demote_lru(if from_t1 { T1 } else { T2 })
    }

    /// Brings in `unit`, remembered on ghost list `list` in `ghost`: adapts `p`, replaces if
    /// full, and puts `unit` at the MRU end of T2.
    fn admit_ghost(&mut self, unit: UnitId, ghost: Slot, list: usize) -> Option<UnitId> {
        let (b1, b2) = (
            self.ghost_lists.len(B1) as f64,
            self.ghost_lists.len(B2) as f64,
        );
        if list == B1 {
            self.p = (self.p + (b2 / b1).max(1.0)).min(self.capacity() as f64);
        } else {
            self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
        }
        // Forget the ghost before REPLACE adds one, so the ghosts never exceed the capacity.
        self.ghost_lists.unlink(list, ghost);
        self.ghosts.remove_slot(ghost);
        let victim = self.units.is_full().then(|| self.replace(list == B2));
        self.insert_resident(T2, unit);
        victim
    }

    /// Brings in `unit`, not in the directory: trims the directory as the paper's case IV does,
    /// replaces if full, and puts `unit` at the MRU end of T1.
    fn admit_new(&mut self, unit: UnitId) -> Option<UnitId> {
        let c = self.capacity();
        let t1 = self.resident.len(T1);
        let full = self.units.is_full();
        let victim = if t1 + self.ghost_lists.len(B1) >= c {
            // Case A: L1 = T1 + B1 holds the capacity.
            if t1 < c {
                self.forget_lru(B1);
                full.then(|| self.replace(false))
            } else {
                // T1 is the whole set and B1 empty: the LRU unit of T1 leaves without a ghost.
                let slot = self.resident.pop_front(T1).expect("T1 holds the capacity");
                Some(self.units.remove_slot(slot))
            }
        } else {
            // Case B: L1 is below the capacity; the directory may be full.
            if self.len() + self.ghosts.len() >= 2 * c {
                self.forget_lru(B2);
            }
            full.then(|| self.replace(false))
        };
        self.insert_resident(T1, unit);
        victim
    }
}

impl EvictionPolicy for Arc {
    fn name(&self) -> &'static str {
        "arc"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, unit: UnitId) {
        if let Some(slot) = self.units.slot(unit) {
            let list = self.list_of(slot);
            self.resident.move_to_back(list, T2, slot);
            self.in_t2[slot as usize] = true;
        }
    }
    fn mark_referenced(&mut self, unit: UnitId) {
        self.units.mark_referenced(unit);
    }
    fn on_sample(&mut self) {
        // T2's walk stops at its old MRU end, so units just promoted are not visited twice.
        let old_t2_mru = self.resident.back(T2);
        for list in [T1, T2] {
            let stop = if list == T1 {
                self.resident.back(T1)
            } else {
                old_t2_mru
            };
            let Some(stop) = stop else { continue };
            let mut cur = self.resident.front(list);
            while let Some(slot) = cur {
                cur = if slot == stop {
                    None
                } else {
                    self.resident.next(slot)
                };
                if self.units.take_referenced(slot) {
                    self.resident.move_to_back(list, T2, slot);
                    self.in_t2[slot as usize] = true;
                }
            }
        }
    }
    fn admit(&mut self, unit: UnitId) -> Option<UnitId> {
        match self.ghosts.slot(unit) {
            Some(ghost) => {
                let list = self.ghost_list_of(ghost);
                self.admit_ghost(unit, ghost, list)
            }
            None => self.admit_new(unit),
        }
    }
    fn evict(&mut self) -> Option<UnitId> {
        if self.units.is_empty() {
            return None;
        }
        Some(self.replace(false))
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        // Released memory has no history worth remembering.
        self.forget(unit);
        match self.units.remove(unit) {
            Some(slot) => {
                let list = self.list_of(slot);
                self.resident.unlink(list, slot);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(p: &Arc, list: usize) -> Vec<UnitId> {
        p.resident.iter(list).map(|s| p.units.id(s)).collect()
    }

    fn ghost_ids(p: &Arc, list: usize) -> Vec<UnitId> {
        p.ghost_lists.iter(list).map(|s| p.ghosts.id(s)).collect()
    }

    #[test]
    fn a_second_access_promotes_to_t2() {
        let mut p = Arc::new(4);
        for u in [1, 2, 3] {
            p.admit(u);
        }
        p.on_hit(2);
        assert_eq!(ids(&p, T1), [1, 3]);
        assert_eq!(ids(&p, T2), [2]);
    }

    #[test]
    fn a_b1_hit_grows_the_target_and_a_b2_hit_shrinks_it() {
        let mut p = Arc::new(4);
        for u in [1, 2] {
            p.admit(u);
            p.on_hit(u); // T2 = [1, 2]
        }
        for u in [3, 4] {
            p.admit(u); // T1 = [3, 4]
        }
        // Full, p = 0: T1 exceeds its target, so its LRU unit 3 becomes a B1 ghost.
        assert_eq!(p.admit(5), Some(3));
        assert_eq!(ghost_ids(&p, B1), [3]);
        // 3 comes back: T1 was too small. p grows by 1 and 3 enters T2.
        assert_eq!(p.admit(3), Some(4));
        assert_eq!(p.target_t1(), 1.0);
        assert_eq!(ids(&p, T2), [1, 2, 3]);
        assert_eq!(ids(&p, T1), [5]);
        // Now |T1| = p: a new unit evicts from T2, whose LRU unit 1 becomes a B2 ghost.
        assert_eq!(p.admit(6), Some(1));
        assert_eq!(ghost_ids(&p, B2), [1]);
        // 1 comes back: T2 was too small; p shrinks by max(1, |B1| / |B2|) = 1.
        assert_eq!(ghost_ids(&p, B1), [4]);
        assert_eq!(p.admit(1), Some(5));
        assert_eq!(p.target_t1(), 0.0);
        assert_eq!(ids(&p, T2), [2, 3, 1]);
    }

    #[test]
    fn a_scan_does_not_flush_t2() {
        let mut p = Arc::new(10);
        for u in 0..5 {
            p.admit(u);
            p.on_hit(u);
        }
        for u in 100..1000 {
            p.admit(u);
        }
        for u in 0..5 {
            assert!(p.contains(u), "frequent unit {u} was flushed by a scan");
        }
    }

    #[test]
    fn the_directory_stays_within_twice_the_capacity() {
        let mut p = Arc::new(8);
        let mut x = 7u64;
        for i in 0..10_000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = (x >> 33) % 40;
            if p.contains(u) {
                p.on_hit(u);
            } else {
                p.admit(u);
            }
            if i % 37 == 0 {
                p.evict();
            }
            assert!(p.ghosts.len() <= p.capacity());
            assert!(p.resident.len(T1) + p.ghost_lists.len(B1) <= p.capacity());
            assert!((0.0..=p.capacity() as f64).contains(&p.target_t1()));
        }
    }

    #[test]
    fn sampled_hits_promote_at_the_sample() {
        let mut p = Arc::new(4);
        for u in [1, 2, 3] {
            p.admit(u);
        }
        p.on_hit(3); // T2 = [3]
        p.mark_referenced(1);
        p.mark_referenced(3);
        assert_eq!(ids(&p, T1), [1, 2]);
        p.on_sample();
        assert_eq!(ids(&p, T1), [2]);
        assert_eq!(ids(&p, T2), [1, 3]);
        p.on_sample();
        assert_eq!(ids(&p, T2), [1, 3]);
    }
}
