//! [`Reservations`]: the program's large `PROT_NONE` private anonymous mappings that it has
//! not used yet, so that a later `mprotect` making one of them accessible can be managed.
//!
//! Programs reserve address space first and make it accessible later. QEMU's TCG does it for
//! its translated-code buffer: a 1 GiB `PROT_NONE` mapping, then one `mprotect` to
//! read-write-execute (Debian's QEMU 7.2; traced with `strace -e mmap,mprotect`). Nothing in
//! such a range has ever been readable, so it holds zeros, and a region can take its place
//! without changing what the program sees. That is true only for a range no earlier call has
//! touched: a reservation is recorded at its `mmap` and forgotten at the first call that
//! concerns any part of it (an `mprotect` that is not managed, a `MAP_FIXED` mapping over it,
//! `munmap`, `mremap`), so a range once made accessible and protected again (which may hold
//! data) is never taken for an empty one: an allocator that grows a heap by small `mprotect`
//! steps has it forgotten at its first step (glibc's malloc does so with internal calls the
//! library does not see; its heaps are never recorded). Calls the library cannot see at all
//! (a raw system call) are covered by a last check before a region takes a range: no page of
//! it may be in memory or in swap (`PAGEMAP_SCAN`, [`memvisor_pager::Pagemap::any_page`]).
//!
//! A fixed table without allocation (the interposed calls run with the program's allocator
//! locks held), behind one mutex; a lock-free count keeps the common case (no reservation)
//! from taking it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Most reservations remembered at once (later ones are not recorded: their `mprotect` is
/// left to the kernel).
pub const MAX_RESERVATIONS: usize = 16;

/// What the table says about an `mprotect` of a range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The range lies inside one untouched reservation, which is now forgotten: the caller
    /// may put a region there.
    Untouched,
    /// The range is not inside one untouched reservation (any reservation it met is
    /// forgotten).
    No,
}

/// The untouched reservations, as `(start, end)`; `(0, 0)` is a free slot.
#[derive(Debug)]
pub struct Reservations {
    spans: Mutex<[(usize, usize); MAX_RESERVATIONS]>,
    count: AtomicUsize,
}

impl Default for Reservations {
    fn default() -> Self {
        Self::new()
    }
}

