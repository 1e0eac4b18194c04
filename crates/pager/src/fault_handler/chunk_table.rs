//! [`ChunkTable`]: what the fault handler knows about each chunk of its region and each of its
//! pages: the chunk's [`ChunkState`], which pages are resident (a chunk may be partly
//! resident), which were written since their swap copy was made, which are poisoned, the
//! writes in flight per chunk, whether a fault waits for a chunk being written, and the
//! resident chunks the policy no longer tracks (overrun). The budget counts resident pages, so
//! the table keeps their total.

use std::sync::Arc;

use crate::page_bitmap::PageBitmap;
use crate::residency_hint::ResidencyHint;

/// Regions up to this many chunks are checked in full on every
/// [`ChunkTable::check_invariants`] call.
#[cfg(debug_assertions)]
const FULL_CHECK_CHUNKS: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkState {
    /// No page in memory: each page is in swap if the swap file stores it, else zero.
    Out,
    /// At least one page in memory; tracked by the policy (or overrun).
    In,
    /// Resident pages kept in memory, page-table entries dropped, while the written ones are
    /// written to swap asynchronously; punched out of memory once the writes complete (or kept,
    /// if a fault asked for the chunk meanwhile).
    Writing,
}

/// How the completion of one write of a chunk's pages left the chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteProgress {
    /// The chunk was not being written.
    NotWriting,
    /// Other writes of the chunk are still in flight.
    Pending,
    /// That was the chunk's last write: it is `In` again. `rescue`: a fault asked for it
    /// meanwhile; `failed`: one of its writes failed.
    Done { rescue: bool, failed: bool },
}

/// Per-chunk state of one region, and per-page residency, written and poison bits.
#[derive(Debug)]
pub(crate) struct ChunkTable {
    states: Vec<ChunkState>,
    pages_per_chunk: usize,
    /// Pages of the region (the last chunk may be short).
    region_pages: usize,
    /// Per page: in memory (in the memfd).
    resident: PageBitmap,
    /// `resident`, copied for other threads.
    residency: Arc<ResidencyHint>,
    /// Per page: written since its swap copy (or zero state) was made. Sticky: harvested from
    /// the page tables before they are rebuilt.
    written: PageBitmap,
    /// Per page: a page-in failed; accesses get SIGBUS until the page is discarded.
    poisoned: PageBitmap,
    /// Per page: being read from swap on its own (a parallel page-in), not resident yet.
    reading: PageBitmap,
    /// Per page: resident when its chunk was last evicted, and not mapped since (what a larger
    /// budget would have kept: the refaults that count in the refault curve).
    held: PageBitmap,
    /// Per page, on a post-copy migration's destination: the content is still at the source.
    /// A remote page is never mapped (a resident one keeps its stale copy unmapped) nor
    /// read; faults on it wait until its content is installed.
    remote: PageBitmap,
    /// Remote pages in all.
    remote_total: usize,
    /// Per page, while a live migration tracks changes: the content changed since the
    /// migration last sent it (every page marked written is marked here too, and discards).
    changed: Option<PageBitmap>,
    /// Pages being read.
    reading_total: usize,
    /// Resident pages in all.
    resident_total: usize,
    /// Per chunk: writes in flight (chunks in [`ChunkState::Writing`]).
    jobs: Vec<u32>,
    /// Per chunk being written: one of its writes failed.
    failed: Vec<bool>,
    /// Per chunk: a fault arrived while it was being written; keep it in memory when the
    /// writes complete.
    rescue: Vec<bool>,
    /// Resident chunks the policy no longer tracks because their page-out failed.
    overrun: Vec<usize>,
    /// Chunks in [`ChunkState::Writing`].
    writing: usize,
    /// Writes in flight, all chunks together.
    jobs_total: usize,
    /// Resident pages of the chunks being written (memory that their writes will free).
    writing_pages: usize,
    /// Calls of [`check_invariants`](Self::check_invariants) so far (it checks every
    /// region in full only every so many calls, see there).
    #[cfg(debug_assertions)]
    checks: std::cell::Cell<u64>,
}

