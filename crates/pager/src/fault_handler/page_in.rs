//! Page-in: a missing fault brings in what [`AccessPattern`](super::access_pattern) asks for:
//! the faulting page alone when faults are scattered, every page of the chunk that is not in
//! memory when they stream (and the next chunk is read ahead). Room is made first, counted in
//! pages. Pages are read from swap (every stored page verified by its checksum) or zero-filled,
//! mapped, and their waiters woken. A failed read poisons the pages it was for
//! (`UFFDIO_POISON`): their accessors get SIGBUS, never garbage; the chunk's other pages are
//! untouched.

use std::io;
use std::time::Instant;

/// A parallel page read in flight: the page, its slot, the chunk's swap version when it
/// started, and when.
#[derive(Debug)]
pub(super) struct PendingPageRead {
    chunk: usize,
    page: usize,
    slot: usize,
    version: u32,
    started: Instant,
}

use super::access_pattern::PageInSpan;
use super::fault_loop::nanos;
use super::swap_mapper::ImageReadError;
use super::{ChunkState, FaultHandler, Fill};
use crate::pager_error::PagerError;
use crate::region_config::ResolveMode;
use crate::region_stats::{add, sub};
use crate::swap_file::ReadError;
use crate::swap_io::ReadStart;

/// What [`FaultHandler::count_page_in`] counted, to admit the chunk or take the count back.
#[derive(Debug, Clone, Copy)]
struct PageInCount {
    /// Counted as a page-in (something was read).
    read: bool,
    /// Counted as a scattered page-in.
    scattered: bool,
    bytes_read: usize,
    /// Pages that became resident.
    added: usize,
    /// The chunk came into memory with this page-in.
    now_in: bool,
    /// The chunk had a swap copy before.
    stored_before: bool,
}

/// Why a page-in stopped.
pub(super) enum PageInError {
    /// Reading failed: poison the pages.
    Read(ReadError),
    /// Mapping failed.
    Map(io::Error),
    /// Reading associated pages from their image failed or did not match.
    Image(ImageReadError),
}

/// What a page-in did: the runs of pages it mapped (page index in the chunk, count), the bytes
/// it read from swap and from images, and, if it stopped early, the run it failed on and why.
#[derive(Default)]
pub(super) struct PageInDone {
    mapped: Vec<(usize, usize)>,
    bytes_read: usize,
    image_bytes: usize,
    failed: Option<((usize, usize), PageInError)>,
}

impl PageInDone {
    /// Run `(first, n)` was mapped.
    pub fn push_mapped(&mut self, run: (usize, usize)) {
        self.mapped.push(run);
    }

    /// The runs mapped so far.
    pub fn mapped_runs(&self) -> &[(usize, usize)] {
        &self.mapped
    }
}

impl FaultHandler {
    /// Frees room for `incoming` more resident pages: retries one overrun chunk (while swap is
    /// full, once per [`RETRY_INTERVAL`](crate::swap_full::RETRY_INTERVAL)), then evicts
    /// policy victims until the resident pages fit the budget (overrun chunks are over it: see
    /// [`ChunkTable::overrun_pages`]), counting pages being written
    /// as free once their writes complete (and waiting for those if they are all that is
    /// left).
    pub(super) fn make_room(&mut self, incoming: usize) {
        self.reap_writes(false);
        // Take the chunk off the list first: page_out may complete other writes, which can put
        // chunks on the list.
        let overrun = if self.page_out_options.swap_full.retry_due(Instant::now()) {
            self.chunks.pop_overrun()
        } else {
            None
        };
        if let Some(o) = overrun {
            if self.page_out(o).is_err() {
                self.chunks.push_overrun(o);
            } else {
                sub(&self.stats().overrun_chunks, 1);
            }
        }
        // Pages being read on their own will be resident soon: count them.
        let incoming = incoming + self.chunks.reading_total();
        let overrun_before = self.chunks.overrun_len();
        // Taken once: the loop ends as soon as the overrun list grows, and nothing else
        // changes the overrun chunks' pages meanwhile.
        let over = self.chunks.overrun_pages();
        let mut waited = false;
        while self.chunks.resident_total() - over + incoming > self.budget_pages {
            if self.chunks.overrun_len() > overrun_before {
                // A page-out failed (swap full, I/O error): overrun the budget rather than
                // try every other chunk, which would most likely fail the same way.
                break;
            }
            let settled = self.chunks.resident_total() - over - self.chunks.writing_pages();
            if settled + incoming <= self.budget_pages || self.policy.is_empty() {
                // What the writes in flight free is enough (or all there is): wait for them.
                if self.chunks.writing() == 0 {
                    break; // overrun: nothing left to free
                }
                waited = true;
                self.reap_writes(true);
                continue;
            }
            match self.next_victim(None) {
                // A failed page-out: the budget is overrun until a later page-in retries.
                Some(v) if !self.evict_or_overrun(v as usize) => break,
                Some(_) => {}
                None => break,
            }
        }
        if waited {
            add(&self.stats().page_in_write_waits, 1);
        }
    }

