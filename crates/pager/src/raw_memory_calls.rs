//! The memory-management system calls the pager makes (`mmap`, `munmap`, `madvise`), issued
//! as raw system calls rather than through the libc symbols of the same names.
//!
//! An `LD_PRELOAD` shim that puts an unmodified program's memory under the pager interposes
//! exactly those libc symbols; if the pager called them, the shim would see the pager's own
//! mappings and page-table drops as the program's and re-enter itself. Raw system calls cannot
//! be interposed.

use std::io;

/// `mmap(addr, len, prot, flags, fd, 0)` as a raw system call.
///
/// # Safety
///
/// With `MAP_FIXED`, `[addr, addr + len)` is replaced: nothing there may still be in use.
/// Without it, the call cannot affect existing memory.
pub(crate) unsafe fn mmap(
    addr: usize,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
) -> io::Result<*mut u8> {
    // SAFETY: the caller upholds the contract for MAP_FIXED; the arguments are plain values.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            addr,
            len,
            prot as libc::c_long,
            flags as libc::c_long,
            fd as libc::c_long,
            0 as libc::c_long,
        )
    };
    // The kernel returns -errno in the last page of the address space; libc::syscall turns
    // that into -1 with errno set.
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as usize as *mut u8)
}

/// `munmap(addr, len)` as a raw system call.
///
/// # Safety
///
/// Nothing may use `[addr, addr + len)` afterwards.
pub(crate) unsafe fn munmap(addr: usize, len: usize) -> io::Result<()> {
    // SAFETY: the caller guarantees the range is no longer in use.
    let r = unsafe { libc::syscall(libc::SYS_munmap, addr, len) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `madvise(addr, len, advice)` as a raw system call.
///
/// # Safety
///
/// `advice` must not change the data visible through `[addr, addr + len)` in a way its users do
/// not expect (e.g. `MADV_DONTNEED` on private anonymous memory zeroes it).
pub(crate) unsafe fn madvise(addr: usize, len: usize, advice: libc::c_int) -> io::Result<()> {
    // SAFETY: the caller vouches for the effect of `advice` on the range.
    let r = unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice as libc::c_long) };
    if r == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
