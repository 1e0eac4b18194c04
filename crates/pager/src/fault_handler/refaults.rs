//! The fault handler's side of the [`RefaultCurve`](crate::RefaultCurve): evictions stamp
//! their chunk in the handler's [`RefaultHistory`](memvisor_policy::RefaultHistory) (and the
//! chunk table marks the pages it held), page-ins that read a held page of a stamped chunk
//! back count as refaults, each at the distance evicted since the chunk's eviction; discards
//! drop the stamp (a discarded chunk's next page-in is a fresh zero page, not a refault).

use memvisor_policy::Refault;

use super::FaultHandler;

impl FaultHandler {
    /// Chunk `v` left memory with `pages` pages resident.
    pub(super) fn note_eviction(&mut self, v: usize, pages: usize) {
        self.refault_history.evicted(v, pages as u64);
        self.image_first.left(v);
        self.shared
            .refaults
            .evicted((pages * self.memory.page) as u64);
    }

    /// A page-in read pages chunk `c` held at its eviction back from swap or an image.
    pub(super) fn note_refault(&mut self, c: usize) {
        if let Some(r) = self.refault_history.refault(c) {
            self.shared.refaults.record(r);
            let near = match r {
                Refault::Bucket(k) => {
                    self.refault_history.scale().upper(k) <= self.budget_pages as u64
                }
                Refault::Beyond => false,
            };
            self.image_first.refaulted(c, near);
        }
    }

    /// Chunk `c`'s content was discarded.
    pub(super) fn forget_eviction(&mut self, c: usize) {
        self.refault_history.forget(c);
        self.chunks.clear_held(c);
        self.image_first.forget(c);
    }
}