    /// Brings in page `page` of chunk `c`, or every missing page of the chunk, as `span` says.
    pub(super) fn page_in(&mut self, c: usize, page: usize, span: PageInSpan) {
        let incoming: usize = self.missing_runs(c, page, span).iter().map(|r| r.1).sum();
        if incoming == 0 {
            return;
        }
        let t = Instant::now();
        self.make_room(incoming);
        // Making room may have chosen `c` itself: its writes must be over before pages come
        // in (they end by punching the chunk out of memory).
        self.wait_for_write(c);
        add(&self.stats().evict_nanos, nanos(t));
        let runs = self.missing_runs(c, page, span);
        if runs.is_empty() {
            // Nothing left to bring in (cannot happen: the faulting page was missing); never
            // leave its thread waiting.
            let at = self.memory.base + self.chunk_range(c).0 + page * self.memory.page;
            let _ = self.uffd.wake(at, self.memory.page);
            return;
        }
        if span == PageInSpan::Page && self.start_page_read(c, page) {
            return;
        }
        let done = match self.page_in_options.resolve {
            ResolveMode::AliasContinue => self.page_in_alias(c, &runs),
            ResolveMode::Copy => self.page_in_copy(c, page, &runs, span),
        };
        self.finish_page_in(c, page, span, done);
    }

    /// Parallel page-in: starts reading page `page` of chunk `c` on its own and returns to
    /// the fault loop, which serves other faults (and starts other reads) meanwhile;
    /// [`reap_page_reads`](Self::reap_page_reads) maps the page when the read completes.
    /// `false`: not started (copy mode with a demand reader only, stored pages only); read it
    /// now.
    fn start_page_read(&mut self, c: usize, page: usize) -> bool {
        if self.page_in_options.resolve != ResolveMode::Copy
            || !self.io.has_page_reads()
            || self.io.stored_in(c, page, 1) == 0
            || self.is_image_page(c, page)
        {
            return false;
        }
        if !self.io.page_read_slot_free() {
            self.reap_page_reads(true);
        }
        let Some((slot, version)) = self.io.start_page_read(c, page) else {
            return false;
        };
        self.chunks.set_reading(c, page, true);
        self.page_reads.push(PendingPageRead {
            chunk: c,
            page,
            slot,
            version,
            started: Instant::now(),
        });
        add(&self.stats().parallel_page_reads, 1);
        true
    }

    /// Completes the parallel page reads that finished; with `wait`, waits for one if any is
    /// in flight. Each page is verified and mapped, and its waiters woken; a failed read
    /// poisons it; a page whose chunk's swap copy changed meanwhile (a discard) is paged in
    /// again. Every finished page is mapped before any of their chunks is admitted to the
    /// policy, which may evict: no woken thread waits behind another page's eviction.
    pub(super) fn reap_page_reads(&mut self, wait: bool) {
        let mut done = std::mem::take(&mut self.page_reads_done);
        self.io.take_page_reads(&mut done, wait);
        let mut admit = Vec::new();
        for d in done.drain(..) {
            let Some(i) = self.page_reads.iter().position(|p| p.slot == d.slot) else {
                self.io.release_page_read(d.slot);
                continue;
            };
            let p = self.page_reads.swap_remove(i);
            self.chunks.set_reading(p.chunk, p.page, false);
            if let Some(mapped) = self.complete_page_read(p, d.result) {
                admit.push(mapped);
            }
        }
        self.page_reads_done = done;
        for (c, counted) in admit {
            self.admit_page_in(c, counted);
        }
    }

