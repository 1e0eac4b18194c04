//! [`SlotLists`]: doubly linked lists threaded through slot-indexed link arrays.

use crate::unit_table::{Slot, NO_SLOT};

/// A fixed set of doubly linked lists whose nodes are slots of a [`crate::UnitTable`].
///
/// A slot is on at most one list at a time; the caller knows which (policies keep that in their
/// own per-slot metadata), and passes the list index to the operations that need it. Heads are the
/// oldest end (eviction side), tails the newest. Every operation is O(1) and none allocates.
#[derive(Debug, Clone)]
pub struct SlotLists {
    prev: Vec<Slot>,
    next: Vec<Slot>,
    head: Vec<Slot>,
    tail: Vec<Slot>,
    len: Vec<usize>,
}

impl SlotLists {
    /// `lists` empty lists over slots `0..slots`.
    pub fn new(lists: usize, slots: usize) -> Self {
        Self {
            prev: vec![NO_SLOT; slots],
            next: vec![NO_SLOT; slots],
            head: vec![NO_SLOT; lists],
            tail: vec![NO_SLOT; lists],
            len: vec![0; lists],
        }
    }

    /// Number of lists.
    pub fn lists(&self) -> usize {
        self.head.len()
    }

    /// Length of `list`.
    #[inline]
    pub fn len(&self, list: usize) -> usize {
        self.len[list]
    }

    /// Whether `list` is empty.
    #[inline]
    pub fn is_empty(&self, list: usize) -> bool {
        self.len[list] == 0
    }

    /// The oldest slot of `list`.
    #[inline]
    pub fn front(&self, list: usize) -> Option<Slot> {
        let h = self.head[list];
        (h != NO_SLOT).then_some(h)
    }

    /// The newest slot of `list`.
    #[inline]
    pub fn back(&self, list: usize) -> Option<Slot> {
        let t = self.tail[list];
        (t != NO_SLOT).then_some(t)
    }

    /// The slot after `slot` (towards the tail), if any.
    #[inline]
    pub fn next(&self, slot: Slot) -> Option<Slot> {
        let n = self.next[slot as usize];
        (n != NO_SLOT).then_some(n)
    }

    /// The slot before `slot` (towards the head), if any.
    #[inline]
    pub fn prev(&self, slot: Slot) -> Option<Slot> {
        let p = self.prev[slot as usize];
        (p != NO_SLOT).then_some(p)
    }

    /// Appends `slot` (on no list) at the tail of `list`.
    #[inline]
    pub fn push_back(&mut self, list: usize, slot: Slot) {
        let s = slot as usize;
        let t = self.tail[list];
        self.prev[s] = t;
        self.next[s] = NO_SLOT;
        if t == NO_SLOT {
            self.head[list] = slot;
        } else {
            self.next[t as usize] = slot;
        }
        self.tail[list] = slot;
        self.len[list] += 1;
    }

    /// Prepends `slot` (on no list) at the head of `list`.
    #[inline]
    pub fn push_front(&mut self, list: usize, slot: Slot) {
        let s = slot as usize;
        let h = self.head[list];
        self.next[s] = h;
        self.prev[s] = NO_SLOT;
        if h == NO_SLOT {
            self.tail[list] = slot;
        } else {
            self.prev[h as usize] = slot;
        }
        self.head[list] = slot;
        self.len[list] += 1;
    }

    /// Unlinks `slot` from `list`, which must be the list it is on.
    #[inline]
    pub fn unlink(&mut self, list: usize, slot: Slot) {
        let s = slot as usize;
        let (p, n) = (self.prev[s], self.next[s]);
        if p == NO_SLOT {
            debug_assert_eq!(self.head[list], slot, "slot {slot} is not on list {list}");
            self.head[list] = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NO_SLOT {
            debug_assert_eq!(self.tail[list], slot, "slot {slot} is not on list {list}");
            self.tail[list] = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[s] = NO_SLOT;
        self.next[s] = NO_SLOT;
        self.len[list] -= 1;
    }

    /// Removes and returns the oldest slot of `list`.
    #[inline]
    pub fn pop_front(&mut self, list: usize) -> Option<Slot> {
        let h = self.front(list)?;
        self.unlink(list, h);
        Some(h)
    }

    /// Moves `slot` from `from` to the tail of `to` (they may be the same list).
    #[inline]
    pub fn move_to_back(&mut self, from: usize, to: usize, slot: Slot) {
        self.unlink(from, slot);
        self.push_back(to, slot);
    }

    /// Moves all of `src` to the tail of `dst` in O(1), leaving `src` empty.
    pub fn append(&mut self, dst: usize, src: usize) {
        if dst == src || self.len[src] == 0 {
            return;
        }
        let (sh, st) = (self.head[src], self.tail[src]);
        let dt = self.tail[dst];
        if dt == NO_SLOT {
            self.head[dst] = sh;
        } else {
            self.next[dt as usize] = sh;
            self.prev[sh as usize] = dt;
        }
        self.tail[dst] = st;
        self.len[dst] += self.len[src];
        self.head[src] = NO_SLOT;
        self.tail[src] = NO_SLOT;
        self.len[src] = 0;
    }

    /// Iterates over `list` from head (oldest) to tail.
    pub fn iter(&self, list: usize) -> impl Iterator<Item = Slot> + '_ {
        let mut cur = self.head[list];
        std::iter::from_fn(move || {
            (cur != NO_SLOT).then(|| {
                let s = cur;
                cur = self.next[s as usize];
                s
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(l: &SlotLists, list: usize) -> Vec<Slot> {
        l.iter(list).collect()
    }

    #[test]
    fn push_unlink_pop_keep_order() {
        let mut l = SlotLists::new(2, 8);
        for s in [3, 1, 4] {
            l.push_back(0, s);
        }
        l.push_front(0, 5);
        assert_eq!(contents(&l, 0), [5, 3, 1, 4]);
        l.unlink(0, 1);
        assert_eq!(contents(&l, 0), [5, 3, 4]);
        assert_eq!(l.pop_front(0), Some(5));
        l.move_to_back(0, 1, 3);
        assert_eq!(contents(&l, 0), [4]);
        assert_eq!(contents(&l, 1), [3]);
        assert_eq!((l.len(0), l.len(1)), (1, 1));
        l.unlink(0, 4);
        assert!(l.is_empty(0));
        assert_eq!(l.front(0), None);
        assert_eq!(l.back(0), None);
    }

    #[test]
    fn append_concatenates_and_empties_source() {
        let mut l = SlotLists::new(3, 8);
        for s in [0, 1] {
            l.push_back(0, s);
        }
        for s in [2, 3, 4] {
            l.push_back(1, s);
        }
        l.append(0, 1);
        assert_eq!(contents(&l, 0), [0, 1, 2, 3, 4]);
        assert!(l.is_empty(1));
        l.append(2, 0);
        assert_eq!(contents(&l, 2), [0, 1, 2, 3, 4]);
        assert_eq!(l.back(2), Some(4));
        assert_eq!(l.prev(2), Some(1));
        l.append(2, 1);
        assert_eq!(l.len(2), 5);
    }
}
