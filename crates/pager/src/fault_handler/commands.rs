//! Run-time changes, made by the handler thread between faults: a new budget, a new policy, and
//! discarding a range (which also resets poisoned chunks).

use std::sync::atomic::Ordering;

use memvisor_policy::PolicySpec;

use super::{ChunkState, FaultHandler};
use crate::pager_error::PagerError;
use crate::region_command::RegionCommand;
use crate::region_stats::{add, sub};

impl FaultHandler {
    /// Carries out every queued command and answers each caller.
    pub(super) fn run_commands(&mut self) {
        loop {
            // Cleared before looking, so a command that arrives meanwhile wakes the next poll.
            self.shared.commands.wake.clear();
            // Posted commands first (in order), then the submitted one: a caller that submits
            // after posting finds its posts carried out.
            self.run_posted();
            let Some(cmd) = self.shared.commands.take() else {
                break;
            };
            let r = self.run_command(cmd);
            // An install or a discard may have ended pages' remote state.
            self.serve_remote_waits();
            self.shared.commands.answer(r);
        }
    }

    /// Carries out every posted command (associations), in order; no answer is expected.
    pub(super) fn run_posted(&mut self) {
        while let Some(cmd) = self.shared.commands.take_posted() {
            let _ = self.run_command(cmd);
        }
        self.serve_remote_waits();
    }

    /// Carries out one command.
    fn run_command(&mut self, cmd: RegionCommand) -> Result<(), PagerError> {
        match cmd {
            RegionCommand::SetBudget(chunks) => {
                let spec = self.policy_spec.clone();
                self.rebuild_policy(spec, chunks)
            }
            RegionCommand::SetPolicy(spec) => {
                let chunks = self.shared.budget_chunks.load(Ordering::Relaxed);
                self.rebuild_policy(spec, chunks)
            }
            RegionCommand::Discard { offset, len } => {
                self.discard(offset, len);
                Ok(())
            }
            RegionCommand::PrepareOverwrite { offset, len } => {
                self.prepare_overwrite(offset, len);
                Ok(())
            }
            RegionCommand::Associate {
                offset,
                len,
                image,
                file_offset,
                epoch,
            } => {
                self.associate(offset, len, &image, file_offset, epoch);
                Ok(())
            }
            RegionCommand::ImageWritten { image, from, to } => {
                self.image_written(image, from, to);
                Ok(())
            }
            RegionCommand::Barrier => Ok(()),
            RegionCommand::Migration(request) => self.migration_request(request),
        }
    }

    /// Replaces the policy by `spec` with a budget of `budget_chunks` chunks' worth of pages.
    /// The resident chunks move to the new policy in the order the old one would have evicted
    /// them (least valuable first), so the new policy starts with the same ranking; what no
    /// longer fits is paged out now.
    fn rebuild_policy(&mut self, spec: PolicySpec, budget_chunks: usize) -> Result<(), PagerError> {
        let budget_chunks = budget_chunks.clamp(1, self.chunks.len());
        let budget_pages = budget_chunks * self.chunks.pages_per_chunk();
        let capacity = policy_capacity(self.chunks.len(), budget_pages);
        let mut new = spec
            .build(capacity, None)
            .map_err(|source| PagerError::Policy {
                region: self.shared.name.clone(),
                source,
            })?;
        let mut order = Vec::with_capacity(self.policy.len());
        while let Some(u) = self.policy.evict() {
            order.push(u);
        }
        let mut leaving = Vec::new();
        for u in order {
            if let Some(v) = new.admit(u) {
                leaving.push(v as usize);
            }
        }
        self.policy = new;
        self.policy_spec = spec;
        self.budget_pages = budget_pages;
        self.shared
            .budget_chunks
            .store(budget_chunks, Ordering::Relaxed);
        if let Ok(mut name) = self.shared.policy.lock() {
            *name = self.policy_spec.to_string();
        }
        for v in leaving {
            self.evict_or_overrun(v);
        }
        // The excess is out of memory when the caller hears back.
        self.make_room(0);
        while self.chunks.writing() > 0 {
            self.reap_writes(true);
        }
        Ok(())
    }

    /// Makes `[offset, offset + len)` (page-aligned) read as zeros, like `MADV_DONTNEED` on
    /// private anonymous memory. Whole chunks leave memory and swap; in part of a chunk,
    /// resident pages are zeroed in memory and the swap copies of the others are punched.
    /// Poisoned pages become fresh zero pages.
    pub(super) fn discard(&mut self, offset: usize, len: usize) {
        let end = (offset + len).min(self.memory.len);
        let mut at = offset;
        while at < end {
            let c = at / self.memory.chunk_size;
            self.wait_for_write(c);
            let (start, clen) = self.chunk_range(c);
            let to = end.min(start + clen);
            if at == start && to == start + clen {
                self.discard_chunk(c, start, clen);
            } else {
                let pg = self.memory.page;
                self.discard_pages(c, (at - start) / pg, (to - at).div_ceil(pg));
            }
            at = to;
        }
    }

