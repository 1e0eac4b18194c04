//! [`WriteJob`] and [`WriteDone`]: a chunk write handed to a page-out back end, and its
//! outcome. Shared by the [`PageOutEngine`](crate::page_out_engine::PageOutEngine) and its
//! writers, which depend on this module only.

use std::io;

use crate::swap_file::ChunkWrite;

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
