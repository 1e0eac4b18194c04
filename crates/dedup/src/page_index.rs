//! [`PageIndex`]: the seed's hash-table page index (Singleton replaced KSM's trees with one):
//! content hash → classes of pages with identical content, and location → class.
//!
//! A *class* is a set of pages whose bytes were found equal (every member joined by a byte
//! comparison with a member, never by hash equality alone). Pages with the same hash but
//! different bytes get separate classes chained under that hash.

use rustc_hash::FxHashMap;

/// Where a page is: which source (as numbered by the scanner) and its address there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageLocation {
    /// The source's number.
    pub source: u32,
    /// Page-aligned address in the source.
    pub address: u64,
}

/// A class of identical pages.
pub type ClassId = u32;

const NONE: ClassId = ClassId::MAX;

#[derive(Debug, Clone)]
struct Class {
    hash: u64,
    first: PageLocation,
    others: Vec<PageLocation>,
    /// The next class with the same hash (a collision chain), or `NONE`.
    next: ClassId,
    live: bool,
}

/// Totals over the index (see [`PageIndex::summary`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IndexSummary {
    /// Pages in the index (non-zero pages of every source).
    pub pages: u64,
    /// Distinct contents (classes).
    pub distinct: u64,
    /// Pages that merging would free: pages minus distinct.
    pub duplicate_pages: u64,
    /// Of those, freed by merging within each source.
    pub within_sources: u64,
    /// Of those, freed by merging across sources (after merging within).
    pub across_sources: u64,
}

/// Per-source totals over the index (see [`PageIndex::source_summary`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SourceSummary {
    /// Pages of this source in the index.
    pub pages: u64,
    /// Pages whose content appears nowhere else (in this or any source).
    pub unique: u64,
    /// Pages that duplicate an earlier page of the same source (merging within would free them).
    pub duplicates_within: u64,
    /// Pages whose content also appears in another source.
    pub shared_with_others: u64,
}

/// Content hash → classes; location → class.
#[derive(Debug, Default)]
pub struct PageIndex {
    by_hash: FxHashMap<u64, ClassId>,
    by_location: FxHashMap<PageLocation, ClassId>,
    classes: Vec<Class>,
    free: Vec<ClassId>,
}

impl PageIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index with room for `pages` pages without rehashing (the seed sizes its table
    /// to the number of pages).
    pub fn with_capacity(pages: usize) -> Self {
        Self {
            by_hash: FxHashMap::with_capacity_and_hasher(pages, Default::default()),
            by_location: FxHashMap::with_capacity_and_hasher(pages, Default::default()),
            classes: Vec::with_capacity(pages),
            free: Vec::new(),
        }
    }

    /// Pages in the index.
    pub fn len(&self) -> usize {
        self.by_location.len()
    }

    /// Whether the index is empty.
    pub fn is_empty(&self) -> bool {
        self.by_location.is_empty()
    }

    /// The classes whose content has hash `hash` (usually zero or one).
    pub fn candidates(&self, hash: u64) -> impl Iterator<Item = ClassId> + '_ {
        let mut c = self.by_hash.get(&hash).copied().unwrap_or(NONE);
        std::iter::from_fn(move || {
            if c == NONE {
                return None;
            }
            let this = c;
            c = self.classes[c as usize].next;
            Some(this)
        })
    }

    /// The first member of `class` (the page new pages are compared with).
    pub fn representative(&self, class: ClassId) -> PageLocation {
        self.classes[class as usize].first
    }

    /// The content hash of `class`.
    pub fn hash_of(&self, class: ClassId) -> u64 {
        self.classes[class as usize].hash
    }

    /// Members of `class`.
    pub fn members(&self, class: ClassId) -> impl Iterator<Item = PageLocation> + '_ {
        let c = &self.classes[class as usize];
        std::iter::once(c.first).chain(c.others.iter().copied())
    }

    /// Number of members of `class`.
    pub fn class_len(&self, class: ClassId) -> usize {
        1 + self.classes[class as usize].others.len()
    }

    /// The class `location` belongs to.
    pub fn class_of(&self, location: PageLocation) -> Option<ClassId> {
        self.by_location.get(&location).copied()
    }

    /// Starts a new class of content `hash` with its first page `location` (which must not be
    /// indexed).
    pub fn insert_new(&mut self, hash: u64, location: PageLocation) -> ClassId {
        debug_assert!(!self.by_location.contains_key(&location));
        let next = self.by_hash.get(&hash).copied().unwrap_or(NONE);
        let class = Class {
            hash,
            first: location,
            others: Vec::new(),
            next,
            live: true,
        };
        let id = match self.free.pop() {
            Some(id) => {
                self.classes[id as usize] = class;
                id
            }
            None => {
                self.classes.push(class);
                (self.classes.len() - 1) as ClassId
            }
        };
        self.by_hash.insert(hash, id);
        self.by_location.insert(location, id);
        id
    }

    /// Adds `location` (not indexed) to `class`, whose bytes it was found equal to.
    pub fn join(&mut self, class: ClassId, location: PageLocation) {
        debug_assert!(!self.by_location.contains_key(&location));
        self.classes[class as usize].others.push(location);
        self.by_location.insert(location, class);
    }

    /// Removes `location` from the index; returns whether it was there.
    pub fn remove(&mut self, location: PageLocation) -> bool {
        let Some(id) = self.by_location.remove(&location) else {
            return false;
        };
        let c = &mut self.classes[id as usize];
        if c.first == location {
            match c.others.pop() {
                Some(last) => c.first = last,
                None => {
                    self.unlink(id);
                    return true;
                }
            }
        } else if let Some(i) = c.others.iter().position(|&l| l == location) {
            c.others.swap_remove(i);
        }
        true
    }

    fn unlink(&mut self, id: ClassId) {
        let hash = self.classes[id as usize].hash;
        let next = self.classes[id as usize].next;
        let head = self.by_hash[&hash];
        if head == id {
            if next == NONE {
                self.by_hash.remove(&hash);
            } else {
                self.by_hash.insert(hash, next);
            }
        } else {
            let mut c = head;
            while self.classes[c as usize].next != id {
                c = self.classes[c as usize].next;
            }
            self.classes[c as usize].next = next;
        }
        let c = &mut self.classes[id as usize];
        c.live = false;
        c.others = Vec::new();
        c.next = NONE;
        self.free.push(id);
    }

    /// Removes every page of `source` whose address is in `[start, end)`.
    pub fn remove_range(&mut self, source: u32, start: u64, end: u64) {
        let doomed: Vec<PageLocation> = if (end - start) / 4096 < self.by_location.len() as u64 {
            (start..end)
                .step_by(crate::PAGE_SIZE)
                .map(|address| PageLocation { source, address })
                .filter(|l| self.by_location.contains_key(l))
                .collect()
        } else {
            self.by_location
                .keys()
                .filter(|l| l.source == source && (start..end).contains(&l.address))
                .copied()
                .collect()
        };
        for l in doomed {
            self.remove(l);
        }
    }

    /// Removes every page of `source`.
    pub fn remove_source(&mut self, source: u32) {
        self.remove_range(source, 0, u64::MAX);
    }

    fn live_classes(&self) -> impl Iterator<Item = &Class> {
        self.classes.iter().filter(|c| c.live)
    }

    /// Totals: pages, distinct contents, and duplicates within and across sources.
    pub fn summary(&self) -> IndexSummary {
        let mut s = IndexSummary::default();
        let mut per_source: Vec<(u32, u64)> = Vec::new();
        for c in self.live_classes() {
            let n = 1 + c.others.len() as u64;
            s.pages += n;
            s.distinct += 1;
            s.duplicate_pages += n - 1;
            if n > 1 {
                count_sources(c, &mut per_source);
                let within: u64 = per_source.iter().map(|&(_, k)| k - 1).sum();
                s.within_sources += within;
                s.across_sources += per_source.len() as u64 - 1;
            }
        }
        s
    }

    /// Totals for one source.
    pub fn source_summary(&self, source: u32) -> SourceSummary {
        let mut s = SourceSummary::default();
        let mut per_source: Vec<(u32, u64)> = Vec::new();
        for c in self.live_classes() {
            count_sources(c, &mut per_source);
            let Some(&(_, mine)) = per_source.iter().find(|&&(src, _)| src == source) else {
                continue;
            };
            s.pages += mine;
            if per_source.len() > 1 {
                s.shared_with_others += mine;
            } else if mine == 1 {
                s.unique += 1;
            }
            s.duplicates_within += mine - 1;
        }
        s
    }
}

