//! Live migration inside the fault handler (seed 003, section 3): reading pages where they are
//! (memory, swap, disk image) without paging them in, tracking which pages change between
//! rounds, and, on the destination, installing received pages in memory while they fit the
//! budget and straight into the swap file after that.
//!
//! Change tracking folds the page tables' written bits (`PAGEMAP_SCAN`, re-protecting the
//! pages in the same call) into the chunk table's sticky written bitmap, which marks every
//! page it sets as changed; discards mark their pages changed too. Every other way a page's
//! content changes goes through one of those two (page-ins restore what was there), so the
//! pages changed since a round are exactly the ones to send again.

use std::sync::{Arc, Mutex};

use super::{ChunkState, FaultHandler};
use crate::memfd::Mapping;
use crate::migration_pages::{InstallOutcome, MigrationPages};
use crate::pager_error::PagerError;
use crate::region_command::MigrationRequest;
use crate::region_stats::{add, sub};
use crate::swap_file::{is_zero, ReadError, WriteOutcome};

impl FaultHandler {
    /// Carries out one migration request, filling its answer slot.
    pub(super) fn migration_request(
        &mut self,
        request: MigrationRequest,
    ) -> Result<(), PagerError> {
        match request {
            MigrationRequest::TrackChanges(true) => self.start_tracking_changes(),
            MigrationRequest::TrackChanges(false) => {
                self.chunks.untrack_changes();
                self.migration_buffer = None;
                Ok(())
            }
            MigrationRequest::Order(out) => {
                let order = self.migration_order();
                put(&out, order);
                Ok(())
            }
            MigrationRequest::Read { runs, out } => {
                let reads = runs
                    .into_iter()
                    .map(|(first_page, pages)| self.read_for_migration(first_page, pages))
                    .collect::<Result<Vec<_>, _>>()?;
                put(&out, reads);
                Ok(())
            }
            MigrationRequest::TakeChanged(out) => {
                let changed = self.take_changed()?;
                put(&out, changed);
                Ok(())
            }
            MigrationRequest::Install {
                runs,
                only_remote,
                out,
            } => {
                let mut total = InstallOutcome::default();
                for (first_page, data) in runs {
                    let placed = if only_remote {
                        self.install_remote(first_page, &data)?
                    } else {
                        self.install(first_page, &data)?
                    };
                    total.in_memory += placed.in_memory;
                    total.to_swap += placed.to_swap;
                }
                put(&out, total);
                Ok(())
            }
            MigrationRequest::MarkRemote(runs) => self.mark_remote(runs),
            MigrationRequest::RemoteRuns(out) => {
                put(&out, self.all_remote_runs());
                Ok(())
            }
        }
    }

    pub(super) fn migration_error(&self, page: usize, reason: impl Into<String>) -> PagerError {
        PagerError::Migration {
            region: self.shared.name.clone(),
            offset: (page * self.memory.page) as u64,
            reason: reason.into(),
        }
    }

    /// Starts tracking changes: the written state the page tables hold now is saved (and the
    /// pages write-protected again), then every change from here on is recorded.
    fn start_tracking_changes(&mut self) -> Result<(), PagerError> {
        if self.pagemap.is_none() {
            return Err(self.migration_error(
                0,
                "needs write tracking (userfaultfd WP_ASYNC and PAGEMAP_SCAN), which is off",
            ));
        }
        self.fold_page_table_writes()?;
        self.chunks.track_changes();
        Ok(())
    }

    /// Saves the written bits of every resident page's page-table entry in the chunk table
    /// (marking those pages changed) and write-protects the pages again, so later writes show
    /// in the next call. Chunks being written are skipped: their entries are gone (their
    /// written state was saved when their page-out started) and a write faults first.
    fn fold_page_table_writes(&mut self) -> Result<(), PagerError> {
        let Some(pagemap) = self.pagemap.as_ref() else {
            return Ok(());
        };
        let pg = self.memory.page;
        let mut written: Vec<(usize, usize, usize)> = Vec::new();
        for c in 0..self.chunks.len() {
            if !self.chunks.is(c, ChunkState::In) {
                continue;
            }
            let start = self.chunk_range(c).0;
            for (f, n) in self.chunks.resident_runs(c) {
                let at = self.memory.base + start + f * pg;
                let ranges = pagemap.take_written(at, n * pg, false).map_err(|e| {
                    self.migration_error(
                        start / pg + f,
                        format!("PAGEMAP_SCAN of {} pages: {e}", n),
                    )
                })?;
                for r in ranges {
                    let lo = (r.start as usize - self.memory.base - start) / pg;
                    let hi = ((r.end as usize - self.memory.base - start) / pg).min(f + n);
                    if hi > lo {
                        written.push((c, lo, hi - lo));
                    }
                }
            }
        }
        for (c, first, n) in written {
            self.chunks.set_written(c, first, n, true);
        }
        Ok(())
    }

