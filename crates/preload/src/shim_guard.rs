//! [`ShimGuard`]: keeps the library's own threads and start-up from being given managed
//! memory, and recognizes the pager's threads.
//!
//! While a thread is inside the library (starting up, serving the control socket), a new
//! mapping it causes (through glibc's internal use of the program's `malloc`, say) goes to
//! the kernel instead of the arena. The pager's fault-handler threads (named `pager-N`) are
//! never given managed memory either: a handler faulting on memory it pages itself would wait
//! for itself. `munmap`, `madvise` and `mremap` of managed memory are handled whoever calls
//! them.

use std::cell::Cell;

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
    /// 0 unknown, 1 a pager thread, 2 not.
    static PAGER_THREAD: Cell<u8> = const { Cell::new(0) };
    /// A thread the library started (see [`mark_library_thread`]).
    static LIBRARY_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// Marks the current thread as inside the library until dropped.
#[derive(Debug)]
pub struct ShimGuard(());

impl ShimGuard {
    /// Enters the library; `None` if this thread already is inside it.
    pub fn enter() -> Option<Self> {
        INSIDE.with(|i| {
            if i.get() {
                None
            } else {
                i.set(true);
                Some(Self(()))
            }
        })
    }

    /// Marks the current thread as inside the library for good (the control threads).
    pub fn enter_forever() {
        INSIDE.with(|i| i.set(true));
    }
}

impl Drop for ShimGuard {
    fn drop(&mut self) {
        INSIDE.with(|i| i.set(false));
    }
}

/// Marks the current thread as one the library started (fault handlers, writers, readahead,
/// control and migration threads): no mapping it makes is managed, whatever it maps through
/// (glibc's internal use of the program's `malloc`, jemalloc's arena of the library's threads
/// in `library_malloc_arena`).
pub fn mark_library_thread() {
    LIBRARY_THREAD.with(|l| l.set(true));
}

/// Whether a mapping the current thread makes must stay the kernel's: a pager thread's, or
/// one of a thread the library started. A thread given managed memory that it pages itself,
/// or that the program's allocator shares with a fault handler, could wait for itself.
pub fn gets_no_managed_memory() -> bool {
    LIBRARY_THREAD.with(|l| l.get()) || is_pager_thread()
}

/// Whether the current thread is one of the pager's fault-handler threads.
pub fn is_pager_thread() -> bool {
    PAGER_THREAD.with(|p| {
        if p.get() == 0 {
            let mut name = [0u8; 16];
            // SAFETY: PR_GET_NAME writes at most 16 bytes into the buffer.
            let r = unsafe { libc::prctl(libc::PR_GET_NAME, name.as_mut_ptr()) };
            let pager = r == 0 && name.starts_with(b"pager-");
            p.set(if pager { 1 } else { 2 });
        }
        p.get() == 1
    })
}
