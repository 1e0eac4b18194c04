//! Page-out of a chunk, page by page: its page-table entries are dropped (any access now
//! faults and waits for the handler), its written state is harvested, and then only its
//! resident pages that differ from their swap copy are written, adjacent ones in one I/O.
//! Pages unchanged since their page-in are dropped without a write (dirty tracking, checked
//! against their checksums), all-zero pages are not stored. Once the writes are done the chunk
//! is punched out of the memfd (the next access is a missing fault). A failed write leaves the
//! chunk resident: its page-table entries come back on the next minor fault.

use std::time::Instant;

use super::chunk_table::ChunkTable;
use super::fault_loop::nanos;
use super::region_memory::RegionMemory;
use super::swap_mapper::ImageFate;
use super::{ChunkState, FaultHandler};
use crate::pagemap::Pagemap;
use crate::region_stats::{add, sub};
use crate::swap_file::{is_zero, WriteOutcome};

/// What a page-out does with one resident page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PageFate {
    /// Same as its swap copy (or zero and not stored): dropped.
    Unchanged,
    /// Changed and all zeros: its swap copy is punched.
    Zero,
    /// Changed: written.
    Write,
}

impl FaultHandler {
    /// Pages out policy victim `v`; if that fails, keeps it resident as overrun. Returns
    /// whether it left memory (or is being written).
    pub(super) fn evict_or_overrun(&mut self, v: usize) -> bool {
        if !self.chunks.is(v, ChunkState::In) {
            // The policy named a chunk that is not in memory: nothing to write or free.
            self.memory_error(
                "evict",
                v.saturating_mul(self.memory.chunk_size),
                self.memory.chunk_size,
                std::io::Error::other("policy victim is not resident"),
            );
            return true;
        }
        if self.page_out(v).is_err() {
            self.chunks.push_overrun(v);
            add(&self.stats().overrun_chunks, 1);
            return false;
        }
        true
    }

    /// The bytes of pages `first..first + n` of chunk `c` through the alias mapping.
    fn alias_pages(&self, c: usize, first: usize, n: usize) -> &[u8] {
        let pg = self.memory.page;
        let start = self.chunk_range(c).0 + first * pg;
        // SAFETY: the alias mapping covers the whole region and `[start, start + n * pg)` lies
        // in chunk `c`. Callers read pages whose registered entries were dropped (nobody writes
        // them until this handler maps them again), or zero pages being discarded.
        unsafe { std::slice::from_raw_parts(self.memory.alias.as_ptr().add(start), n * pg) }
    }

    /// Writes resident chunk `v`'s changed pages to swap and drops it from memory (with an
    /// engine, once the writes complete). On failure `v` stays resident (its data intact in
    /// the memfd) and the error is recorded.
    pub(super) fn page_out(&mut self, v: usize) -> Result<(), ()> {
        let pages = self.chunks.resident_pages(v);
        // What it holds now is what a larger budget would have kept (write_out clears it).
        self.chunks.hold_evicted(v);
        let out = self.write_out(v);
        if out.is_ok() {
            self.note_eviction(v, pages);
        } else {
            self.chunks.clear_held(v);
        }
        out
    }

