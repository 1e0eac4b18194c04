//! [`ReadAhead`]: round 0's chunk reads, made on a thread of their own ahead of the sender.
//!
//! A migration read is carried out by the region's fault handler (from memory, the swap file
//! or a disk image); the sender thread would otherwise wait for each read, then authenticate
//! and send it, then ask for the next, so reading and sending never overlapped. With the reads
//! made ahead (at most [`READ_AHEAD_CHUNKS`] waiting), the handler reads the next chunks while
//! the sender sends the current one: on a source whose memory is mostly in swap, the swap
//! reads no longer add to the migration's time.

use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use memvisor_pager::{MigrationPages, PagerError, Region};

use crate::migration_error::MigrationError;

/// Chunks read and waiting to be sent, at most (a few MiB with 1 MiB chunks).
pub const READ_AHEAD_CHUNKS: usize = 4;

/// One planned read: region index, first region page, page count (inside one chunk).
pub(crate) type PlannedRead = (usize, usize, usize);

/// One read made: region index and the pages, or why the read failed.
type MadeRead = (usize, Result<MigrationPages, PagerError>);

/// The reads of a plan, made in order on a reader thread, handed out in order by
/// [`next`](Self::next). Dropping it stops the thread after the read it is making (if any).
pub(crate) struct ReadAhead {
    reads: Option<Receiver<MadeRead>>,
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
        let (tx, rx) = sync_channel::<MadeRead>(READ_AHEAD_CHUNKS);
        let thread = memvisor_pager::spawn_started(
            "memvisor-migrate-read".into(),
            thread_start,
            move || {
                for (ri, first, pages) in plan {
                    let read = regions[ri].read_for_migration(first, pages);
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
            thread: Some(thread),
        })
    }

    /// The next read of the plan (waiting for it), or `None` once all were handed out.
    pub(crate) fn next(&mut self) -> Option<Result<(usize, MigrationPages), MigrationError>> {
        let (ri, read) = self.reads.as_ref()?.recv().ok()?;
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
