//! [`ByteMemory`]: made-up program memory, a run of bytes at a chosen address, for tests and
//! fuzz targets that play the kernel's and liburing's part (writing rings, advancing tails)
//! between the reader's looks.

use std::io;
use std::sync::{Mutex, MutexGuard};

use crate::plain_data::{bytes_of, PlainData};
use crate::program_memory::{no_such_address, ProgramMemory};

/// `len` bytes at address `base`; everything else is unmapped.
#[derive(Debug)]
pub struct ByteMemory {
    base: usize,
    bytes: Mutex<Vec<u8>>,
}

impl ByteMemory {
    /// `len` zero bytes at `base` (`base + len` must not pass the address space's end; it is
    /// cut there).
    pub fn new(base: usize, len: usize) -> Self {
        let len = len.min(usize::MAX - base);
        Self {
            base,
            bytes: Mutex::new(vec![0; len]),
        }
    }

    /// The first address.
    pub fn base(&self) -> usize {
        self.base
    }

    fn bytes(&self) -> MutexGuard<'_, Vec<u8>> {
        self.bytes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The byte range `[at, at + len)` as indices, if all of it is there.
    fn range(&self, at: usize, len: usize, have: usize) -> Option<std::ops::Range<usize>> {
        let start = at.checked_sub(self.base)?;
        let end = start.checked_add(len)?;
        (end <= have).then_some(start..end)
    }

    /// Writes `data` at `at`. `Err` (`EFAULT`) if any of it falls outside.
    pub fn write_bytes(&self, at: usize, data: &[u8]) -> io::Result<()> {
        let mut bytes = self.bytes();
        let have = bytes.len();
        let r = self
            .range(at, data.len(), have)
            .ok_or_else(no_such_address)?;
        bytes[r].copy_from_slice(data);
        Ok(())
    }

    /// Writes `values` at `at`.
    pub fn write<T: PlainData>(&self, at: usize, values: &[T]) -> io::Result<()> {
        self.write_bytes(at, bytes_of(values))
    }
}

impl ProgramMemory for ByteMemory {
    fn read_bytes(&self, at: usize, out: &mut [u8]) -> io::Result<()> {
        let bytes = self.bytes();
        let r = self
            .range(at, out.len(), bytes.len())
            .ok_or_else(no_such_address)?;
        out.copy_from_slice(&bytes[r]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_was_written_and_nothing_outside() {
        let m = ByteMemory::new(0x1000, 16);
        m.write(0x1004, &[5u32, 6]).unwrap();
        assert_eq!(m.value::<u32>(0x1008).unwrap(), 6);
        assert!(m.value::<u32>(0x100e).is_err());
        assert!(m.value::<u32>(0xffe).is_err());
        assert!(m.write(0x100e, &[1u32]).is_err());
        let top = ByteMemory::new(usize::MAX - 8, 100);
        assert!(top.value::<u64>(usize::MAX - 8).is_ok());
        assert!(top.value::<u64>(usize::MAX - 4).is_err());
    }
}
