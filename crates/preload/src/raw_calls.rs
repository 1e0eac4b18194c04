//! The real memory system calls, issued as raw system calls so that they reach the kernel
//! whoever interposes the libc symbols (this library does). Each returns what libc's wrapper
//! would: the result, or -1 (`MAP_FAILED` for pointers) with `errno` set.

use libc::{c_int, c_long, c_void, off_t, size_t};

/// This thread's `errno` (0 if it cannot be read).
pub fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

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

/// `pread64` as the kernel does it.
///
/// # Safety
///
/// As `pread(2)`: the kernel writes up to `n` bytes at `buf`.
pub unsafe fn pread(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> isize {
    // SAFETY: the caller upholds pread's contract.
    unsafe { libc::syscall(libc::SYS_pread64, fd as c_long, buf, n, off as c_long) as isize }
}

/// `preadv2` as the kernel does it (`preadv` is `flags` 0; `off` -1 reads at the file
/// position).
///
/// # Safety
///
/// As `preadv2(2)`: the kernel writes into the buffers `iov` describes.
pub unsafe fn preadv2(
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: off_t,
    flags: c_int,
) -> isize {
    // SAFETY: the caller upholds preadv2's contract.
    unsafe { vectored(libc::SYS_preadv2, fd, iov, iovcnt, off, flags) }
}

/// `preadv2`/`pwritev2` (system call `nr`): on 64-bit Linux the offset travels whole in the
/// low word; the high word is 0.
///
/// # Safety
///
/// As the system call: `iov` describes `iovcnt` buffers the kernel reads or writes.
unsafe fn vectored(
    nr: c_long,
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: off_t,
    flags: c_int,
) -> isize {
    // SAFETY: guaranteed by the caller.
    unsafe {
        libc::syscall(
            nr,
            fd as c_long,
            iov,
            iovcnt as c_long,
            off as c_long,
            0 as c_long,
            flags as c_long,
        ) as isize
    }
}

/// `pwrite64` as the kernel does it.
///
/// # Safety
///
/// As `pwrite(2)`: the kernel reads `n` bytes at `buf`.
pub unsafe fn pwrite(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> isize {
    // SAFETY: the caller upholds pwrite's contract.
    unsafe { libc::syscall(libc::SYS_pwrite64, fd as c_long, buf, n, off as c_long) as isize }
}

/// `pwritev2` as the kernel does it (see [`preadv2`]).
///
/// # Safety
///
/// As `pwritev2(2)`: the kernel reads the buffers `iov` describes.
pub unsafe fn pwritev2(
    fd: c_int,
    iov: *const libc::iovec,
    iovcnt: c_int,
    off: off_t,
    flags: c_int,
) -> isize {
    // SAFETY: the caller upholds pwritev2's contract.
    unsafe { vectored(libc::SYS_pwritev2, fd, iov, iovcnt, off, flags) }
}

/// `fallocate` as the kernel does it.
pub fn fallocate(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
    // SAFETY: plain values; the kernel validates the descriptor and range.
    unsafe {
        libc::syscall(
            libc::SYS_fallocate,
            fd as c_long,
            mode as c_long,
            off as c_long,
            len as c_long,
        ) as c_int
    }
}

/// `ftruncate` as the kernel does it.
pub fn ftruncate(fd: c_int, len: off_t) -> c_int {
    // SAFETY: plain values; the kernel validates the descriptor.
    unsafe { libc::syscall(libc::SYS_ftruncate, fd as c_long, len as c_long) as c_int }
}

/// `copy_file_range` as the kernel does it.
///
/// # Safety
///
/// As `copy_file_range(2)`: `off_in` and `off_out` are null or point to live offsets the
/// kernel reads and updates.
pub unsafe fn copy_file_range(
    fd_in: c_int,
    off_in: *mut libc::loff_t,
    fd_out: c_int,
    off_out: *mut libc::loff_t,
    len: size_t,
    flags: libc::c_uint,
) -> isize {
    // SAFETY: the caller upholds copy_file_range's contract.
    unsafe {
        libc::syscall(
            libc::SYS_copy_file_range,
            fd_in as c_long,
            off_in,
            fd_out as c_long,
            off_out,
            len,
            flags as c_long,
        ) as isize
    }
}

/// `io_submit` as the kernel does it: the number of control blocks submitted, or -1 with
/// `errno` set.
///
/// # Safety
///
/// As `io_submit(2)`: `iocbpp` points to `nr` pointers to valid control blocks whose buffers
/// stay valid until each completes.
pub unsafe fn io_submit(ctx: libc::c_ulong, nr: libc::c_long, iocbpp: *mut *mut c_void) -> c_long {
    // SAFETY: the caller upholds io_submit's contract.
    unsafe { libc::syscall(libc::SYS_io_submit, ctx, nr, iocbpp) }
}

/// `io_destroy` as the kernel does it (waits for the context's requests, then unmaps its
/// ring): 0, or -1 with `errno` set.
pub fn io_destroy(ctx: libc::c_ulong) -> c_long {
    // SAFETY: io_destroy takes a context id by value; an unknown one fails with EINVAL.
    unsafe { libc::syscall(libc::SYS_io_destroy, ctx) }
}
