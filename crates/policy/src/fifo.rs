//! [`Fifo`]: first in, first out.

use crate::eviction_policy::EvictionPolicy;
use crate::slot_lists::SlotLists;
use crate::unit_table::{UnitId, UnitTable};

/// First in, first out: the victim is the unit brought in longest ago; accesses change nothing.
///
/// Source: the textbook baseline (Belady 1966); seed 000's starting point in KVM.
/// Cost: victim selection O(1), update O(1) (a hit does nothing).
#[derive(Debug, Clone)]
pub struct Fifo {
    units: UnitTable,
    queue: SlotLists,
}

impl Fifo {
    /// A FIFO resident set of `capacity` units.
    pub fn new(capacity: usize) -> Self {
        Self {
            units: UnitTable::new(capacity),
            queue: SlotLists::new(1, capacity),
        }
    }
}

impl EvictionPolicy for Fifo {
    fn name(&self) -> &'static str {
        "fifo"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, _unit: UnitId) {}
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
        let slot = self.queue.pop_front(0)?;
        Some(self.units.remove_slot(slot))
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        match self.units.remove(unit) {
            Some(slot) => {
                self.queue.unlink(0, slot);
                true
            }
            None => false,
        }
    }
}