impl ChunkTable {
    /// A region of `region_pages` pages in chunks of `pages_per_chunk` pages (the last may be
    /// short), all out.
    #[cfg(test)]
    pub fn new(region_pages: usize, pages_per_chunk: usize) -> Self {
        let hint = Arc::new(ResidencyHint::new(region_pages));
        Self::with_residency_hint(region_pages, pages_per_chunk, hint)
    }

    /// As [`new`](Self::new), keeping `residency` (a hint for `region_pages` pages, all clear)
    /// a copy of the resident bits for other threads.
    pub fn with_residency_hint(
        region_pages: usize,
        pages_per_chunk: usize,
        residency: Arc<ResidencyHint>,
    ) -> Self {
        let pages_per_chunk = pages_per_chunk.max(1);
        let chunks = region_pages.div_ceil(pages_per_chunk);
        let pages = chunks.saturating_mul(pages_per_chunk);
        Self {
            states: vec![ChunkState::Out; chunks],
            pages_per_chunk,
            region_pages,
            resident: PageBitmap::new(pages),
            residency,
            written: PageBitmap::new(pages),
            poisoned: PageBitmap::new(pages),
            reading: PageBitmap::new(pages),
            held: PageBitmap::new(pages),
            remote: PageBitmap::new(pages),
            remote_total: 0,
            changed: None,
            reading_total: 0,
            resident_total: 0,
            jobs: vec![0; chunks],
            failed: vec![false; chunks],
            rescue: vec![false; chunks],
            overrun: Vec::new(),
            writing: 0,
            jobs_total: 0,
            writing_pages: 0,
            #[cfg(debug_assertions)]
            checks: std::cell::Cell::new(0),
        }
    }

    /// How many chunks the region has.
    pub fn len(&self) -> usize {
        self.states.len()
    }

    /// How many pages the region has.
    pub fn region_pages(&self) -> usize {
        self.region_pages
    }

