//! [`RemotePages`]: what a region's fault handler tells a post-copy migration about the pages
//! whose content is still at the source (seed 003's post-copy variant): how many are left, and
//! which ones a fault waits for, so the migration asks the source for those first.
//!
//! The handler owns which pages are remote (its chunk table); this is only its report, shared
//! with the migration thread: a list of wanted region pages and an eventfd that becomes
//! readable when the list is not empty, so the migration thread can `poll` it beside its
//! connection.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::event_fd::EventFd;

/// Most wanted pages kept waiting for the migration thread; more are dropped (the source
/// sends every remote page anyway, a dropped want only loses its priority).
const MAX_WANTED: usize = 65_536;

/// The remote pages' report of one region.
#[derive(Debug)]
pub(crate) struct RemotePages {
    /// Pages whose content is at the source, as the handler counts them.
    left: AtomicUsize,
    /// Faults that found their page remote and waited for it.
    waited_faults: AtomicU64,
    /// Region pages faults wait for, not yet taken by the migration thread.
    wanted: Mutex<Vec<usize>>,
    /// Readable while `wanted` may be non-empty.
    ready: EventFd,
}

impl RemotePages {
    pub fn new(ready: EventFd) -> Self {
        Self {
            left: AtomicUsize::new(0),
            waited_faults: AtomicU64::new(0),
            wanted: Mutex::new(Vec::new()),
            ready,
        }
    }

    /// The handler's count of remote pages changed to `left`.
    pub fn set_left(&self, left: usize) {
        self.left.store(left, Ordering::Release);
    }

    /// How many pages are remote.
    pub fn left(&self) -> usize {
        self.left.load(Ordering::Acquire)
    }

    /// A fault waits for region page `page`: the migration should fetch it first.
    pub fn want(&self, page: usize) {
        self.waited_faults.fetch_add(1, Ordering::Relaxed);
        let Ok(mut w) = self.wanted.lock() else {
            return;
        };
        if w.len() >= MAX_WANTED {
            return;
        }
        let first = w.is_empty();
        w.push(page);
        drop(w);
        if first {
            self.ready.signal();
        }
    }

    /// The wanted pages since the last call, in the order their faults came (a page may be
    /// listed twice).
    pub fn take_wanted(&self) -> Vec<usize> {
        self.ready.clear();
        self.wanted
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default()
    }

    /// Faults that waited for a remote page so far.
    pub fn waited_faults(&self) -> u64 {
        self.waited_faults.load(Ordering::Relaxed)
    }
}

impl AsRawFd for RemotePages {
    /// The descriptor that is readable while wanted pages wait to be taken.
    fn as_raw_fd(&self) -> RawFd {
        self.ready.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fd_readiness::readable_within;

    fn readable(fd: RawFd) -> bool {
        readable_within(fd, 0).unwrap()
    }

    #[test]
    fn wants_wake_the_descriptor_until_taken() {
        let r = RemotePages::new(EventFd::new().unwrap());
        assert!(!readable(r.as_raw_fd()));
        r.want(7);
        r.want(3);
        assert!(readable(r.as_raw_fd()));
        assert_eq!(r.take_wanted(), vec![7, 3]);
        assert!(!readable(r.as_raw_fd()));
        assert!(r.take_wanted().is_empty());
        assert_eq!(r.waited_faults(), 2);
        r.set_left(5);
        assert_eq!(r.left(), 5);
    }
}
