//! [`run_on_worker`]: the one thread of the library that talks to the pager's fault handlers
//! on behalf of the program's threads.
//!
//! A program thread reaches `munmap`/`madvise` with its allocator's locks held (jemalloc
//! purging, for one). Asking a region's handler for a change (`Region::discard`,
//! `set_budget`) blocks on a channel, and the first blocking receive on a thread registers a
//! thread-local destructor through glibc's `__cxa_thread_atexit_impl`, which calls the
//! *program's* `calloc`: on a thread that holds the allocator's lock, that is a deadlock (seen
//! with redis in development). So program threads only hand the job to this worker through a
//! mutex and a condition variable (futexes: no allocation, no thread-local state) and wait;
//! the worker, warmed up at library start before the program runs, does the call.

use std::sync::{Condvar, Mutex};

/// A job and its answer.
type Job = Box<dyn FnOnce() -> Result<(), libc::c_int> + Send>;

enum Slot {
    Idle,
    Pending(Job),
    Done(Result<(), libc::c_int>),
}

/// One caller at a time.
static CALLER: Mutex<()> = Mutex::new(());
static SLOT: Mutex<Slot> = Mutex::new(Slot::Idle);
static POSTED: Condvar = Condvar::new();
static FINISHED: Condvar = Condvar::new();

/// Run first by the worker: inside the library for good, and following the program's
/// credential changes.
fn worker_start() {
    crate::shim_guard::ShimGuard::enter_forever();
    crate::library_init::prepare_library_thread();
}

/// Starts the worker thread (returns once it has started).
pub fn start() -> std::io::Result<()> {
    memvisor_pager::spawn_started("memvisor-worker".into(), worker_start, || {
        let mut slot = SLOT.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Slot::Pending(_) = &*slot {
                let Slot::Pending(job) = std::mem::replace(&mut *slot, Slot::Idle) else {
                    continue;
                };
                drop(slot);
                let result = job();
                slot = SLOT.lock().unwrap_or_else(|e| e.into_inner());
                *slot = Slot::Done(result);
                FINISHED.notify_all();
            } else {
                slot = POSTED.wait(slot).unwrap_or_else(|e| e.into_inner());
            }
        }
    })
    .map(|_| ())
}

/// Runs `job` on the worker and returns its result.
pub fn run_on_worker(
    job: impl FnOnce() -> Result<(), libc::c_int> + Send + 'static,
) -> Result<(), libc::c_int> {
    let _one = CALLER.lock().unwrap_or_else(|e| e.into_inner());
    let mut slot = SLOT.lock().unwrap_or_else(|e| e.into_inner());
    *slot = Slot::Pending(Box::new(job));
    POSTED.notify_all();
    loop {
        if let Slot::Done(r) = &*slot {
            let r = *r;
            *slot = Slot::Idle;
            return r;
        }
        slot = FINISHED.wait(slot).unwrap_or_else(|e| e.into_inner());
    }
}
