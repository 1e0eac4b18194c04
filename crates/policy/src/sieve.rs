//! [`Sieve`]: a FIFO queue with visited bits and a hand that persists between evictions.

use crate::eviction_policy::EvictionPolicy;
use crate::slot_lists::SlotLists;
use crate::unit_table::{Slot, UnitId, UnitTable};

/// SIEVE: units sit in one FIFO queue in arrival order, each with a visited bit (the reference
/// bit). A hand moves from the oldest unit towards the newest, clearing the visited bits it
/// passes and evicting the first unit whose bit is clear; past the newest unit it wraps around
/// to the oldest. The hand stays where the last eviction left it (at the victim's newer
/// neighbour), so a visited unit keeps its place in the queue instead of being moved to the new
/// end as in CLOCK: new units are always inserted at the newest end, behind the hand's sweep.
///
/// The queue's head is the oldest end (SIEVE's "tail") and its tail the newest (SIEVE's
/// "head"). The same rule runs in both models, because it only ever reads reference bits.
///
/// Source: Zhang, Yang, Yue, Vigfusson, Rashmi, "SIEVE is simpler than LRU: an efficient
/// turn-key eviction algorithm for web caches", NSDI 2024.
/// Cost: update O(1) (sets a bit); victim selection O(1) amortized, O(resident) worst case.
///
/// Agreement with libCacheSim (`libcachesim.Sieve`, Python binding 0.3.5, unit-size objects,
/// exact model): identical hit/miss sequence on every trace tried (Zipf-like with α 0.8 to 1.2,
/// Zipf with scans, loops, and with removals mixed in; capacities 10 to 1000): the same
/// algorithm, including where the hand resumes after an eviction and after a removal.
#[derive(Debug, Clone)]
pub struct Sieve {
    units: UnitTable,
    queue: SlotLists,
    /// The next unit the hand examines; `None` means the oldest unit.
    hand: Option<Slot>,
}

impl Sieve {
    /// A SIEVE resident set of `capacity` units.
    pub fn new(capacity: usize) -> Self {
        Self {
            units: UnitTable::new(capacity),
            queue: SlotLists::new(1, capacity),
            hand: None,
        }
    }

    /// The unit after `slot` on the hand's way: the next newer one, wrapping to the oldest.
    fn after(&self, slot: Slot) -> Option<Slot> {
        self.queue.next(slot).or_else(|| self.queue.front(0))
    }
}

impl EvictionPolicy for Sieve {
    fn name(&self) -> &'static str {
        "sieve"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, unit: UnitId) {
        self.units.mark_referenced(unit);
    }
    fn mark_referenced(&mut self, unit: UnitId) {
        self.units.mark_referenced(unit);
    }
    fn on_sample(&mut self) {}
    fn admit(&mut self, unit: UnitId) -> Option<UnitId> {
        let victim = if self.units.is_full() {
            self.evict()
        } else {
            None
        };
        let slot = self.units.insert(unit).expect("room after eviction");
        self.queue.push_back(0, slot);
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        let mut slot = self.hand.or_else(|| self.queue.front(0))?;
        // Every pass clears the bits it reads, so this ends within one full turn.
        while self.units.take_referenced(slot) {
            slot = self.after(slot).expect("the queue is not empty");
        }
        self.hand = self.queue.next(slot);
        self.queue.unlink(0, slot);
        Some(self.units.remove_slot(slot))
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        match self.units.remove(unit) {
            Some(slot) => {
                if self.hand == Some(slot) {
                    self.hand = self.queue.next(slot);
                }
                self.queue.unlink(0, slot);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(units: &[UnitId]) -> Sieve {
        let mut s = Sieve::new(units.len());
        for &u in units {
            assert_eq!(s.admit(u), None);
        }
        s
    }

    #[test]
    fn a_visited_unit_stays_and_its_bit_is_cleared() {
        let mut s = filled(&[1, 2, 3]);
        s.on_hit(1);
        // The hand passes 1 (clearing its bit) and evicts 2; 1 keeps its place at the old end.
        assert_eq!(s.admit(4), Some(2));
        assert!(s.contains(1));
        let oldest = s.queue.front(0).unwrap();
        assert_eq!(s.units.id(oldest), 1);
        assert!(!s.units.is_referenced(oldest));
    }

    #[test]
    fn the_hand_persists_between_evictions() {
        let mut s = filled(&[1, 2, 3, 4]);
        s.on_hit(1);
        assert_eq!(s.admit(5), Some(2)); // hand now at 3
        s.on_hit(1); // 1 is behind the hand: it is not examined before 3 and 4
        assert_eq!(s.admit(6), Some(3));
        assert_eq!(s.admit(7), Some(4));
        // The hand reaches the newest end (5, 6, 7 unvisited): 5 goes before 1 is seen again.
        assert_eq!(s.admit(8), Some(5));
    }

    #[test]
    fn the_hand_wraps_to_the_oldest_and_all_visited_evicts_the_first_seen() {
        let mut s = filled(&[1, 2, 3]);
        for u in [1, 2, 3] {
            s.on_hit(u);
        }
        // A full turn clears every bit and comes back to 1.
        assert_eq!(s.admit(4), Some(1));
        assert_eq!(s.hand.map(|h| s.units.id(h)), Some(2));
    }

    #[test]
    fn removing_the_unit_under_the_hand_moves_the_hand_on() {
        let mut s = filled(&[1, 2, 3, 4]);
        s.on_hit(1);
        assert_eq!(s.admit(5), Some(2)); // hand at 3
        assert!(s.remove(3));
        assert!(!s.remove(3));
        assert_eq!(s.evict(), Some(4));
        assert_eq!(s.len(), 2);
        assert_eq!(s.evict(), Some(5));
        assert_eq!(s.evict(), Some(1));
        assert_eq!(s.evict(), None);
    }
}
