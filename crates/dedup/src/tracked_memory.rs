//! [`TrackedMemory`]: a range of memory memvisor owns, rescanned only where it was written
//! since the previous pass: the seed's "scan only dirtied pages", which KSM cannot do.
//!
//! The range is registered with userfaultfd in `MODE_WP` with `UFFD_FEATURE_WP_ASYNC`: the
//! kernel lifts the write protection of a page on its first write without a fault message, and
//! `PAGEMAP_SCAN` reports the page `PAGE_IS_WRITTEN`. Each pass asks `PAGEMAP_SCAN` for the
//! written pages with `PM_SCAN_WP_MATCHING`, which write-protects them again in the same call,
//! so a write that lands after the call is reported by the next pass and none is lost.

use std::io;
use std::ops::Range;

use memvisor_pager::userfaultfd::features;
use memvisor_pager::{Pagemap, RegisterMode, Userfaultfd};

use crate::page_source::{LocalMemory, PageSource, PageState};
use crate::{DedupError, PAGE_SIZE};

/// Memory memvisor owns, tracked for writes; a [`PageSource`] whose passes after the first
/// return only the pages written since the previous one.
#[derive(Debug)]
pub struct TrackedMemory {
    memory: LocalMemory,
    uffd: Userfaultfd,
    pagemap: Pagemap,
    first_pass: bool,
}

impl TrackedMemory {
    /// Tracks `[start, start + len)`: registers it with a new userfaultfd (`MODE_WP`,
    /// `WP_ASYNC`) and write-protects it.
    ///
    /// # Safety
    /// The range must be page-aligned, mapped readable and writable (anonymous or shmem), not
    /// registered with another userfaultfd, and stay mapped while the tracker lives.
    pub unsafe fn new(
        name: impl Into<String>,
        start: *mut u8,
        len: usize,
    ) -> Result<Self, DedupError> {
        let a = start as usize;
        let err = |what, source| DedupError::DirtyTracking {
            start: a,
            len,
            what,
            source,
        };
        if a % PAGE_SIZE != 0 || len % PAGE_SIZE != 0 || len == 0 {
            return Err(err(
                "range check",
                io::Error::new(io::ErrorKind::InvalidInput, "not page-aligned or empty"),
            ));
        }
        let uffd = Userfaultfd::new(
            features::WP_ASYNC | features::WP_UNPOPULATED | features::WP_HUGETLBFS_SHMEM,
        )
        .map_err(|e| err("opening a userfaultfd with WP_ASYNC", e))?;
        uffd.register(a, len, RegisterMode::WP)
            .map_err(|e| err("UFFDIO_REGISTER (MODE_WP)", e))?;
        let pagemap = Pagemap::open().map_err(|e| err("opening pagemap", e))?;
        // SAFETY: the caller guarantees the range stays mapped and readable.
        let memory = unsafe { LocalMemory::new(name, start, len) };
        let mut t = Self {
            memory,
            uffd,
            pagemap,
            first_pass: true,
        };
        // Write-protect everything now: from here on every write is recorded.
        t.take_written(true)?;
        Ok(t)
    }

    /// The pages written since the last call (all pages if `all`), write-protecting them again
    /// in the same `PAGEMAP_SCAN` call.
    pub fn take_written(&mut self, all: bool) -> Result<Vec<Range<u64>>, DedupError> {
        let (start, len) = (self.memory.start(), self.memory.len());
        let written = self
            .pagemap
            .take_written(start, len, all)
            .map_err(|source| DedupError::DirtyTracking {
                start,
                len,
                what: "PAGEMAP_SCAN",
                source,
            })?;
        Ok(if all {
            std::iter::once(start as u64..(start + len) as u64).collect()
        } else {
            written
        })
    }

    /// The userfaultfd the range is registered with.
    pub fn userfaultfd(&self) -> &Userfaultfd {
        &self.uffd
    }
}

impl PageSource for TrackedMemory {
    fn name(&self) -> String {
        self.memory.name()
    }

    fn pass_ranges(&mut self) -> Result<Vec<Range<u64>>, DedupError> {
        let all = std::mem::replace(&mut self.first_pass, false);
        let written = self.take_written(false)?;
        Ok(if all {
            std::iter::once(
                self.memory.start() as u64..(self.memory.start() + self.memory.len()) as u64,
            )
            .collect()
        } else {
            written
        })
    }

    fn is_incremental(&self) -> bool {
        true
    }

    fn read(
        &mut self,
        address: u64,
        buf: &mut [u8],
        states: &mut [PageState],
    ) -> Result<(), DedupError> {
        self.memory.read(address, buf, states)
    }
}
