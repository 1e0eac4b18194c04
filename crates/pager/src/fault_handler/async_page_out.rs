//! Asynchronous page-out (seed 003, section 4.3): the handler hands a dirty victim's write to the
//! [`PageOutEngine`](crate::page_out_engine::PageOutEngine) (through
//! [`SwapIo`](crate::swap_io::SwapIo)) and goes on serving faults; the chunk stays in memory, in
//! state `Writing`, until the write completes, and is punched out of the memfd then. A fault on a
//! chunk being written is served at completion by keeping the chunk (no read needed). A headroom of
//! free chunks is kept ahead of demand, so a page-in seldom waits for a write.

use std::sync::atomic::Ordering;

use super::{ChunkState, FaultHandler, Fill};
use crate::pager_error::PagerError;
use crate::region_stats::add;
use crate::swap_file::is_zero;
use crate::swap_full::{is_out_of_space, SwapFigures};
use crate::write_job::WriteDone;

impl FaultHandler {
    /// Starts writing dirty chunk `v` (entries already dropped, written state harvested).
    /// All-zero data needs no write: the chunk is dropped at once.
    pub(super) fn start_write(&mut self, v: usize, start: usize, len: usize) -> Result<(), ()> {
        // SAFETY: the alias mapping covers the region; nobody writes the chunk now (its
        // registered entries are gone, so program accesses fault and wait for this thread).
        let data =
            unsafe { std::slice::from_raw_parts(self.memory.alias.as_ptr().add(start), len) };
        if is_zero(data) {
            if let Err(source) = self.io.punch(v) {
                self.write_failed(v, start, source);
                return Err(());
            }
            add(&self.stats().zero_page_outs, 1);
            self.chunks.set_written(v, false);
            return self.drop_chunk(v, start, len);
        }
        // SAFETY: `data` is the chunk's part of the alias mapping, which outlives every write in
        // flight (the handler reaps them all before it exits, and `io` is dropped before `memory`,
        // which holds the alias); nobody writes it until the write is reaped: the chunk is
        // `Writing`, its registered entries are gone, and faults on it wait for the completion.
        if let Err(source) = unsafe { self.io.start_write(v, data) } {
            self.write_failed(v, start, source);
            return Err(());
        }
        self.chunks.start_writing(v);
        Ok(())
    }

    /// Counts and records a failed page-out of chunk `v` (at region offset `start`); a failure
    /// for lack of space goes to the current swap-full episode instead of the log.
    pub(super) fn write_failed(&mut self, v: usize, start: usize, source: std::io::Error) {
        add(&self.stats().write_errors, 1);
        let out_of_space = is_out_of_space(&source);
        if out_of_space {
            let cs = self.memory.chunk_size as u64;
            let figures = SwapFigures {
                region: &self.shared.name,
                swap: self.io.swap_file(),
                resident: self.stats().resident_chunks.load(Ordering::Relaxed) * cs,
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
            offset: start as u64,
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
        let wait = block && self.chunks.writing() > 0;
        let mut done = self.io.reap_writes(wait);
        for d in done.drain(..) {
            self.finish_write(d);
        }
        self.io.recycle(done);
    }

    /// Completes one write: the chunk leaves memory, or stays if a fault asked for it
    /// meanwhile or the write failed (then as overrun, retried later).
    fn finish_write(&mut self, d: WriteDone) {
        let v = d.chunk;
        let Some(rescue) = self.chunks.finish_writing(v) else {
            return;
        };
        let (start, len) = self.chunk_range(v);
        match d.result {
            Ok(crc) => {
                self.io.accept_write(v, crc);
                self.page_out_options
                    .swap_full
                    .write_succeeded(&self.shared.stats, &self.shared.name);
                add(&self.stats().page_outs, 1);
                add(&self.stats().bytes_written, len as u64);
                // Swap now holds exactly the memory's content.
                self.chunks.set_written(v, false);
                if rescue {
                    add(&self.stats().rescued_chunks, 1);
                    self.remap(start, len);
                    self.readmit(v);
                } else if self.drop_chunk(v, start, len).is_err() {
                    self.push_overrun(v);
                }
            }
            Err(source) => {
                self.write_failed(v, start, source);
                if rescue {
                    self.remap(start, len);
                }
                self.push_overrun(v);
            }
        }
    }

    /// Maps a resident chunk again (write-protected if tracking) and wakes its waiters.
    fn remap(&mut self, start: usize, len: usize) {
        if let Err(e) = self.fill(start, len, Fill::Continue) {
            self.memory_error("UFFDIO_CONTINUE (after page-out)", start, len, e);
        }
    }

    /// Gives resident chunk `v` back to the policy (evicting another if it is full).
    fn readmit(&mut self, v: usize) {
        if let Some(victim) = self.policy.admit(v as u64) {
            let victim = victim as usize;
            if victim == v {
                self.push_overrun(v);
            } else {
                self.evict_or_overrun(victim);
            }
        }
    }

    fn push_overrun(&mut self, v: usize) {
        self.chunks.push_overrun(v);
        add(&self.stats().overrun_chunks, 1);
    }

    /// With an engine, waits until fewer writes than its depth are in flight.
    pub(super) fn wait_for_write_slot(&mut self) {
        let Some(depth) = self.io.write_depth() else {
            return;
        };
        while self.chunks.writing() >= depth {
            self.reap_writes(true);
        }
    }

    /// Waits until chunk `c` is not being written.
    pub(super) fn wait_for_write(&mut self, c: usize) {
        while self.chunks.is(c, ChunkState::Writing) {
            self.reap_writes(true);
        }
    }

    /// After a page-in, with an engine: evicts until `headroom` chunks of the budget (at most a
    /// quarter of it) are free, counting writes in flight as free soon, with at most the
    /// engine's depth of writes in flight.
    pub(super) fn keep_headroom(&mut self) {
        self.keep_headroom_for(0);
    }

    /// [`keep_headroom`](Self::keep_headroom) as if `incoming` more chunks were resident
    /// already (during a page-in, before the chunk is admitted).
    pub(super) fn keep_headroom_for(&mut self, incoming: usize) {
        let Some(depth) = self.io.write_depth() else {
            return;
        };
        // A quarter of the budget at most: headroom is memory the policy does not use.
        let cap = self.policy.capacity();
        let target = cap - self.page_out_options.headroom.min(cap / 4);
        while self.policy.len() + incoming > target && self.chunks.writing() < depth {
            match self.policy.evict() {
                Some(v) => self.evict_or_overrun(v as usize),
                None => break,
            }
        }
    }
}
