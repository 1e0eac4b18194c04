//! Asynchronous page-out (seed 003, section 4.3): the handler hands the writes of a victim's
//! changed pages to the [`PageOutEngine`](crate::page_out_engine::PageOutEngine) (through
//! [`SwapIo`](crate::swap_io::SwapIo)) and goes on serving faults; the chunk stays in memory, in
//! state `Writing`, until its last write completes, and is punched out of the memfd then. A
//! fault on a resident page of a chunk being written is served at completion by keeping the
//! chunk (no read needed). A headroom of free pages is kept ahead of demand, so a page-in
//! seldom waits for a write.

use std::sync::atomic::Ordering;

use super::chunk_table::WriteProgress;
use super::{ChunkState, FaultHandler, Fill};
use crate::pager_error::PagerError;
use crate::region_stats::add;
use crate::swap_full::{is_out_of_space, SwapFigures};
use crate::write_job::WriteDone;

/// Most page-out writes in flight at once, all chunks together.
const MAX_WRITES_IN_FLIGHT: usize = 256;

impl FaultHandler {
    /// Starts the writes of chunk `v`'s runs of changed pages `(first, count)` (entries
    /// already dropped, written state harvested). The chunk is `Writing` until the last one
    /// completes; a write refused at once counts as a failed one.
    pub(super) fn start_writes(&mut self, v: usize, runs: &[(usize, usize)]) {
        let pg = self.memory.page;
        let start = self.chunk_range(v).0;
        self.chunks.start_writing(v, runs.len());
        for &(f, n) in runs {
            let at = start + f * pg;
            // SAFETY: the alias mapping covers the region, and `[at, at + n * pg)` lies in
            // chunk `v`; it outlives every write in flight (the handler reaps them all before it
            // exits, and `io` is dropped before `memory`, which holds the alias). Nobody writes
            // these pages until the write is reaped: the chunk is `Writing`, its registered
            // entries are gone, and faults on it wait for the completion.
            let data =
                unsafe { std::slice::from_raw_parts(self.memory.alias.as_ptr().add(at), n * pg) };
            // SAFETY: as above.
            if let Err(source) = unsafe { self.io.start_write(v, f, data) } {
                self.write_failed(v, at, source);
                self.complete_job(v, false);
            }
        }
    }

    /// Counts and records a failed page-out write of chunk `v` (at region offset `offset`); a
    /// failure for lack of space goes to the current swap-full episode instead of the log.
    pub(super) fn write_failed(&mut self, v: usize, offset: usize, source: std::io::Error) {
        add(&self.stats().write_errors, 1);
        let out_of_space = is_out_of_space(&source);
        if out_of_space {
            let pg = self.memory.page as u64;
            let cs = self.memory.chunk_size as u64;
            let figures = SwapFigures {
                region: &self.shared.name,
                swap: self.io.swap_file(),
                resident: self.stats().resident_pages.load(Ordering::Relaxed) * pg,
                budget: self.shared.budget_chunks.load(Ordering::Relaxed) as u64 * cs,
                chunk: cs,
            };
            self.page_out_options
                .swap_full
                .write_failed(&self.shared.stats, &figures, &source);
        }
        let e = PagerError::SwapWrite {
            region: self.shared.name.clone(),
            chunk: v as u64,
            offset: offset as u64,
            path: self.io.path().to_path_buf(),
            source,
        };
        if out_of_space {
            self.shared.record_quietly(e);
        } else {
            self.shared.record(e);
        }
    }

    /// Takes the finished writes and completes each; with `block`, waits until at least one has
    /// finished (if any is in flight).
    pub(super) fn reap_writes(&mut self, block: bool) {
        let wait = block && self.chunks.jobs_in_flight() > 0;
        let mut done = self.io.reap_writes(wait);
        for d in done.drain(..) {
            self.finish_write(d);
        }
        self.io.recycle(done);
    }

    /// Completes one write: records its pages' new swap copies (or the error), and if it was
    /// the chunk's last, lets the chunk leave memory.
    fn finish_write(&mut self, d: WriteDone) {
        let c = d.chunk;
        if !self.chunks.is(c, ChunkState::Writing) {
            return;
        }
        let (f, n) = self.io.memory_pages(d.first_page, d.pages);
        let pg = self.memory.page;
        let ok = match d.result {
            Ok(crcs) => {
                self.io.accept_write(c, d.first_page, &crcs);
                // Swap now holds exactly these pages' content.
                self.chunks.set_written(c, f, n, false);
                add(&self.stats().bytes_written, (n * pg) as u64);
                self.page_out_options
                    .swap_full
                    .write_succeeded(&self.shared.stats, &self.shared.name);
                true
            }
            Err(source) => {
                let at = self.chunk_range(c).0 + f * pg;
                self.write_failed(c, at, source);
                false
            }
        };
        self.complete_job(c, ok);
    }

