//! [`ChunkTable`]: what the fault handler knows about each chunk of its region: its
//! [`ChunkState`], which of its pages are resident and which were written since the chunk's
//! swap copy was made, whether a fault waits for it while it is being written, and the
//! resident chunks the policy no longer tracks (overrun).
//!
//! Today a chunk's pages are all resident or none, and written bits are set and cleared for the
//! whole chunk; the per-page queries and updates are there for a paging unit that moves parts
//! of chunks.

use super::page_bitmap::PageBitmap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkState {
    /// Not in memory: in swap if the swap file stores it, else zero.
    Out,
    /// In memory.
    In,
    /// Page-in failed; poisoned.
    Poisoned,
    /// In memory, its page-table entries dropped, being written to swap asynchronously; punched
    /// out of memory once the write completes (or kept, if a fault asked for it meanwhile).
    Writing,
}

/// Per-chunk state of one region, and per-page residency and written bits.
#[derive(Debug)]
pub(crate) struct ChunkTable {
    states: Vec<ChunkState>,
    pages_per_chunk: usize,
    /// Per page: in memory (its chunk is `In` or `Writing`).
    resident: PageBitmap,
    /// Per page: written since its chunk's swap copy (or zero state) was made. Sticky:
    /// harvested from the page tables before they are rebuilt.
    written: PageBitmap,
    /// Per chunk: a fault arrived while it was being written; keep it in memory when the write
    /// completes.
    rescue: Vec<bool>,
    /// Resident chunks the policy no longer tracks because their page-out failed.
    overrun: Vec<usize>,
    /// Chunks in [`ChunkState::Writing`].
    writing: usize,
}

impl ChunkTable {
    /// `chunks` chunks of `pages_per_chunk` pages each, all out.
    pub fn new(chunks: usize, pages_per_chunk: usize) -> Self {
        let pages = chunks.saturating_mul(pages_per_chunk);
        Self {
            states: vec![ChunkState::Out; chunks],
            pages_per_chunk,
            resident: PageBitmap::new(pages),
            written: PageBitmap::new(pages),
            rescue: vec![false; chunks],
            overrun: Vec::new(),
            writing: 0,
        }
    }

    /// How many chunks the region has.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// Chunk `c`'s state; `None` beyond the region.
    pub fn state(&self, c: usize) -> Option<ChunkState> {
        self.states.get(c).copied()
    }

    /// Whether chunk `c` is in state `st`.
    pub fn is(&self, c: usize, st: ChunkState) -> bool {
        self.state(c) == Some(st)
    }

    fn first_page(&self, c: usize) -> usize {
        c * self.pages_per_chunk
    }

    fn set_state(&mut self, c: usize, st: ChunkState) {
        let Some(slot) = self.states.get_mut(c) else {
            return;
        };
        *slot = st;
        let resident = matches!(st, ChunkState::In | ChunkState::Writing);
        self.resident
            .set_range(c * self.pages_per_chunk, self.pages_per_chunk, resident);
    }

    /// Chunk `c` is in memory; `written`: its content differs from its swap copy.
    pub fn set_in(&mut self, c: usize, written: bool) {
        self.set_state(c, ChunkState::In);
        self.set_written(c, written);
    }

    /// Chunk `c` left memory (its swap copy, or zero, is its content).
    pub fn set_out(&mut self, c: usize) {
        self.set_state(c, ChunkState::Out);
        self.set_written(c, false);
    }

    /// Chunk `c` is poisoned (a page-in failed).
    pub fn set_poisoned(&mut self, c: usize) {
        self.set_state(c, ChunkState::Poisoned);
        self.set_written(c, false);
    }

    /// A poisoned chunk `c` is reset to a fresh zero chunk.
    pub fn reset_poisoned(&mut self, c: usize) {
        self.set_state(c, ChunkState::Out);
    }

    /// Resident chunk `c` is being written to swap.
    pub fn start_writing(&mut self, c: usize) {
        self.set_state(c, ChunkState::Writing);
        self.writing += 1;
    }

