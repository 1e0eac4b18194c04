//! [`RegionCommand`] and [`CommandQueue`]: what other threads ask of a region's fault handler at
//! run time (new budget, new policy, discard a range), and how the request reaches it.
//!
//! The handler thread owns all of a region's paging state, so a change is made by that thread,
//! between two faults: the caller puts its command in the queue's single slot, wakes the
//! handler's `poll` through an eventfd and waits on a condition variable for the answer.
//!
//! Submitting allocates nothing and touches no thread-local state (a mutex, a condition
//! variable and an eventfd write): an `LD_PRELOAD` shim calls it from inside the program's own
//! `munmap` or `madvise`, where the program's allocator may hold its locks.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use memvisor_policy::PolicySpec;

use crate::event_fd::EventFd;
use crate::image_file::{FileKey, ImageFile, ReadEpoch};
use crate::migration_pages::{InstallOutcome, MigrationPages};
use crate::pager_error::PagerError;

/// A change to a running region.
#[derive(Debug)]
pub(crate) enum RegionCommand {
    /// At most this many chunks resident from now on (evicting at once if more are).
    SetBudget(usize),
    /// Replace the policy; the resident chunks are carried over in the old policy's eviction
    /// order.
    SetPolicy(PolicySpec),
    /// `[offset, offset + len)` reads as zeros afterwards (page-aligned, inside the region).
    Discard { offset: usize, len: usize },
    /// A file read is about to overwrite `[offset, offset + len)` (inside the region): the
    /// false-read preventer.
    PrepareOverwrite { offset: usize, len: usize },
    /// A complete read of `len` bytes at `file_offset` of `image` landed in
    /// `[offset, offset + len)`, started at `epoch`: the swap mapper's associations.
    Associate {
        offset: usize,
        len: usize,
        image: Arc<ImageFile>,
        file_offset: u64,
        epoch: ReadEpoch,
    },
    /// Bytes `[from, to)` of the image `image` are about to be written (or discarded).
    ImageWritten { image: FileKey, from: u64, to: u64 },
    /// Nothing: answered once every command posted before it was carried out.
    Barrier,
    /// A live migration's request.
    Migration(MigrationRequest),
}

/// What a live migration asks of a region's handler; answers go back through the shared slot
/// each request carries (filled before the command is answered).
#[derive(Debug)]
pub(crate) enum MigrationRequest {
    /// Start (`true`) or stop tracking which pages change.
    TrackChanges(bool),
    /// The chunks to send, most valuable first.
    Order(Arc<Mutex<Vec<usize>>>),
    /// Read each run (region page, count), each inside one chunk.
    Read {
        runs: Vec<(usize, usize)>,
        out: Arc<Mutex<Vec<MigrationPages>>>,
    },
    /// The runs of pages changed since the last such request, as (region page, count).
    TakeChanged(Arc<Mutex<Vec<(usize, usize)>>>),
    /// Install each run (region page, whole pages of data; each inside one chunk), in order;
    /// with `only_remote`, only its pages that are still remote (post-copy).
    Install {
        runs: Vec<(usize, Vec<u8>)>,
        only_remote: bool,
        out: Arc<Mutex<InstallOutcome>>,
    },
    /// Post-copy: each run's pages (region page, count; inside one chunk) are remote: their
    /// content is at the source, and faults on them wait until it is installed.
    MarkRemote(Vec<(usize, usize)>),
    /// Post-copy: the pages still remote, as runs (region page, count) inside one chunk.
    RemoteRuns(Arc<Mutex<Vec<(usize, usize)>>>),
}

/// Most posted commands waiting at once; more are dropped (only associations are posted, and
/// a dropped one only means a page is not associated).
const MAX_POSTED: usize = 4096;

/// A post that makes the queue this long wakes the handler; shorter queues wait for its next
/// fault, submitted command or timer (at most [`POSTED_MAX_WAIT`]). Posted commands are
/// associations, which only matter when a page is evicted, and the handler evicts only while
/// serving faults and commands, taking the posted ones first. A TCG guest reading its disk at
/// 6,600 reads a second woke the handler 1,400 times a second when a post to an empty queue
/// woke it, each wake-up taking a CPU from QEMU's threads on this 2-CPU VM.
pub(crate) const POSTED_WAKE_AT: usize = 512;

/// The longest a posted command waits for the handler while it sleeps (for the status's
/// counts to follow).
pub(crate) const POSTED_MAX_WAIT: Duration = Duration::from_millis(100);

