//! The io_uring C symbols this library interposes (liburing's `io_uring_submit`,
//! `io_uring_submit_and_wait` and `io_uring_queue_exit`, which QEMU's `aio=io_uring` calls, and
//! the other submitting calls):
//! before liburing publishes the submission queue entries it handed out since its last
//! submission, the library reads them ([`UringRings`], [`Sqe::request`]) and acts on
//! each as for `io_submit` ([`crate::aio_entry_points`]): a read into managed memory pins its
//! chunks, a read of an image into guest RAM gets the false-read preventer, a write to an image
//! ends the associations it overlaps. Then liburing's own function runs, and the completions
//! are found in the ring's completion queue ([`crate::aio_in_flight`]).
//!
//! The other liburing calls that submit (`io_uring_submit_and_wait_timeout`,
//! `io_uring_submit_and_get_events`, `io_uring_wait_cqes`, `io_uring_wait_cqe_timeout`) are
//! interposed the same way. Entries published without liburing (a program's own ring code and
//! the raw `io_uring_enter`) are not seen.
//! A ring this library cannot read (not liburing's layout, or entries of other sizes) is said
//! once and passed through.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use libc::{c_int, c_uint, c_void};
use memvisor_io_rings::{CompletionRing, IoRingsResult, OwnMemory, ProgramMemory, Sqe, UringRings};

use crate::aio_entry_points::{prepare, watching};
use crate::aio_in_flight::{self, ContextKind};
use crate::entry_points::next_symbol;
use crate::shim_guard::ShimGuard;

/// Rings checked so far, forgotten at `io_uring_queue_exit` (a submission then reads liburing's
/// structure and the entries, not the queue sizes again).
static CHECKED: Mutex<Vec<UringRings>> = Mutex::new(Vec::new());

fn checked() -> MutexGuard<'static, Vec<UringRings>> {
    CHECKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The entries about to be submitted of the ring at `ring`, and the ring (checked again if it
/// was set up again since it was checked).
fn unsubmitted(ring: usize) -> IoRingsResult<(UringRings, Vec<Sqe>)> {
    let known = checked().iter().find(|r| r.address() == ring).copied();
    if let Some(r) = known {
        if let Ok(entries) = r.unsubmitted() {
            return Ok((r, entries));
        }
    }
    let r = UringRings::at(OwnMemory, ring)?;
    let entries = r.unsubmitted()?;
    let mut list = checked();
    list.retain(|k| k.address() != ring);
    list.push(r);
    Ok((r, entries))
}

/// Reads the entries of `ring` about to be submitted and acts on them (see the module
/// documentation). Called inside the library.
fn before_submit(ring: *mut c_void) {
    let (rings, entries) = match unsubmitted(ring as usize) {
        Ok(found) => found,
        Err(e) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "memvisor-preload: io_uring at {ring:p} is not followed ({e}): its reads \
                     into managed memory are neither pinned nor associated"
                );
            }
            return;
        }
    };
    let mut requests = Vec::new();
    for sqe in &entries {
        // Copied, not dereferenced: an entry's address is what the program wrote there (the
        // kernel refuses a bad one, and so does this copy).
        let request = sqe.request(|at, n| OwnMemory.iovecs(at, n));
        requests.extend(prepare(sqe.user_data, request));
    }
    aio_in_flight::register(
        rings.completion_queue(),
        ContextKind::Uring,
        || {
            rings
                .completions()
                .ok()
                .map(|c| Box::new(c) as Box<dyn CompletionRing>)
        },
        requests,
    );
}

/// A liburing function that publishes the entries handed out since the last submission (and
/// may wait for completions): the library reads those entries first.
macro_rules! submitting_entry {
    ($(#[$doc:meta])* $name:ident ($($arg:ident: $ty:ty),*)) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As liburing's function: `ring` is a ring set up by liburing, the other arguments
        /// valid for it.
        #[no_mangle]
        pub unsafe extern "C" fn $name(ring: *mut c_void $(, $arg: $ty)*) -> c_int {
            let Some(real) =
                next_symbol!($name, unsafe extern "C" fn(*mut c_void $(, $ty)*) -> c_int)
            else {
                return -libc::ENOSYS;
            };
            if watching() && !ring.is_null() {
                if let Some(_guard) = ShimGuard::enter() {
                    before_submit(ring);
                }
            }
            // SAFETY: liburing's own function, with the program's own arguments.
            unsafe { real(ring $(, $arg)*) }
        }
    };
}

submitting_entry!(
    /// `io_uring_submit(3)` (QEMU's submission).
    io_uring_submit()
);
submitting_entry!(
    /// `io_uring_submit_and_wait(3)` (QEMU's, when its submission queue is full).
    io_uring_submit_and_wait(wait_nr: c_uint)
);
submitting_entry!(
    /// `io_uring_submit_and_wait_timeout(3)`.
    io_uring_submit_and_wait_timeout(
        cqe: *mut *mut c_void,
        wait_nr: c_uint,
        ts: *mut c_void,
        sigmask: *mut c_void
    )
);
submitting_entry!(
    /// `io_uring_submit_and_get_events(3)`.
    io_uring_submit_and_get_events()
);
submitting_entry!(
    /// `io_uring_wait_cqes(3)`, which submits what was handed out before waiting.
    io_uring_wait_cqes(
        cqe: *mut *mut c_void,
        wait_nr: c_uint,
        ts: *mut c_void,
        sigmask: *mut c_void
    )
);
submitting_entry!(
    /// `io_uring_wait_cqe_timeout(3)`, which submits what was handed out before waiting.
    io_uring_wait_cqe_timeout(cqe: *mut *mut c_void, ts: *mut c_void)
);

/// `io_uring_queue_exit(3)` (liburing): the ring's requests the library follows are finished
/// (no completion is ever delivered after it), and its rings are never read again.
///
/// # Safety
///
/// As `io_uring_queue_exit(3)`: `ring` is a ring set up by liburing.
#[no_mangle]
pub unsafe extern "C" fn io_uring_queue_exit(ring: *mut c_void) {
    let Some(real) = next_symbol!(io_uring_queue_exit, unsafe extern "C" fn(*mut c_void)) else {
        return;
    };
    let Some(_guard) = ShimGuard::enter() else {
        // SAFETY: liburing's own function, with the program's own argument.
        return unsafe { real(ring) };
    };
    let id = {
        let mut list = checked();
        let at = list.iter().position(|k| k.address() == ring as usize);
        at.map(|i| list.swap_remove(i).completion_queue())
    };
    let left = id.map(aio_in_flight::destroying).unwrap_or_default();
    // SAFETY: liburing's own function, with the program's own argument.
    unsafe { real(ring) };
    aio_in_flight::finish_without_results(left);
}
