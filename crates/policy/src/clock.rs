//! [`Clock`]: second chance with one global hand.

use crate::eviction_policy::{Access, EvictionPolicy, InformationModel};
use crate::slot_lists::SlotLists;
use crate::unit_table::{UnitId, UnitTable};

/// CLOCK (second chance): units sit on a circle in arrival order; the hand sweeps from the
/// oldest, clearing set reference bits and evicting the first unit whose bit is clear. A unit
/// brought in starts with its bit clear and is placed just behind the hand (the newest position).
///
/// The circle is kept as a list whose head is the hand: "advance the hand past a unit" is moving
/// it from head to tail, which is the same order as a circular buffer with a moving index.
/// The same rule runs in both models, because it only ever reads reference bits.
/// Source: Corbató 1968; seed 000's "approximate LRU" (second chance, one global hand).
/// Cost: update O(1) (sets a bit); victim selection O(1) amortized, O(resident) worst case.
#[derive(Debug, Clone)]
pub struct Clock {
    units: UnitTable,
    circle: SlotLists,
}

impl Clock {
    /// A CLOCK resident set of `capacity` units.
    pub fn new(capacity: usize) -> Self {
        Self {
            units: UnitTable::new(capacity),
            circle: SlotLists::new(1, capacity),
        }
    }
}

impl EvictionPolicy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, unit: UnitId) {
        self.units.mark_referenced(unit);
    }
    fn access(&mut self, unit: UnitId, _model: InformationModel) -> Access {
        // Both models only set the bit: one lookup does the hit test and the update.
        match self.units.slot(unit) {
            Some(slot) => {
                self.units.set_referenced(slot, true);
                Access::Hit
            }
            None => Access::Miss {
                victim: self.admit(unit),
            },
        }
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
        self.circle.push_back(0, slot);
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        loop {
            let slot = self.circle.front(0)?;
            if self.units.take_referenced(slot) {
                self.circle.move_to_back(0, 0, slot);
            } else {
                self.circle.unlink(0, slot);
                return Some(self.units.remove_slot(slot));
            }
        }
    }
    /// Enhanced second chance (CLOCK with a modified bit): the hand clears and passes
    /// referenced units as usual, passes unreferenced costly units without changing them
    /// (moving them behind it, in their order), and evicts the first unit that is neither
    /// referenced nor costly. If it comes round to the first costly unit it passed (one
    /// revolution, no unit found), it evicts that one: the unit plain CLOCK would have taken.
    /// So an unreferenced costly unit goes before a referenced one, as in the classic
    /// algorithm's order of (referenced, modified) classes, and a selection passes each unit at
    /// most once more than plain CLOCK would.
    fn evict_sparing(&mut self, costly: &mut dyn FnMut(UnitId) -> bool) -> Option<UnitId> {
        let mut first_spared = None;
        loop {
            let slot = self.circle.front(0)?;
            if first_spared == Some(slot)
                || !self.units.is_referenced(slot) && !costly(self.units.id(slot))
            {
                self.circle.unlink(0, slot);
                return Some(self.units.remove_slot(slot));
            }
            if !self.units.take_referenced(slot) {
                first_spared.get_or_insert(slot);
            }
            self.circle.move_to_back(0, 0, slot);
        }
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        match self.units.remove(unit) {
            Some(slot) => {
                self.circle.unlink(0, slot);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clock_with(units: &[UnitId]) -> Clock {
        let mut c = Clock::new(units.len());
        for &u in units {
            assert_eq!(c.admit(u), None);
        }
        c
    }

    #[test]
    fn sparing_takes_the_oldest_unit_that_is_not_costly() {
        let mut c = clock_with(&[1, 2, 3, 4]);
        assert_eq!(c.evict_sparing(&mut |u| u <= 2), Some(3));
        // The spared units went behind the hand in their order: 4 is next, then 1 and 2.
        assert_eq!(c.evict(), Some(4));
        assert_eq!(c.evict(), Some(1));
    }

    #[test]
    fn sparing_still_honours_reference_bits() {
        let mut c = clock_with(&[1, 2, 3]);
        c.mark_referenced(2);
        // 1 is costly, 2 referenced: 3 goes, and 2 lost its bit on the way.
        assert_eq!(c.evict_sparing(&mut |u| u == 1), Some(3));
        assert!(!c.units().is_referenced(c.units().slot(2).unwrap()));
        // An unreferenced costly unit goes before a referenced one (the classic order of
        // (referenced, modified) classes): 1 after one revolution, 2 losing its bit.
        c.mark_referenced(2);
        assert_eq!(c.evict_sparing(&mut |u| u == 1), Some(1));
        assert!(!c.units().is_referenced(c.units().slot(2).unwrap()));
    }

    #[test]
    fn when_every_unit_is_costly_it_evicts_what_plain_clock_would() {
        for referenced in [None, Some(1), Some(3)] {
            let mut plain = clock_with(&[1, 2, 3, 4]);
            let mut sparing = plain.clone();
            if let Some(r) = referenced {
                plain.mark_referenced(r);
                sparing.mark_referenced(r);
            }
            let mut calls = 0;
            let victim = sparing.evict_sparing(&mut |_| {
                calls += 1;
                true
            });
            assert_eq!(victim, plain.evict(), "referenced {referenced:?}");
            assert!(calls <= 4, "one revolution of sparing: {calls} calls");
            assert_eq!(sparing.len(), 3);
        }
    }

    #[test]
    fn an_empty_clock_has_no_victim() {
        let mut c = Clock::new(4);
        assert_eq!(c.evict_sparing(&mut |_| false), None);
    }
}
