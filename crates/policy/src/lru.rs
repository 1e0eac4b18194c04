//! [`Lru`]: exact least recently used.

use crate::eviction_policy::{Access, EvictionPolicy, InformationModel};
use crate::slot_lists::SlotLists;
use crate::unit_table::{UnitId, UnitTable};

/// Exact LRU: the victim is the unit whose last access is oldest.
///
/// In the sampled model it only learns of hits at samples: each referenced unit moves to the
/// most-recent end then (in list order), so it degrades to "LRU over sample periods".
/// Source: the classic stack algorithm (Mattson et al. 1970).
/// Cost: victim selection O(1), update O(1) (unlink and append); a sample is O(resident).
#[derive(Debug, Clone)]
pub struct Lru {
    units: UnitTable,
    recency: SlotLists,
}

impl Lru {
    /// An LRU resident set of `capacity` units.
    pub fn new(capacity: usize) -> Self {
        Self {
            units: UnitTable::new(capacity),
            recency: SlotLists::new(1, capacity),
        }
    }
}

impl EvictionPolicy for Lru {
    fn name(&self) -> &'static str {
        "lru"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, unit: UnitId) {
        if let Some(slot) = self.units.slot(unit) {
            // Already the most recent (a run of accesses to one unit): nothing moves.
            if self.recency.back(0) != Some(slot) {
                self.recency.move_to_back(0, 0, slot);
            }
        }
    }
    fn access(&mut self, unit: UnitId, model: InformationModel) -> Access {
        // One lookup for both the hit test and the update.
        match self.units.slot(unit) {
            Some(slot) => {
                match model {
                    InformationModel::Exact => {
                        if self.recency.back(0) != Some(slot) {
                            self.recency.move_to_back(0, 0, slot);
                        }
                    }
                    InformationModel::Sampled => self.units.set_referenced(slot, true),
                }
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
    fn on_sample(&mut self) {
        // Walk the list once, from the old end; referenced units move to the new end. Units
        // appended during the walk are not visited again (the walk stops at the old tail).
        let Some(last) = self.recency.back(0) else {
            return;
        };
        let mut cur = self.recency.front(0);
        while let Some(slot) = cur {
            cur = if slot == last {
                None
            } else {
                self.recency.next(slot)
            };
            if self.units.take_referenced(slot) {
                self.recency.move_to_back(0, 0, slot);
            }
        }
    }
    fn admit(&mut self, unit: UnitId) -> Option<UnitId> {
        let victim = if self.units.is_full() {
            self.evict()
        } else {
            None
        };
        let slot = self.units.insert(unit).expect("room after eviction");
        self.recency.push_back(0, slot);
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        let slot = self.recency.pop_front(0)?;
        Some(self.units.remove_slot(slot))
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        match self.units.remove(unit) {
            Some(slot) => {
                self.recency.unlink(0, slot);
                true
            }
            None => false,
        }
    }
}