    /// Maps finished page read `p` (or fails it, or pages it in again); returns its chunk and
    /// count if it was mapped and the chunk is still to be admitted
    /// ([`admit_page_in`](Self::admit_page_in)).
    fn complete_page_read(
        &mut self,
        p: PendingPageRead,
        result: io::Result<()>,
    ) -> Option<(usize, PageInCount)> {
        let (c, page) = (p.chunk, p.page);
        let pg = self.memory.page;
        let at = self.chunk_range(c).0 + page * pg;
        add(&self.stats().swap_read_nanos, nanos(p.started));
        // Evicted meanwhile: its writes end by punching the chunk out of memory, so no page
        // may come in before they are over (they also changed its version: read again below).
        self.wait_for_write(c);
        if self.chunks.is_page_resident(c, page) || self.io.version(c) != p.version {
            // Mapped meanwhile (a whole-chunk page-in), or the swap copy changed: wake, or
            // page it in again (synchronously) from what swap holds now.
            self.io.release_page_read(p.slot);
            if !self.chunks.is_page_resident(c, page) {
                self.page_in(c, page, PageInSpan::Page);
            }
            let _ = self.uffd.wake(self.memory.base + at, pg);
            return None;
        }
        let src = match result.map_err(ReadError::Io).and_then(|()| {
            self.io
                .accept_page_read(c, page, p.slot)
                .map(|buf| buf.as_ptr())
        }) {
            Ok(src) => src,
            Err(e) => {
                self.io.release_page_read(p.slot);
                let done = PageInDone {
                    failed: Some(((page, 1), PageInError::Read(e))),
                    ..PageInDone::default()
                };
                self.finish_page_in(c, page, PageInSpan::Page, done);
                return None;
            }
        };
        // The page is counted in first, then the copy maps it and wakes its thread in one call:
        // the woken thread sees consistent statistics, and no separate wake call stands between
        // the data and the thread.
        let done = PageInDone {
            mapped: vec![(page, 1)],
            bytes_read: pg,
            ..PageInDone::default()
        };
        let counted = self.count_page_in(c, PageInSpan::Page, &done);
        // SAFETY: `src` is the slot's page-sized buffer, which stays valid and untouched until
        // `release_page_read` below.
        let buf = unsafe { std::slice::from_raw_parts(src, pg) };
        let mapped = self.fill_wake(at, pg, Fill::Copy(buf), true);
        self.io.release_page_read(p.slot);
        match mapped {
            Ok(()) => Some((c, counted)),
            Err(e) => {
                // Not in memory after all: counted out again, then poisoned (which wakes).
                self.uncount_page_in(c, page, counted);
                self.fail_run(c, (page, 1), PageInError::Map(e));
                None
            }
        }
    }

    /// After the pages of a page-in are mapped (or it failed): counters, residency, the
    /// failure, the wake, the policy, the headroom.
    pub(super) fn finish_page_in(
        &mut self,
        c: usize,
        page: usize,
        span: PageInSpan,
        mut done: PageInDone,
    ) {
        let counted = self.count_page_in(c, span, &done);
        if let Some((run, e)) = done.failed.take() {
            self.fail_run(c, run, e);
        }
        // Counters first, then the wake: a woken thread sees consistent statistics.
        let (start, len) = self.chunk_range(c);
        match span {
            PageInSpan::Page => {
                let _ = self.uffd.wake(
                    self.memory.base + start + page * self.memory.page,
                    self.memory.page,
                );
            }
            PageInSpan::Window { .. } | PageInSpan::Chunk { .. } => {
                let _ = self.uffd.wake(self.memory.base + start, len);
            }
        }
        self.admit_page_in(c, counted);
    }

