//! [`Mglru`]: a multi-generational LRU in the style of Linux's MGLRU.

use crate::eviction_policy::EvictionPolicy;
use crate::slot_lists::SlotLists;
use crate::unit_table::{Slot, UnitId, UnitTable, NO_SLOT};

/// Multi-generational LRU: units sit in generations numbered by sequence, from the oldest
/// (`min_seq`) to the youngest (`max_seq`), at most `gens` of them; each generation is a list.
///
/// - A unit brought in joins the youngest generation.
/// - Aging, at each [`on_sample`](EvictionPolicy::on_sample): every referenced unit is promoted
///   to the tail of the youngest generation and its bit is cleared (generations walked oldest
///   first, each head to tail). Then empty oldest generations are retired, and a new, empty
///   youngest generation is created (`max_seq += 1`) if fewer than `gens` exist; while `gens`
///   exist, the youngest keeps collecting until eviction retires the oldest.
/// - Eviction takes the head of the oldest generation; a unit there whose reference bit is set is
///   promoted to the youngest generation (bit cleared) instead. Empty oldest generations are
///   retired (`min_seq += 1`); if only one generation remains, a new youngest one is created
///   first, so eviction always has an older generation to take from.
///
/// Hits only set the reference bit, in both models, as the kernel only sees accessed bits.
///
/// Mapping to the kernel (mm/vmscan.c, Documentation/mm/multigen_lru.rst): generations are
/// `lrugen->folios[gen]` indexed by `seq % MAX_NR_GENS`; aging is `try_to_inc_max_seq` (page
/// table walk promoting accessed folios to `max_seq`, then `inc_max_seq`); eviction is
/// `evict_folios` from `min_seq`, where `folio_referenced`/look-around finds a young PTE and
/// promotes the folio instead; `MIN_NR_GENS` = 2 is the floor kept here by aging on demand.
/// Simplified away: anon/file types and swappiness, tiers and the PID refault controller,
/// Bloom filters steering the walk (every unit is visited), look-around of neighbouring pages,
/// and forced merging of the two oldest generations when `max_seq` cannot grow (here a sample
/// at `gens` generations simply creates none).
///
/// Source: Yu Zhao's multi-generational LRU (Linux 6.1); seed 003 compares chunk queues to it.
/// Cost: update O(1) (a bit); a sample O(resident), one walk; victim selection O(1) amortized
/// (each promotion clears a bit, so a selection is O(resident) only if every unit was
/// referenced).
#[derive(Debug, Clone)]
pub struct Mglru {
    units: UnitTable,
    /// One list per generation; generation `seq` is list `seq % gens`.
    generations: SlotLists,
    /// Per slot: the list of the generation it is in.
    generation_of: Vec<u8>,
    min_seq: u64,
    max_seq: u64,
    gens: u64,
}

impl Mglru {
    /// Default maximum number of generations, the kernel's `MAX_NR_GENS`.
    pub const DEFAULT_GENS: u32 = 4;
    /// Fewest generations the policy runs with.
    pub const MIN_GENS: u32 = 2;
    /// Largest supported maximum.
    pub const MAX_GENS: u32 = 16;

    /// A resident set of `capacity` units with at most `gens` generations (clamped to 2..=16).
    pub fn new(capacity: usize, gens: u32) -> Self {
        let gens = gens.clamp(Self::MIN_GENS, Self::MAX_GENS);
        Self {
            units: UnitTable::new(capacity),
            generations: SlotLists::new(gens as usize, capacity),
            generation_of: vec![0; capacity],
            min_seq: 0,
            max_seq: 0,
            gens: u64::from(gens),
        }
    }

    /// The sequence numbers of the oldest and youngest generations.
    pub fn seq_range(&self) -> (u64, u64) {
        (self.min_seq, self.max_seq)
    }

    /// The sequence number of the generation resident `unit` is in.
    pub fn generation_of(&self, unit: UnitId) -> Option<u64> {
        let slot = self.units.slot(unit)?;
        let list = u64::from(self.generation_of[slot as usize]);
        (self.min_seq..=self.max_seq).find(|seq| seq % self.gens == list)
    }

