//! [`TrackedMemory`]: a range of memory memvisor owns, rescanned only where it was written
//! since the previous pass: the seed's "scan only dirtied pages", which KSM cannot do.
//!
//! The range is registered with userfaultfd in `MODE_WP` with `UFFD_FEATURE_WP_ASYNC`: the
//! kernel lifts the write protection of a page on its first write without a fault message, and
//! `PAGEMAP_SCAN` reports the page `PAGE_IS_WRITTEN`. Each pass asks `PAGEMAP_SCAN` for the
//! written pages with `PM_SCAN_WP_MATCHING`, which write-protects them again in the same call,
//! so a write that lands after the call is reported by the next pass and none is lost.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;

use memvisor_pager::userfaultfd::features;
use memvisor_pager::{RegisterMode, Userfaultfd};

use crate::page_source::{LocalMemory, PageSource, PageState};
use crate::{DedupError, PAGE_SIZE};

/// `struct page_region`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// `struct pm_scan_arg`.
#[repr(C)]
#[derive(Debug, Default)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `PAGEMAP_SCAN = _IOWR('f', 16, struct pm_scan_arg)`.
const PAGEMAP_SCAN: u64 = (3 << 30) | ((size_of::<PmScanArg>() as u64) << 16) | (0x66 << 8) | 16;
const PM_SCAN_WP_MATCHING: u64 = 1 << 0;
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

/// Memory memvisor owns, tracked for writes; a [`PageSource`] whose passes after the first
/// return only the pages written since the previous one.
#[derive(Debug)]
pub struct TrackedMemory {
    memory: LocalMemory,
    uffd: Userfaultfd,
    pagemap: File,
    first_pass: bool,
    regions: Vec<PageRegion>,
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
        let pagemap = File::open("/proc/self/pagemap").map_err(|e| err("opening pagemap", e))?;
        // SAFETY: the caller guarantees the range stays mapped and readable.
        let memory = unsafe { LocalMemory::new(name, start, len) };
        let mut t = Self {
            memory,
            uffd,
            pagemap,
            first_pass: true,
            regions: vec![PageRegion::default(); 64],
        };
        // Write-protect everything now: from here on every write is recorded.
        t.take_written(true)?;
        Ok(t)
    }

    /// The pages written since the last call (all pages if `all`), write-protecting them again
    /// in the same `PAGEMAP_SCAN` call.
    pub fn take_written(&mut self, all: bool) -> Result<Vec<Range<u64>>, DedupError> {
        let (start, len) = (self.memory.start(), self.memory.len());
        let end = (start + len) as u64;
        let mut out: Vec<Range<u64>> = Vec::new();
        let mut from = start as u64;
        while from < end {
            let mut arg = PmScanArg {
                size: size_of::<PmScanArg>() as u64,
                flags: PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
                start: from,
                end,
                vec: self.regions.as_mut_ptr() as u64,
                vec_len: self.regions.len() as u64,
                category_mask: if all { 0 } else { PAGE_IS_WRITTEN },
                return_mask: PAGE_IS_WRITTEN,
                ..Default::default()
            };
            // SAFETY: `arg` is a valid `struct pm_scan_arg`; `vec` points to `vec_len` live,
            // writable `page_region`s; the range is ours (registered with WP_ASYNC).
            let r = unsafe { libc::ioctl(self.pagemap.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
            if r < 0 {
                return Err(DedupError::DirtyTracking {
                    start,
                    len,
                    what: "PAGEMAP_SCAN",
                    source: io::Error::last_os_error(),
                });
            }
            for reg in &self.regions[..r as usize] {
                match out.last_mut() {
                    Some(last) if last.end == reg.start => last.end = reg.end,
                    _ => out.push(reg.start..reg.end),
                }
            }
            if arg.walk_end <= from {
                break;
            }
            from = arg.walk_end;
        }
        if all {
            out = std::iter::once(start as u64..end).collect();
        }
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi() {
        assert_eq!(size_of::<PageRegion>(), 24);
        assert_eq!(size_of::<PmScanArg>(), 96);
        assert_eq!(PAGEMAP_SCAN, 0xc060_6610);
    }
}
