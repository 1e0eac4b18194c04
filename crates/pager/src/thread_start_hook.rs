//! A hook every thread the pager starts runs first.
//!
//! The pager starts threads inside other programs (through the preload library), and a
//! program's threads are not the pager's: their signal masks, credentials and thread-local
//! state belong to the program. The embedder that needs to prepare the pager's threads (the
//! preload library lets them follow the program's credential changes, see its
//! `credential_mirror`) installs one function here; it runs at the start of each fault-handler,
//! writer and readahead thread. Without a hook nothing runs.

use std::sync::OnceLock;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Installs `hook`, run first by every thread the pager starts from now on. Only the first
/// installation counts; returns whether this one did.
pub fn set_thread_start_hook(hook: fn()) -> bool {
    HOOK.set(hook).is_ok()
}

/// Runs the hook, if one is installed (called by each pager thread as it starts).
pub(crate) fn run_thread_start_hook() {
    if let Some(hook) = HOOK.get() {
        hook();
    }
}
