//! [`ArenaAllocator`]: which parts of the arena region the program has mapped.
//!
//! Pure bookkeeping over byte offsets, no system calls. Space is handed out in whole chunks
//! (first fit, lowest offset), so one chunk never holds pages of two mappings; the program's
//! mapping covers `len` rounded up to a page, and the rest of its last chunk stays unused.
//! Partial unmaps are tracked page by page: a chunk returns to the free list only when no
//! mapped page is left in it. Both lists are sorted vectors with a fixed capacity reserved up
//! front, so that the interposed `mmap` path does not allocate; when they are full the caller
//! leaves the mapping to the kernel.

/// A byte range `[start, start + len)`.
pub type Span = (usize, usize);

/// Mapped and free space of an arena.
#[derive(Debug)]
pub struct ArenaAllocator {
    size: usize,
    chunk: usize,
    page: usize,
    /// Free, chunk-aligned ranges, sorted and coalesced.
    free: Vec<Span>,
    /// Ranges the program has mapped (page-aligned), sorted, disjoint, coalesced.
    live: Vec<Span>,
    capacity: usize,
}

/// What an unmap released.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// Mapped ranges that must now read as zeros (discard them).
    pub discard: Vec<Span>,
    /// Whole chunks no longer holding any mapped page: give them back with
    /// [`ArenaAllocator::add_free`] once discarded.
    pub chunks: Vec<Span>,
}

fn end(s: Span) -> usize {
    s.0 + s.1
}

impl ArenaAllocator {
    /// An empty arena of `size` bytes (rounded down to chunks), with room for `capacity`
    /// entries in each list.
    pub fn new(size: usize, chunk: usize, page: usize, capacity: usize) -> Self {
        let size = size / chunk * chunk;
        let mut free = Vec::with_capacity(capacity);
        if size > 0 {
            free.push((0, size));
        }
        Self {
            size,
            chunk,
            page,
            free,
            live: Vec::with_capacity(capacity),
            capacity,
        }
    }

    /// The arena's size.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Bytes currently mapped by the program.
    pub fn mapped_bytes(&self) -> usize {
        self.live.iter().map(|s| s.1).sum()
    }

    /// Bytes of free chunks.
    pub fn free_bytes(&self) -> usize {
        self.free.iter().map(|s| s.1).sum()
    }

    fn has_room(&self, extra: usize) -> bool {
        self.free.len() + extra <= self.capacity && self.live.len() + extra <= self.capacity
    }

    /// Maps `len` bytes: returns the offset, or `None` if no free run of chunks is large
    /// enough (or the lists are full).
    pub fn alloc(&mut self, len: usize) -> Option<usize> {
        if len == 0 || !self.has_room(1) {
            return None;
        }
        let need = len.checked_next_multiple_of(self.chunk)?;
        let i = self.free.iter().position(|s| s.1 >= need)?;
        let start = self.free[i].0;
        if self.free[i].1 == need {
            self.free.remove(i);
        } else {
            self.free[i] = (start + need, self.free[i].1 - need);
        }
        self.insert_live((start, len.next_multiple_of(self.page)));
        Some(start)
    }

    /// Whether `[start, start + len)` is entirely mapped.
    pub fn is_mapped(&self, start: usize, len: usize) -> bool {
        let i = self.live.partition_point(|s| end(*s) <= start);
        self.live
            .get(i)
            .is_some_and(|s| s.0 <= start && end(*s) >= start + len)
    }

    /// Whether `[start, start + len)` overlaps a mapped range.
    fn overlaps_live(&self, start: usize, len: usize) -> bool {
        let i = self.live.partition_point(|s| end(*s) <= start);
        self.live.get(i).is_some_and(|s| s.0 < start + len)
    }

    /// Chunk-aligned span covering `[start, start + len)`.
    fn chunk_span(&self, start: usize, len: usize) -> Span {
        let a = start / self.chunk * self.chunk;
        let b = (start + len).next_multiple_of(self.chunk).min(self.size);
        (a, b - a)
    }

