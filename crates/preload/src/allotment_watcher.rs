//! The allotment watcher: a library thread, started with the first fixed region (QEMU's guest
//! RAM or code buffer), that checks the allotments of code regions and of the arena when it
//! holds the program's heap, and rebalances the split when one changed
//! ([`managed_process::check_claims`], every [`ALLOTMENT_CHECK_PERIOD`]). Nothing else would:
//! the other claims change only at calls the library sees (`mmap`, `munmap`, a new budget),
//! an allotment as its region's handler pages.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::managed_process::{self, ALLOTMENT_CHECK_PERIOD};

static STARTED: AtomicBool = AtomicBool::new(false);

/// Run first by the watcher: inside the library for good, and following the program's
/// credential changes.
fn watcher_start() {
    crate::shim_guard::ShimGuard::enter_forever();
    crate::library_init::prepare_library_thread();
}

/// Starts the watcher once (later calls do nothing). If the thread cannot start, says so once:
/// the split then follows only the calls the library sees.
pub fn start() {
    if STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    let started = memvisor_pager::spawn_started("memvisor-allot".into(), watcher_start, || {
        let mut last = std::time::Instant::now();
        loop {
            std::thread::sleep(ALLOTMENT_CHECK_PERIOD);
            let now = std::time::Instant::now();
            managed_process::check_claims((now - last).as_secs_f64());
            last = now;
        }
    });
    if let Err(e) = started {
        eprintln!("memvisor-preload: cannot start the allotment watcher thread: {e}");
    }
}