    /// The chunks that hold data, most valuable first: the resident chunks in the policy's
    /// rank (the reverse of its eviction order), then resident chunks it does not track
    /// (overrun), then those only in swap or only associated with disk-image blocks. The rank
    /// is read by draining the policy and admitting the chunks again in the same order, as a
    /// policy change does (reference bits and ghost entries are lost; the source is leaving).
    fn migration_order(&mut self) -> Vec<usize> {
        let mut drained = Vec::with_capacity(self.policy.len());
        while let Some(u) = self.policy.evict() {
            drained.push(u);
        }
        for &u in &drained {
            if let Some(v) = self.policy.admit(u) {
                // Cannot happen (the policy held them all a moment ago); never lose a chunk.
                self.chunks.push_overrun(v as usize);
                add(&self.stats().overrun_chunks, 1);
            }
        }
        let mut listed = vec![false; self.chunks.len()];
        let mut order: Vec<usize> = Vec::with_capacity(self.chunks.len());
        for u in drained.into_iter().rev() {
            let c = u as usize;
            if c < listed.len() && !listed[c] {
                listed[c] = true;
                order.push(c);
            }
        }
        let mut out = Vec::new();
        for (c, &done) in listed.iter().enumerate() {
            if done {
                continue;
            }
            if self.chunks.resident_pages(c) > 0 {
                order.push(c);
            } else if self.io.is_stored(c) || self.any_image_pages(c, 0, self.chunks.pages_in(c)) {
                out.push(c);
            }
        }
        order.extend(out);
        order
    }

    /// The chunk of region pages `first_page..first_page + pages`, and the first page's index
    /// in it; an error unless the run is inside one chunk.
    pub(super) fn chunk_of_run(
        &self,
        first_page: usize,
        pages: usize,
    ) -> Result<(usize, usize), PagerError> {
        let ppc = self.chunks.pages_per_chunk();
        let c = first_page / ppc;
        let p = first_page % ppc;
        if pages == 0 || c >= self.chunks.len() || p + pages > self.chunks.pages_in(c) {
            return Err(self.migration_error(
                first_page,
                format!("{pages} pages from page {first_page}: not inside one chunk of the region"),
            ));
        }
        Ok((c, p))
    }

    /// For `data` to install from region page `first_page` on: the chunk, the first page's
    /// index in it and the page count; an error unless `data` is whole pages inside one chunk.
    fn chunk_of_data(
        &self,
        first_page: usize,
        data: &[u8],
    ) -> Result<(usize, usize, usize), PagerError> {
        let pg = self.memory.page;
        if data.is_empty() || data.len() % pg != 0 {
            return Err(self.migration_error(
                first_page,
                format!(
                    "{} bytes to install: not whole pages of {pg} bytes",
                    data.len()
                ),
            ));
        }
        let pages = data.len() / pg;
        let (c, p0) = self.chunk_of_run(first_page, pages)?;
        Ok((c, p0, pages))
    }