impl Reservations {
    /// An empty table.
    pub const fn new() -> Self {
        Self {
            spans: Mutex::new([(0, 0); MAX_RESERVATIONS]),
            count: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, [(usize, usize); MAX_RESERVATIONS]> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records the fresh reservation `[start, start + len)`; false if the table is full.
    pub fn record(&self, start: usize, len: usize) -> bool {
        let Some(end) = start.checked_add(len) else {
            return false;
        };
        if len == 0 {
            return false;
        }
        let mut spans = self.lock();
        // A fresh mapping replaced whatever was there (the kernel chose the address, so
        // nothing was): drop stale entries it overlaps all the same.
        self.forget_locked(&mut spans, start, end);
        self.insert_locked(&mut spans, start, end)
    }

    /// Puts `[start, end)` in a free slot; false if there is none.
    fn insert_locked(
        &self,
        spans: &mut [(usize, usize); MAX_RESERVATIONS],
        start: usize,
        end: usize,
    ) -> bool {
        let Some(slot) = spans.iter_mut().find(|s| **s == (0, 0)) else {
            return false;
        };
        *slot = (start, end);
        self.count.fetch_add(1, Ordering::AcqRel);
        true
    }

    fn forget_locked(&self, spans: &mut [(usize, usize); MAX_RESERVATIONS], a: usize, e: usize) {
        for s in spans.iter_mut() {
            if *s != (0, 0) && s.0 < e && a < s.1 {
                *s = (0, 0);
                self.count.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// Forgets every reservation that `[start, start + len)` meets (the program used part of
    /// it). Lock-free when there is none.
    pub fn forget(&self, start: usize, len: usize) {
        if self.count.load(Ordering::Acquire) == 0 || len == 0 {
            return;
        }
        let end = start.saturating_add(len);
        let mut spans = self.lock();
        self.forget_locked(&mut spans, start, end);
    }

    /// The program makes `[start, start + len)` accessible: [`Claim::Untouched`] if the range
    /// lies inside one untouched reservation. Either way every reservation the range meets
    /// is forgotten (the caller either manages the range or lets the kernel make part of the
    /// reservation accessible), except, with `keep_rest`, the part of the reservation after
    /// the range, which the call does not concern: it stays recorded, untouched still, in
    /// the same hold of the lock (so a mapping another thread makes there meanwhile forgets
    /// it as any). QEMU's TCG with more than one vCPU makes its code buffer accessible in
    /// slices, each by one `mprotect` and each followed by a guard page it leaves `PROT_NONE`
    /// (16 slices of 64 MiB less a page for `-smp 2`): with the rest kept, every slice can
    /// become a region. A rest that finds the table full is not kept.
    pub fn claim(&self, start: usize, len: usize, keep_rest: bool) -> Claim {
        if self.count.load(Ordering::Acquire) == 0 || len == 0 {
            return Claim::No;
        }
        let Some(end) = start.checked_add(len) else {
            return Claim::No;
        };
        let mut spans = self.lock();
        let inside = spans
            .iter()
            .find(|s| **s != (0, 0) && s.0 <= start && end <= s.1)
            .map(|s| s.1);
        self.forget_locked(&mut spans, start, end);
        match inside {
            Some(rest_end) => {
                if keep_rest && end < rest_end {
                    self.insert_locked(&mut spans, end, rest_end);
                }
                Claim::Untouched
            }
            None => Claim::No,
        }
    }

    /// How many reservations are remembered.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 1 << 20;

    #[test]
    fn a_range_inside_an_untouched_reservation_is_claimed_once() {
        let r = Reservations::new();
        assert!(r.record(100 * M, 64 * M));
        assert_eq!(r.claim(100 * M, 64 * M - 4096, false), Claim::Untouched);
        // The rest of it (the guard page) is no longer untouched.
        assert_eq!(r.claim(164 * M - 4096, 4096, false), Claim::No);
        assert!(r.is_empty());
    }

    #[test]
    fn any_use_of_a_reservation_forgets_it() {
        let r = Reservations::new();
        r.record(100 * M, 64 * M);
        // An mprotect straddling its end is not inside it, and forgets it.
        assert_eq!(r.claim(160 * M, 8 * M, false), Claim::No);
        assert_eq!(r.claim(100 * M, 16 * M, false), Claim::No);

        r.record(200 * M, 64 * M);
        r.forget(210 * M, 4096); // a MAP_FIXED or munmap inside it
        assert_eq!(r.claim(200 * M, 8 * M, false), Claim::No);

        // A small first step (an allocator growing a heap; too small to manage) is claimed and
        // forgets the whole reservation: a later large mprotect may cover data written
        // through it.
        r.record(300 * M, 64 * M);
        assert_eq!(r.claim(300 * M, 132 * 1024, false), Claim::Untouched);
        assert_eq!(r.claim(300 * M, 32 * M, false), Claim::No);
    }

    #[test]
    fn ranges_outside_every_reservation_are_not_claimed_and_forget_nothing() {
        let r = Reservations::new();
        r.record(100 * M, 64 * M);
        assert_eq!(r.claim(10 * M, 64 * M, false), Claim::No);
        r.forget(164 * M, M);
        r.forget(99 * M, M);
        assert_eq!(r.len(), 1);
        assert_eq!(r.claim(100 * M, M, false), Claim::Untouched);
    }

    #[test]
    fn the_table_is_bounded_and_rejects_empty_or_wrapping_ranges() {
        let r = Reservations::new();
        for i in 0..MAX_RESERVATIONS {
            assert!(r.record((i + 1) * 100 * M, M));
        }
        assert!(!r.record(10_000 * M, M));
        assert_eq!(r.len(), MAX_RESERVATIONS);
        assert!(!r.record(usize::MAX - 4095, 8192));
        assert!(!r.record(5 * M, 0));
        assert_eq!(r.claim(usize::MAX - 4095, 8192, false), Claim::No);
        r.forget(0, usize::MAX);
        assert!(r.is_empty());
    }

    #[test]
    fn recording_over_a_stale_entry_replaces_it() {
        let r = Reservations::new();
        r.record(100 * M, 64 * M);
        r.record(120 * M, 8 * M);
        assert_eq!(r.len(), 1);
        assert_eq!(r.claim(100 * M, 4 * M, false), Claim::No);
        assert_eq!(r.claim(120 * M, 8 * M, false), Claim::Untouched);
    }

    #[test]
    fn with_the_rest_kept_every_slice_of_a_reservation_is_claimed() {
        // TCG's slices: 4 of 16 MiB, each made accessible but for its last page (the guard).
        let r = Reservations::new();
        r.record(100 * M, 64 * M);
        for k in 0..4 {
            let start = 100 * M + k * 16 * M;
            assert_eq!(
                r.claim(start, 16 * M - 4096, true),
                Claim::Untouched,
                "slice {k}"
            );
            assert_eq!(r.len(), 1, "the guard page onwards stays recorded");
        }
        // The last slice's guard page is all that is left.
        assert_eq!(r.claim(164 * M - 4096, 4096, true), Claim::Untouched);
        assert!(r.is_empty());
        // A mapping made in the rest forgets it, as any reservation.
        r.record(200 * M, 32 * M);
        assert_eq!(r.claim(200 * M, 8 * M, true), Claim::Untouched);
        r.forget(216 * M, 4096);
        assert_eq!(r.claim(208 * M, 8 * M, true), Claim::No);
        // Without keep_rest the rest goes with its reservation.
        r.record(300 * M, 32 * M);
        assert_eq!(r.claim(300 * M, 8 * M, false), Claim::Untouched);
        assert_eq!(r.claim(308 * M, 8 * M, false), Claim::No);
        assert!(r.is_empty());
    }
}