/// How long a caller of [`CommandQueue::submit`] looks for the answer before it sleeps.
const ANSWER_SPIN: Duration = Duration::from_micros(50);

/// The slot one command and its answer pass through.
#[derive(Debug, Default)]
struct Slot {
    command: Option<RegionCommand>,
    answer: Option<Result<(), PagerError>>,
    /// Set by the handler when it stops: no command will be answered any more.
    closed: bool,
}

/// One command at a time between callers and the handler.
#[derive(Debug)]
pub(crate) struct CommandQueue {
    /// Held by a caller from submitting until it has its answer: one command in flight.
    turn: Mutex<()>,
    /// Commands posted without waiting for an answer, carried out in order before the slot's.
    posted: Mutex<std::collections::VecDeque<RegionCommand>>,
    slot: Mutex<Slot>,
    answered: Condvar,
    pub wake: EventFd,
}

impl CommandQueue {
    pub fn new(wake: EventFd) -> Self {
        Self {
            turn: Mutex::new(()),
            posted: Mutex::new(std::collections::VecDeque::new()),
            slot: Mutex::new(Slot::default()),
            answered: Condvar::new(),
            wake,
        }
    }

    /// Hands `cmd` to the handler, wakes it and waits for its answer. `region` names the region
    /// in the error if the handler is gone.
    pub fn submit(&self, region: &str, cmd: RegionCommand) -> Result<(), PagerError> {
        let Ok(_turn) = self.turn.lock() else {
            return Err(Self::gone(region));
        };
        let Ok(mut slot) = self.slot.lock() else {
            return Err(Self::gone(region));
        };
        if slot.closed {
            return Err(Self::gone(region));
        }
        slot.command = Some(cmd);
        slot.answer = None;
        self.wake.signal();
        // Most commands take the handler microseconds: look for the answer without sleeping
        // for a while first (a sleep and a cross-CPU wake-up cost tens of microseconds here).
        let spin_until = Instant::now() + ANSWER_SPIN;
        loop {
            if let Some(a) = slot.answer.take() {
                return a;
            }
            if slot.closed {
                return Err(Self::gone(region));
            }
            if Instant::now() < spin_until {
                drop(slot);
                std::thread::yield_now();
                slot = match self.slot.lock() {
                    Ok(s) => s,
                    Err(_) => return Err(Self::gone(region)),
                };
                continue;
            }
            slot = match self.answered.wait(slot) {
                Ok(s) => s,
                Err(_) => return Err(Self::gone(region)),
            };
        }
    }

    /// Hands `cmd` to the handler without waiting: it is carried out before the next
    /// submitted command. `false` if the handler is gone or too many are waiting (dropped).
    /// Allocates (the queue grows): not for callers inside the program's allocator.
    ///
    /// Only the post that makes the queue [`POSTED_WAKE_AT`] long wakes the handler, so that a
    /// busy I/O thread (an association per read) costs one wake-up per batch, not one per
    /// read; the handler takes shorter queues at its next fault, submitted command or timer
    /// ([`POSTED_MAX_WAIT`] at most while any wait).
    pub fn post(&self, cmd: RegionCommand) -> bool {
        if self.slot.lock().map(|s| s.closed).unwrap_or(true) {
            return false;
        }
        let Ok(mut q) = self.posted.lock() else {
            return false;
        };
        if q.len() >= MAX_POSTED {
            return false;
        }
        q.push_back(cmd);
        let wake = q.len() == POSTED_WAKE_AT;
        drop(q);
        if wake {
            self.wake.signal();
        }
        true
    }

    /// Whether a command was submitted and not yet taken (posted ones aside).
    pub fn has_submitted(&self) -> bool {
        self.slot
            .lock()
            .map(|s| s.command.is_some())
            .unwrap_or(false)
    }

    /// Whether posted commands wait to be taken.
    pub fn has_posted(&self) -> bool {
        self.posted.lock().map(|q| !q.is_empty()).unwrap_or(false)
    }

    /// Takes the next posted command, if any (no answer is expected).
    pub fn take_posted(&self) -> Option<RegionCommand> {
        self.posted.lock().ok()?.pop_front()
    }

    /// Takes the pending command, if any (the handler answers it with [`answer`]). The handler
    /// clears the wake-up eventfd before it looks for commands, so none is missed.
    ///
    /// [`answer`]: Self::answer
    pub fn take(&self) -> Option<RegionCommand> {
        self.slot.lock().ok()?.command.take()
    }