    /// The write of chunk `c` finished: the chunk is `In` again. Returns whether a fault asked
    /// for it meanwhile (and clears that request); `None` if `c` was not being written.
    pub fn finish_writing(&mut self, c: usize) -> Option<bool> {
        if !self.is(c, ChunkState::Writing) {
            return None;
        }
        self.writing -= 1;
        self.set_state(c, ChunkState::In);
        Some(self.rescue.get_mut(c).is_some_and(std::mem::take))
    }

    /// A fault waits for chunk `c`, which is being written: keep it when the write completes.
    pub fn request_rescue(&mut self, c: usize) {
        if let Some(r) = self.rescue.get_mut(c) {
            *r = true;
        }
    }

    /// How many chunks are being written.
    pub fn writing(&self) -> usize {
        self.writing
    }

    /// Whether any page of chunk `c` was written since its swap copy was made.
    pub fn is_written(&self, c: usize) -> bool {
        self.written
            .count_range(self.first_page(c), self.pages_per_chunk)
            > 0
    }

    /// Marks every page of chunk `c` written (`true`) or matching its swap copy (`false`).
    pub fn set_written(&mut self, c: usize, written: bool) {
        if c < self.len() {
            self.written
                .set_range(self.first_page(c), self.pages_per_chunk, written);
        }
    }

    /// Whether page `page` (index within the chunk) of chunk `c` is resident.
    #[cfg_attr(not(test), allow(dead_code))] // for partial-chunk paging (issue 9)
    pub fn is_page_resident(&self, c: usize, page: usize) -> bool {
        page < self.pages_per_chunk && self.resident.get(self.first_page(c) + page)
    }

    /// Whether page `page` of chunk `c` was written since its swap copy was made.
    #[cfg_attr(not(test), allow(dead_code))] // for partial-chunk paging (issue 9)
    pub fn is_page_written(&self, c: usize, page: usize) -> bool {
        page < self.pages_per_chunk && self.written.get(self.first_page(c) + page)
    }

    /// Sets page `page` of chunk `c` resident or not.
    #[cfg_attr(not(test), allow(dead_code))] // for partial-chunk paging (issue 9)
    pub fn set_page_resident(&mut self, c: usize, page: usize, resident: bool) {
        if c < self.len() && page < self.pages_per_chunk {
            self.resident.set(self.first_page(c) + page, resident);
        }
    }

    /// Sets page `page` of chunk `c` written or not.
    #[cfg_attr(not(test), allow(dead_code))] // for partial-chunk paging (issue 9)
    pub fn set_page_written(&mut self, c: usize, page: usize, written: bool) {
        if c < self.len() && page < self.pages_per_chunk {
            self.written.set(self.first_page(c) + page, written);
        }
    }

    /// How many pages of chunk `c` are resident.
    #[cfg_attr(not(any(test, debug_assertions)), allow(dead_code))] // the invariant check's
    pub fn resident_pages(&self, c: usize) -> usize {
        self.resident
            .count_range(self.first_page(c), self.pages_per_chunk)
    }

    /// Adds resident chunk `c` to the overrun list.
    pub fn push_overrun(&mut self, c: usize) {
        self.overrun.push(c);
    }

    /// Takes the most recently overrun chunk off the list.
    pub fn pop_overrun(&mut self) -> Option<usize> {
        self.overrun.pop()
    }

    /// Takes chunk `c` off the overrun list; whether it was there.
    pub fn remove_overrun(&mut self, c: usize) -> bool {
        match self.overrun.iter().position(|&o| o == c) {
            Some(i) => {
                self.overrun.swap_remove(i);
                true
            }
            None => false,
        }
    }

    /// How many chunks are overrun.
    pub fn overrun_len(&self) -> usize {
        self.overrun.len()
    }

