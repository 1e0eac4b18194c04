//! [`PageOutEngine`]: carries out swap writes of evicted chunks asynchronously, so the fault
//! handler can map the next chunk while earlier victims are still being written (seed 003,
//! section 4.3, "asynchronous paging").
//!
//! Two back ends, selected by [`PageOut`](crate::PageOut): a pool of writer threads doing
//! `pwrite` (checksums computed on the pool), or one io_uring the handler submits to itself
//! (checksums computed by the handler). Both report completions through an eventfd the handler
//! polls beside its userfaultfd.

use std::os::fd::RawFd;

use crate::thread_pool_writer::ThreadPoolWriter;
use crate::uring_writer::UringWriter;
use crate::write_job::{WriteDone, WriteJob};

/// The asynchronous writer of a region.
#[derive(Debug)]
pub(crate) enum PageOutEngine {
    Threads(ThreadPoolWriter),
    Uring(Box<UringWriter>),
}

impl PageOutEngine {
    /// Starts writing `job`.
    pub fn submit(&mut self, job: WriteJob) {
        match self {
            Self::Threads(t) => t.submit(job),
            Self::Uring(u) => u.submit(job),
        }
    }

    /// Moves every finished write into `out` (never blocks).
    pub fn take_done(&mut self, out: &mut Vec<WriteDone>) {
        match self {
            Self::Threads(t) => t.take_done(out),
            Self::Uring(u) => u.take_done(out),
        }
    }

    /// Becomes readable when a write has finished.
    pub fn completion_fd(&self) -> RawFd {
        match self {
            Self::Threads(t) => t.completion_fd(),
            Self::Uring(u) => u.completion_fd(),
        }
    }

    /// How many writes may be in flight at once.
    pub fn depth(&self) -> usize {
        match self {
            Self::Threads(t) => t.depth(),
            Self::Uring(u) => u.depth(),
        }
    }
}