    /// Removes `[start, start + len)` (chunk-aligned) from the free list if all of it is free
    /// there; returns whether it was.
    fn take_free(&mut self, span: Span) -> bool {
        if span.1 == 0 {
            return true;
        }
        let i = self.free.partition_point(|s| end(*s) <= span.0);
        let Some(&f) = self.free.get(i) else {
            return false;
        };
        if f.0 > span.0 || end(f) < end(span) || !self.has_room(1) {
            return false;
        }
        let (left, right) = ((f.0, span.0 - f.0), (end(span), end(f) - end(span)));
        self.free.remove(i);
        let mut at = i;
        for part in [left, right] {
            if part.1 > 0 {
                self.free.insert(at, part);
                at += 1;
            }
        }
        true
    }

    /// Whether every chunk of `span` (chunk-aligned) is free.
    fn all_free(&self, span: Span) -> bool {
        if span.1 == 0 {
            return true;
        }
        let i = self.free.partition_point(|s| end(*s) <= span.0);
        self.free
            .get(i)
            .is_some_and(|f| f.0 <= span.0 && end(*f) >= end(span))
    }

    /// Marks `[start, start + len)` mapped again (a `MAP_FIXED` mapping over arena space):
    /// chunks of it that were free are taken. Fails (changing nothing) if some chunk of it
    /// is neither free nor already holding pages of this range's owner, i.e. if any chunk is
    /// half free.
    pub fn claim(&mut self, start: usize, len: usize) -> bool {
        if len == 0 || start + len > self.size || !self.has_room(2) {
            return false;
        }
        let len = len.next_multiple_of(self.page);
        // Each chunk must be wholly free (taken now) or wholly allocated.
        let span = self.chunk_span(start, len);
        let mut c = span.0;
        while c < end(span) {
            let chunk = (c, self.chunk.min(self.size - c));
            let i = self.free.partition_point(|s| end(*s) <= c);
            let partly_free = self
                .free
                .get(i)
                .is_some_and(|f| f.0 < end(chunk) && !(f.0 <= c && end(*f) >= end(chunk)));
            if partly_free {
                return false;
            }
            c += self.chunk;
        }
        let mut c = span.0;
        while c < end(span) {
            let chunk = (c, self.chunk.min(self.size - c));
            if self.all_free(chunk) && !self.take_free(chunk) {
                return false;
            }
            c += self.chunk;
        }
        self.remove_live(start, len);
        self.insert_live((start, len));
        true
    }

    /// Unmaps `[start, start + len)` (clipped to the arena): returns what was mapped in it
    /// and the chunks left without a mapped page.
    pub fn unmap(&mut self, start: usize, len: usize) -> Released {
        let start = start.min(self.size);
        let len = len.next_multiple_of(self.page).min(self.size - start);
        let discard = self.remove_live(start, len);
        let mut chunks: Vec<Span> = Vec::new();
        for d in &discard {
            let span = self.chunk_span(d.0, d.1);
            let mut c = span.0;
            while c < end(span) {
                let chunk = (c, self.chunk.min(self.size - c));
                if !self.overlaps_live(chunk.0, chunk.1) {
                    match chunks.last_mut() {
                        Some(last) if end(*last) == c => last.1 += chunk.1,
                        Some(last) if end(*last) > c => {}
                        _ => chunks.push(chunk),
                    }
                }
                c += self.chunk;
            }
        }
        Released { discard, chunks }
    }

    /// Returns unmapped chunks to the free list (coalescing).
    pub fn add_free(&mut self, span: Span) {
        if span.1 == 0 {
            return;
        }
        let i = self.free.partition_point(|s| s.0 < span.0);
        let merge_left = i > 0 && end(self.free[i - 1]) == span.0;
        let merge_right = i < self.free.len() && self.free[i].0 == end(span);
        match (merge_left, merge_right) {
            (true, true) => {
                self.free[i - 1].1 += span.1 + self.free[i].1;
                self.free.remove(i);
            }
            (true, false) => self.free[i - 1].1 += span.1,
            (false, true) => self.free[i] = (span.0, span.1 + self.free[i].1),
            (false, false) => self.free.insert(i, span),
        }
    }

