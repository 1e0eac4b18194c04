//! [`Belady`]: Belady's optimal offline policy (OPT, MIN).

use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::eviction_policy::EvictionPolicy;
use crate::unit_table::{Slot, UnitId, UnitTable};

/// Next-access times of a whole trace, for offline policies: `future[i]` is the index of the next
/// request for the same unit as request `i`, or `u64::MAX` if there is none.
pub type Future = Arc<[u64]>;

/// Belady's OPT: the victim is the resident unit whose next request is farthest in the future,
/// units never requested again first. It needs the whole trace in advance, so it only runs in
/// the simulator, as the lower bound on misses.
///
/// The future is given at construction: `future[i]` is the index of the next request for the
/// unit of request `i` (`u64::MAX` if none). The policy keeps a cursor into the trace: each call
/// of [`on_hit`](EvictionPolicy::on_hit), [`mark_referenced`](EvictionPolicy::mark_referenced)
/// or [`admit`](EvictionPolicy::admit) consumes one request, so the driver calls exactly one of
/// them per request. A hit reported as a reference bit is still a request that OPT must account
/// for: the information model does not apply to a policy that knows the future, and OPT decides
/// the same in both models. [`on_sample`](EvictionPolicy::on_sample) does nothing. Requests past
/// the end of the future count as never requested again.
///
/// Like libCacheSim's Belady, it never bypasses: the incoming unit is always admitted and a
/// resident unit is evicted, so miss counts agree exactly. Ties (only possible among units never
/// requested again) go to the highest slot.
///
/// The priority structure is a max-heap of (next request, slot) with lazy invalidation: an
/// update pushes a new entry and leaves the old one stale; a pop skips entries whose slot is
/// vacant or whose next request changed. When the heap holds twice the capacity it is rebuilt
/// from the resident units, so it never grows past its initial allocation.
///
/// Source: L. A. Belady, "A study of replacement algorithms for a virtual-storage computer",
/// IBM Systems Journal 5(2), 1966; Mattson et al. 1970 for the stack formulation.
/// Cost: victim selection O(log n) amortized (a pop, plus stale pops paid for by the pushes);
/// update O(log n) (a push), plus an O(capacity) rebuild every `capacity` updates.
#[derive(Debug, Clone)]
pub struct Belady {
    units: UnitTable,
    /// Per slot: the index of the unit's next request.
    next_request: Vec<u64>,
    /// Per slot: whether a unit occupies it.
    occupied: Vec<bool>,
    farthest: BinaryHeap<(u64, Slot)>,
    future: Future,
    /// The index of the request the next `on_hit`/`admit` stands for.
    cursor: usize,
}

impl Belady {
    /// An OPT resident set of `capacity` units for the trace whose next-request times are
    /// `future`.
    pub fn new(capacity: usize, future: Future) -> Self {
        Self {
            units: UnitTable::new(capacity),
            next_request: vec![u64::MAX; capacity],
            occupied: vec![false; capacity],
            farthest: BinaryHeap::with_capacity(Self::heap_limit(capacity) + 1),
            future,
            cursor: 0,
        }
    }

    fn heap_limit(capacity: usize) -> usize {
        capacity.saturating_mul(2).max(16)
    }

    /// How many requests have been consumed.
    pub fn requests_seen(&self) -> usize {
        self.cursor
    }

    /// Consumes one request; returns when its unit is requested next.
    #[inline]
    fn consume_request(&mut self) -> u64 {
        let next = self.future.get(self.cursor).copied().unwrap_or(u64::MAX);
        self.cursor = self.cursor.saturating_add(1);
        next
    }

    /// Records that occupied `slot` is next requested at `next`.
    #[inline]
    fn set_next(&mut self, slot: Slot, next: u64) {
        self.next_request[slot as usize] = next;
        if self.farthest.len() >= Self::heap_limit(self.units.capacity()) {
            self.rebuild();
        }
        self.farthest.push((next, slot));
    }

    /// Drops every stale entry: one entry per resident unit remains.
    fn rebuild(&mut self) {
        self.farthest.clear();
        for (slot, &occupied) in self.occupied.iter().enumerate() {
            if occupied {
                self.farthest.push((self.next_request[slot], slot as Slot));
            }
        }
    }

    fn hit(&mut self, unit: UnitId) {
        let next = self.consume_request();
        if let Some(slot) = self.units.slot(unit) {
            if self.next_request[slot as usize] != next {
                self.set_next(slot, next);
            }
        }
    }
}

