//! SIGINT / SIGTERM / SIGHUP become a flag a long-running command polls, so it can undo what it
//! started (a benchmark its children, swap file and cgroups; `memvisor migrate` both
//! migrations) instead of dying with them in place.

use std::sync::atomic::{AtomicBool, Ordering};

static REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    REQUESTED.store(true, Ordering::SeqCst);
}

/// Installs the handlers (idempotent).
pub fn install() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `sigaction` is plain data for which all-zero is valid (empty mask, no flags).
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        sa.sa_sigaction = on_signal as *const () as libc::sighandler_t;
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; `sa` is a
        // valid sigaction and the old action is not requested.
        unsafe {
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Whether a termination signal arrived since [`install`].
pub fn requested() -> bool {
    REQUESTED.load(Ordering::SeqCst)
}