    /// Reads region pages `first_page..first_page + pages` (inside one chunk) where they are:
    /// resident pages from memory, the others from swap or from their disk-image block
    /// (checksums verified), never mapping them. A poisoned page or a failed read is an error.
    fn read_for_migration(
        &mut self,
        first_page: usize,
        pages: usize,
    ) -> Result<MigrationPages, PagerError> {
        let (c, p0) = self.chunk_of_run(first_page, pages)?;
        self.wait_for_write(c);
        let pg = self.memory.page;
        if let Some(p) = (p0..p0 + pages).find(|&p| self.chunks.is_page_poisoned(c, p)) {
            return Err(self.migration_error(
                first_page - p0 + p,
                "the page is poisoned (an earlier read of it failed): its data is lost",
            ));
        }
        let mut out = MigrationPages {
            first_page,
            page_size: pg,
            data: vec![0; pages * pg],
            zero: vec![true; pages],
        };
        let start = self.chunk_range(c).0;
        for (f, n) in self.chunks.resident_runs(c) {
            let (lo, hi) = (f.max(p0), (f + n).min(p0 + pages));
            if lo >= hi {
                continue;
            }
            // Resident pages are in the memfd. The program may write them meanwhile: such
            // writes are tracked and sent again in a later round.
            self.memory
                .memfd
                .read_at(
                    start + lo * pg,
                    &mut out.data[(lo - p0) * pg..(hi - p0) * pg],
                )
                .map_err(|e| {
                    self.migration_error(first_page - p0 + lo, format!("reading memory: {e}"))
                })?;
        }
        let missing = self
            .chunks
            .runs_in(c, p0, pages, |p| !self.chunks.is_page_resident(c, p));
        for (f, n) in missing {
            let stored = self.io.stored_in(c, f, n) > 0;
            let image = self.any_image_pages(c, f, n);
            if !stored && !image {
                continue;
            }
            let buf = self.migration_buffer(n * pg)?;
            // SAFETY: the buffer is this handler's own anonymous mapping of at least `n`
            // pages; nothing else refers to it.
            let buf = unsafe { std::slice::from_raw_parts_mut(buf, n * pg) };
            buf.fill(0);
            if stored {
                self.io.read_page(c, f, buf).map_err(|e| {
                    let what = match e {
                        ReadError::Io(e) => format!("reading swap: {e}"),
                        ReadError::Checksum {
                            page,
                            expected,
                            actual,
                        } => format!(
                            "swap page {page} of chunk {c} does not match its checksum \
                             (recorded {expected:#010x}, read {actual:#010x})"
                        ),
                    };
                    self.migration_error(first_page - p0 + f, what)
                })?;
                // Counted with the page-ins' reads: swap traffic is swap traffic.
                add(&self.stats().bytes_read, (n * pg) as u64);
            }
            // Associated pages hold their image block (as at page-in).
            self.read_image_pages(c, f, buf, |_| true, false)
                .map_err(|e| {
                    self.migration_error(
                        first_page - p0 + e.run.0,
                        format!(
                            "reading image {} at byte {:#x}: {}",
                            e.image.path().display(),
                            e.file_offset,
                            e.source
                        ),
                    )
                })?;
            out.data[(f - p0) * pg..(f - p0 + n) * pg].copy_from_slice(buf);
        }
        for (i, z) in out.zero.iter_mut().enumerate() {
            *z = is_zero(&out.data[i * pg..(i + 1) * pg]);
        }
        add(&self.stats().migration_pages_read, pages as u64);
        Ok(out)
    }

    /// The runs of pages (region page, count) changed since the last call or since tracking
    /// started; forgets them.
    fn take_changed(&mut self) -> Result<Vec<(usize, usize)>, PagerError> {
        if !self.chunks.tracks_changes() {
            return Err(self.migration_error(0, "changes are not being tracked"));
        }
        self.fold_page_table_writes()?;
        Ok(self.chunks.take_changed())
    }

    /// Post-copy: [`install`](Self::install) of those pages of `data` (whole pages for region
    /// pages `first_page..`, inside one chunk) that are still remote; they are remote no more.
    /// The others are left as they are: since they were marked, the destination's program
    /// discarded them (and may have written them again).
    fn install_remote(
        &mut self,
        first_page: usize,
        data: &[u8],
    ) -> Result<InstallOutcome, PagerError> {
        let pg = self.memory.page;
        let (c, p0, pages) = self.chunk_of_data(first_page, data)?;
        let mut total = InstallOutcome::default();
        for (f, n) in self.remote_runs(c, p0, pages) {
            let bytes = &data[(f - p0) * pg..(f - p0 + n) * pg];
            let placed = self.install(first_page - p0 + f, bytes)?;
            self.end_remote(c, f, n);
            total.in_memory += placed.in_memory;
            total.to_swap += placed.to_swap;
        }
        Ok(total)
    }

