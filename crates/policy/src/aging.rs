//! [`Aging`]: the aging algorithm, an n-bit shift register of reference history per unit.

use crate::eviction_policy::EvictionPolicy;
use crate::slot_lists::SlotLists;
use crate::unit_table::{Slot, UnitId, UnitTable};

/// Units whose counter is below the top bit (not referenced in the last sample period).
const BELOW_TOP: usize = 0;
/// Units whose counter is exactly the top bit (referenced in the last period only, or new).
const AT_TOP: usize = 1;
/// Units whose counter is above the top bit.
const ABOVE_TOP: usize = 2;

/// Aging: every unit has a counter of `bits` bits; at each sample it shifts right by one and the
/// unit's reference bit enters at the top (`counter = counter >> 1 | referenced << (bits - 1)`),
/// and the bit is cleared. The victim is the unit with the smallest counter. A unit brought in
/// starts with only its top bit set (it was just accessed).
///
/// Hits only set the reference bit, in both models: the counter is a history of sample periods,
/// so the algorithm is sampled by nature.
///
/// Victim selection without a scan: the units are kept in one order sorted by counter (three
/// lists, below / at / above the top bit, concatenated). A sample keeps it sorted by a stable
/// partition: unreferenced units (counter < top afterwards) stay in their order, referenced ones
/// (counter >= top afterwards) move behind them in their order, because shifting preserves
/// order and the top bit dominates. A unit brought in has counter exactly top, so it joins the
/// tail of the middle list. The victim is the head of the first non-empty list.
///
/// Ties: the order is stable, so among equal counters the unit that was ahead stays ahead. A
/// unit brought in queues behind every unit already at its counter, so equal counters leave in
/// order of admission, and units ordered by an earlier sample keep that order, which ranks them
/// by the history that has already been shifted out (as a wider counter would).
///
/// Source: the aging algorithm (Tanenbaum, *Modern Operating Systems*), S-memV's 8-bit access
/// history per memory chunk (Suetake et al., CLOUD 2018), cited by seed 003.
/// Cost: victim selection O(1); update (hit) O(1), one bit; a sample O(resident), one walk, for
/// any `bits` from 1 to 32 (no per-counter-value buckets).
#[derive(Debug, Clone)]
pub struct Aging {
    units: UnitTable,
    order: SlotLists,
    counters: Vec<u32>,
    top: u32,
}

impl Aging {
    /// Default counter width, as in S-memV.
    pub const DEFAULT_BITS: u32 = 8;
    /// Widest supported counter.
    pub const MAX_BITS: u32 = 32;

    /// An aging resident set of `capacity` units with `bits`-bit counters (clamped to 1..=32).
    pub fn new(capacity: usize, bits: u32) -> Self {
        let bits = bits.clamp(1, Self::MAX_BITS);
        Self {
            units: UnitTable::new(capacity),
            order: SlotLists::new(3, capacity),
            counters: vec![0; capacity],
            top: 1 << (bits - 1),
        }
    }

    /// The counter of resident `unit`.
    pub fn counter(&self, unit: UnitId) -> Option<u32> {
        self.units.slot(unit).map(|s| self.counters[s as usize])
    }

    /// The list a counter value belongs on.
    #[inline]
    fn list_of(&self, counter: u32) -> usize {
        match counter.cmp(&self.top) {
            std::cmp::Ordering::Less => BELOW_TOP,
            std::cmp::Ordering::Equal => AT_TOP,
            std::cmp::Ordering::Greater => ABOVE_TOP,
        }
    }

    #[inline]
    fn unlink(&mut self, slot: Slot) {
        let list = self.list_of(self.counters[slot as usize]);
        self.order.unlink(list, slot);
    }
}

