//! [`DirectIoPins`]: chunks that a direct-I/O read into the region is filling, which no
//! eviction may take until it returns.
//!
//! A read with `O_DIRECT` (QEMU's `cache=none`, `aio=threads`) pins the buffer's pages in the
//! kernel when it starts and has the device write into them. Evicting such a page meanwhile
//! would write its old content to swap and punch it from the memfd: the device's data would
//! then land in a page no longer in the region, and the next access would read the old
//! content back, with no error. The kernel's own reclaim skips pages pinned for DMA; from user
//! space the pin cannot be seen, so the reader says so: it pins the chunks its buffer covers
//! before the system call and unpins them after it ([`DirectIoPin`]), and the fault handler
//! leaves a pinned chunk resident (as overrun) instead of evicting it.
//!
//! Ordering: the reader increments before its system call; the handler reads the count after
//! it dropped the chunk's page-table entries. A read that pinned the pages before the drop
//! incremented before that, so the handler sees it; a read that starts after the drop faults
//! on the pages and waits until the handler is done, then gets the pages the handler maps.

use std::ops::Range;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::fault_handler::HandlerShared;

/// A pin count per chunk of a region.
#[derive(Debug)]
pub(crate) struct DirectIoPins {
    counts: Box<[AtomicU32]>,
}

impl DirectIoPins {
    /// Counts for `chunks` chunks, none pinned.
    pub fn new(chunks: usize) -> Self {
        Self {
            counts: (0..chunks).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Pins chunks `chunks` (clipped to the region).
    pub fn pin(&self, chunks: Range<usize>) {
        for c in self.clip(chunks) {
            self.counts[c].fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Takes back one [`pin`](Self::pin) of `chunks`.
    pub fn unpin(&self, chunks: Range<usize>) {
        for c in self.clip(chunks) {
            let _ = self.counts[c]
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
    }

    /// Whether a direct-I/O read is filling chunk `c`.
    pub fn is_pinned(&self, c: usize) -> bool {
        self.counts
            .get(c)
            .is_some_and(|n| n.load(Ordering::SeqCst) > 0)
    }

    fn clip(&self, chunks: Range<usize>) -> Range<usize> {
        chunks.start.min(self.counts.len())..chunks.end.min(self.counts.len())
    }
}

/// Chunks of a region pinned for one direct-I/O read (see [`Region::pin_for_direct_io`]);
/// unpinned when dropped, after the read returned.
///
/// [`Region::pin_for_direct_io`]: crate::Region::pin_for_direct_io
#[derive(Debug)]
pub struct DirectIoPin {
    shared: Arc<HandlerShared>,
    chunks: Range<usize>,
}

impl DirectIoPin {
    pub(crate) fn new(shared: Arc<HandlerShared>, chunks: Range<usize>) -> Self {
        shared.pins.pin(chunks.clone());
        Self { shared, chunks }
    }
}

impl Drop for DirectIoPin {
    fn drop(&mut self) {
        self.shared.pins.unpin(self.chunks.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_count_and_clip_to_the_region() {
        let p = DirectIoPins::new(4);
        p.pin(1..3);
        p.pin(2..9);
        assert!(!p.is_pinned(0) && p.is_pinned(1) && p.is_pinned(2) && p.is_pinned(3));
        p.unpin(1..3);
        assert!(!p.is_pinned(1) && p.is_pinned(2));
        p.unpin(2..9);
        assert!((0..4).all(|c| !p.is_pinned(c)));
        p.unpin(0..4); // never below zero
        assert!(!p.is_pinned(0) && !p.is_pinned(99));
    }
}
