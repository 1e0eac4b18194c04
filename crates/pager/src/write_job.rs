//! [`WriteJob`] and [`WriteDone`]: a write of a run of pages of one chunk handed to a page-out
//! back end, and its outcome. Shared by the [`PageOutEngine`](crate::page_out_engine::PageOutEngine) and its
//! writers, which depend on this module only.

use std::io;

use crate::swap_file::ChunkWrite;

/// One run of pages to write: `len` bytes at `addr` (the handler's alias mapping of the pages),
/// pages `first_page..` of chunk `chunk`.
#[derive(Debug)]
pub(crate) struct WriteJob {
    pub chunk: usize,
    pub first_page: usize,
    pub addr: usize,
    pub len: usize,
    pub target: ChunkWrite,
}

// SAFETY: `addr` points into the region's alias mapping, which outlives every job: the handler
// waits for all writes in flight before it exits and the mapping is unmapped only after that.
// Nobody writes the chunk while its job is in flight (the handler dropped the program's
// page-table entries for it and serves no fault there until the write completes).
unsafe impl Send for WriteJob {}

/// A finished write: the run (chunk, first page, page count) and the CRC32C of each page, or
/// the error.
#[derive(Debug)]
pub(crate) struct WriteDone {
    pub chunk: usize,
    pub first_page: usize,
    pub pages: usize,
    pub result: io::Result<Vec<u32>>,
}

impl WriteDone {
    /// The outcome of `job`.
    pub fn of(job: &WriteJob, result: io::Result<Vec<u32>>) -> Self {
        Self {
            chunk: job.chunk,
            first_page: job.first_page,
            pages: job.len / crate::swap_file::DIRECT_ALIGN,
            result,
        }
    }
}