fn count_sources(c: &Class, out: &mut Vec<(u32, u64)>) {
    out.clear();
    for l in std::iter::once(&c.first).chain(&c.others) {
        match out.iter_mut().find(|(s, _)| *s == l.source) {
            Some((_, k)) => *k += 1,
            None => out.push((l.source, 1)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(source: u32, page: u64) -> PageLocation {
        PageLocation {
            source,
            address: page * 4096,
        }
    }

    #[test]
    fn classes_chains_and_removal() {
        let mut ix = PageIndex::new();
        let a = ix.insert_new(7, loc(0, 0));
        ix.join(a, loc(0, 1));
        ix.join(a, loc(1, 5));
        // Same hash, different bytes: a second class in the chain.
        let b = ix.insert_new(7, loc(1, 6));
        assert_eq!(ix.candidates(7).collect::<Vec<_>>(), vec![b, a]);
        let c = ix.insert_new(9, loc(1, 7));
        assert_eq!(ix.len(), 5);
        let s = ix.summary();
        assert_eq!(
            s,
            IndexSummary {
                pages: 5,
                distinct: 3,
                duplicate_pages: 2,
                within_sources: 1,
                across_sources: 1
            }
        );
        assert_eq!(
            ix.source_summary(0),
            SourceSummary {
                pages: 2,
                unique: 0,
                duplicates_within: 1,
                shared_with_others: 2
            }
        );
        assert_eq!(
            ix.source_summary(1),
            SourceSummary {
                pages: 3,
                unique: 2,
                duplicates_within: 0,
                shared_with_others: 1
            }
        );
        // Removing the representative promotes another member.
        assert!(ix.remove(loc(0, 0)));
        assert!(!ix.remove(loc(0, 0)));
        assert_eq!(ix.class_len(a), 2);
        assert_ne!(ix.representative(a), loc(0, 0));
        // Removing a class's last member unlinks it from its chain.
        ix.remove(loc(1, 6));
        assert_eq!(ix.candidates(7).collect::<Vec<_>>(), vec![a]);
        ix.remove_source(1);
        assert_eq!(ix.len(), 1);
        assert_eq!(ix.candidates(9).count(), 0);
        assert_eq!(ix.class_of(loc(0, 1)), Some(a));
        // Freed ids are reused.
        let d = ix.insert_new(11, loc(2, 0));
        assert!(d == b || d == c);
        ix.remove_range(0, 4096, 8192);
        assert_eq!(ix.summary().pages, 1);
    }
}
