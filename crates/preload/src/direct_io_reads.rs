//! [`DirectIoReads`]: the chunks of managed memory a direct-I/O read (`O_DIRECT`) fills,
//! pinned while it runs.
//!
//! The kernel pins the buffer's pages and the device writes into them; an eviction meanwhile
//! (another thread's fault needing room) would punch the page from the region's memfd, and the
//! device's data would land outside the region (`memvisor_pager::DirectIoPin` has the details).
//! QEMU reads disk images this way into guest RAM with `cache=none` (or `cache.direct=on`) and
//! `aio=threads`; any program may into memory of its arena. Reads submitted without a library
//! call (`aio=native`'s `io_submit`, `aio=io_uring`) cannot be seen, so cannot be pinned: see
//! the crate README.

use libc::c_int;

use crate::managed_process::{self as mp, ACTIVE};
use std::sync::atomic::Ordering;

/// The pins of one read's buffers, dropped (unpinned) with it.
#[derive(Debug, Default)]
pub struct DirectIoReads {
    pins: Vec<memvisor_pager::DirectIoPin>,
}

impl DirectIoReads {
    /// Pins the managed parts of `buffers` (`(address, length)`) if `fd` is open with
    /// `O_DIRECT`; nothing otherwise (a buffered read copies into the pages, and a page the
    /// copy finds gone is faulted back in, as any access).
    pub fn pin(fd: c_int, buffers: impl Iterator<Item = (usize, usize)>) -> Self {
        let mut reads = Self::default();
        if !ACTIVE.load(Ordering::Acquire) {
            return reads;
        }
        let mut direct = None;
        for (base, len) in buffers {
            let (over, n) = mp::managed_overlaps(base, len);
            for &(s, l, owner) in &over[..n] {
                // Asked only for a read into managed memory: one fcntl, not one per read.
                if !*direct.get_or_insert_with(|| is_direct(fd)) {
                    return reads;
                }
                if let Some(pin) = mp::pin_for_direct_io(s, l, owner) {
                    reads.pins.push(pin);
                }
            }
        }
        reads
    }
}

/// Whether `fd` is open with `O_DIRECT`.
fn is_direct(fd: c_int) -> bool {
    // SAFETY: F_GETFL takes no pointer; an invalid descriptor returns -1.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}
