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
        while let Some(cmd) = self.shared.commands.take() {
            let r = match cmd {
                RegionCommand::SetBudget(chunks) => {
                    let spec = self.policy_spec.clone();
                    self.rebuild_policy(spec, chunks)
                }
                RegionCommand::SetPolicy(spec) => {
                    let chunks = self.policy.capacity();
                    self.rebuild_policy(spec, chunks)
                }
                RegionCommand::Discard { offset, len } => {
                    self.discard(offset, len);
                    Ok(())
                }
            };
            self.shared.commands.answer(r);
        }
    }

    /// Replaces the policy by `spec` with `capacity` chunks. The resident chunks move to the new
    /// policy in the order the old one would have evicted them (least valuable first), so the
    /// new policy starts with the same ranking; any that no longer fit are paged out now.
    fn rebuild_policy(&mut self, spec: PolicySpec, capacity: usize) -> Result<(), PagerError> {
        let capacity = capacity.clamp(1, self.chunks.len());
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
        self.shared.budget_chunks.store(capacity, Ordering::Relaxed);
        if let Ok(mut name) = self.shared.policy.lock() {
            *name = self.policy_spec.to_string();
        }
        for v in leaving {
            self.evict_or_overrun(v);
        }
        // The excess is out of memory when the caller hears back.
        while self.chunks.writing() > 0 {
            self.reap_writes(true);
        }
        Ok(())
    }

    /// Makes `[offset, offset + len)` read as zeros, like `MADV_DONTNEED` on private anonymous
    /// memory. Whole chunks leave memory and swap (a poisoned chunk becomes a fresh zero chunk);
    /// the covered part of a partial chunk is zeroed in memory or, for a chunk that is out,
    /// during a page-in, between the read and the mapping.
    fn discard(&mut self, offset: usize, len: usize) {
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
                self.discard_part(c, at - start, to - at);
            }
            at = to;
        }
    }

    fn discard_chunk(&mut self, c: usize, start: usize, len: usize) {
        let was_stored = self.io.is_stored(c);
        if was_stored {
            if let Err(e) = self.io.punch(c) {
                self.memory_error("punch discarded swap copy", start, len, e);
            }
        }
        let Some(state) = self.chunks.state(c) else {
            return;
        };
        match state {
            ChunkState::In => {
                // Punching the memfd also drops every mapping's entries for these pages, so the
                // next access is a missing fault and reads zeros.
                if let Err(e) = self.memory.memfd.punch_hole(start, len) {
                    // The pages stay: zero them in place instead.
                    self.memory_error("punch discarded chunk", start, len, e);
                    self.zero_in_memory(c, start, len);
                    return;
                }
                if !self.policy.remove(c as u64) && self.chunks.remove_overrun(c) {
                    sub(&self.stats().overrun_chunks, 1);
                }
                self.chunks.set_out(c);
                sub(&self.stats().resident_chunks, 1);
            }
            ChunkState::Out => {
                if was_stored {
                    sub(&self.stats().swapped_chunks, 1);
                }
            }
            ChunkState::Writing => return,
            ChunkState::Poisoned => {
                // Poison markers live in the page tables: punching the range drops them.
                if let Err(e) = self.memory.memfd.punch_hole(start, len) {
                    self.memory_error("punch discarded poisoned chunk", start, len, e);
                }
                if let Err(e) = self.registered_dontneed(start, len) {
                    self.memory_error("MADV_DONTNEED (reset poisoned chunk)", start, len, e);
                    return;
                }
                self.chunks.reset_poisoned(c);
                sub(&self.stats().poisoned_chunks, 1);
            }
        }
        add(&self.stats().discarded_chunks, 1);
    }

    /// Zeroes `[at, at + len)` of chunk `c` (offsets within the chunk).
    fn discard_part(&mut self, c: usize, at: usize, len: usize) {
        let start = c * self.memory.chunk_size;
        let Some(state) = self.chunks.state(c) else {
            return;
        };
        match state {
            ChunkState::In => self.zero_in_memory(c, start + at, len),
            // Zeroed between the read and the mapping: the page-in may evict the chunk again
            // at once (headroom), so zeroing it afterwards could miss.
            ChunkState::Out if self.io.is_stored(c) => self.page_in_zeroing(c, Some((at, len))),
            // Never stored: already zero. Poisoned: the rest of the chunk is lost anyway.
            // (Writing: waited for by the caller.)
            ChunkState::Out | ChunkState::Poisoned | ChunkState::Writing => {}
        }
    }

    /// Zeroes `[start, start + len)` of resident chunk `c` through the alias mapping and marks
    /// the chunk dirty (the alias write is invisible to dirty tracking); its swap copy is stale.
    fn zero_in_memory(&mut self, c: usize, start: usize, len: usize) {
        // SAFETY: the alias mapping covers the whole region, so the range is inside it; the
        // program may race with its own discard, as with madvise, but no Rust reference to
        // these bytes exists.
        unsafe { std::ptr::write_bytes(self.memory.alias.as_ptr().add(start), 0, len) };
        self.chunks.set_written(c, true);
        if self.io.is_stored(c) {
            let (cstart, clen) = self.chunk_range(c);
            match self.io.punch(c) {
                Ok(()) => add(&self.stats().stale_punches, 1),
                Err(e) => self.memory_error("punch stale swap copy", cstart, clen, e),
            }
        }
    }
}