    fn discard_chunk(&mut self, c: usize, start: usize, len: usize) {
        self.forget_eviction(c);
        self.end_image_pages(c, 0, self.chunks.pages_in(c));
        self.chunks.mark_changed(c, 0, self.chunks.pages_in(c));
        self.end_remote(c, 0, self.chunks.pages_in(c));
        let was_stored = self.io.is_stored(c);
        if was_stored {
            if let Err(e) = self.io.punch(c) {
                self.memory_error("punch discarded swap copy", start, len, e);
            }
        }
        self.clear_poison(c, 0, self.chunks.pages_in(c));
        match self.chunks.state(c) {
            Some(ChunkState::In) => {
                // Punching the memfd also drops every mapping's entries for these pages, so the
                // next access is a missing fault and reads zeros.
                if let Err(e) = self.memory.memfd.punch_hole(start, len) {
                    // The pages stay: zero them in place instead.
                    self.memory_error("punch discarded chunk", start, len, e);
                    self.discard_pages(c, 0, self.chunks.pages_in(c));
                    return;
                }
                if !self.policy.remove(c as u64) && self.chunks.remove_overrun(c) {
                    sub(&self.stats().overrun_chunks, 1);
                }
                let pages = self.chunks.set_out(c);
                sub(&self.stats().resident_pages, pages as u64);
                sub(&self.stats().resident_chunks, 1);
            }
            Some(ChunkState::Out) if was_stored => sub(&self.stats().swapped_chunks, 1),
            // Writing: waited for by the caller.
            _ => {}
        }
        add(&self.stats().discarded_chunks, 1);
    }

    /// Zeroes pages `first..first + n` of chunk `c`: resident ones in memory (through the
    /// alias mapping; marked written, as that write is invisible to dirty tracking), the
    /// others by punching their swap copies.
    fn discard_pages(&mut self, c: usize, first: usize, n: usize) {
        let pg = self.memory.page;
        let start = self.chunk_range(c).0;
        let out_and_stored = self.chunks.is(c, ChunkState::Out) && self.io.is_stored(c);
        self.end_image_pages(c, first, n);
        self.chunks.mark_changed(c, first, n);
        self.clear_poison(c, first, n);
        self.end_remote(c, first, n);
        for (f, k) in self.chunks.resident_runs(c) {
            let (lo, hi) = (f.max(first), (f + k).min(first + n));
            if lo >= hi {
                continue;
            }
            // SAFETY: the alias mapping covers the whole region, so the range is inside it;
            // the program may race with its own discard, as with madvise, but no Rust
            // reference to these bytes exists.
            unsafe {
                std::ptr::write_bytes(
                    self.memory.alias.as_ptr().add(start + lo * pg),
                    0,
                    (hi - lo) * pg,
                )
            };
            self.chunks.set_written(c, lo, hi - lo, true);
        }
        if self.io.stored_in(c, first, n) > 0 {
            match self.io.punch_pages(c, first, n) {
                Ok(()) => add(&self.stats().stale_punches, 1),
                Err(e) => {
                    self.memory_error("punch discarded swap copy", start + first * pg, n * pg, e)
                }
            }
        }
        if out_and_stored && !self.io.is_stored(c) {
            sub(&self.stats().swapped_chunks, 1);
        }
    }

    /// Pages `first..first + n` of chunk `c` are no longer poisoned: their poison markers
    /// (in the page tables) are dropped, so the next access faults and gets a zero page.
    pub(super) fn clear_poison(&mut self, c: usize, first: usize, n: usize) {
        if self.chunks.poisoned_pages(c) == 0 {
            return;
        }
        let pg = self.memory.page;
        let start = self.chunk_range(c).0;
        let poisoned = self
            .chunks
            .runs_in(c, first, n, |p| self.chunks.is_page_poisoned(c, p));
        for (f, k) in poisoned {
            let (s, l) = (start + f * pg, k * pg);
            if let Err(e) = self.registered_dontneed(s, l) {
                self.memory_error("MADV_DONTNEED (reset poisoned pages)", s, l, e);
                continue;
            }
            self.chunks.set_poisoned(c, f, k, false);
        }
        if self.chunks.poisoned_pages(c) == 0 {
            sub(&self.stats().poisoned_chunks, 1);
        }
    }
}

/// How many chunks a policy over `chunks` chunks may track with a budget of `budget_pages`
/// resident pages: every chunk with at least one resident page is tracked, so as many chunks
/// as there are budget pages, at most the region's.
pub(super) fn policy_capacity(chunks: usize, budget_pages: usize) -> usize {
    chunks.min(budget_pages).max(1)
}
