//! [`CodeAllotment`]: how much of the process budget a code region (QEMU's TCG
//! translated-code buffer) gets, set by its page-in rate (page-fault-frequency allocation,
//! Chu and Opderbeck, 1972).
//!
//! A code region's size says nothing of what it needs: TCG fills its 1 GiB buffer from the
//! start, flushes it when full and fills it again. What it has used says little more: an idle
//! 192 MiB guest had used 45 MiB after boot, most of it code that boot ran once, and the same
//! guest reading its disk made 27 code page-ins in 48 s with 20 MiB of it in memory. Two rules were measured before
//! this one (`docs/benchmarks.md`, "TCG's code buffer under the budget"): a share in
//! proportion to what the buffer used starved it at start (one chunk for 2 MiB used: a guest
//! booted at one page-in per translated block, 5,325 page-ins in 14 s); the same with a floor
//! of twice the use, up to an eighth of the budget, booted a guest under a 64 MiB budget in
//! 15 s instead of 3 s, because boot's code did not fit the floor.
//!
//! So the allotment follows the region's page-in rate, checked every
//! [`ALLOTMENT_CHECK_PERIOD`](crate::managed_process::ALLOTMENT_CHECK_PERIOD):
//!
//! * above [`GROW_RATE`] page-ins a second it grows by a 32nd of the budget for each
//!   `GROW_RATE` (at most [`MAX_GROW_STEPS`]), so boot's thrashing is answered within a
//!   second or two;
//! * with no page-in (below [`SHRINK_RATE`]) it gives back one chunk, so it settles where the
//!   code that runs now fits, and guest RAM gets the rest;
//! * in between it stays.
//!
//! It starts at an eighth of the budget (boot translates fast), stays within one chunk and a
//! quarter of the budget ([`MAX_DIVISOR`]), and never exceeds what the region has used plus
//! two chunks (room for new translations until the next check). The other regions share what
//! it leaves.

/// Page-ins a second above which the allotment grows.
pub const GROW_RATE: f64 = 16.0;
/// Page-ins a second below which the allotment shrinks (with checks a second apart: none).
pub const SHRINK_RATE: f64 = 1.0;
/// The allotment is at most the budget divided by this.
pub const MAX_DIVISOR: usize = 4;
/// The allotment starts at the budget divided by this.
pub const START_DIVISOR: usize = 8;
/// A growth step is the budget divided by this.
pub const GROW_DIVISOR: usize = 32;
/// Most growth steps in one check (one per [`GROW_RATE`] page-ins a second).
pub const MAX_GROW_STEPS: usize = 4;

/// One code region's allotment and the page-in count it was last checked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodeAllotment {
    bytes: usize,
    page_ins: u64,
}

impl CodeAllotment {
    /// The allotment of a new code region in a process whose budget is `budget`.
    pub fn new(budget: usize, chunk: usize) -> Self {
        Self {
            bytes: Self::bounded(budget / START_DIVISOR, usize::MAX, budget, chunk),
            page_ins: 0,
        }
    }

    fn bounded(bytes: usize, used: usize, budget: usize, chunk: usize) -> usize {
        let chunk = chunk.max(1);
        let top = (budget / MAX_DIVISOR).min(used.saturating_add(2 * chunk));
        (bytes.min(top) / chunk * chunk).max(chunk)
    }

    /// The allotment in bytes (whole chunks, at least one).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// [`check`](Self::check) with a region's counters: its page-ins, and as used the chunks it
    /// holds in memory or in swap (`chunk` bytes each).
    pub fn check_region(
        &mut self,
        stats: &memvisor_pager::RegionStats,
        secs: f64,
        budget: usize,
        chunk: usize,
    ) -> bool {
        let used = (stats.resident_chunks + stats.swapped_chunks) as usize * chunk;
        self.check(stats.page_ins, secs, used, budget, chunk)
    }