    /// Grows the mapping ending at `start + old_len` to `new_len` in place if the pages after
    /// it are unmapped and the chunks it needs beyond its own are free.
    pub fn grow_in_place(&mut self, start: usize, old_len: usize, new_len: usize) -> bool {
        let old_len = old_len.next_multiple_of(self.page);
        let new_len = new_len.next_multiple_of(self.page);
        if new_len <= old_len || start + new_len > self.size || !self.has_room(2) {
            return false;
        }
        if !self.is_mapped(start, old_len) || self.overlaps_live(start + old_len, new_len - old_len)
        {
            return false;
        }
        let have_end = (start + old_len).next_multiple_of(self.chunk);
        let want_end = (start + new_len)
            .next_multiple_of(self.chunk)
            .min(self.size);
        if want_end > have_end {
            let extra = (have_end, want_end - have_end);
            if !self.all_free(extra) || !self.take_free(extra) {
                return false;
            }
        }
        self.insert_live((start + old_len, new_len - old_len));
        true
    }

    /// Removes `[start, start + len)` from the mapped list; returns the parts that were mapped.
    fn remove_live(&mut self, start: usize, len: usize) -> Vec<Span> {
        let stop = start + len;
        let mut removed = Vec::new();
        let mut i = self.live.partition_point(|s| end(*s) <= start);
        while i < self.live.len() && self.live[i].0 < stop {
            let s = self.live[i];
            let (a, b) = (s.0.max(start), end(s).min(stop));
            removed.push((a, b - a));
            let left = (s.0, a - s.0);
            let right = (b, end(s) - b);
            match (left.1 > 0, right.1 > 0) {
                (true, true) => {
                    self.live[i] = left;
                    self.live.insert(i + 1, right);
                    i += 2;
                }
                (true, false) => {
                    self.live[i] = left;
                    i += 1;
                }
                (false, true) => {
                    self.live[i] = right;
                    i += 1;
                }
                (false, false) => {
                    self.live.remove(i);
                }
            }
        }
        removed
    }

