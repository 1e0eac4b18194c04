//! Marking memory memvisor owns for KSM: `MADV_MERGEABLE` and `MADV_UNMERGEABLE`.
//!
//! KSM only takes private anonymous memory: a shared mapping (a memfd, as QEMU's
//! `memory-backend-memfd` or the pager's regions) accepts the advice and is ignored.

use crate::DedupError;

/// Marks `[start, start + len)` `MADV_MERGEABLE`, so ksmd scans it.
///
/// # Safety
/// The range must be a page-aligned private anonymous mapping this process owns (madvise
/// changes how the kernel treats it, not its content).
pub unsafe fn madvise_mergeable(start: *mut u8, len: usize) -> Result<(), DedupError> {
    // SAFETY: the caller guarantees the range is mapped and owned; MADV_MERGEABLE does not
    // change the memory's content.
    let r = unsafe { libc::madvise(start.cast(), len, libc::MADV_MERGEABLE) };
    if r < 0 {
        return Err(DedupError::DirtyTracking {
            start: start as usize,
            len,
            what: "madvise(MADV_MERGEABLE)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Marks `[start, start + len)` `MADV_UNMERGEABLE`: KSM unmerges its pages at once (each gets
/// its own copy again) and stops scanning it.
///
/// # Safety
/// As [`madvise_mergeable`].
pub unsafe fn madvise_unmergeable(start: *mut u8, len: usize) -> Result<(), DedupError> {
    // SAFETY: the caller guarantees the range is mapped and owned; unmerging keeps contents.
    let r = unsafe { libc::madvise(start.cast(), len, libc::MADV_UNMERGEABLE) };
    if r < 0 {
        return Err(DedupError::DirtyTracking {
            start: start as usize,
            len,
            what: "madvise(MADV_UNMERGEABLE)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}
