//! [`DirectIoReads`]: the chunks of managed memory a direct-I/O read (`O_DIRECT`) fills,
//! pinned while it runs.
//!
//! The kernel pins the buffer's pages and the device writes into them; an eviction meanwhile
//! (another thread's fault needing room) would punch the page from the region's memfd, and the
//! device's data would land outside the region (`memvisor_pager::DirectIoPin` has the details).
//! QEMU reads disk images this way into guest RAM with `cache=none` (or `cache.direct=on`) and
//! `aio=threads`; any program may into memory of its arena. `aio=native`'s and `aio=io_uring`'s
//! reads are pinned at their submission (`io_submit`, `io_uring_submit`) and held until their
//! completions show in the kernel's rings ([`crate::aio_in_flight`]).

use crate::managed_process::{self as mp, ACTIVE};
use std::sync::atomic::Ordering;

/// Pins held inline (a read into guest RAM covers one or two ranges): no allocation.
const INLINE: usize = 4;

/// The pins of one read's buffers, dropped (unpinned) with it.
#[derive(Debug, Default)]
pub struct DirectIoReads {
    inline: [Option<memvisor_pager::DirectIoPin>; INLINE],
    more: Vec<memvisor_pager::DirectIoPin>,
}

impl DirectIoReads {
    /// Pins the managed parts of `buffers` (`(address, length)`) of a read. Only a read with
    /// `O_DIRECT` needs it (a buffered read copies into the pages, and a page the
    /// copy finds gone is faulted back in, as any access), but asking the descriptor's flags
    /// would cost a system call per read, more than the pin (a few atomic operations).
    pub fn pin(buffers: impl Iterator<Item = (usize, usize)>) -> Self {
        let mut reads = Self::default();
        if !ACTIVE.load(Ordering::Acquire) {
            return reads;
        }
        let mut held = 0;
        for (base, len) in buffers {
            let (over, n) = mp::managed_overlaps(base, len);
            for &(s, l, owner) in &over[..n] {
                if let Some(pin) = mp::pin_for_direct_io(s, l, owner) {
                    match reads.inline.get_mut(held) {
                        Some(slot) => *slot = Some(pin),
                        None => reads.more.push(pin),
                    }
                    held += 1;
                }
            }
        }
        reads
    }

    /// Whether nothing is pinned.
    pub fn is_empty(&self) -> bool {
        self.inline[0].is_none()
    }
}