    /// Pages per chunk.
    pub fn pages_per_chunk(&self) -> usize {
        self.pages_per_chunk
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

    /// How many pages chunk `c` has (fewer than the others if it is the region's short last
    /// one; 0 beyond the region).
    pub fn pages_in(&self, c: usize) -> usize {
        self.region_pages
            .saturating_sub(self.first_page(c))
            .min(self.pages_per_chunk)
    }

    /// Whether `first..first + n` is a run of pages inside chunk `c`.
    fn in_chunk(&self, c: usize, first: usize, n: usize) -> bool {
        c < self.len() && first.saturating_add(n) <= self.pages_in(c)
    }

    /// Resident pages of the whole region.
    pub fn resident_total(&self) -> usize {
        self.resident_total
    }

    /// How many pages of chunk `c` are resident.
    pub fn resident_pages(&self, c: usize) -> usize {
        if c >= self.len() {
            return 0;
        }
        self.resident
            .count_range(self.first_page(c), self.pages_per_chunk)
    }

    /// Whether page `page` (index within the chunk) of chunk `c` is resident.
    pub fn is_page_resident(&self, c: usize, page: usize) -> bool {
        page < self.pages_per_chunk && self.resident.get(self.first_page(c) + page)
    }

    /// Pages `first..first + n` of chunk `c` are now resident (some may have been already);
    /// an `Out` chunk becomes `In`. Returns how many were not resident before.
    pub fn add_resident(&mut self, c: usize, first: usize, n: usize) -> usize {
        if !self.in_chunk(c, first, n) {
            return 0;
        }
        let at = self.first_page(c) + first;
        let added = n - self.resident.count_range(at, n);
        self.resident.set_range(at, n, true);
        self.residency.set_range(at, n, true);
        self.poisoned.set_range(at, n, false);
        self.resident_total += added;
        if self.states[c] == ChunkState::Out && n > 0 {
            self.states[c] = ChunkState::In;
        }
        added
    }

    /// Page `page` of chunk `c` is not resident after all (its mapping failed right after
    /// [`add_resident`](Self::add_resident)); the chunk's state is the caller's (see
    /// [`set_out`](Self::set_out)). Returns whether the page was resident.
    pub fn remove_resident(&mut self, c: usize, page: usize) -> bool {
        if !self.in_chunk(c, page, 1) {
            return false;
        }
        let at = self.first_page(c) + page;
        if !self.resident.get(at) {
            return false;
        }
        self.resident.set_range(at, 1, false);
        self.residency.set_range(at, 1, false);
        self.written.set_range(at, 1, false);
        self.resident_total -= 1;
        true
    }

    /// Chunk `c` left memory: no page resident, none written (its swap copy, or zero, is its
    /// content). Returns how many pages were resident.
    pub fn set_out(&mut self, c: usize) -> usize {
        if c >= self.len() {
            return 0;
        }
        let at = self.first_page(c);
        let was = self.resident.count_range(at, self.pages_per_chunk);
        self.resident.set_range(at, self.pages_per_chunk, false);
        self.residency.set_range(at, self.pages_per_chunk, false);
        self.written.set_range(at, self.pages_per_chunk, false);
        self.resident_total -= was;
        self.states[c] = ChunkState::Out;
        was
    }

    /// Chunk `c` is being evicted: its resident pages are the ones it held (replacing what it
    /// held at an earlier eviction).
    pub fn hold_evicted(&mut self, c: usize) {
        if c < self.len() {
            let at = self.first_page(c);
            self.held
                .copy_range(&self.resident, at, self.pages_per_chunk);
        }
    }

    /// Chunk `c` holds nothing from an eviction (it stayed in memory, or its content was
    /// discarded).
    pub fn clear_held(&mut self, c: usize) {
        if c < self.len() {
            self.held
                .set_range(self.first_page(c), self.pages_per_chunk, false);
        }
    }

    /// Pages `first..first + n` of chunk `c` are being mapped again: returns how many of them
    /// the chunk held at its last eviction, and clears them.
    pub fn take_held(&mut self, c: usize, first: usize, n: usize) -> usize {
        if !self.in_chunk(c, first, n) {
            return 0;
        }
        let at = self.first_page(c) + first;
        let held = self.held.count_range(at, n);
        self.held.set_range(at, n, false);
        held
    }

    /// The runs of pages of chunk `c` for which `pick(page)` holds, as `(first, count)`.
    pub fn runs(&self, c: usize, pick: impl Fn(usize) -> bool) -> Vec<(usize, usize)> {
        self.runs_in(c, 0, self.pages_in(c), pick)
    }

    /// [`runs`](Self::runs) among pages `first..first + n` of chunk `c` only (looking at no
    /// other page).
    pub fn runs_in(
        &self,
        c: usize,
        first: usize,
        n: usize,
        pick: impl Fn(usize) -> bool,
    ) -> Vec<(usize, usize)> {
        let mut out: Vec<(usize, usize)> = Vec::new();
        if c >= self.len() {
            return out;
        }
        for p in first..first.saturating_add(n).min(self.pages_in(c)) {
            if !pick(p) {
                continue;
            }
            match out.last_mut() {
                Some((first, n)) if *first + *n == p => *n += 1,
                _ => out.push((p, 1)),
            }
        }
        out
    }

    /// The run of pages of chunk `c` around page `page` for which `pick` holds, as
    /// `(first, count)`: `None` if it does not hold for `page` itself.
    pub fn run_around(
        &self,
        c: usize,
        page: usize,
        pick: impl Fn(usize) -> bool,
    ) -> Option<(usize, usize)> {
        if c >= self.len() || page >= self.pages_in(c) || !pick(page) {
            return None;
        }
        let first = (0..page)
            .rev()
            .take_while(|&p| pick(p))
            .last()
            .unwrap_or(page);
        let end = (page + 1..self.pages_in(c))
            .take_while(|&p| pick(p))
            .last()
            .map_or(page + 1, |p| p + 1);
        Some((first, end - first))
    }

    /// The runs of resident pages of chunk `c`.
    pub fn resident_runs(&self, c: usize) -> Vec<(usize, usize)> {
        self.runs(c, |p| self.is_page_resident(c, p))
    }

    /// Whether any page of chunk `c` was written since its swap copy was made.
    #[cfg_attr(not(any(test, debug_assertions)), allow(dead_code))] // the invariant check's
    pub fn is_written(&self, c: usize) -> bool {
        c < self.len()
            && self
                .written
                .count_range(self.first_page(c), self.pages_per_chunk)
                > 0
    }

    /// Whether page `page` of chunk `c` was written since its swap copy was made.
    pub fn is_page_written(&self, c: usize, page: usize) -> bool {
        page < self.pages_per_chunk && self.written.get(self.first_page(c) + page)
    }

    /// Marks pages `first..first + n` of chunk `c` written (`true`) or matching their swap copy
    /// (`false`).
    pub fn set_written(&mut self, c: usize, first: usize, n: usize, written: bool) {
        if self.in_chunk(c, first, n) {
            self.written
                .set_range(self.first_page(c) + first, n, written);
            if written {
                self.mark_changed(c, first, n);
            }
        }
    }

    /// Starts (or restarts) tracking which pages change for a live migration: none has yet.
    pub fn track_changes(&mut self) {
        self.changed = Some(PageBitmap::new(self.states.len() * self.pages_per_chunk));
    }

    /// Stops tracking changes.
    pub fn untrack_changes(&mut self) {
        self.changed = None;
    }

    /// Whether changes are tracked.
    pub fn tracks_changes(&self) -> bool {
        self.changed.is_some()
    }

    /// Pages `first..first + n` of chunk `c` changed (written, or discarded): a migration sends
    /// them again. Nothing without tracking.
    pub fn mark_changed(&mut self, c: usize, first: usize, n: usize) {
        if self.in_chunk(c, first, n) {
            let at = self.first_page(c) + first;
            if let Some(changed) = self.changed.as_mut() {
                changed.set_range(at, n, true);
            }
        }
    }

    /// The runs of pages (region page index, count) changed since the last call (or since
    /// tracking started), each run inside one chunk; forgets them.
    pub fn take_changed(&mut self) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let Some(changed) = self.changed.as_mut() else {
            return out;
        };
        for c in 0..self.states.len() {
            let base = c * self.pages_per_chunk;
            let pages = self.pages_per_chunk.min(self.region_pages - base);
            if changed.count_range(base, pages) == 0 {
                continue;
            }
            let mut run: Option<(usize, usize)> = None;
            for p in base..base + pages {
                if changed.get(p) {
                    run = Some(match run {
                        Some((f, n)) => (f, n + 1),
                        None => (p, 1),
                    });
                } else if let Some(r) = run.take() {
                    out.push(r);
                }
            }
            out.extend(run);
            changed.set_range(base, pages, false);
        }
        out
    }

