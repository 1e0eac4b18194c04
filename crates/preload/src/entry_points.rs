//! The C symbols this library interposes: `mmap`, `mmap64`, `munmap`, `madvise`, `mprotect`,
//! `pkey_mprotect`, `mremap`, each forwarded to [`interposer`](crate::interposer); `fork` and
//! `_Fork`, refused while the program's heap is managed; and the
//! credential changes (`setuid`, `setresgid`, `setgroups` and the rest), which first let the
//! library's threads take the caller's capabilities
//! ([`credential_mirror`](crate::credential_mirror)) and then call glibc's.
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

/// `mprotect(2)`, managed.
///
/// # Safety
///
/// As `mprotect(2)`.
#[no_mangle]
pub unsafe extern "C" fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { interposer::mprotect(addr, len, prot) }
}

/// `pkey_mprotect(2)`: the range's reservations are forgotten (see
/// [`reservations`](crate::reservations)), then the kernel does the call.
///
/// # Safety
///
/// As `pkey_mprotect(2)`.
#[no_mangle]
pub unsafe extern "C" fn pkey_mprotect(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    pkey: c_int,
) -> c_int {
    // SAFETY: forwarded with the caller's contract.
    unsafe { interposer::pkey_mprotect(addr, len, prot, pkey) }
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

/// Looks up the next definition of the symbol `name` (glibc's) once, as a function of type
/// `ty`; `None` if there is none.
macro_rules! next_symbol {
    ($name:ident, $ty:ty) => {{
        static NEXT: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let addr = *NEXT.get_or_init(|| {
            // SAFETY: dlsym with RTLD_NEXT and a NUL-terminated name; a null result is kept
            // as 0 and checked below.
            unsafe {
                libc::dlsym(
                    libc::RTLD_NEXT,
                    concat!(stringify!($name), "\0").as_ptr().cast(),
                ) as usize
            }
        });
        if addr == 0 {
            None
        } else {
            // SAFETY: the symbol is glibc's function of this name, whose C type is `$ty`.
            Some(unsafe { std::mem::transmute::<usize, $ty>(addr) })
        }
    }};
}

pub(crate) use next_symbol;

/// Refuses a `fork` while the program's heap is managed memory (`memvisor run --malloc
/// jemalloc`): managed memory is not inherited (`MADV_DONTFORK`), so the child would lack
/// its heap, even the strings of an `exec` it would make, and the fork itself could wait
/// forever (jemalloc's fork handler locks arenas whose pages the pager may have evicted,
/// after the library's heap lock is taken). `None` lets the fork go ahead. Says so once.
fn fork_refused() -> Option<libc::pid_t> {
    use std::sync::atomic::{AtomicBool, Ordering};
    static SAID: AtomicBool = AtomicBool::new(false);
    if !(crate::managed_process::ACTIVE.load(Ordering::Acquire)
        && crate::managed_process::HEAP_MANAGED.load(Ordering::Acquire))
    {
        return None;
    }
    if !SAID.swap(true, Ordering::AcqRel) {
        eprintln!(
            "memvisor-preload: fork refused (ENOMEM): the program's heap is paged by memvisor \
             (memvisor run --malloc jemalloc) and a child would not have it; run with \
             --malloc program to fork"
        );
    }
    crate::raw_calls::set_errno(libc::ENOMEM);
    Some(-1)
}

/// glibc's fork function `real` (`None`: there is none, ENOSYS), unless [`fork_refused`].
///
/// # Safety
///
/// As `fork(2)`; `real` is glibc's `fork` or `_Fork`.
unsafe fn fork_unless_refused(real: Option<unsafe extern "C" fn() -> libc::pid_t>) -> libc::pid_t {
    if let Some(r) = fork_refused() {
        return r;
    }
    match real {
        // SAFETY: glibc's fork function, called as the program called ours.
        Some(real) => unsafe { real() },
        None => {
            crate::raw_calls::set_errno(libc::ENOSYS);
            -1
        }
    }
}

/// `fork(2)`: refused while the program's heap is managed ([`fork_refused`]), else glibc's.
///
/// # Safety
///
/// As `fork(2)`.
#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let real = next_symbol!(fork, unsafe extern "C" fn() -> libc::pid_t);
    // SAFETY: the caller's contract; glibc's `fork` passed on.
    unsafe { fork_unless_refused(real) }
}

/// `_Fork` (glibc 2.34: a fork without the fork handlers): refused likewise, else glibc's.
///
/// # Safety
///
/// As `_Fork`.
#[no_mangle]
pub unsafe extern "C" fn _Fork() -> libc::pid_t {
    let real = next_symbol!(_Fork, unsafe extern "C" fn() -> libc::pid_t);
    // SAFETY: the caller's contract; glibc's `_Fork` passed on.
    unsafe { fork_unless_refused(real) }
}

/// Defines a credential-changing entry point: the library's threads first take the caller's
/// capability state ([`credential_mirror`](crate::credential_mirror)), then glibc's function
/// changes the ids of every thread.
macro_rules! credential_change {
    ($(#[$doc:meta])* $name:ident ( $($arg:ident : $ty:ty),* )) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As the libc function.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> c_int {
            // Only a managed process has library threads (a forked child has none).
            if crate::managed_process::ACTIVE.load(std::sync::atomic::Ordering::Acquire) {
                crate::credential_mirror::mirror_to_library_threads();
            }
            match next_symbol!($name, unsafe extern "C" fn($($ty),*) -> c_int) {
                // SAFETY: glibc's function, called with the caller's arguments and contract.
                Some(real) => unsafe { real($($arg),*) },
                None => {
                    crate::raw_calls::set_errno(libc::ENOSYS);
                    -1
                }
            }
        }
    };
}

credential_change!(
    /// `setuid(2)`, after the library's threads take the caller's capabilities.
    setuid(uid: libc::uid_t)
);
credential_change!(
    /// `setgid(2)`, likewise.
    setgid(gid: libc::gid_t)
);
credential_change!(
    /// `seteuid(2)`, likewise.
    seteuid(uid: libc::uid_t)
);
credential_change!(
    /// `setegid(2)`, likewise.
    setegid(gid: libc::gid_t)
);
credential_change!(
    /// `setreuid(2)`, likewise.
    setreuid(ruid: libc::uid_t, euid: libc::uid_t)
);
credential_change!(
    /// `setregid(2)`, likewise.
    setregid(rgid: libc::gid_t, egid: libc::gid_t)
);
credential_change!(
    /// `setresuid(2)`, likewise.
    setresuid(ruid: libc::uid_t, euid: libc::uid_t, suid: libc::uid_t)
);
credential_change!(
    /// `setresgid(2)`, likewise.
    setresgid(rgid: libc::gid_t, egid: libc::gid_t, sgid: libc::gid_t)
);
credential_change!(
    /// `setgroups(2)`, likewise.
    setgroups(size: size_t, list: *const libc::gid_t)
);
