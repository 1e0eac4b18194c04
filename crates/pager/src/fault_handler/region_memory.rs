//! [`RegionMemory`]: the memory a fault handler serves: the memfd, the address of its mapping
//! registered with the userfaultfd, its unregistered alias mapping, and the chunk geometry.

use crate::memfd::{page_size, Mapping, Memfd};

/// A region's memory, as its fault handler sees it.
#[derive(Debug)]
pub(crate) struct RegionMemory {
    pub memfd: Memfd,
    /// Unregistered second mapping of the memfd.
    pub alias: Mapping,
    /// Start address of the registered mapping (owned by the region, outlives the handler).
    pub base: usize,
    /// Page-rounded length of the region.
    pub len: usize,
    pub chunk_size: usize,
    pub page: usize,
}

impl RegionMemory {
    /// The memory of `memfd`, mapped at `base` (registered) and at `alias`, `len` bytes paged
    /// in chunks of `chunk_size`.
    pub fn new(memfd: Memfd, alias: Mapping, base: usize, len: usize, chunk_size: usize) -> Self {
        Self {
            memfd,
            alias,
            base,
            len,
            chunk_size,
            page: page_size(),
        }
    }

    /// How many chunks the region has (the last may be short).
    pub fn chunks(&self) -> usize {
        self.len.div_ceil(self.chunk_size)
    }

    /// Region offset and length of chunk `c`.
    pub fn chunk_range(&self, c: usize) -> (usize, usize) {
        let start = c * self.chunk_size;
        (start, self.chunk_size.min(self.len - start))
    }
}