    /// [`page_out`](Self::page_out) but for the refault history.
    fn write_out(&mut self, v: usize) -> Result<(), ()> {
        self.wait_for_write_slot();
        let (start, len) = self.chunk_range(v);
        if let Err(e) = self.registered_dontneed(start, len) {
            self.memory_error("MADV_DONTNEED", start, len, e);
            return Err(());
        }
        // The entries are gone, so nobody writes the chunk now: its written state is final.
        self.harvest_dirty(v);
        // A direct-I/O read that pinned its pages before the entries went is still filling
        // them: the chunk stays (overrun), its pages in the memfd, mapped again on access.
        if self.shared.pins.is_pinned(v) {
            add(&self.stats().pinned_evictions_skipped, 1);
            return Err(());
        }
        let pg = self.memory.page;
        let resident = self.chunks.resident_runs(v);
        for &(f, n) in &resident {
            // Map the alias pages in one call rather than faulting on each while reading them
            // (resident runs only: reading a hole of the memfd would allocate it).
            let _ = self.memory.alias.populate_read(start + f * pg, n * pg);
        }
        let tracking = self.pagemap.is_some();
        // Pages an image holds (the swap mapper) need no write.
        let images = self.image_fates(v);
        // What each resident page needs: a write, a punch (all zeros), or nothing (unchanged).
        let mut fate = vec![PageFate::Unchanged; self.chunks.pages_in(v)];
        for p in resident.iter().flat_map(|&(f, n)| f..f + n) {
            let mut needs_write = !tracking || self.chunks.is_page_written(v, p);
            match images[p] {
                // The image holds it: dropped without a write.
                ImageFate::Held => continue,
                ImageFate::Released => needs_write = true,
                ImageFate::NotImage => {}
            }
            let data = self.alias_pages(v, p, 1);
            if !needs_write {
                // Reported clean: a safety net checks it against its swap copy (or zero). A
                // mismatch means tracking missed a write: counted and written normally.
                let clean = match self.io.matches_stored(v, p, data) {
                    Some(same) => same,
                    None => is_zero(data),
                };
                if !clean {
                    add(&self.stats().dirty_tracking_misses, 1);
                    needs_write = true;
                }
            }
            if needs_write {
                fate[p] = if is_zero(data) {
                    PageFate::Zero
                } else {
                    PageFate::Write
                };
            }
        }
        // Adjacent pages of the same fate go in one write or one punch.
        let writes = self.chunks.runs(v, |p| fate[p] == PageFate::Write);
        for (f, n) in self.chunks.runs(v, |p| fate[p] == PageFate::Zero) {
            // All zeros: no write, and any old copy must not come back.
            if let Err(source) = self.io.punch_pages(v, f, n) {
                self.write_failed(v, start + f * pg, source);
                return Err(());
            }
            self.chunks.set_written(v, f, n, false);
        }
        if writes.is_empty() {
            if self.io.is_stored(v) {
                add(&self.stats().clean_evictions, 1);
            } else {
                add(&self.stats().zero_page_outs, 1);
            }
            return self.drop_chunk(v);
        }
        if self.io.writes_async() {
            self.start_writes(v, &writes);
            return Ok(());
        }
        for (f, n) in writes {
            let t = Instant::now();
            // SAFETY: see `alias_pages`; the slice is not kept past the write.
            let data = unsafe {
                std::slice::from_raw_parts(self.memory.alias.as_ptr().add(start + f * pg), n * pg)
            };
            let written = self.io.write_now(v, f, data);
            add(&self.stats().swap_write_nanos, nanos(t));
            match written {
                Ok(WriteOutcome::Written) => {
                    add(&self.stats().bytes_written, (n * pg) as u64);
                    self.page_out_options
                        .swap_full
                        .write_succeeded(&self.shared.stats, &self.shared.name);
                }
                Ok(WriteOutcome::Zero) => {}
                Err(source) => {
                    self.write_failed(v, start + f * pg, source);
                    return Err(());
                }
            }
            // Swap now holds exactly these pages' content.
            self.chunks.set_written(v, f, n, false);
        }
        add(&self.stats().page_outs, 1);
        self.drop_chunk(v)
    }

    /// Marks chunk `c`'s resident pages written since they were last mapped write-protected
    /// as written (sticky). Without tracking, or if the scan fails, every resident page counts
    /// as written.
    pub(super) fn harvest_dirty(&mut self, c: usize) {
        self.harvest_dirty_in(c, 0, self.chunks.pages_in(c));
    }

    /// [`harvest_dirty`](Self::harvest_dirty) of pages `first..first + n` of chunk `c` only.
    pub(super) fn harvest_dirty_in(&mut self, c: usize, first: usize, n: usize) {
        let harvested = self
            .pagemap
            .as_ref()
            .map(|p| harvest_written(&mut self.chunks, p, &self.memory, c, first, n));
        match harvested {
            Some(Ok(())) => return,
            Some(Err(e)) => {
                let start = self.chunk_range(c).0 + first * self.memory.page;
                self.memory_error("PAGEMAP_SCAN", start, n * self.memory.page, e);
            }
            None => {}
        }
        for (f, k) in self
            .chunks
            .runs_in(c, first, n, |p| self.chunks.is_page_resident(c, p))
        {
            self.chunks.set_written(c, f, k, true);
        }
    }

    /// Punches chunk `v` (its changed pages saved, or none changed) out of the memfd and marks
    /// it out.
    pub(super) fn drop_chunk(&mut self, v: usize) -> Result<(), ()> {
        let (start, len) = self.chunk_range(v);
        if let Err(e) = self.memory.memfd.punch_hole(start, len) {
            // The data is in swap (or clean) and still in memory: keep it resident.
            self.memory_error("punch memfd", start, len, e);
            return Err(());
        }
        let pages = self.chunks.set_out(v);
        sub(&self.stats().resident_pages, pages as u64);
        sub(&self.stats().resident_chunks, 1);
        if self.io.is_stored(v) {
            add(&self.stats().swapped_chunks, 1);
        }
        Ok(())
    }
}

/// Marks the resident pages among pages `first..first + n` of chunk `c` that the page tables
/// report written since they were last write-protected as written in `chunks` (sticky; the
/// protection stays as it is); an error if the scan failed, nothing marked.
pub(super) fn harvest_written(
    chunks: &mut ChunkTable,
    pagemap: &Pagemap,
    memory: &RegionMemory,
    c: usize,
    first: usize,
    n: usize,
) -> std::io::Result<()> {
    let pg = memory.page;
    let start = memory.chunk_range(c).0 + first * pg;
    let ranges = pagemap.written(memory.base + start, n * pg)?;
    let base = (memory.base + start) as u64;
    for r in ranges {
        let from = first + ((r.start - base) as usize) / pg;
        let end = (first + ((r.end - base) as usize) / pg).min(first + n);
        // Pages without an entry read as written: only resident ones count.
        for p in from..end {
            if chunks.is_page_resident(c, p) {
                chunks.set_written(c, p, 1, true);
            }
        }
    }
    Ok(())
}