    /// Installs `data` (whole pages) as region pages `first_page..` (inside one chunk), as a
    /// migration's destination: resident pages are overwritten in memory; the others go to
    /// memory while the resident pages fit the budget (no eviction), else straight to the swap
    /// file. Installed pages count as written (they have no swap copy, or a stale one).
    fn install(&mut self, first_page: usize, data: &[u8]) -> Result<InstallOutcome, PagerError> {
        let pg = self.memory.page;
        let (c, p0, pages) = self.chunk_of_data(first_page, data)?;
        self.wait_for_write(c);
        self.end_image_pages(c, p0, pages);
        let mut outcome = InstallOutcome::default();
        let start = self.chunk_range(c).0;
        let mut p = p0;
        while p < p0 + pages {
            let resident = self.chunks.is_page_resident(c, p);
            let mut end = p + 1;
            while end < p0 + pages && self.chunks.is_page_resident(c, end) == resident {
                end += 1;
            }
            let (n, bytes) = (end - p, &data[(p - p0) * pg..(end - p0) * pg]);
            let (s, l) = (start + p * pg, n * pg);
            if resident || self.chunks.resident_total() + n <= self.budget_pages {
                if !resident {
                    self.memory.alias.populate_write(s, l).map_err(|e| {
                        self.migration_error(first_page - p0 + p, format!("allocating memory: {e}"))
                    })?;
                }
                // SAFETY: the alias mapping covers `[s, s + l)`. Resident pages may be in use
                // by the program (a destination's guest does not run yet); the others have no
                // page-table entries in the registered mapping, so accesses fault and wait for
                // this thread. No Rust reference to the mapping exists.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        bytes.as_ptr(),
                        self.memory.alias.as_ptr().add(s),
                        l,
                    )
                };
                if !resident {
                    self.admit_installed(c, p, n);
                }
                self.chunks.set_written(c, p, n, true);
                outcome.in_memory += n;
            } else {
                let was_stored = self.io.is_stored(c);
                let buf = self.migration_buffer(l)?;
                // SAFETY: the handler's own buffer of at least `l` bytes, referred to nowhere
                // else.
                let buf = unsafe { std::slice::from_raw_parts_mut(buf, l) };
                buf.copy_from_slice(bytes);
                match self.io.write_now(c, p, buf) {
                    Ok(WriteOutcome::Written) => add(&self.stats().bytes_written, l as u64),
                    Ok(WriteOutcome::Zero) => {}
                    Err(e) => {
                        return Err(self.migration_error(
                            first_page - p0 + p,
                            format!("writing {n} pages to swap: {e}"),
                        ))
                    }
                }
                let now_stored = self.io.is_stored(c);
                if self.chunks.is(c, ChunkState::Out) && was_stored != now_stored {
                    if now_stored {
                        add(&self.stats().swapped_chunks, 1);
                    } else {
                        sub(&self.stats().swapped_chunks, 1);
                    }
                }
                outcome.to_swap += n;
            }
            p = end;
        }
        add(&self.stats().migration_pages_installed, pages as u64);
        Ok(outcome)
    }

    /// Pages `first..first + n` of chunk `c`, just filled through the alias mapping, are
    /// resident: the chunk enters the policy if it was out.
    fn admit_installed(&mut self, c: usize, first: usize, n: usize) {
        let was_out = self.chunks.is(c, ChunkState::Out);
        let stored_before = self.io.is_stored(c);
        let added = self.chunks.add_resident(c, first, n);
        add(&self.stats().resident_pages, added as u64);
        if !was_out {
            return;
        }
        add(&self.stats().resident_chunks, 1);
        if stored_before {
            sub(&self.stats().swapped_chunks, 1);
        }
        if let Some(victim) = self.policy.admit(c as u64) {
            let v = victim as usize;
            if v == c {
                self.chunks.push_overrun(v);
                add(&self.stats().overrun_chunks, 1);
            } else {
                self.evict_or_overrun(v);
            }
        }
    }

    /// The handler's migration buffer (page-aligned, for `O_DIRECT`), at least `len` bytes.
    fn migration_buffer(&mut self, len: usize) -> Result<*mut u8, PagerError> {
        if self.migration_buffer.as_ref().is_none_or(|m| m.len() < len) {
            let size = len.max(self.memory.chunk_size);
            let m = Mapping::anonymous(size).map_err(|e| {
                self.migration_error(0, format!("allocating a {size}-byte buffer: {e}"))
            })?;
            self.migration_buffer = Some(m);
        }
        Ok(self
            .migration_buffer
            .as_ref()
            .map_or(std::ptr::null_mut(), |m| m.as_ptr()))
    }
}

/// Puts `value` into a request's answer slot.
fn put<T>(slot: &Arc<Mutex<T>>, value: T) {
    if let Ok(mut s) = slot.lock() {
        *s = value;
    }
}