    /// The counters and residency of a page-in of chunk `c` that mapped `done.mapped`.
    fn count_page_in(&mut self, c: usize, span: PageInSpan, done: &PageInDone) -> PageInCount {
        let was_out = self.chunks.is(c, ChunkState::Out);
        let stored_before = self.io.is_stored(c);
        let read = done.bytes_read > 0 || done.image_bytes > 0;
        // A refault only if it maps pages the chunk held when it was evicted: the others left
        // at an earlier eviction, farther away than the chunk's stamp says.
        let (mut added, mut held) = (0, 0);
        for &(first, n) in &done.mapped {
            held += self.chunks.take_held(c, first, n);
            added += self.chunks.add_resident(c, first, n);
        }
        if read {
            if held > 0 {
                self.note_refault(c);
            }
            add(&self.stats().page_ins, 1);
            add(&self.stats().bytes_read, done.bytes_read as u64);
            if span == PageInSpan::Page {
                add(&self.stats().scattered_page_ins, 1);
            }
        } else if !done.mapped.is_empty() {
            add(&self.stats().zero_fills, 1);
        }
        add(&self.stats().resident_pages, added as u64);
        let now_in = was_out && self.chunks.is(c, ChunkState::In);
        if now_in {
            add(&self.stats().resident_chunks, 1);
            if stored_before {
                sub(&self.stats().swapped_chunks, 1);
            }
        }
        PageInCount {
            read,
            scattered: span == PageInSpan::Page,
            bytes_read: done.bytes_read,
            added,
            now_in,
            stored_before,
        }
    }

    /// Takes back [`count_page_in`](Self::count_page_in) of single page `page` of chunk `c`,
    /// whose mapping failed. The refault it noted stays: the chunk was read back.
    fn uncount_page_in(&mut self, c: usize, page: usize, counted: PageInCount) {
        if counted.read {
            sub(&self.stats().page_ins, 1);
            sub(&self.stats().bytes_read, counted.bytes_read as u64);
            if counted.scattered {
                sub(&self.stats().scattered_page_ins, 1);
            }
        }
        if counted.added > 0 {
            self.chunks.remove_resident(c, page);
            sub(&self.stats().resident_pages, 1);
        }
        if counted.now_in {
            // It came in with this page alone: out again.
            self.chunks.set_out(c);
            sub(&self.stats().resident_chunks, 1);
            if counted.stored_before {
                add(&self.stats().swapped_chunks, 1);
            }
        }
    }

    /// A page-in of chunk `c` is over (`counted`): a chunk new in memory joins the policy (or
    /// is declined), one already in is referenced; then the headroom is restored.
    fn admit_page_in(&mut self, c: usize, counted: PageInCount) {
        if counted.now_in {
            if let Some(declined) = self.policy.admit(c as u64) {
                // A full policy, or one with admission control, returns a victim. Declining `c`
                // itself: keep it resident outside the policy (as overrun, paged out first at
                // the next page-in) rather than take it away from the thread about to use it.
                let d = declined as usize;
                if d == c {
                    self.chunks.push_overrun(d);
                    add(&self.stats().overrun_chunks, 1);
                } else {
                    self.evict_or_overrun(d);
                }
            }
        } else if self.policy.contains(c as u64) {
            self.policy.mark_referenced(c as u64);
        }
        self.keep_headroom(c);
    }

    /// The runs of pages of chunk `c` a page-in of `span` (faulting page `page`) brings in:
    /// those not resident, not poisoned, not being read and not remote (their content is at a
    /// post-copy migration's source).
    fn missing_runs(&self, c: usize, page: usize, span: PageInSpan) -> Vec<(usize, usize)> {
        let missing = |p: usize| {
            !self.chunks.is_page_resident(c, p)
                && !self.chunks.is_page_poisoned(c, p)
                && !self.chunks.is_page_reading(c, p)
                && !self.chunks.is_page_remote(c, p)
        };
        match span {
            PageInSpan::Page if missing(page) => vec![(page, 1)],
            PageInSpan::Page => Vec::new(),
            PageInSpan::Window { .. } => {
                let (first, n) = self.read_extent(c, page, span);
                self.chunks.runs_in(c, first, n, missing)
            }
            PageInSpan::Chunk { .. } => self.chunks.runs(c, missing),
        }
    }

    /// The pages `(first, count)` of chunk `c` a page-in of `span` reads (in one read in copy
    /// mode): the faulting page, the window from it (cut at the chunk's end), or the chunk.
    fn read_extent(&self, c: usize, page: usize, span: PageInSpan) -> (usize, usize) {
        match span {
            PageInSpan::Page => (page, 1),
            PageInSpan::Window { pages } => (
                page,
                pages.clamp(1, self.chunks.pages_in(c).saturating_sub(page).max(1)),
            ),
            PageInSpan::Chunk { .. } => (0, self.chunks.pages_in(c)),
        }
    }

