//! [`resident_pages`]: which pages of a file are in the page cache, by `mincore(2)` on a
//! read-only mapping of it (the mapping is never touched, so it maps nothing).

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use memvisor_dedup::PAGE_SIZE;

/// One flag per page of the first `len` bytes of `file`: in the page cache or not.
pub fn resident_pages(file: &File, len: u64) -> io::Result<Vec<bool>> {
    let pages = len.div_ceil(PAGE_SIZE as u64) as usize;
    if pages == 0 {
        return Ok(Vec::new());
    }
    let map_len = pages * PAGE_SIZE;
    // SAFETY: a new shared read-only mapping of our open file; nothing reads through it (a read
    // past a concurrent truncation would raise SIGBUS), it is only passed to mincore and unmapped.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            map_len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let mut vec = vec![0u8; pages];
    // SAFETY: `p` is our mapping of `map_len` bytes; `vec` holds one byte per page.
    let r = unsafe { libc::mincore(p, map_len, vec.as_mut_ptr()) };
    let err = io::Error::last_os_error();
    // SAFETY: unmapping the mapping made above.
    unsafe { libc::munmap(p, map_len) };
    if r < 0 {
        return Err(err);
    }
    Ok(vec.into_iter().map(|v| v & 1 != 0).collect())
}

/// Drops the clean page-cache pages of `[off, off + len)` (`posix_fadvise(POSIX_FADV_DONTNEED)`;
/// the kernel keeps dirty, under-writeback and mapped pages, and a large folio unless the range
/// covers all of it).
pub fn drop_range(file: &File, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: posix_fadvise on a valid descriptor has no memory-safety preconditions.
    let r = unsafe {
        libc::posix_fadvise(
            file.as_raw_fd(),
            off as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn written_pages_are_resident_and_dropped_when_clean() {
        let mut f = tempfile::tempfile_in("/var/tmp").unwrap();
        // One write per page: 4 KiB folios (a 16 KiB write may make one 16 KiB folio, which
        // DONTNEED drops only as a whole).
        for _ in 0..4 {
            f.write_all(&[7u8; PAGE_SIZE]).unwrap();
        }
        f.sync_all().unwrap();
        assert_eq!(resident_pages(&f, 4 * PAGE_SIZE as u64).unwrap(), [true; 4]);
        drop_range(&f, PAGE_SIZE as u64, PAGE_SIZE as u64).unwrap();
        assert_eq!(
            resident_pages(&f, 4 * PAGE_SIZE as u64).unwrap(),
            [true, false, true, true]
        );
        assert!(resident_pages(&f, 0).unwrap().is_empty());
    }
}