    /// One check: the region has had `page_ins` page-ins in all, `secs` seconds after the last
    /// check, has used `used` bytes, and the process budget is `budget`. Returns whether the
    /// allotment changed.
    pub fn check(
        &mut self,
        page_ins: u64,
        secs: f64,
        used: usize,
        budget: usize,
        chunk: usize,
    ) -> bool {
        let rate = page_ins.saturating_sub(self.page_ins) as f64 / secs.max(1e-3);
        self.page_ins = page_ins;
        let wanted = if rate > GROW_RATE {
            let steps = (rate / GROW_RATE).min(MAX_GROW_STEPS as f64) as usize;
            self.bytes
                .saturating_add((budget / GROW_DIVISOR).max(chunk) * steps)
        } else if rate < SHRINK_RATE {
            self.bytes.saturating_sub(chunk)
        } else {
            self.bytes
        };
        let next = Self::bounded(wanted, used, budget, chunk);
        let changed = next != self.bytes;
        self.bytes = next;
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 1 << 20;

    #[test]
    fn it_starts_at_an_eighth_of_the_budget_in_whole_chunks() {
        assert_eq!(CodeAllotment::new(128 * M, M).bytes(), 16 * M);
        assert_eq!(CodeAllotment::new(117 * M, M).bytes(), 14 * M);
        assert_eq!(CodeAllotment::new(2 * M, M).bytes(), M);
    }

    #[test]
    fn page_ins_grow_it_in_steps_by_their_rate_up_to_a_quarter_of_the_budget() {
        let grow = |per_second: u64| {
            let mut a = CodeAllotment::new(128 * M, M);
            let mut ins = 0;
            let mut sizes = Vec::new();
            for _ in 0..5 {
                ins += per_second;
                a.check(ins, 1.0, 1 << 30, 128 * M, M);
                sizes.push(a.bytes() / M);
            }
            sizes
        };
        assert_eq!(grow(20), [20, 24, 28, 32, 32]);
        assert_eq!(grow(40), [24, 32, 32, 32, 32]);
        assert_eq!(grow(5000), [32, 32, 32, 32, 32]);
    }

    #[test]
    fn few_page_ins_give_back_a_chunk_a_check_down_to_one() {
        let mut a = CodeAllotment::new(128 * M, M);
        // No page-in in a second: below the shrink rate.
        assert!(a.check(0, 1.0, 1 << 30, 128 * M, M));
        assert_eq!(a.bytes(), 15 * M);
        for _ in 0..40 {
            a.check(0, 1.0, 1 << 30, 128 * M, M);
        }
        assert_eq!(a.bytes(), M);
    }

    #[test]
    fn a_rate_in_between_keeps_it() {
        let mut a = CodeAllotment::new(128 * M, M);
        assert!(!a.check(10, 1.0, 1 << 30, 128 * M, M));
        assert!(
            !a.check(30, 2.0, 1 << 30, 128 * M, M),
            "10 a second over 2 s"
        );
        assert_eq!(a.bytes(), 16 * M);
    }

    #[test]
    fn it_never_exceeds_what_was_used_plus_two_chunks() {
        let mut a = CodeAllotment::new(128 * M, M);
        a.check(1000, 1.0, 3 * M + 5, 128 * M, M);
        assert_eq!(a.bytes(), 5 * M);
        // A smaller budget (the broker moved it) takes it down at the next check.
        let mut b = CodeAllotment::new(128 * M, M);
        b.check(10, 1.0, 1 << 30, 32 * M, M);
        assert_eq!(b.bytes(), 8 * M);
    }

    #[test]
    fn a_page_in_counter_that_went_back_counts_as_none() {
        let mut a = CodeAllotment::new(128 * M, M);
        a.check(1000, 1.0, 1 << 30, 128 * M, M);
        let before = a.bytes();
        a.check(10, 1.0, 1 << 30, 128 * M, M);
        assert_eq!(a.bytes(), before - M);
    }
}
