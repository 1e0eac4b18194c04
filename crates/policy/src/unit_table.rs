//! [`UnitTable`]: the map between unit ids and dense slots, with one reference bit per slot.

use rustc_hash::FxHashMap;

/// Identifier of a unit of memory: a page number, a chunk index or an object id from a trace.
pub type UnitId = u64;

/// Index of a slot in a [`UnitTable`]; stable while the unit stays in the table.
pub type Slot = u32;

/// Sentinel for "no slot" in link arrays.
pub const NO_SLOT: Slot = Slot::MAX;

/// Maps unit ids to dense slots `0..capacity` and keeps one reference bit per slot.
///
/// Every policy keeps its per-unit metadata in arrays indexed by [`Slot`], so that a lookup costs
/// one hash probe and everything else is array indexing. All storage is allocated up front: after
/// construction, inserting and removing units never allocates (the hash map is sized at twice the
/// capacity, so tombstone clean-up rehashes in place).
#[derive(Debug, Clone)]
pub struct UnitTable {
    index: FxHashMap<UnitId, Slot>,
    ids: Vec<UnitId>,
    referenced: Vec<bool>,
    free: Vec<Slot>,
    capacity: usize,
}

impl UnitTable {
    /// A table for at most `capacity` units.
    ///
    /// # Panics
    /// If `capacity` does not fit in a [`Slot`] (more than 2^32 - 2 units).
    pub fn new(capacity: usize) -> Self {
        assert!(
            capacity < NO_SLOT as usize,
            "unit table capacity {capacity} exceeds {}",
            NO_SLOT - 1
        );
        let mut index = FxHashMap::default();
        index.reserve(capacity.saturating_mul(2).max(16));
        Self {
            index,
            ids: vec![0; capacity],
            referenced: vec![false; capacity],
            free: (0..capacity as Slot).rev().collect(),
            capacity,
        }
    }

    /// How many units the table can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many units the table holds.
    pub fn len(&self) -> usize {
        self.capacity - self.free.len()
    }

    /// Whether the table holds no unit.
    pub fn is_empty(&self) -> bool {
        self.free.len() == self.capacity
    }

    /// Whether the table holds as many units as it can.
    pub fn is_full(&self) -> bool {
        self.free.is_empty()
    }

    /// The slot of `unit`, if present.
    #[inline]
    pub fn slot(&self, unit: UnitId) -> Option<Slot> {
        self.index.get(&unit).copied()
    }

    /// Whether `unit` is present.
    #[inline]
    pub fn contains(&self, unit: UnitId) -> bool {
        self.index.contains_key(&unit)
    }

    /// The unit in `slot`. Only meaningful for an occupied slot.
    #[inline]
    pub fn id(&self, slot: Slot) -> UnitId {
        self.ids[slot as usize]
    }

    /// Adds `unit` (which must be absent) with its reference bit clear; returns its slot, or
    /// `None` if the table is full.
    #[inline]
    pub fn insert(&mut self, unit: UnitId) -> Option<Slot> {
        let slot = self.free.pop()?;
        let previous = self.index.insert(unit, slot);
        debug_assert!(previous.is_none(), "unit {unit} inserted twice");
        self.ids[slot as usize] = unit;
        self.referenced[slot as usize] = false;
        Some(slot)
    }

    /// Removes the unit in the occupied `slot`; returns its id.
    #[inline]
    pub fn remove_slot(&mut self, slot: Slot) -> UnitId {
        let unit = self.ids[slot as usize];
        let removed = self.index.remove(&unit);
        debug_assert_eq!(
            removed,
            Some(slot),
            "slot {slot} was not occupied by {unit}"
        );
        self.free.push(slot);
        unit
    }

    /// Removes `unit` if present; returns the slot it had.
    #[inline]
    pub fn remove(&mut self, unit: UnitId) -> Option<Slot> {
        let slot = self.index.remove(&unit)?;
        self.free.push(slot);
        Some(slot)
    }

    /// The reference bit of `slot`.
    #[inline]
    pub fn is_referenced(&self, slot: Slot) -> bool {
        self.referenced[slot as usize]
    }

    /// Sets or clears the reference bit of `slot`.
    #[inline]
    pub fn set_referenced(&mut self, slot: Slot, referenced: bool) {
        self.referenced[slot as usize] = referenced;
    }

    /// Sets the reference bit of `unit` if present; returns whether it was present.
    #[inline]
    pub fn mark_referenced(&mut self, unit: UnitId) -> bool {
        match self.slot(unit) {
            Some(slot) => {
                self.referenced[slot as usize] = true;
                true
            }
            None => false,
        }
    }

    /// Reads and clears the reference bit of `slot` (the scan of an accessed bit).
    #[inline]
    pub fn take_referenced(&mut self, slot: Slot) -> bool {
        std::mem::take(&mut self.referenced[slot as usize])
    }

    /// Iterates over the occupied slots and their units, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Slot, UnitId)> + '_ {
        self.index.iter().map(|(&unit, &slot)| (slot, unit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_lookup_remove() {
        let mut t = UnitTable::new(3);
        let a = t.insert(10).unwrap();
        let b = t.insert(20).unwrap();
        assert_ne!(a, b);
        assert_eq!(t.slot(10), Some(a));
        assert_eq!(t.id(b), 20);
        assert_eq!(t.len(), 2);
        t.insert(30).unwrap();
        assert!(t.is_full());
        assert_eq!(t.insert(40), None);
        assert_eq!(t.remove_slot(a), 10);
        assert!(!t.contains(10));
        assert_eq!(t.remove(20), Some(b));
        assert_eq!(t.remove(20), None);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn reference_bits_are_per_slot_and_reset_on_insert() {
        let mut t = UnitTable::new(2);
        let a = t.insert(1).unwrap();
        assert!(t.mark_referenced(1));
        assert!(!t.mark_referenced(2));
        assert!(t.is_referenced(a));
        t.remove(1);
        let again = t.insert(5).unwrap();
        assert_eq!(again, a);
        assert!(!t.is_referenced(again));
        t.set_referenced(again, true);
        assert!(t.take_referenced(again));
        assert!(!t.is_referenced(again));
    }
}
