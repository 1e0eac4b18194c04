//! The real memory system calls, issued as raw system calls so that they reach the kernel
//! whoever interposes the libc symbols (this library does). Each returns what libc's wrapper
//! would: the result, or -1 (`MAP_FAILED` for pointers) with `errno` set.

use libc::{c_int, c_long, c_void, off_t, size_t};

/// Sets `errno`.
pub fn set_errno(e: c_int) {
    // SAFETY: __errno_location returns this thread's errno slot, valid for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// `mmap` as the kernel does it.
///
/// # Safety
///
/// As `mmap(2)`: with `MAP_FIXED` the range is replaced.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the caller upholds mmap's contract; arguments are plain values.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            addr,
            len,
            prot as c_long,
            flags as c_long,
            fd as c_long,
            off as c_long,
        )
    };
    r as *mut c_void
}

/// `munmap` as the kernel does it.
///
/// # Safety
///
/// As `munmap(2)`: nothing may use the range afterwards.
pub unsafe fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: the caller upholds munmap's contract.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len) as c_int }
}

/// `madvise` as the kernel does it.
///
/// # Safety
///
/// As `madvise(2)`: destructive advice (`MADV_DONTNEED`, ...) drops memory contents.
pub unsafe fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: the caller upholds madvise's contract.
    unsafe { libc::syscall(libc::SYS_madvise, addr, len, advice as c_long) as c_int }
}

/// `mprotect` as the kernel does it.
///
/// # Safety
///
/// As `mprotect(2)`: accesses the new protection forbids fault.
pub unsafe fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // SAFETY: the caller upholds mprotect's contract.
    unsafe { libc::syscall(libc::SYS_mprotect, addr, len, prot as c_long) as c_int }
}

/// `mremap` as the kernel does it.
///
/// # Safety
///
/// As `mremap(2)`: the old range may move or disappear.
pub unsafe fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: the caller upholds mremap's contract.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mremap,
            old,
            old_len,
            new_len,
            flags as c_long,
            new_addr,
        )
    };
    r as *mut c_void
}