impl EvictionPolicy for Aging {
    fn name(&self) -> &'static str {
        "aging"
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
    fn on_sample(&mut self) {
        // Gather the sorted order into one list, then partition it stably in one walk.
        self.order.append(BELOW_TOP, AT_TOP);
        self.order.append(BELOW_TOP, ABOVE_TOP);
        let Some(last) = self.order.back(BELOW_TOP) else {
            return;
        };
        let mut cur = self.order.front(BELOW_TOP);
        while let Some(slot) = cur {
            cur = if slot == last {
                None
            } else {
                self.order.next(slot)
            };
            let s = slot as usize;
            let shifted = self.counters[s] >> 1;
            if self.units.take_referenced(slot) {
                let counter = shifted | self.top;
                self.counters[s] = counter;
                let list = self.list_of(counter);
                self.order.move_to_back(BELOW_TOP, list, slot);
            } else {
                self.counters[s] = shifted;
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
        self.counters[slot as usize] = self.top;
        self.order.push_back(AT_TOP, slot);
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        let list = [BELOW_TOP, AT_TOP, ABOVE_TOP]
            .into_iter()
            .find(|&l| !self.order.is_empty(l))?;
        let slot = self.order.pop_front(list)?;
        Some(self.units.remove_slot(slot))
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        match self.units.slot(unit) {
            Some(slot) => {
                self.unlink(slot);
                self.units.remove_slot(slot);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deterministic_rng::DeterministicRng as Rng;
    use std::collections::HashMap;

    #[test]
    fn unreferenced_units_leave_in_admission_order() {
        let mut a = Aging::new(3, 8);
        for u in [1, 2, 3] {
            assert_eq!(a.admit(u), None);
        }
        assert_eq!(a.admit(4), Some(1));
        a.on_sample();
        assert_eq!(a.admit(5), Some(2));
        assert_eq!(a.evict(), Some(3));
    }

    #[test]
    fn victim_is_the_smallest_counter() {
        let mut a = Aging::new(3, 4);
        for u in [1, 2, 3] {
            a.admit(u);
        }
        // Counters start at 1000b. Reference 1 and 3, then only 3.
        a.mark_referenced(1);
        a.mark_referenced(3);
        a.on_sample(); // 1: 1100, 2: 0100, 3: 1100
        a.on_hit(3);
        a.on_sample(); // 1: 0110, 2: 0010, 3: 1110
        assert_eq!(a.counter(1), Some(0b0110));
        assert_eq!(a.counter(2), Some(0b0010));
        assert_eq!(a.counter(3), Some(0b1110));
        assert_eq!(a.admit(4), Some(2));
        assert_eq!(a.admit(5), Some(1));
        assert_eq!(a.admit(6), Some(4));
    }

    /// Random streams against a literal model: a map of counters updated by the rule; the
    /// policy's victim must hold the smallest counter, and every counter must agree.
    #[test]
    fn matches_literal_counters() {
        for bits in [1, 2, 3, 8, 32] {
            let top = 1u32 << (bits - 1);
            let cap = 20;
            let mut a = Aging::new(cap, bits);
            let mut counters: HashMap<u64, u32> = HashMap::new();
            let mut referenced: HashMap<u64, bool> = HashMap::new();
            let mut rng = Rng::new(0x9e37_79b9 + u64::from(bits));
            for step in 0..30_000 {
                let u = rng.below(60);
                if counters.contains_key(&u) {
                    if rng.below(2) == 0 {
                        a.on_hit(u);
                    } else {
                        a.mark_referenced(u);
                    }
                    referenced.insert(u, true);
                } else {
                    let min = counters.values().copied().min();
                    match a.admit(u) {
                        Some(v) => {
                            let c = counters.remove(&v).expect("victim was resident");
                            assert_eq!(Some(c), min, "bits={bits} step={step}");
                            referenced.remove(&v);
                        }
                        None => assert!(counters.len() < cap),
                    }
                    counters.insert(u, top);
                    referenced.insert(u, false);
                }
                if step % 7 == 0 {
                    for (u, c) in counters.iter_mut() {
                        let r = std::mem::take(referenced.get_mut(u).unwrap());
                        *c = (*c >> 1) | if r { top } else { 0 };
                    }
                    a.on_sample();
                    for (&u, &c) in &counters {
                        assert_eq!(a.counter(u), Some(c), "bits={bits} step={step} unit={u}");
                    }
                }
                if step % 13 == 0 {
                    let r = rng.below(60);
                    assert_eq!(a.remove(r), counters.remove(&r).is_some());
                    referenced.remove(&r);
                }
            }
        }
    }
}