    /// Copy mode: reads into the bounce buffer (the faulting page alone, or the whole chunk in
    /// one read, or takes it from the prefetcher) and maps each run with `UFFDIO_COPY`; runs
    /// that nothing stored covers are zero-filled without a read.
    fn page_in_copy(
        &mut self,
        c: usize,
        page: usize,
        runs: &[(usize, usize)],
        span: PageInSpan,
    ) -> PageInDone {
        let mut done = PageInDone::default();
        let pg = self.memory.page;
        let (start, _) = self.chunk_range(c);
        let stored = runs
            .iter()
            .any(|&(f, n)| self.io.stored_in(c, f, n) > 0 || self.any_image_pages(c, f, n));
        if !stored {
            for &run in runs {
                let (s, l) = (start + run.0 * pg, run.1 * pg);
                if let Err(e) = self.fill_wake(s, l, Fill::Zero, false) {
                    done.failed = Some((run, PageInError::Map(e)));
                    return done;
                }
                done.mapped.push(run);
            }
            return done;
        }
        let Some(mut bounce) = self.page_in_options.bounce.take() else {
            done.failed = Some((
                runs[0],
                PageInError::Map(io::Error::other("no bounce buffer")),
            ));
            return done;
        };
        // What to read: the faulting page, a window from it, or the whole chunk (one read
        // covers every run).
        let (first, n) = self.read_extent(c, page, span);
        let whole_chunk = matches!(span, PageInSpan::Chunk { .. });
        let t = Instant::now();
        // SAFETY: the bounce buffer is a private mapping of one chunk owned by this handler.
        let buf = unsafe { std::slice::from_raw_parts_mut(bounce.as_ptr(), n * pg) };
        let whole_chunk_out = self.chunks.resident_pages(c) == 0;
        let read = if whole_chunk && whole_chunk_out && self.io.take_prefetched(c, &mut bounce) {
            // SAFETY: as above; `bounce` now holds the prefetcher's former buffer, as large.
            let buf = unsafe { std::slice::from_raw_parts_mut(bounce.as_ptr(), n * pg) };
            let r = self.io.verify_prefetched(c, buf).map(|()| n);
            if r.is_ok() {
                add(&self.stats().readahead_hits, 1);
            }
            r
        } else {
            let early = if whole_chunk && whole_chunk_out {
                self.map_faulting_page_first(c, start, buf)
            } else {
                Ok(None)
            };
            early.and_then(|mapped| {
                if let Some(page) = mapped {
                    // Resident from now on, whatever happens to the rest of the chunk: its
                    // thread runs and may write it, so no failure below may drop or poison it
                    // (the runs a failure loses are the pages not resident).
                    done.mapped.push((page, 1));
                    done.bytes_read = pg;
                }
                self.read_stored(c, first, buf)
            })
        };
        add(&self.stats().swap_read_nanos, nanos(t));
        // SAFETY: as above (the buffer may have been swapped with the prefetcher's).
        let buf = unsafe { std::slice::from_raw_parts_mut(bounce.as_ptr(), n * pg) };
        match read {
            Ok(0) => buf.fill(0),
            Ok(_) => done.bytes_read = n * pg,
            Err(e) => {
                // Every run depended on this one read.
                let all = (
                    runs[0].0,
                    runs[runs.len() - 1].0 + runs[runs.len() - 1].1 - runs[0].0,
                );
                done.failed = Some((all, PageInError::Read(e)));
                self.page_in_options.bounce = Some(bounce);
                return done;
            }
        }
        // Pages the image holds replace what swap had for them (a stale copy, or nothing).
        match self.read_image_pages(c, first, buf, |p| !self.chunks.is_page_resident(c, p), true) {
            Ok(b) => done.image_bytes = b,
            Err(e) => {
                let (run, e) = PageInError::image(e);
                done.failed = Some((run, e));
                self.page_in_options.bounce = Some(bounce);
                return done;
            }
        }
        if let PageInSpan::Chunk { read_ahead: true } = span {
            // Start reading the next chunk now, so the read overlaps this chunk's mapping.
            self.read_ahead(c);
        }
        for &run in runs {
            let src = &buf[(run.0 - first) * pg..(run.0 - first + run.1) * pg];
            let (s, l) = (start + run.0 * pg, run.1 * pg);
            if let Err(e) = self.fill_wake(s, l, Fill::Copy(src), false) {
                done.failed = Some((run, PageInError::Map(e)));
                break;
            }
            done.mapped.push(run);
        }
        self.page_in_options.bounce = Some(bounce);
        done
    }