    /// Inserts a range known not to overlap the mapped list, coalescing with neighbours.
    fn insert_live(&mut self, span: Span) {
        let i = self.live.partition_point(|s| s.0 < span.0);
        let merge_left = i > 0 && end(self.live[i - 1]) == span.0;
        let merge_right = i < self.live.len() && self.live[i].0 == end(span);
        match (merge_left, merge_right) {
            (true, true) => {
                self.live[i - 1].1 += span.1 + self.live[i].1;
                self.live.remove(i);
            }
            (true, false) => self.live[i - 1].1 += span.1,
            (false, true) => self.live[i] = (span.0, span.1 + self.live[i].1),
            (false, false) => self.live.insert(i, span),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: usize = 1 << 20;
    const P: usize = 4096;

    fn arena() -> ArenaAllocator {
        ArenaAllocator::new(8 * C + 123, C, P, 64)
    }

    #[test]
    fn allocates_whole_chunks_first_fit() {
        let mut a = arena();
        assert_eq!(a.size(), 8 * C);
        assert_eq!(a.alloc(1), Some(0));
        assert_eq!(a.mapped_bytes(), P);
        assert_eq!(a.alloc(C + 1), Some(C));
        assert_eq!(a.alloc(5 * C), Some(3 * C));
        assert_eq!(a.alloc(C), None);
        assert_eq!(a.alloc(0), None);
        assert_eq!(a.free_bytes(), 0);
    }

    #[test]
    fn unmap_returns_chunks_only_when_empty() {
        let mut a = arena();
        let x = a.alloc(3 * C).unwrap();
        // A page in the middle chunk: discarded, no chunk freed.
        let r = a.unmap(x + C + P, P);
        assert_eq!(r.discard, vec![(x + C + P, P)]);
        assert!(r.chunks.is_empty());
        // The rest of the middle chunk: now it is empty.
        let r = a.unmap(x + C, C);
        assert_eq!(r.discard, vec![(x + C, P), (x + C + 2 * P, C - 2 * P)]);
        assert_eq!(r.chunks, vec![(x + C, C)]);
        for c in r.chunks {
            a.add_free(c);
        }
        assert_eq!(a.free_bytes(), 6 * C);
        // Unmapping what is not mapped releases nothing.
        assert_eq!(a.unmap(x + C, C), Released::default());
        let r = a.unmap(0, 8 * C);
        assert_eq!(r.chunks, vec![(0, C), (2 * C, C)]);
        for c in r.chunks {
            a.add_free(c);
        }
        assert_eq!(a.free_bytes(), 8 * C);
        assert_eq!(a.mapped_bytes(), 0);
        assert_eq!(a.alloc(8 * C), Some(0), "free list coalesced");
    }

    #[test]
    fn grows_in_place_only_into_free_chunks() {
        let mut a = arena();
        let x = a.alloc(C / 2).unwrap();
        assert!(a.grow_in_place(x, C / 2, C), "within its own chunk");
        assert!(a.grow_in_place(x, C, 2 * C), "into a free chunk");
        let y = a.alloc(C).unwrap();
        assert_eq!(y, 2 * C);
        assert!(!a.grow_in_place(x, 2 * C, 3 * C), "next chunk taken");
        assert!(!a.grow_in_place(x, C, 2 * C), "not the mapping's end");
        assert!(a.is_mapped(x, 2 * C));
        assert_eq!(a.mapped_bytes(), 3 * C);
    }

    #[test]
    fn claim_takes_free_chunks_and_refuses_half_free_ones() {
        let mut a = arena();
        assert!(a.claim(2 * C, C + P));
        assert!(a.is_mapped(2 * C, C + P));
        assert_eq!(a.free_bytes(), 6 * C);
        // Claiming over mapped pages (MAP_FIXED over the program's own mapping) is fine.
        assert!(a.claim(2 * C, P));
        assert_eq!(a.mapped_bytes(), C + P);
        assert!(!a.claim(7 * C, 2 * C), "beyond the arena");
        assert_eq!(a.alloc(2 * C), Some(0));
    }

    #[test]
    fn randomized_against_a_page_map() {
        // Model: per page, mapped or not; per chunk, free or not.
        let pages = 8 * C / P;
        let mut a = ArenaAllocator::new(8 * C, C, P, 1024);
        let mut mapped = vec![false; pages];
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rnd = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..20_000 {
            match rnd(3) {
                0 => {
                    let len = 1 + rnd(3 * C);
                    if let Some(off) = a.alloc(len) {
                        assert_eq!(off % C, 0);
                        for m in &mut mapped[off / P..(off + len).div_ceil(P)] {
                            assert!(!*m, "page handed out twice");
                            *m = true;
                        }
                    }
                }
                1 => {
                    let start = rnd(pages) * P;
                    let len = (1 + rnd(pages / 4)) * P;
                    let r = a.unmap(start, len);
                    let stop = (start + len).min(8 * C);
                    let was: usize = mapped[start / P..stop / P].iter().filter(|&&m| m).count();
                    assert_eq!(r.discard.iter().map(|s| s.1).sum::<usize>(), was * P);
                    mapped[start / P..stop / P]
                        .iter_mut()
                        .for_each(|m| *m = false);
                    for c in r.chunks {
                        assert!(mapped[c.0 / P..(c.0 + c.1) / P].iter().all(|m| !m));
                        a.add_free(c);
                    }
                }
                _ => {
                    let start = rnd(pages) * P;
                    let len = (1 + rnd(16)) * P;
                    let new_len = len + (1 + rnd(C / P)) * P;
                    if a.grow_in_place(start, len, new_len) {
                        for m in &mut mapped[(start + len) / P..(start + new_len) / P] {
                            assert!(!*m);
                            *m = true;
                        }
                    }
                }
            }
            assert_eq!(a.mapped_bytes(), mapped.iter().filter(|&&m| m).count() * P);
        }
    }
}
