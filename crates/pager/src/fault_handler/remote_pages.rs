//! Post-copy migration inside the fault handler, on the destination: pages whose content is
//! still at the source (*remote*). The destination guest runs before they arrive; a fault on
//! one waits (its thread stays blocked in the kernel, unanswered) and names the page to the
//! migration thread ([`RemotePages`](crate::remote_pages::RemotePages)), which asks the source
//! for it first. Installing the content (or discarding the page) ends the wait: the fault is
//! served again as a new one.
//!
//! A remote page is never mapped and never read: the page-in paths leave it out of what they
//! bring in (`missing_runs`, the false-read preventer), `remap` leaves it out of what it maps,
//! and a resident remote page keeps its stale copy in the memfd with its page-table entry
//! dropped, so any access raises a fault that waits here. Residency and the budget are not
//! changed by marking: eviction writes a stale copy like any other (never read back while the
//! page is remote).

use super::FaultHandler;
use crate::pager_error::PagerError;
use crate::userfaultfd::FaultEvent;

impl FaultHandler {
    /// Marks each run `(first region page, count)` (inside one chunk) remote. Parallel reads
    /// and writes in flight finish first; the pages' image associations end (their content is
    /// replaced), poison markers are dropped, resident pages lose their page-table entries.
    pub(super) fn mark_remote(&mut self, runs: Vec<(usize, usize)>) -> Result<(), PagerError> {
        while self.chunks.reading_total() > 0 {
            self.reap_page_reads(true);
        }
        let pg = self.memory.page;
        for (first_page, pages) in runs {
            let (c, p0) = self.chunk_of_run(first_page, pages)?;
            self.wait_for_write(c);
            self.end_image_pages(c, p0, pages);
            self.clear_poison(c, p0, pages);
            if let Some(p) = (p0..p0 + pages).find(|&p| self.chunks.is_page_poisoned(c, p)) {
                return Err(self.migration_error(
                    first_page - p0 + p,
                    "a poisoned page could not be reset to wait for its content",
                ));
            }
            let start = self.chunk_range(c).0;
            let resident = self
                .chunks
                .runs_in(c, p0, pages, |p| self.chunks.is_page_resident(c, p));
            for (f, n) in resident {
                self.registered_dontneed(start + f * pg, n * pg)
                    .map_err(|e| {
                        self.migration_error(
                            first_page - p0 + f,
                            format!("dropping the page-table entries of {n} pages: {e}"),
                        )
                    })?;
            }
            self.chunks.set_remote(c, p0, pages, true);
        }
        self.shared.remote.set_left(self.chunks.remote_total());
        Ok(())
    }

    /// The parts of run `(first, n)` of chunk `c` that are remote, as `(first, count)`.
    pub(super) fn remote_runs(&self, c: usize, first: usize, n: usize) -> Vec<(usize, usize)> {
        if self.chunks.remote_pages(c) == 0 {
            return Vec::new();
        }
        self.chunks
            .runs_in(c, first, n, |p| self.chunks.is_page_remote(c, p))
    }

    /// Every remote page of the region, as runs (region page, count) inside one chunk, in
    /// ascending order.
    pub(super) fn all_remote_runs(&self) -> Vec<(usize, usize)> {
        let mut runs = Vec::new();
        for c in 0..self.chunks.len() {
            // `runs_in` stops at the chunk's last page (the region's last chunk may be short).
            runs.extend(
                self.remote_runs(c, 0, self.chunks.pages_per_chunk())
                    .into_iter()
                    .map(|(p, k)| (self.region_page(c, p), k)),
            );
        }
        runs
    }

    /// Pages `first..first + n` of chunk `c` hold their own content now (installed, or
    /// discarded): they are no longer remote.
    pub(super) fn end_remote(&mut self, c: usize, first: usize, n: usize) {
        if self.chunks.set_remote(c, first, n, false) > 0 {
            self.shared.remote.set_left(self.chunks.remote_total());
        }
    }

    /// A fault on remote page `page` of chunk `c`: it waits, and the migration is told.
    pub(super) fn wait_for_remote(&mut self, ev: FaultEvent, c: usize, page: usize) {
        self.shared.remote.want(self.region_page(c, page));
        self.remote_waits.push(ev);
    }

    /// Serves again every waiting fault whose page is no longer remote (the others keep
    /// waiting, without asking again).
    pub(super) fn serve_remote_waits(&mut self) {
        if self.remote_waits.is_empty() {
            return;
        }
        let waits = std::mem::take(&mut self.remote_waits);
        for ev in waits {
            match self.fault_page(&ev) {
                Some((c, page, _)) if self.chunks.is_page_remote(c, page) => {
                    self.remote_waits.push(ev);
                }
                _ => self.serve_fault(ev),
            }
        }
    }
}