impl EvictionPolicy for Belady {
    fn name(&self) -> &'static str {
        "opt"
    }
    fn units(&self) -> &UnitTable {
        &self.units
    }
    fn on_hit(&mut self, unit: UnitId) {
        self.hit(unit);
    }
    fn mark_referenced(&mut self, unit: UnitId) {
        self.hit(unit);
    }
    fn on_sample(&mut self) {}
    fn admit(&mut self, unit: UnitId) -> Option<UnitId> {
        let victim = if self.units.is_full() {
            self.evict()
        } else {
            None
        };
        let next = self.consume_request();
        let slot = self.units.insert(unit).expect("room after eviction");
        self.occupied[slot as usize] = true;
        self.set_next(slot, next);
        victim
    }
    fn evict(&mut self) -> Option<UnitId> {
        if self.units.is_empty() {
            return None;
        }
        while let Some((next, slot)) = self.farthest.pop() {
            let s = slot as usize;
            if self.occupied[s] && self.next_request[s] == next {
                self.occupied[s] = false;
                return Some(self.units.remove_slot(slot));
            }
        }
        // Unreachable while every resident unit has an entry; recover rather than fail.
        self.rebuild();
        let (_, slot) = self.farthest.pop()?;
        self.occupied[slot as usize] = false;
        Some(self.units.remove_slot(slot))
    }
    fn remove(&mut self, unit: UnitId) -> bool {
        match self.units.remove(unit) {
            Some(slot) => {
                self.occupied[slot as usize] = false;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn future_of(stream: &[u64]) -> Future {
        let mut next = vec![u64::MAX; stream.len()];
        let mut seen: HashMap<u64, u64> = HashMap::new();
        for (i, &u) in stream.iter().enumerate().rev() {
            if let Some(&j) = seen.get(&u) {
                next[i] = j;
            }
            seen.insert(u, i as u64);
        }
        next.into()
    }

    /// Misses of OPT over `stream` with a resident set of `capacity`.
    fn misses(p: &mut dyn EvictionPolicy, stream: &[u64]) -> usize {
        let mut misses = 0;
        for &u in stream {
            if p.contains(u) {
                p.on_hit(u);
            } else {
                misses += 1;
                p.admit(u);
            }
        }
        misses
    }

    /// Brute force: on a miss with a full set, scan every resident unit for its next use.
    fn brute_force_misses(stream: &[u64], capacity: usize) -> usize {
        let mut resident: Vec<u64> = Vec::new();
        let mut misses = 0;
        for (i, &u) in stream.iter().enumerate() {
            if resident.contains(&u) {
                continue;
            }
            misses += 1;
            if resident.len() == capacity {
                let next_use = |r: u64| {
                    stream[i + 1..]
                        .iter()
                        .position(|&x| x == r)
                        .unwrap_or(usize::MAX)
                };
                let (victim, _) = resident
                    .iter()
                    .enumerate()
                    .max_by_key(|&(_, &r)| next_use(r))
                    .unwrap();
                resident.swap_remove(victim);
            }
            resident.push(u);
        }
        misses
    }

    #[test]
    fn hand_checked_example() {
        // Capacity 2, requests 1 2 3 1 2 3.
        // 3 misses: 1 is next wanted at 3, 2 at 4: evict 2. 1 hits. 2 misses: 1 is never
        // wanted again, 3 at 5: evict 1. 3 hits. Four misses.
        let stream = [1, 2, 3, 1, 2, 3];
        let mut p = Belady::new(2, future_of(&stream));
        assert_eq!(p.admit(1), None);
        assert_eq!(p.admit(2), None);
        assert_eq!(p.admit(3), Some(2));
        p.on_hit(1);
        assert_eq!(p.admit(2), Some(1));
        p.on_hit(3);
        assert_eq!(p.requests_seen(), 6);
        let mut again = Belady::new(2, future_of(&stream));
        assert_eq!(misses(&mut again, &stream), 4);
        assert_eq!(brute_force_misses(&stream, 2), 4);
    }

    #[test]
    fn matches_brute_force_on_random_streams() {
        let mut x = 0xddb1_a5e5_u64;
        for (capacity, universe, len) in
            [(1, 5, 300), (3, 10, 2000), (16, 60, 3000), (50, 80, 3000)]
        {
            let stream: Vec<u64> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Skewed: half the requests to a fifth of the units.
                    if x & 1 == 0 {
                        (x >> 8) % (universe / 5)
                    } else {
                        (x >> 8) % universe
                    }
                })
                .collect();
            let mut p = Belady::new(capacity, future_of(&stream));
            assert_eq!(
                misses(&mut p, &stream),
                brute_force_misses(&stream, capacity),
                "capacity {capacity} universe {universe}"
            );
        }
    }

    #[test]
    fn evict_and_remove_work_and_past_the_end_is_never_again() {
        let stream = [1, 2, 3, 1];
        let mut p = Belady::new(3, future_of(&stream));
        for u in [1, 2, 3] {
            p.admit(u);
        }
        assert!(p.remove(2));
        assert!(!p.remove(2));
        assert_eq!(p.evict(), Some(3));
        p.on_hit(1);
        p.admit(7); // past the end of the future
        p.on_sample();
        let mut left = vec![p.evict().unwrap(), p.evict().unwrap()];
        left.sort();
        assert_eq!(left, [1, 7]);
        assert_eq!(p.evict(), None);
    }
}