    /// Whether page `page` of chunk `c` is poisoned.
    pub fn is_page_poisoned(&self, c: usize, page: usize) -> bool {
        page < self.pages_per_chunk && self.poisoned.get(self.first_page(c) + page)
    }

    /// Whether page `page` of chunk `c` is being read from swap on its own.
    pub fn is_page_reading(&self, c: usize, page: usize) -> bool {
        page < self.pages_per_chunk && self.reading.get(self.first_page(c) + page)
    }

    /// Marks page `page` of chunk `c` as being read (`true`) or no longer.
    pub fn set_reading(&mut self, c: usize, page: usize, reading: bool) {
        if !self.in_chunk(c, page, 1) || self.is_page_reading(c, page) == reading {
            return;
        }
        self.reading
            .set_range(self.first_page(c) + page, 1, reading);
        if reading {
            self.reading_total += 1;
        } else {
            self.reading_total -= 1;
        }
    }

    /// Pages being read, all chunks together.
    pub fn reading_total(&self) -> usize {
        self.reading_total
    }

    /// Whether page `page` of chunk `c` is remote (its content still at a post-copy
    /// migration's source).
    pub fn is_page_remote(&self, c: usize, page: usize) -> bool {
        self.remote_total > 0
            && page < self.pages_per_chunk
            && self.remote.get(self.first_page(c) + page)
    }

    /// Whether the memfd holds the content of page `page` of chunk `c`: resident and not
    /// remote (the pages a remap maps).
    pub fn holds_page(&self, c: usize, page: usize) -> bool {
        self.is_page_resident(c, page) && !self.is_page_remote(c, page)
    }

