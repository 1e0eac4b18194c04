//! [`PageSource`]: memory the scanner can read, page by page, and [`LocalMemory`], a range of
//! this process's own memory (memvisor's regions).

use std::ops::Range;

use crate::{DedupError, PAGE_SIZE};

/// What a read found at one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageState {
    /// The page is in memory; its content was read. `frame` is the physical frame number when the
    /// source can tell (two pages with the same frame already share memory).
    Present {
        /// Physical frame number, if known.
        frame: Option<u64>,
    },
    /// Not in memory (never touched, or swapped out): not read, not counted as content.
    Absent,
    /// Mapped but unreadable (e.g. a guard page or a range unmapped meanwhile).
    Unreadable,
}

impl PageState {
    /// Whether the page is in memory and its bytes were read.
    pub fn is_present(self) -> bool {
        matches!(self, Self::Present { .. })
    }
}

/// Memory the scanner reads: one process, or a range of memvisor's own memory.
pub trait PageSource {
    /// A short name for reports and errors (`pid 1234`, `region vm0`).
    fn name(&self) -> String;

    /// The page-aligned address ranges to read in the next pass. A source that tracks writes
    /// returns only the pages written since the previous pass (and everything the first time).
    fn pass_ranges(&mut self) -> Result<Vec<Range<u64>>, DedupError>;

    /// Whether [`pass_ranges`](Self::pass_ranges) returns only changed pages, so pages outside
    /// them keep their indexed content; otherwise each pass re-indexes the source from scratch.
    fn is_incremental(&self) -> bool {
        false
    }

    /// Reads `buf.len() / PAGE_SIZE` pages starting at page-aligned `address` into `buf`, and
    /// each page's state into `states` (same number of pages). Contents of pages not `Present`
    /// are unspecified. Errors are about the whole source (the process exited, permission
    /// denied); a page that cannot be read is `Unreadable`.
    fn read(
        &mut self,
        address: u64,
        buf: &mut [u8],
        states: &mut [PageState],
    ) -> Result<(), DedupError>;
}

/// A range of this process's memory, read in place: memvisor's own regions.
#[derive(Debug)]
pub struct LocalMemory {
    name: String,
    start: usize,
    len: usize,
}

impl LocalMemory {
    /// A source over `[start, start + len)`, page-aligned.
    ///
    /// # Safety
    /// The range must stay mapped and readable for as long as the source is used.
    pub unsafe fn new(name: impl Into<String>, start: *const u8, len: usize) -> Self {
        Self {
            name: name.into(),
            start: start as usize,
            len,
        }
    }

    /// Start address.
    pub fn start(&self) -> usize {
        self.start
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies pages of `[address, address + buf.len())` (inside the range) into `buf`.
    pub(crate) fn copy(&self, address: u64, buf: &mut [u8]) -> Result<(), DedupError> {
        let a = address as usize;
        if a < self.start || a + buf.len() > self.start + self.len {
            return Err(DedupError::InvalidArgument(format!(
                "{}: read of {:#x}+{:#x} outside the range",
                self.name,
                address,
                buf.len()
            )));
        }
        // SAFETY: the constructor's contract keeps the range mapped and readable, and the read
        // lies inside it; the buffer is a distinct, writable allocation.
        unsafe { std::ptr::copy_nonoverlapping(a as *const u8, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }
}

impl PageSource for LocalMemory {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn pass_ranges(&mut self) -> Result<Vec<Range<u64>>, DedupError> {
        Ok(std::iter::once(self.start as u64..(self.start + self.len) as u64).collect())
    }

    fn read(
        &mut self,
        address: u64,
        buf: &mut [u8],
        states: &mut [PageState],
    ) -> Result<(), DedupError> {
        debug_assert_eq!(states.len() * PAGE_SIZE, buf.len());
        let (lo, hi) = (self.start as u64, (self.start + self.len) as u64);
        for (i, st) in states.iter_mut().enumerate() {
            let a = address + (i * PAGE_SIZE) as u64;
            *st = if a >= lo && a + PAGE_SIZE as u64 <= hi {
                PageState::Present { frame: None }
            } else {
                PageState::Unreadable
            };
        }
        // Copy the part inside the range.
        let first = states
            .iter()
            .position(|s| *s != PageState::Unreadable)
            .unwrap_or(states.len());
        let last = states
            .iter()
            .rposition(|s| *s != PageState::Unreadable)
            .map_or(first, |i| i + 1);
        if first < last {
            self.copy(
                address + (first * PAGE_SIZE) as u64,
                &mut buf[first * PAGE_SIZE..last * PAGE_SIZE],
            )?;
        }
        Ok(())
    }
}