    /// Alias mode: per run, reads straight into the memfd through the alias mapping (or
    /// allocates zero pages), then maps the run with one `UFFDIO_CONTINUE`.
    fn page_in_alias(&mut self, c: usize, runs: &[(usize, usize)]) -> PageInDone {
        let mut done = PageInDone::default();
        let pg = self.memory.page;
        let (start, _) = self.chunk_range(c);
        for &run in runs {
            let (s, l) = (start + run.0 * pg, run.1 * pg);
            let stored = self.io.stored_in(c, run.0, run.1) > 0;
            let image = self.any_image_pages(c, run.0, run.1);
            if stored || image {
                // Allocate and map the pages in one call, so the read does not fault them in
                // one by one.
                if let Err(e) = self.memory.alias.populate_write(s, l) {
                    done.failed = Some((run, PageInError::Map(e)));
                    break;
                }
                // SAFETY: the alias mapping covers `[s, s + l)`. These pages are not resident,
                // so the registered mapping has no entries there: program accesses fault and
                // wait for this thread, and no other reference to these bytes exists.
                let buf =
                    unsafe { std::slice::from_raw_parts_mut(self.memory.alias.as_ptr().add(s), l) };
                let t = Instant::now();
                let r = if stored {
                    self.read_stored(c, run.0, buf)
                } else {
                    Ok(0)
                };
                add(&self.stats().swap_read_nanos, nanos(t));
                match r {
                    Ok(0) => {}
                    Ok(_) => done.bytes_read += l,
                    Err(e) => {
                        done.failed = Some((run, PageInError::Read(e)));
                        break;
                    }
                }
                match self.read_image_pages(c, run.0, buf, |_| true, true) {
                    Ok(b) => done.image_bytes += b,
                    Err(e) => {
                        let (run, e) = PageInError::image(e);
                        done.failed = Some((run, e));
                        break;
                    }
                }
            } else if let Err(e) = self.memory.memfd.allocate(s, l) {
                done.failed = Some((run, PageInError::Map(e)));
                break;
            }
            if let Err(e) = self.fill_wake(s, l, Fill::Continue, false) {
                done.failed = Some((run, PageInError::Map(e)));
                break;
            }
            done.mapped.push(run);
        }
        done
    }

    /// Asynchronous page-in (seed 003, section 4.3): reads the faulting page of chunk `c` (at
    /// `start`) on its own, verifies it, maps it and wakes the thread waiting on it; the caller
    /// then reads and maps the rest of the chunk around it. Returns the page if it was mapped
    /// (the caller counts it resident at once: its thread runs and may write it, whatever
    /// happens to the rest). A failed page read fails the page-in; anything else (off, the
    /// page not stored, a mapping error) leaves the whole-chunk path to do everything.
    fn map_faulting_page_first(
        &mut self,
        c: usize,
        start: usize,
        buf: &mut [u8],
    ) -> Result<Option<usize>, ReadError> {
        let Some(offset) = self.fault_offset.take() else {
            return Ok(None);
        };
        if !self.page_in_options.async_page_in
            || offset < start
            || self.is_image_page(c, (offset - start) / self.memory.page)
        {
            return Ok(None);
        }
        let in_chunk = offset - start;
        let page = in_chunk / self.memory.page;
        let Some(page_buf) = buf.get_mut(in_chunk..in_chunk + self.memory.page) else {
            return Ok(None);
        };
        if self.io.read_page(c, page, page_buf)? == 0 {
            return Ok(None);
        }
        if self
            .fill_wake(
                start + in_chunk,
                self.memory.page,
                Fill::Copy(page_buf),
                true,
            )
            .is_ok()
        {
            add(&self.stats().early_wakes, 1);
            return Ok(Some(page));
        }
        Ok(None)
    }