    /// One write of chunk `c` is over (`ok`: it succeeded). After its last one the chunk leaves
    /// memory, or stays if a fault asked for it meanwhile or a write failed (then as overrun,
    /// retried later; pages whose write succeeded are clean now).
    fn complete_job(&mut self, c: usize, ok: bool) {
        let WriteProgress::Done { rescue, failed } = self.chunks.finish_job(c, ok) else {
            return;
        };
        if failed {
            if rescue {
                self.remap(c, "UFFDIO_CONTINUE (after page-out)");
            }
            self.push_overrun(c);
            return;
        }
        add(&self.stats().page_outs, 1);
        if rescue {
            add(&self.stats().rescued_chunks, 1);
            self.remap(c, "UFFDIO_CONTINUE (after page-out)");
            self.readmit(c);
        } else if self.drop_chunk(c).is_err() {
            self.push_overrun(c);
        }
    }

    /// Maps a resident chunk's pages again (write-protected if tracking) and wakes their
    /// waiters; `op` names the occasion in errors. Remote pages stay unmapped.
    pub(super) fn remap(&mut self, c: usize, op: &'static str) {
        let start = self.chunk_range(c).0;
        let pg = self.memory.page;
        let runs = if self.chunks.remote_pages(c) > 0 {
            self.chunks.runs(c, |p| self.chunks.holds_page(c, p))
        } else {
            self.chunks.resident_runs(c)
        };
        for (f, n) in runs {
            if let Err(e) = self.fill(start + f * pg, n * pg, Fill::Continue) {
                self.memory_error(op, start + f * pg, n * pg, e);
            }
        }
    }

    /// Gives resident chunk `v` back to the policy (evicting another if it is full). The
    /// chunk the handler is working on (`pinned_chunk`: a write completing while a page-in
    /// waits for its read leads here) is never evicted: it stays resident outside the policy
    /// (overrun), as `v` does when the policy declines it.
    fn readmit(&mut self, v: usize) {
        if let Some(victim) = self.policy.admit(v as u64) {
            let victim = victim as usize;
            if victim == v || Some(victim) == self.pinned_chunk {
                self.push_overrun(victim);
            } else {
                self.evict_or_overrun(victim);
            }
        }
    }

    fn push_overrun(&mut self, v: usize) {
        self.chunks.push_overrun(v);
        add(&self.stats().overrun_chunks, 1);
    }

    /// With an engine, waits until fewer chunks than its depth are being written (and fewer
    /// than [`MAX_WRITES_IN_FLIGHT`] writes are in flight: a partly resident chunk may need
    /// many small ones).
    pub(super) fn wait_for_write_slot(&mut self) {
        let Some(depth) = self.io.write_depth() else {
            return;
        };
        while self.chunks.writing() >= depth || self.chunks.jobs_in_flight() >= MAX_WRITES_IN_FLIGHT
        {
            self.reap_writes(true);
        }
    }

    /// Waits until chunk `c` is not being written.
    pub(super) fn wait_for_write(&mut self, c: usize) {
        while self.chunks.is(c, ChunkState::Writing) {
            self.reap_writes(true);
        }
    }

    /// After a page-in, with an engine: evicts until `headroom` chunks' worth of pages of the
    /// budget (at most a quarter of it) are free, counting pages being written as free soon,
    /// with at most the engine's depth of chunks being written. No more is kept free than the
    /// region could ever bring in beyond its budget: a region whose budget covers it whole
    /// never evicts for headroom (it would only evict pages it then faults back). Chunk
    /// `paged_in`, whose page-in just woke its thread, is never evicted here: that thread may
    /// not have run yet, and taking its pages away would only make it fault again.
    pub(super) fn keep_headroom(&mut self, paged_in: usize) {
        self.keep_headroom_for(0, Some(paged_in));
    }

    /// [`keep_headroom`](Self::keep_headroom) as if `incoming` more pages were resident
    /// already (during a page-in), never evicting chunk `busy` (whose pages are being read).
    pub(super) fn keep_headroom_for(&mut self, incoming: usize, busy: Option<usize>) {
        let Some(depth) = self.io.write_depth() else {
            return;
        };
        let budget = self.budget_pages;
        let ppc = self.chunks.pages_per_chunk();
        // In whole chunks, a quarter of the budget's at most (none under 4 chunks).
        let headroom = (self.page_out_options.headroom.min(budget / ppc / 4) * ppc)
            .min(self.chunks.region_pages().saturating_sub(budget));
        let target = budget - headroom;
        // Taken once: a write failing meanwhile adds an overrun chunk, which only makes this
        // loop evict a little more than needed.
        let over = self.chunks.overrun_pages();
        while self.chunks.resident_total() - over - self.chunks.writing_pages() + incoming > target
            && self.chunks.writing() < depth
        {
            match self.next_victim(busy) {
                Some(v) if Some(v as usize) == busy => {
                    // Give it back (there is room: it just left) and stop here.
                    self.readmit(v as usize);
                    break;
                }
                Some(v) if !self.evict_or_overrun(v as usize) => break,
                Some(_) => {}
                None => break,
            }
        }
    }
}
