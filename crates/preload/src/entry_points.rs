//! The C symbols this library interposes: `mmap`, `mmap64`, `munmap`, `madvise`, `mremap`.
//! Each forwards to [`interposer`](crate::interposer).
//!
//! `mremap` is variadic in C (`new_address` only with `MREMAP_FIXED`). It is declared here
//! with five fixed arguments: on x86-64 (System V) and AArch64 (Linux, AAPCS64) variadic
//! integer and pointer arguments travel in the same registers as fixed ones, so the fifth
//! argument is the caller's `new_address` when one was passed (and ignored otherwise).

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
compile_error!("the mremap entry point relies on the x86-64 or AArch64 Linux calling convention");

use libc::{c_int, c_void, off_t, size_t};

use crate::interposer;

/// `mmap(2)`, managed.
///
/// # Safety
///
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded with the caller's contract.
    unsafe { interposer::mmap(addr, len, prot, flags, fd, off) }
}

/// `mmap64(2)` (the same call on 64-bit Linux; programs built with
/// `_FILE_OFFSET_BITS=64`, QEMU among them, call this name).
///
/// # Safety
///
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: forwarded with the caller's contract.
    unsafe { interposer::mmap(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`, managed.
///
/// # Safety
///
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { interposer::munmap(addr, len) }
}

/// `madvise(2)`, managed.
///
/// # Safety
///
/// As `madvise(2)`.
#[no_mangle]
pub unsafe extern "C" fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { interposer::madvise(addr, len, advice) }
}

/// `mremap(2)`, managed (see the module documentation for the variadic argument).
///
/// # Safety
///
/// As `mremap(2)`.
#[no_mangle]
pub unsafe extern "C" fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: forwarded with the caller's contract.
    unsafe { interposer::mremap(old, old_len, new_len, flags, new_addr) }
}
