//! [`ProgramMemory`]: where the structures this crate reads live. The preload library reads
//! its own process ([`OwnMemory`](crate::OwnMemory)); tests and fuzz targets read bytes they
//! made up ([`ByteMemory`](crate::ByteMemory)). Addresses are the program's: a structure names
//! others by address (an AIO context is its ring's address, liburing's ring points to the
//! kernel's queues), and every address read may be wrong.

use std::io;

use crate::plain_data::{bytes_of_mut, PlainData};

/// Memory of a program, read by address, never dereferenced.
pub trait ProgramMemory {
    /// Copies `out.len()` bytes at address `at` into `out`. `Err` (`EFAULT` for memory that is
    /// not there) if any of them cannot be read; `out` is then unspecified.
    fn read_bytes(&self, at: usize, out: &mut [u8]) -> io::Result<()>;

    /// Copies `out.len()` values at address `at` into `out`.
    fn read<T: PlainData>(&self, at: usize, out: &mut [T]) -> io::Result<()>
    where
        Self: Sized,
    {
        self.read_bytes(at, bytes_of_mut(out))
    }

    /// The value at address `at`.
    fn value<T: PlainData + Default>(&self, at: usize) -> io::Result<T>
    where
        Self: Sized,
    {
        let mut v = [T::default()];
        self.read(at, &mut v)?;
        Ok(v[0])
    }
}

impl<M: ProgramMemory + ?Sized> ProgramMemory for &M {
    fn read_bytes(&self, at: usize, out: &mut [u8]) -> io::Result<()> {
        (**self).read_bytes(at, out)
    }
}

/// The address `count` values of `size` bytes after `base`, or `None` past the address space
/// (a misread structure may give any base).
pub fn address_after(base: usize, count: u64, size: usize) -> Option<usize> {
    usize::try_from(count)
        .ok()?
        .checked_mul(size)?
        .checked_add(base)
}
