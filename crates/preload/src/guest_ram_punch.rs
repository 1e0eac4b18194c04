//! [`GuestRamPunch`]: the last hole a thread punched in guest RAM, so that the
//! `madvise(MADV_DONTNEED)` QEMU makes of the same range right after it
//! (`ram_block_discard_range`: `fallocate(PUNCH_HOLE)` on the memfd, then `madvise` "to drop the
//! mappings") is not a second discard through the pager.
//!
//! On a shared mapping `MADV_DONTNEED` only drops page-table entries: the memfd's content, a
//! hole after the punch, stays. Each discard is a synchronous command to the region's fault
//! handler (and the `madvise` one passes through the library's worker thread as well), and a
//! virtio-balloon inflation makes two per 4 KiB page: the guest gave up memory at a tenth of
//! the kernel's rate under memvisor (`docs/benchmarks.md`, the balloon case). A thread's
//! `madvise` of a range inside the hole it punched last is skipped; the record is taken by it,
//! so a later `madvise` of the range (after the program wrote there again) discards as before.

use std::cell::Cell;

use memvisor_pager::Region;

thread_local! {
    /// ([`GuestRamPunch::identity`] of the region, offset, length) of this thread's last punch.
    static LAST: Cell<Option<(usize, usize, usize)>> = const { Cell::new(None) };
}

/// This thread's last punch in guest RAM.
#[derive(Debug)]
pub struct GuestRamPunch;

impl GuestRamPunch {
    /// The identity of `region` for [`record`](Self::record) and
    /// [`take_covering`](Self::take_covering): its address, the same whether it is reached
    /// through its memfd or through the program's address.
    pub fn identity(region: &Region) -> usize {
        region as *const Region as usize
    }

    /// This thread just punched (discarded) bytes `[offset, offset + len)` of the region whose
    /// [`identity`](Self::identity) is `region`.
    pub fn record(region: usize, offset: usize, len: usize) {
        LAST.with(|l| l.set(Some((region, offset, len))));
    }

    /// Whether bytes `[offset, offset + len)` of `region` lie inside this thread's last punch,
    /// and nothing was punched since; the record is used up either way.
    pub fn take_covering(region: usize, offset: usize, len: usize) -> bool {
        LAST.with(|l| {
            l.take().is_some_and(|(r, o, n)| {
                r == region && offset >= o && offset.saturating_add(len) <= o + n
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_range_just_punched_is_skipped_and_only_once() {
        GuestRamPunch::record(7, 4096, 8192);
        assert!(GuestRamPunch::take_covering(7, 4096, 4096));
        assert!(!GuestRamPunch::take_covering(7, 4096, 4096), "used up");
        GuestRamPunch::record(7, 4096, 8192);
        assert!(
            !GuestRamPunch::take_covering(8, 4096, 4096),
            "another region"
        );
        GuestRamPunch::record(7, 4096, 8192);
        assert!(!GuestRamPunch::take_covering(7, 0, 8192), "starts before");
        GuestRamPunch::record(7, 4096, 8192);
        assert!(!GuestRamPunch::take_covering(7, 8192, 8192), "ends after");
        GuestRamPunch::record(7, 4096, 8192);
        assert!(GuestRamPunch::take_covering(7, 4096, 8192));
        // Another thread's record is its own.
        GuestRamPunch::record(7, 0, 4096);
        std::thread::spawn(|| assert!(!GuestRamPunch::take_covering(7, 0, 4096)))
            .join()
            .unwrap();
        assert!(GuestRamPunch::take_covering(7, 0, 4096));
    }
}
