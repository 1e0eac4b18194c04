//! [`cachestat`]: the `cachestat(2)` system call (Linux 6.5): how many pages of a file range
//! are in the page cache, dirty, under writeback, or recently evicted.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `__NR_cachestat` (the same on every architecture that has it).
const SYS_CACHESTAT: libc::c_long = 451;

/// `struct cachestat_range`.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `struct cachestat`: page counts for a range.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheStat {
    /// Pages in the page cache.
    pub nr_cache: u64,
    /// Of those, dirty.
    pub nr_dirty: u64,
    /// Of those, under writeback.
    pub nr_writeback: u64,
    /// Pages evicted from the cache.
    pub nr_evicted: u64,
    /// Pages evicted recently (would be refaults).
    pub nr_recently_evicted: u64,
}

impl CacheStat {
    /// Dirty or under writeback: such pages are never dropped.
    pub fn unclean(&self) -> u64 {
        self.nr_dirty + self.nr_writeback
    }
}

/// Page-cache counts for `[off, off + len)` of the file `fd` (`len == 0`: to the end).
pub fn cachestat(fd: BorrowedFd<'_>, off: u64, len: u64) -> io::Result<CacheStat> {
    let range = CachestatRange { off, len };
    let mut cs = CacheStat::default();
    // SAFETY: valid descriptor; `range` and `cs` are live, properly sized structures the kernel
    // reads and writes respectively; flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const CachestatRange,
            &mut cs as *mut CacheStat,
            0u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn counts_a_written_file() {
        assert_eq!(size_of::<CacheStat>(), 40);
        let mut f = tempfile::tempfile_in("/var/tmp").unwrap();
        f.write_all(&vec![1u8; 8 * 4096]).unwrap();
        let cs = cachestat(f.as_fd(), 0, 0).unwrap();
        assert_eq!(cs.nr_cache, 8);
        assert_eq!(cs.nr_dirty, 8);
        f.sync_all().unwrap();
        let cs = cachestat(f.as_fd(), 4096, 4096).unwrap();
        assert_eq!((cs.nr_cache, cs.nr_dirty, cs.unclean()), (1, 0, 0));
    }
}
