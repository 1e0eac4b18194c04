//! [`FaultInjector`]: makes swap I/O fail on demand, for failure tests.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

/// Shared switches a [`SwapFile`](crate::SwapFile) consults before each I/O.
///
/// Each switch holds an errno and a count: the next `count` writes (or reads) fail with that
/// errno instead of reaching the disk. `corrupt_reads` flips one bit in the data of the next
/// reads after they complete, so checksum verification is exercised. All switches are atomic and
/// may be set from any thread while the region runs.
#[derive(Debug, Default)]
pub struct FaultInjector {
    write_errno: AtomicI32,
    write_count: AtomicU32,
    read_errno: AtomicI32,
    read_count: AtomicU32,
    /// Reads that still succeed before the armed read failures.
    read_skip: AtomicU32,
    corrupt_count: AtomicU32,
}

impl FaultInjector {
    /// No faults armed.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next `count` chunk writes fail with `errno` (e.g. `libc::EIO`, `libc::ENOSPC`).
    pub fn fail_writes(&self, errno: i32, count: u32) {
        self.write_errno.store(errno, Ordering::SeqCst);
        self.write_count.store(count, Ordering::SeqCst);
    }

    /// The next `count` chunk reads fail with `errno`.
    pub fn fail_reads(&self, errno: i32, count: u32) {
        self.fail_reads_after(0, errno, count);
    }

    /// After `skip` more reads succeed, the next `count` fail with `errno` (a page read on its
    /// own that succeeds, then the read of its chunk that fails).
    pub fn fail_reads_after(&self, skip: u32, errno: i32, count: u32) {
        self.read_errno.store(errno, Ordering::SeqCst);
        self.read_skip.store(skip, Ordering::SeqCst);
        self.read_count.store(count, Ordering::SeqCst);
    }

    /// The next `count` chunk reads return data with one bit flipped.
    pub fn corrupt_reads(&self, count: u32) {
        self.corrupt_count.store(count, Ordering::SeqCst);
    }

    fn take(count: &AtomicU32) -> bool {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| c.checked_sub(1))
            .is_ok()
    }

    pub(crate) fn before_write(&self) -> io::Result<()> {
        if Self::take(&self.write_count) {
            return Err(io::Error::from_raw_os_error(
                self.write_errno.load(Ordering::SeqCst),
            ));
        }
        Ok(())
    }

    pub(crate) fn before_read(&self) -> io::Result<()> {
        if self.read_count.load(Ordering::SeqCst) > 0 && Self::take(&self.read_skip) {
            return Ok(());
        }
        if Self::take(&self.read_count) {
            return Err(io::Error::from_raw_os_error(
                self.read_errno.load(Ordering::SeqCst),
            ));
        }
        Ok(())
    }

    pub(crate) fn after_read(&self, data: &mut [u8]) {
        if !data.is_empty() && Self::take(&self.corrupt_count) {
            let i = data.len() / 2;
            data[i] ^= 0x10;
        }
    }
}
