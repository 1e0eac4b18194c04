//! The calls memvisor makes on an image's pages in the host page cache: measure them
//! (`cachestat(2)`), drop clean ones (`posix_fadvise(DONTNEED)`, checked first so that no dirty
//! or writeback page is ever asked to go), let them in (`WILLNEED`) and start writeback of dirty
//! ones (`sync_file_range`). Shared by the exclusive host cache and the cache limit.

use std::io;
use std::os::fd::{BorrowedFd, RawFd};

use crate::cachestat::CacheStat;

/// The page size, as a byte count of file offsets.
pub(crate) fn page() -> u64 {
    crate::page_size() as u64
}

/// `cachestat(2)` of `[off, off + len)` (`len` 0: to the end) of the image descriptor `fd`.
pub(crate) fn cachestat(fd: RawFd, off: u64, len: u64) -> io::Result<CacheStat> {
    // SAFETY: `fd` is the descriptor of the program's read being handled or of an image this
    // library keeps open: open for the whole call, which does not keep it.
    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
    crate::cachestat::cachestat(fd, off, len)
}

/// `posix_fadvise(fd, off, len, advice)`.
pub(crate) fn fadvise(fd: RawFd, off: u64, len: u64, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: plain system call on a descriptor; no memory is passed.
    let r = unsafe { libc::posix_fadvise(fd, off as libc::off_t, len as libc::off_t, advice) };
    if r != 0 {
        return Err(io::Error::from_raw_os_error(r));
    }
    Ok(())
}

/// Starts writeback of the dirty pages of `[off, off + len)` without waiting for it
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`).
pub(crate) fn start_writeback(fd: RawFd, off: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain system call on a descriptor; no memory is passed.
    let r = unsafe {
        libc::sync_file_range(
            fd,
            off as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What [`drop_clean`] did with a range.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct DropOutcome {
    /// Pages that left the host cache.
    pub dropped_pages: u64,
    /// Clean pages that stayed (a large folio straddling an end of the range).
    pub left_clean_pages: u64,
    /// Page-aligned ranges kept because they hold dirty or writeback pages.
    pub unclean: Vec<(u64, u64)>,
}

/// A failed call: which one, and its error.
pub(crate) type CallError = (&'static str, io::Error);

/// Drops the clean pages of `[s, s + len)` (page-aligned) from the host cache of `fd`: a range
/// with dirty or writeback pages is split in halves down to single pages, which are kept.
pub(crate) fn drop_clean(
    fd: RawFd,
    s: u64,
    len: u64,
    out: &mut DropOutcome,
) -> Result<(), CallError> {
    let pg = page();
    if len == 0 {
        return Ok(());
    }
    let before = cachestat(fd, s, len).map_err(|e| ("cachestat(2)", e))?;
    if before.nr_cache == 0 {
        return Ok(());
    }
    if before.unclean() == 0 {
        fadvise(fd, s, len, libc::POSIX_FADV_DONTNEED)
            .map_err(|e| ("posix_fadvise(DONTNEED)", e))?;
        let after = cachestat(fd, s, len).map_err(|e| ("cachestat(2)", e))?;
        out.dropped_pages += before.nr_cache.saturating_sub(after.nr_cache);
        out.left_clean_pages += after.nr_cache.saturating_sub(after.unclean());
        return Ok(());
    }
    if len <= pg {
        match out.unclean.last_mut() {
            Some((o, l)) if *o + *l == s => *l += len,
            _ => out.unclean.push((s, len)),
        }
        return Ok(());
    }
    let half = (len / pg).div_ceil(2) * pg;
    drop_clean(fd, s, half, out)?;
    drop_clean(fd, s + half, len - half, out)
}