    #[inline]
    fn list(&self, seq: u64) -> usize {
        (seq % self.gens) as usize
    }

    /// Moves occupied `slot` to the tail of the youngest generation.
    #[inline]
    fn promote(&mut self, slot: Slot) {
        let from = self.generation_of[slot as usize] as usize;
        let to = self.list(self.max_seq);
        self.generations.move_to_back(from, to, slot);
        self.generation_of[slot as usize] = to as u8;
    }

    /// Retires empty generations from the old end, keeping at least the youngest.
    fn retire_empty(&mut self) {
        while self.min_seq < self.max_seq && self.generations.is_empty(self.list(self.min_seq)) {
            self.min_seq += 1;
        }
    }

    /// Creates a new, empty youngest generation if fewer than `gens` exist.
    fn try_new_generation(&mut self) {
        if self.max_seq - self.min_seq + 1 < self.gens {
            self.max_seq += 1;
        }
    }
}

impl EvictionPolicy for Mglru {
    fn name(&self) -> &'static str {
        "mglru"
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
        // Walk each generation up to its tail as it was before any promotion.
        let mut ends = [NO_SLOT; Self::MAX_GENS as usize];
        for (seq, end) in (self.min_seq..=self.max_seq).zip(ends.iter_mut()) {
            *end = self.generations.back(self.list(seq)).unwrap_or(NO_SLOT);
        }
        for (seq, &end) in (self.min_seq..=self.max_seq).zip(ends.iter()) {
            let mut cur = if end == NO_SLOT {
                None
            } else {
                self.generations.front(self.list(seq))
            };
            while let Some(slot) = cur {
                cur = if slot == end {
                    None
                } else {
                    self.generations.next(slot)
                };
                if self.units.take_referenced(slot) {
                    self.promote(slot);
                }
            }
        }
        self.retire_empty();
        self.try_new_generation();
    }
    fn admit(&mut self, unit: UnitId) -> Option<UnitId> {
        let victim = if self.units.is_full() {
            self.evict()
        } else {
            None
        };
        let slot = self.units.insert(unit).expect("room after eviction");
        let youngest = self.list(self.max_seq);
        self.generations.push_back(youngest, slot);
        self.generation_of[slot as usize] = youngest as u8;
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        if self.units.is_empty() {
            return None;
        }
        loop {
            self.retire_empty();
            if self.min_seq == self.max_seq {
                self.max_seq += 1;
            }
            let oldest = self.list(self.min_seq);
            let slot = self.generations.front(oldest)?;
            if self.units.take_referenced(slot) {
                self.promote(slot);
            } else {
                self.generations.unlink(oldest, slot);
                return Some(self.units.remove_slot(slot));
            }
        }
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        match self.units.slot(unit) {
            Some(slot) => {
                let list = self.generation_of[slot as usize] as usize;
                self.generations.unlink(list, slot);
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
    use std::collections::VecDeque;

    #[test]
    fn eviction_promotes_referenced_units() {
        let mut p = Mglru::new(3, 4);
        for u in [1, 2, 3] {
            p.admit(u);
        }
        p.on_hit(1);
        // One generation: eviction creates a younger one, promotes 1 there, evicts 2.
        assert_eq!(p.admit(4), Some(2));
        assert_eq!(p.generation_of(1), Some(1));
        assert_eq!(p.generation_of(3), Some(0));
        assert_eq!(p.admit(5), Some(3));
        assert_eq!(p.admit(6), Some(1));
    }

    #[test]
    fn aging_promotes_referenced_units_and_adds_generations() {
        let mut p = Mglru::new(4, 3);
        for u in [1, 2, 3, 4] {
            p.admit(u);
        }
        p.mark_referenced(1);
        p.on_sample(); // 1 promoted within gen 0 (to its tail); gen 1 created
        assert_eq!(p.seq_range(), (0, 1));
        p.mark_referenced(2);
        p.on_sample(); // 2 -> gen 1; gen 2 created
        assert_eq!(p.seq_range(), (0, 2));
        assert_eq!(p.generation_of(2), Some(1));
        p.on_sample(); // three generations already: none created
        assert_eq!(p.seq_range(), (0, 2));
        assert_eq!(p.admit(5), Some(3));
        assert_eq!(p.admit(6), Some(4));
        assert_eq!(p.admit(7), Some(1));
        // Gen 0 is empty now: the next eviction retires it and takes gen 1.
        assert_eq!(p.admit(8), Some(2));
        assert_eq!(p.seq_range(), (1, 2));
    }

    /// The rules, literally: a deque of generations (oldest first) of unit ids.
    struct Reference {
        gens: VecDeque<VecDeque<(u64, bool)>>,
        max_gens: usize,
        capacity: usize,
    }

    impl Reference {
        fn len(&self) -> usize {
            self.gens.iter().map(VecDeque::len).sum()
        }
        fn find(&mut self, u: u64) -> Option<&mut (u64, bool)> {
            self.gens.iter_mut().flatten().find(|e| e.0 == u)
        }
        fn take(&mut self, u: u64) -> bool {
            for g in &mut self.gens {
                if let Some(i) = g.iter().position(|e| e.0 == u) {
                    g.remove(i);
                    return true;
                }
            }
            false
        }
        fn retire(&mut self) {
            while self.gens.len() > 1 && self.gens[0].is_empty() {
                self.gens.pop_front();
            }
        }
        fn sample(&mut self) {
            let mut promoted = Vec::new();
            for g in &mut self.gens {
                g.retain(|e| {
                    if e.1 {
                        promoted.push((e.0, false));
                    }
                    !e.1
                });
            }
            self.gens.back_mut().unwrap().extend(promoted);
            self.retire();
            if self.gens.len() < self.max_gens {
                self.gens.push_back(VecDeque::new());
            }
        }
        fn evict(&mut self) -> Option<u64> {
            if self.len() == 0 {
                return None;
            }
            loop {
                self.retire();
                if self.gens.len() == 1 {
                    self.gens.push_back(VecDeque::new());
                }
                let (u, referenced) = self.gens[0].pop_front().unwrap();
                if referenced {
                    self.gens.back_mut().unwrap().push_back((u, false));
                } else {
                    return Some(u);
                }
            }
        }
        fn admit(&mut self, u: u64) -> Option<u64> {
            let v = if self.len() == self.capacity {
                self.evict()
            } else {
                None
            };
            self.gens.back_mut().unwrap().push_back((u, false));
            v
        }
    }

    #[test]
    fn matches_the_literal_rules() {
        for gens in [2, 3, 4, 16] {
            for seed in 1..4u64 {
                let cap = 30;
                let mut p = Mglru::new(cap, gens);
                let mut r = Reference {
                    gens: VecDeque::from([VecDeque::new()]),
                    max_gens: gens as usize,
                    capacity: cap,
                };
                let mut rng = Rng::new(seed * 0x2545_f491_4f6c_dd1d);
                for step in 0..20_000 {
                    let ctx = format!("gens={gens} seed={seed} step={step}");
                    let u = if rng.below(2) == 0 {
                        rng.below(15)
                    } else {
                        rng.below(100)
                    };
                    if let Some(e) = r.find(u) {
                        e.1 = true;
                        assert!(p.contains(u), "{ctx}");
                        p.mark_referenced(u);
                    } else {
                        assert!(!p.contains(u), "{ctx}");
                        assert_eq!(p.admit(u), r.admit(u), "{ctx}");
                    }
                    if rng.below(10) == 0 {
                        p.on_sample();
                        r.sample();
                    }
                    if rng.below(40) == 0 {
                        assert_eq!(p.evict(), r.evict(), "{ctx}");
                        let x = rng.below(100);
                        assert_eq!(p.remove(x), r.take(x), "{ctx}");
                    }
                }
            }
        }
    }
}