    /// Marks pages `first..first + n` of chunk `c` remote (`true`; they must not be poisoned
    /// or being read) or not. Returns how many changed.
    pub fn set_remote(&mut self, c: usize, first: usize, n: usize, remote: bool) -> usize {
        if !self.in_chunk(c, first, n) {
            return 0;
        }
        let at = self.first_page(c) + first;
        let before = self.remote.count_range(at, n);
        self.remote.set_range(at, n, remote);
        let changed = if remote { n - before } else { before };
        if remote {
            self.remote_total += changed;
        } else {
            self.remote_total -= changed;
        }
        changed
    }

    /// How many pages of chunk `c` are remote.
    pub fn remote_pages(&self, c: usize) -> usize {
        if self.remote_total == 0 || c >= self.len() {
            return 0;
        }
        self.remote
            .count_range(self.first_page(c), self.pages_per_chunk)
    }

    /// Remote pages of the whole region.
    pub fn remote_total(&self) -> usize {
        self.remote_total
    }

    /// Marks pages `first..first + n` of chunk `c` poisoned (`true`; they must not be
    /// resident) or not.
    pub fn set_poisoned(&mut self, c: usize, first: usize, n: usize, poisoned: bool) {
        if self.in_chunk(c, first, n) {
            self.poisoned
                .set_range(self.first_page(c) + first, n, poisoned);
        }
    }

    /// How many pages of chunk `c` are poisoned.
    pub fn poisoned_pages(&self, c: usize) -> usize {
        if c >= self.len() {
            return 0;
        }
        self.poisoned
            .count_range(self.first_page(c), self.pages_per_chunk)
    }

    /// Chunk `c` (`In`, out of the policy) is being written by `jobs` writes.
    pub fn start_writing(&mut self, c: usize, jobs: usize) {
        if c >= self.len() || jobs == 0 {
            return;
        }
        self.states[c] = ChunkState::Writing;
        self.jobs[c] = jobs as u32;
        self.failed[c] = false;
        self.writing += 1;
        self.jobs_total += jobs;
        self.writing_pages += self.resident_pages(c);
    }

    /// One write of chunk `c` finished (`ok`: it succeeded).
    pub fn finish_job(&mut self, c: usize, ok: bool) -> WriteProgress {
        if !self.is(c, ChunkState::Writing) || self.jobs[c] == 0 {
            return WriteProgress::NotWriting;
        }
        self.jobs[c] -= 1;
        self.jobs_total -= 1;
        self.failed[c] |= !ok;
        if self.jobs[c] > 0 {
            return WriteProgress::Pending;
        }
        self.writing -= 1;
        self.writing_pages -= self.resident_pages(c);
        self.states[c] = ChunkState::In;
        WriteProgress::Done {
            rescue: std::mem::take(&mut self.rescue[c]),
            failed: std::mem::take(&mut self.failed[c]),
        }
    }

    /// A fault waits for chunk `c`, which is being written: keep it when the writes complete.
    pub fn request_rescue(&mut self, c: usize) {
        if let Some(r) = self.rescue.get_mut(c) {
            *r = true;
        }
    }

    /// How many chunks are being written.
    pub fn writing(&self) -> usize {
        self.writing
    }

    /// Resident pages of the chunks being written.
    pub fn writing_pages(&self) -> usize {
        self.writing_pages
    }

