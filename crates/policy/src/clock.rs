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
