//! [`Pagemap`]: the `PAGEMAP_SCAN` ioctl on `/proc/self/pagemap`, to find written pages.
//!
//! With userfaultfd `WP_ASYNC`, a page mapped write-protected is unprotected by the kernel on
//! its first write, without a fault message; `PAGEMAP_SCAN` then reports it `PAGE_IS_WRITTEN`.
//! Verified on Linux 6.18 (memfd mapping registered MISSING | MINOR | WP, features WP_ASYNC |
//! WP_HUGETLBFS_SHMEM | WP_UNPOPULATED): after `MADV_DONTNEED`, clean pages keep a uffd-wp marker
//! (reported not written) and written pages become empty entries, which are reported written, so
//! the written state survives dropping the page-table entries.

use std::fs::File;
use std::io;
use std::ops::Range;
use std::os::fd::AsRawFd;

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
const PAGE_IS_PRESENT: u64 = 1 << 3;
const PAGE_IS_SWAPPED: u64 = 1 << 4;

/// An open `/proc/self/pagemap`.
#[derive(Debug)]
pub struct Pagemap {
    file: File,
}

impl Pagemap {
    /// Opens `/proc/self/pagemap`.
    pub fn open() -> io::Result<Self> {
        Ok(Self {
            file: File::open("/proc/self/pagemap")?,
        })
    }

    /// Whether any page of `[start, start + len)` (addresses in a range registered with
    /// userfaultfd `MODE_WP` and `WP_ASYNC`) was written since it was last write-protected.
    pub fn any_written(&self, start: usize, len: usize) -> io::Result<bool> {
        self.any_page_matching(
            start as u64,
            (start + len) as u64,
            PM_SCAN_CHECK_WPASYNC,
            PAGE_IS_WRITTEN,
            0,
        )
    }

    /// Whether any page of `[start, start + len)` is in memory or in the kernel's swap: false
    /// means the range holds no data of its own (any mapping, registered or not).
    pub fn any_page(&self, start: usize, len: usize) -> io::Result<bool> {
        self.any_page_matching(
            start as u64,
            start.saturating_add(len) as u64,
            0,
            0,
            PAGE_IS_PRESENT | PAGE_IS_SWAPPED,
        )
    }

    /// Whether one page of `[start, end)` has every category of `all_of` and one of `any_of`
    /// (a zero mask asks nothing), scanned with `flags`; stops at the first.
    fn any_page_matching(
        &self,
        start: u64,
        end: u64,
        flags: u64,
        all_of: u64,
        any_of: u64,
    ) -> io::Result<bool> {
        let mut out = [PageRegion::default(); 1];
        let mut arg = PmScanArg {
            size: size_of::<PmScanArg>() as u64,
            flags,
            start,
            end,
            vec: out.as_mut_ptr() as u64,
            vec_len: 1,
            max_pages: 1,
            category_mask: all_of,
            category_anyof_mask: any_of,
            return_mask: all_of | any_of,
            ..Default::default()
        };
        // SAFETY: `arg` is a valid `struct pm_scan_arg` whose `vec` points to `vec_len` live,
        // writable `page_region`s; the kernel only reads page tables of the given range.
        let r = unsafe { libc::ioctl(self.file.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(r > 0)
    }

    /// The address ranges of `[start, start + len)` written since they were last
    /// write-protected (adjacent ranges merged, in address order), write-protecting them again
    /// in the same `PAGEMAP_SCAN` call (`PM_SCAN_WP_MATCHING`), so a write that lands after the
    /// call shows in the next one and none is lost. With `all`, every page of the range is
    /// write-protected (the start of tracking) and the written ones are still returned.
    pub fn take_written(&self, start: usize, len: usize, all: bool) -> io::Result<Vec<Range<u64>>> {
        let mask = if all { 0 } else { PAGE_IS_WRITTEN };
        self.scan(
            start,
            len,
            PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            mask,
        )
    }

    /// The address ranges of `[start, start + len)` written since they were last
    /// write-protected (adjacent ranges merged, in address order), leaving the protection as it
    /// is. Addresses without a page reads as written (see the module's notes): callers
    /// intersect with what they know is resident.
    pub fn written(&self, start: usize, len: usize) -> io::Result<Vec<Range<u64>>> {
        self.scan(start, len, PM_SCAN_CHECK_WPASYNC, PAGE_IS_WRITTEN)
    }

    fn scan(
        &self,
        start: usize,
        len: usize,
        flags: u64,
        category_mask: u64,
    ) -> io::Result<Vec<Range<u64>>> {
        let end = (start + len) as u64;
        let mut regions = [PageRegion::default(); 64];
        let mut out: Vec<Range<u64>> = Vec::new();
        let mut from = start as u64;
        while from < end {
            let mut arg = PmScanArg {
                size: size_of::<PmScanArg>() as u64,
                flags,
                start: from,
                end,
                vec: regions.as_mut_ptr() as u64,
                vec_len: regions.len() as u64,
                category_mask,
                return_mask: PAGE_IS_WRITTEN,
                ..Default::default()
            };
            // SAFETY: `arg` is a valid `struct pm_scan_arg` whose `vec` points to `vec_len`
            // live, writable `page_region`s; the kernel reads (and with WP_MATCHING
            // write-protects) page tables of the given range only (registered with
            // userfaultfd WP_ASYNC by the caller).
            let r = unsafe { libc::ioctl(self.file.as_raw_fd(), PAGEMAP_SCAN as _, &mut arg) };
            if r < 0 {
                return Err(io::Error::last_os_error());
            }
            for reg in &regions[..r as usize] {
                if reg.categories & PAGE_IS_WRITTEN == 0 {
                    continue;
                }
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
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abi_sizes_and_number() {
        assert_eq!(size_of::<PageRegion>(), 24);
        assert_eq!(size_of::<PmScanArg>(), 96);
        assert_eq!(PAGEMAP_SCAN, 0xc060_6610);
    }

    #[test]
    fn a_range_has_pages_once_written_and_none_before_or_after_a_discard() {
        let len = 64 * 4096;
        // SAFETY: a fresh private anonymous mapping, unmapped at the end of the test.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let a = p as usize;
        let pm = Pagemap::open().unwrap();
        assert!(!pm.any_page(a, len).unwrap());
        // SAFETY: the byte lies inside the mapping made above.
        unsafe { *(p as *mut u8).add(40 * 4096 + 7) = 1 };
        assert!(pm.any_page(a, len).unwrap());
        assert!(pm.any_page(a + 40 * 4096, 4096).unwrap());
        assert!(!pm.any_page(a, 40 * 4096).unwrap());
        assert!(!pm.any_page(a + 41 * 4096, 23 * 4096).unwrap());
        // SAFETY: discards pages of the mapping made above; then unmaps it.
        unsafe {
            assert_eq!(libc::madvise(p, len, libc::MADV_DONTNEED), 0);
            assert!(!pm.any_page(a, len).unwrap());
            libc::munmap(p, len);
        }
    }
}