    /// How many writes are in flight.
    pub fn jobs_in_flight(&self) -> usize {
        self.jobs_total
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

    /// Resident pages of the overrun chunks: over the budget by definition, so the budget counts
    /// the others only (`resident_total() - overrun_pages()`). Counting them would leave the
    /// policy no room while swap is full: every page-in would evict the chunk just brought in,
    /// before its thread used it. O(overrun chunks): callers take it once per eviction loop.
    pub fn overrun_pages(&self) -> usize {
        self.overrun.iter().map(|&c| self.resident_pages(c)).sum()
    }

    /// Debug builds: every chunk with resident pages is `In` or `Writing`, every `In` chunk is
    /// tracked exactly once (by the policy, as `in_policy` tells, or as overrun) and nothing
    /// else is, a page is never both resident and poisoned, the totals (resident pages,
    /// chunks being written, writes in flight) match. The check is O(chunks): for regions of
    /// more than [`FULL_CHECK_CHUNKS`] chunks it runs on one call in `chunks /
    /// FULL_CHECK_CHUNKS`, so a huge arena does not make debug builds crawl.
    #[cfg(debug_assertions)]
    pub fn check_invariants(&self, at: &str, in_policy: impl Fn(usize) -> bool) {
        let n = self.checks.get();
        self.checks.set(n + 1);
        let every = (self.len() / FULL_CHECK_CHUNKS).max(1) as u64;
        if n % every != 0 {
            return;
        }
        let mut resident_total = 0;
        let mut jobs = 0;
        let mut writing_pages = 0;
        for (c, st) in self.states.iter().enumerate() {
            let tracked = in_policy(c);
            let over = self.overrun.iter().filter(|&&o| o == c).count();
            let resident = self.resident_pages(c);
            resident_total += resident;
            let hinted = self.residency.count(self.first_page(c), self.pages_in(c));
            assert_eq!(
                hinted, resident,
                "{at}: chunk {c}: the residency hint counts other pages than the table"
            );
            jobs += self.jobs[c] as usize;
            if *st == ChunkState::Writing {
                writing_pages += resident;
            }
            let ok = match st {
                ChunkState::In => usize::from(tracked) + over == 1 && resident > 0,
                ChunkState::Writing => !tracked && over == 0 && resident > 0 && self.jobs[c] > 0,
                ChunkState::Out => !tracked && over == 0 && resident == 0 && !self.is_written(c),
            };
            debug_assert!(
                ok,
                "{at}: chunk {c} {st:?} in policy {tracked} overrun {over} resident {resident} \
                 jobs {}",
                self.jobs[c]
            );
            if self.remote_pages(c) > 0 {
                for p in 0..self.pages_per_chunk {
                    debug_assert!(
                        !(self.is_page_remote(c, p)
                            && (self.is_page_poisoned(c, p) || self.is_page_reading(c, p))),
                        "{at}: page {p} of chunk {c} remote and poisoned or being read"
                    );
                }
            }
            if self.poisoned_pages(c) > 0 {
                for p in 0..self.pages_per_chunk {
                    debug_assert!(
                        !(self.is_page_poisoned(c, p) && self.is_page_resident(c, p)),
                        "{at}: page {p} of chunk {c} resident and poisoned"
                    );
                }
            }
        }
        debug_assert_eq!(resident_total, self.resident_total, "{at}: resident pages");
        debug_assert_eq!(
            self.remote
                .count_range(0, self.len() * self.pages_per_chunk),
            self.remote_total,
            "{at}: remote pages"
        );
        debug_assert_eq!(
            self.reading
                .count_range(0, self.len() * self.pages_per_chunk),
            self.reading_total,
            "{at}: pages being read"
        );
        debug_assert_eq!(jobs, self.jobs_total, "{at}: writes in flight");
        debug_assert_eq!(
            writing_pages, self.writing_pages,
            "{at}: pages being written"
        );
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
    fn run_around_finds_the_run_of_a_page_and_only_its_run() {
        let t = ChunkTable::new(16, 8);
        let picked = [false, true, true, false, true, true, true, false];
        let pick = |p: usize| picked[p];
        assert_eq!(t.run_around(0, 1, pick), Some((1, 2)));
        assert_eq!(t.run_around(0, 2, pick), Some((1, 2)));
        assert_eq!(t.run_around(0, 5, pick), Some((4, 3)));
        assert_eq!(t.run_around(0, 0, pick), None);
        assert_eq!(t.run_around(0, 8, pick), None);
        assert_eq!(t.run_around(2, 1, pick), None);
        let all = |_: usize| true;
        assert_eq!(t.run_around(1, 0, all), Some((0, 8)));
        assert_eq!(t.run_around(1, 7, all), Some((0, 8)));
    }

    #[test]
    fn remote_pages_are_counted_per_chunk_and_in_all() {
        let mut t = ChunkTable::new(12, 4);
        assert!(!t.is_page_remote(1, 2));
        assert_eq!(t.set_remote(1, 1, 3, true), 3);
        assert_eq!(t.set_remote(1, 0, 2, true), 1, "page 1 was remote already");
        assert_eq!(t.set_remote(2, 3, 2, true), 0, "past the chunk: refused");
        assert_eq!((t.remote_pages(1), t.remote_total()), (4, 4));
        assert!(t.is_page_remote(1, 0) && t.is_page_remote(1, 3));
        assert!(!t.is_page_remote(0, 3) && !t.is_page_remote(2, 0));
        // Residency is independent: a resident page may be remote (its stale copy unmapped).
        t.add_resident(1, 0, 1);
        assert!(t.is_page_remote(1, 0) && t.is_page_resident(1, 0));
        assert_eq!(t.set_remote(1, 0, 4, false), 4);
        assert_eq!((t.remote_pages(1), t.remote_total()), (0, 0));
        t.check_invariants("remote", |c| c == 1);
    }

    #[test]
    fn partial_residency_and_totals() {
        let mut t = ChunkTable::new(12, 4);
        assert_eq!(t.len(), 3);
        assert_eq!(t.state(1), Some(ChunkState::Out));
        assert_eq!(t.state(3), None);
        assert_eq!(t.add_resident(1, 1, 2), 2);
        assert!(t.is(1, ChunkState::In));
        assert_eq!(t.add_resident(1, 0, 4), 2, "pages 1 and 2 were resident");
        assert_eq!(t.resident_pages(1), 4);
        assert_eq!(t.resident_total(), 4);
        assert_eq!(t.add_resident(2, 3, 1), 1);
        assert_eq!(t.resident_runs(2), vec![(3, 1)]);
        assert_eq!(t.resident_total(), 5);
        assert_eq!(t.add_resident(2, 3, 2), 0, "past the chunk's end: refused");
        t.set_written(1, 2, 1, true);
        assert!(t.is_written(1) && t.is_page_written(1, 2) && !t.is_page_written(1, 1));
        assert!(!t.is_written(0) && !t.is_written(2));
        assert_eq!(t.set_out(1), 4);
        assert!(!t.is_written(1) && t.resident_total() == 1);
        t.check_invariants("test", |c| c == 2);
    }

    #[test]
    fn held_pages_are_those_resident_at_the_last_eviction_and_not_mapped_since() {
        let mut t = ChunkTable::new(16, 8);
        t.add_resident(1, 1, 3);
        t.add_resident(0, 7, 1);
        t.hold_evicted(1);
        t.set_out(1);
        assert_eq!(t.take_held(1, 0, 8), 3, "pages 1 to 3");
        assert_eq!(t.take_held(1, 0, 8), 0, "taken once");
        t.add_resident(1, 2, 1);
        t.hold_evicted(1);
        t.add_resident(1, 5, 1);
        t.hold_evicted(1);
        assert_eq!(t.take_held(1, 0, 2), 0);
        assert_eq!(t.take_held(1, 2, 4), 2, "the last eviction's pages 2 and 5");
        assert_eq!(t.take_held(0, 0, 8), 0, "chunk 0 was not evicted");
        t.hold_evicted(0);
        t.clear_held(0);
        assert_eq!(t.take_held(0, 7, 1), 0, "cleared");
        assert_eq!(t.take_held(1, 7, 2), 0, "past the chunk's end");
        t.hold_evicted(9);
        t.clear_held(9);
    }

    #[test]
    fn runs_of_pages() {
        let mut t = ChunkTable::new(16, 8);
        t.add_resident(1, 0, 2);
        t.add_resident(1, 3, 1);
        t.add_resident(1, 5, 3);
        assert_eq!(t.resident_runs(1), vec![(0, 2), (3, 1), (5, 3)]);
        assert_eq!(t.runs(1, |p| p % 4 == 0), vec![(0, 1), (4, 1)]);
        assert!(t.resident_runs(0).is_empty() && t.resident_runs(9).is_empty());
    }

    #[test]
    fn the_last_chunk_may_be_short() {
        let mut t = ChunkTable::new(10, 4);
        assert_eq!(t.len(), 3);
        assert_eq!((t.pages_in(1), t.pages_in(2), t.pages_in(3)), (4, 2, 0));
        assert_eq!(t.add_resident(2, 0, 3), 0, "past the region's end: refused");
        assert_eq!(t.add_resident(2, 0, 2), 2);
        assert_eq!(t.runs(2, |_| true), vec![(0, 2)]);
    }

    #[test]
    fn poison_is_per_page_and_cleared_by_residency() {
        let mut t = ChunkTable::new(4, 4);
        t.set_poisoned(0, 1, 2, true);
        assert!(t.is_page_poisoned(0, 1) && t.is_page_poisoned(0, 2) && !t.is_page_poisoned(0, 0));
        assert_eq!(t.poisoned_pages(0), 2);
        t.add_resident(0, 2, 1);
        assert_eq!(
            t.poisoned_pages(0),
            1,
            "a page mapped again is not poisoned"
        );
        t.set_poisoned(0, 0, 4, false);
        assert_eq!(t.poisoned_pages(0), 0);
    }

    #[test]
    fn pages_being_read_are_counted() {
        let mut t = ChunkTable::new(8, 4);
        t.set_reading(1, 2, true);
        t.set_reading(1, 2, true);
        t.set_reading(0, 0, true);
        assert_eq!(t.reading_total(), 2);
        assert!(t.is_page_reading(1, 2) && !t.is_page_reading(1, 1));
        t.set_reading(1, 2, false);
        t.set_reading(1, 9, true);
        assert_eq!(t.reading_total(), 1);
        t.check_invariants("test", |_| false);
    }

    #[test]
    fn a_page_added_then_removed_leaves_the_table_as_it_was() {
        let mut t = ChunkTable::new(16, 4);
        t.add_resident(1, 0, 1);
        assert_eq!(t.add_resident(1, 2, 1), 1);
        assert!(t.remove_resident(1, 2));
        assert!(!t.remove_resident(1, 2), "not resident any more");
        assert!(!t.remove_resident(1, 9), "outside the chunk");
        assert_eq!((t.resident_pages(1), t.resident_total()), (1, 1));
        assert!(t.is_page_resident(1, 0) && !t.is_page_resident(1, 2));
        assert!(t.is(1, ChunkState::In), "its other page keeps it in");
        t.check_invariants("test", |c| c == 1);
        // A chunk that came in with one page and lost it is set out by the caller.
        assert_eq!(t.add_resident(2, 3, 1), 1);
        assert!(t.remove_resident(2, 3));
        assert_eq!(t.set_out(2), 0);
        assert!(t.is(2, ChunkState::Out));
        t.check_invariants("test", |c| c == 1);
    }

    #[test]
    fn writes_and_rescues() {
        let mut t = ChunkTable::new(4, 2);
        t.add_resident(0, 0, 2);
        assert_eq!(t.finish_job(0, true), WriteProgress::NotWriting);
        t.start_writing(0, 2);
        assert_eq!(
            (t.writing(), t.jobs_in_flight(), t.writing_pages()),
            (1, 2, 2)
        );
        assert_eq!(t.resident_pages(0), 2, "a chunk being written is resident");
        t.request_rescue(0);
        assert_eq!(t.finish_job(0, false), WriteProgress::Pending);
        assert_eq!(
            t.finish_job(0, true),
            WriteProgress::Done {
                rescue: true,
                failed: true
            }
        );
        assert_eq!(
            (t.writing(), t.jobs_in_flight(), t.writing_pages()),
            (0, 0, 0)
        );
        assert!(t.is(0, ChunkState::In));
        t.start_writing(0, 1);
        assert_eq!(
            t.finish_job(0, true),
            WriteProgress::Done {
                rescue: false,
                failed: false
            },
            "rescue and failure were taken"
        );
        t.check_invariants("test", |c| c == 0);
    }

    #[test]
    fn overrun_list() {
        let mut t = ChunkTable::new(4, 1);
        t.add_resident(1, 0, 1);
        t.add_resident(3, 0, 1);
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
        t.add_resident(0, 0, 1);
        t.push_overrun(0);
        t.check_invariants("test", |_| true);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "resident 0")]
    fn invariant_check_catches_an_empty_resident_chunk() {
        let mut t = ChunkTable::new(2, 2);
        t.add_resident(0, 0, 0);
        t.states[0] = ChunkState::In;
        t.check_invariants("test", |_| true);
    }
}
