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
const PM_SCAN_CHECK_WPASYNC: u64 = 1 << 1;
const PAGE_IS_WRITTEN: u64 = 1 << 1;

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
        let mut out = [PageRegion::default(); 1];
        let mut arg = PmScanArg {
            size: size_of::<PmScanArg>() as u64,
            flags: PM_SCAN_CHECK_WPASYNC,
            start: start as u64,
            end: (start + len) as u64,
            vec: out.as_mut_ptr() as u64,
            vec_len: 1,
            max_pages: 1,
            category_mask: PAGE_IS_WRITTEN,
            return_mask: PAGE_IS_WRITTEN,
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
}