    /// Delivers the answer to the command last taken.
    pub fn answer(&self, a: Result<(), PagerError>) {
        if let Ok(mut slot) = self.slot.lock() {
            slot.answer = Some(a);
            self.answered.notify_all();
        }
    }

    /// The handler stops: callers waiting now, and later ones, get an error.
    pub fn close(&self) {
        if let Ok(mut slot) = self.slot.lock() {
            slot.closed = true;
            slot.command = None;
            self.answered.notify_all();
        }
        if let Ok(mut q) = self.posted.lock() {
            q.clear();
        }
    }

    fn gone(region: &str) -> PagerError {
        PagerError::Config(format!("{region}: the fault handler is not running"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_command_is_answered_and_a_closed_queue_refuses() {
        let q = Arc::new(CommandQueue::new(EventFd::new().unwrap()));
        let handler = {
            let q = q.clone();
            std::thread::spawn(move || {
                let mut served = 0;
                while served < 2 {
                    if let Some(cmd) = q.take() {
                        served += 1;
                        let r = match cmd {
                            RegionCommand::SetBudget(0) => Err(PagerError::Config("zero".into())),
                            _ => Ok(()),
                        };
                        q.answer(r);
                    }
                    std::thread::yield_now();
                }
                q.close();
            })
        };
        assert!(q.submit("r", RegionCommand::SetBudget(3)).is_ok());
        let e = q.submit("r", RegionCommand::SetBudget(0)).unwrap_err();
        assert!(e.to_string().contains("zero"), "{e}");
        handler.join().unwrap();
        let e = q
            .submit("r", RegionCommand::Discard { offset: 0, len: 1 })
            .unwrap_err();
        assert!(e.to_string().contains("not running"), "{e}");
    }

    /// Whether `fd` becomes readable within `ms` milliseconds.
    fn readable(fd: std::os::fd::RawFd, ms: i32) -> bool {
        crate::fd_readiness::readable_within(fd, ms).unwrap()
    }

    /// Posts from several threads at once, against a handler that sleeps on the eventfd (or at
    /// most a millisecond, its timer), clears it, then takes posted commands until the queue
    /// is empty (as the fault loop does): every post is taken, with about one wake-up per
    /// [`POSTED_WAKE_AT`] posts; a queue shorter than that wakes nobody.
    #[test]
    fn posts_wake_the_handler_once_a_batch() {
        use std::os::fd::AsRawFd;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::{Duration, Instant};
        const THREADS: usize = 4;
        const POSTS: usize = 5000;
        const TOTAL: usize = THREADS * POSTS;
        let q = Arc::new(CommandQueue::new(EventFd::new().unwrap()));
        // Below the mark: no wake-up.
        for i in 0..POSTED_WAKE_AT - 1 {
            assert!(q.post(RegionCommand::Discard { offset: i, len: 1 }));
        }
        assert!(q.has_posted());
        assert!(!readable(q.wake.as_raw_fd(), 0), "woken before the mark");
        assert!(q.post(RegionCommand::Discard { offset: 0, len: 1 }));
        assert!(readable(q.wake.as_raw_fd(), 0), "not woken at the mark");
        q.wake.clear();
        while q.take_posted().is_some() {}
        assert!(!q.has_posted());
        let taken = Arc::new(AtomicUsize::new(0));
        let handler = {
            let (q, taken) = (q.clone(), taken.clone());
            std::thread::spawn(move || {
                let mut wake_ups = 0;
                while taken.load(Ordering::SeqCst) < TOTAL {
                    if readable(q.wake.as_raw_fd(), 1) {
                        wake_ups += 1;
                    }
                    q.wake.clear();
                    while q.take_posted().is_some() {
                        taken.fetch_add(1, Ordering::SeqCst);
                    }
                }
                wake_ups
            })
        };
        let post = |q: &CommandQueue, offset| {
            while !q.post(RegionCommand::Discard { offset, len: 1 }) {
                std::thread::yield_now(); // the queue is full: retry
            }
        };
        std::thread::scope(|scope| {
            for t in 0..THREADS {
                let q = &q;
                scope.spawn(move || {
                    for i in 0..POSTS {
                        post(q, t * POSTS + i);
                    }
                });
            }
        });
        let started = Instant::now();
        while taken.load(Ordering::SeqCst) < TOTAL {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "posts left untaken"
            );
            std::thread::yield_now();
        }
        let wake_ups = handler.join().unwrap();
        assert!(
            wake_ups <= TOTAL / POSTED_WAKE_AT,
            "{wake_ups} wake-ups for {TOTAL} posts"
        );
    }
}