    /// Debug builds: every resident chunk is tracked exactly once (by the policy, as
    /// `in_policy` tells, or as overrun), nothing else is, the writing count matches, and
    /// residency bits match the states.
    #[cfg(debug_assertions)]
    pub fn check_invariants(&self, at: &str, in_policy: impl Fn(usize) -> bool) {
        for (c, st) in self.states.iter().enumerate() {
            let tracked = in_policy(c);
            let over = self.overrun.iter().filter(|&&o| o == c).count();
            let ok = match st {
                ChunkState::In => usize::from(tracked) + over == 1,
                _ => !tracked && over == 0,
            };
            debug_assert!(
                ok,
                "{at}: chunk {c} {st:?} in policy {tracked} overrun {over}"
            );
            let resident = self.resident_pages(c);
            let expected = match st {
                ChunkState::In | ChunkState::Writing => self.pages_per_chunk,
                ChunkState::Out | ChunkState::Poisoned => 0,
            };
            debug_assert_eq!(resident, expected, "{at}: chunk {c} {st:?} resident pages");
        }
        let writing = self
            .states
            .iter()
            .filter(|s| **s == ChunkState::Writing)
            .count();
        debug_assert_eq!(writing, self.writing, "{at}: writing count");
    }

    #[cfg(not(debug_assertions))]
    pub fn check_invariants(&self, _at: &str, _in_policy: impl Fn(usize) -> bool) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_drive_residency_and_written_bits() {
        let mut t = ChunkTable::new(3, 4);
        assert_eq!(t.len(), 3);
        assert_eq!(t.state(1), Some(ChunkState::Out));
        assert_eq!(t.state(3), None);
        t.set_in(1, true);
        assert!(t.is(1, ChunkState::In));
        assert_eq!(t.resident_pages(1), 4);
        assert_eq!(t.resident_pages(0) + t.resident_pages(2), 0);
        assert!(t.is_written(1) && !t.is_written(0) && !t.is_written(2));
        t.set_written(1, false);
        assert!(!t.is_written(1));
        t.set_out(1);
        assert_eq!(t.resident_pages(1), 0);
        t.set_in(2, false);
        t.set_poisoned(2);
        assert_eq!(t.resident_pages(2), 0);
        t.reset_poisoned(2);
        assert!(t.is(2, ChunkState::Out));
        t.check_invariants("test", |_| false);
    }

    #[test]
    fn per_page_queries_and_updates() {
        let mut t = ChunkTable::new(2, 8);
        t.set_page_written(1, 3, true);
        assert!(t.is_page_written(1, 3));
        assert!(!t.is_page_written(1, 2) && !t.is_page_written(0, 3));
        assert!(t.is_written(1) && !t.is_written(0));
        t.set_page_resident(0, 7, true);
        assert!(t.is_page_resident(0, 7) && !t.is_page_resident(1, 0));
        assert_eq!(t.resident_pages(0), 1);
        // Out of range: ignored, and reads as clear.
        t.set_page_written(0, 8, true);
        t.set_page_written(2, 0, true);
        assert!(!t.is_page_written(0, 8) && !t.is_page_written(2, 0));
        assert!(!t.is_written(0));
    }

    #[test]
    fn writes_and_rescues() {
        let mut t = ChunkTable::new(2, 1);
        t.set_in(0, true);
        assert_eq!(t.finish_writing(0), None, "not being written");
        t.start_writing(0);
        assert_eq!(t.writing(), 1);
        assert_eq!(t.resident_pages(0), 1, "a chunk being written is resident");
        t.request_rescue(0);
        assert_eq!(t.finish_writing(0), Some(true));
        assert_eq!(t.writing(), 0);
        assert!(t.is(0, ChunkState::In));
        t.start_writing(0);
        assert_eq!(t.finish_writing(0), Some(false), "rescue was taken");
        t.check_invariants("test", |c| c == 0);
    }

    #[test]
    fn overrun_list() {
        let mut t = ChunkTable::new(4, 1);
        t.set_in(1, false);
        t.set_in(3, false);
        t.push_overrun(1);
        t.push_overrun(3);
        assert_eq!(t.overrun_len(), 2);
        t.check_invariants("test", |_| false);
        assert!(t.remove_overrun(1));
        assert!(!t.remove_overrun(1));
        assert_eq!(t.pop_overrun(), Some(3));
        assert_eq!(t.pop_overrun(), None);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "in policy true overrun 1")]
    fn invariant_check_catches_double_tracking() {
        let mut t = ChunkTable::new(1, 1);
        t.set_in(0, false);
        t.push_overrun(0);
        t.check_invariants("test", |_| true);
    }
}
