//! [`PageOutEngine`]: carries out swap writes of evicted chunks asynchronously, so the fault
//! handler can map the next chunk while earlier victims are still being written (seed 003,
//! section 4.3, "asynchronous paging").
//!
//! Two back ends, selected by [`PageOut`](crate::PageOut): a pool of writer threads doing
//! `pwrite` (checksums computed on the pool), or one io_uring the handler submits to itself
//! (checksums computed by the handler). Both report completions through an eventfd the handler
//! polls beside its userfaultfd.

use std::io;
use std::os::fd::RawFd;

use crate::swap_file::ChunkWrite;
use crate::thread_pool_writer::ThreadPoolWriter;
use crate::uring_writer::UringWriter;

/// One chunk to write: `len` bytes at `addr` (the handler's alias mapping of the chunk).
#[derive(Debug)]
pub(crate) struct WriteJob {
    pub chunk: usize,
    pub addr: usize,
    pub len: usize,
    pub target: ChunkWrite,
}

// SAFETY: `addr` points into the region's alias mapping, which outlives every job: the handler
// waits for all writes in flight before it exits and the mapping is unmapped only after that.
// Nobody writes the chunk while its job is in flight (the handler dropped the program's
// page-table entries for it and serves no fault there until the write completes).
unsafe impl Send for WriteJob {}

/// A finished write: the chunk and its CRC32C, or the error.
#[derive(Debug)]
pub(crate) struct WriteDone {
    pub chunk: usize,
    pub result: io::Result<u32>,
}

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