    /// Reads pages `first..` of chunk `c` into `buf` (the bounce buffer or the pages' alias
    /// mapping), as [`SwapFile::read_pages`](crate::SwapFile::read_pages) does: how many were
    /// stored (0: `buf` untouched). With a demand reader the read is submitted to its io_uring
    /// and, while the disk works, victims are chosen and their writes started for the headroom
    /// this page-in will use up, so that work is off the faulting thread's wait.
    fn read_stored(&mut self, c: usize, first: usize, buf: &mut [u8]) -> Result<usize, ReadError> {
        // SAFETY: `buf` is the page-in buffer of pages of `c` that are not resident: the
        // handler's bounce buffer, or their alias pages (program accesses fault and wait for
        // this thread). Nothing touches it until `finish_read` below returns: the evictions
        // meanwhile never pick chunk `c` (which would punch its alias pages).
        match unsafe { self.io.start_read(c, first, buf) } {
            ReadStart::Done(r) => r,
            ReadStart::InFlight => {
                let outer = self.pinned_chunk.replace(c);
                self.keep_headroom_for(buf.len() / self.memory.page, Some(c));
                self.pinned_chunk = outer;
                self.io.finish_read(c, first, buf)
            }
        }
    }

    /// During a streaming page-in of chunk `c`: starts reading `c + 1` ahead if it is out and
    /// stored.
    fn read_ahead(&mut self, c: usize) {
        let next = c + 1;
        if !self.chunks.is(next, ChunkState::Out) {
            return;
        }
        let len = self.chunk_range(next).1;
        if self.io.prefetch(next, len) {
            add(&self.stats().readahead_reads, 1);
        }
    }

    /// Gives up on run `(first, n)` of chunk `c` after a failed read or mapping: records the
    /// error, drops whatever reached the memfd for its pages that are not resident, and
    /// poisons those.
    fn fail_run(&mut self, c: usize, (first, n): (usize, usize), e: PageInError) {
        let pg = self.memory.page;
        let (start, _) = self.chunk_range(c);
        let region = self.shared.name.clone();
        let path = self.io.path().to_path_buf();
        let offset = (start + first * pg) as u64;
        // Counted as a read error only if the read failed (a mapping error is not one).
        let read_failed = matches!(e, PageInError::Read(_) | PageInError::Image(_));
        if matches!(e, PageInError::Image(_)) {
            self.drop_failed_images(c, (first, n));
        }
        let err = match e {
            PageInError::Image(ImageReadError {
                run,
                image,
                file_offset,
                source,
            }) => PagerError::ImageRead {
                region,
                offset: (start + run.0 * pg) as u64,
                image: image.path().to_path_buf(),
                file_offset,
                source,
            },
            PageInError::Read(ReadError::Io(source)) => PagerError::SwapRead {
                region,
                chunk: c as u64,
                offset,
                path,
                source,
            },
            PageInError::Read(ReadError::Checksum {
                page,
                expected,
                actual,
            }) => PagerError::Checksum {
                region,
                chunk: c as u64,
                offset: (start + page * crate::swap_file::DIRECT_ALIGN) as u64,
                path,
                expected,
                actual,
            },
            PageInError::Map(source) => PagerError::Memory {
                region,
                op: "map pages",
                offset: offset as usize,
                len: n * pg,
                source,
            },
        };
        if read_failed {
            add(&self.stats().read_errors, 1);
        }
        self.shared.record(err);
        // Pages being read on their own are not part of this page-in: their reads decide.
        let lost = self.chunks.runs_in(c, first, n, |p| {
            !self.chunks.is_page_resident(c, p) && !self.chunks.is_page_reading(c, p)
        });
        let had_poison = self.chunks.poisoned_pages(c) > 0;
        for &(f, k) in &lost {
            self.chunks.set_poisoned(c, f, k, true);
        }
        // Counters first, then the wake (the poison wakes the waiters).
        if !had_poison && self.chunks.poisoned_pages(c) > 0 {
            add(&self.stats().poisoned_chunks, 1);
        }
        for (f, k) in lost {
            let (s, l) = (start + f * pg, k * pg);
            // Never map what a partial read left in the memfd.
            if let Err(e) = self.memory.memfd.punch_hole(s, l) {
                self.memory_error("punch memfd", s, l, e);
            }
            self.poison(s, l);
        }
    }
}
