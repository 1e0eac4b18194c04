//! [`ReadAhead`]: a round's reads, made on a thread of their own ahead of the sender.
//!
//! A migration read is carried out by the region's fault handler (from memory, the swap file
//! or a disk image); the sender thread would otherwise wait for each read, then authenticate
//! and send it, then ask for the next, so reading and sending never overlapped. With the reads
//! made ahead (at most [`READS_WAITING`] waiting), the handler reads the next chunks while
//! the sender sends the current one: on a source whose memory is mostly in swap, the swap
//! reads no longer add to round 0's time, and in the last round, with the guest paused, the
//! reads of scattered changes (about a quarter of that round's time when made in turn) overlap
//! with sending.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use memvisor_pager::{MigrationPages, PagerError, Region};

use crate::migration_error::MigrationError;

/// Reads made and waiting to be sent, at most (a few MiB: a read is one 1 MiB chunk in round
/// 0, at most 256 pages later).
pub const READS_WAITING: usize = 4;

/// One planned read: region index and the runs `(first region page, count)` to read, each
/// inside one chunk, read in one request to the region.
pub(crate) type PlannedRead = (usize, Vec<(usize, usize)>);

/// One read made: region index and the pages of each run, or why the read failed.
type MadeRead = (usize, Result<Vec<MigrationPages>, PagerError>);

/// The reads of a plan, made in order on a reader thread, handed out in order by
/// [`next`](Self::next). Dropping it stops the thread after the read it is making (if any).
pub(crate) struct ReadAhead {
    reads: Option<Receiver<MadeRead>>,
    /// Reads of the plan not handed out yet.
    remaining: usize,
    thread: Option<JoinHandle<()>>,
}

impl ReadAhead {
    /// Starts reading `plan` from `regions` on a thread that first runs `thread_start` (the
    /// embedder's preparation of its threads, as for the sender's own thread).
    pub(crate) fn start(
        regions: Vec<Arc<Region>>,
        plan: Vec<PlannedRead>,
        thread_start: fn(),
    ) -> Result<Self, MigrationError> {
        let remaining = plan.len();
        let (tx, rx) = sync_channel::<MadeRead>(READS_WAITING);
        let thread = memvisor_pager::spawn_started(
            "memvisor-migrate-read".into(),
            thread_start,
            move || {
                for (ri, runs) in plan {
                    let read = regions[ri].read_runs_for_migration(runs);
                    let failed = read.is_err();
                    // The receiver is gone (the sender stopped) or the read failed: stop.
                    if tx.send((ri, read)).is_err() || failed {
                        return;
                    }
                }
            },
        )
        .map_err(|source| MigrationError::Io {
            context: "starting the migration's read-ahead thread".into(),
            source,
        })?;
        Ok(Self {
            reads: Some(rx),
            remaining,
            thread: Some(thread),
        })
    }

    /// The next read of the plan (waiting for it), or `None` once all were handed out. A
    /// reader thread that ended before making them all (it panicked) is an error, never a
    /// silently shorter plan.
    pub(crate) fn next(&mut self) -> Option<Result<(usize, Vec<MigrationPages>), MigrationError>> {
        if self.remaining == 0 {
            return None;
        }
        let made = match self.reads.as_ref()?.recv() {
            Ok(made) => made,
            Err(_) => {
                return Some(Err(MigrationError::Io {
                    context: format!(
                        "the migration's read-ahead thread ended with {} reads not made",
                        self.remaining
                    ),
                    source: std::io::Error::other("the thread exited early"),
                }))
            }
        };
        self.remaining -= 1;
        let (ri, read) = made;
        Some(read.map(|pages| (ri, pages)).map_err(MigrationError::from))
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        // Closing the channel makes the thread's next hand-over fail: it stops there.
        drop(self.reads.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
