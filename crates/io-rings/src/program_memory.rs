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

    /// The `n` iovecs at address `at`, or none if they cannot all be read (the iovec reader
    /// that [`AioRequest::parse`](crate::AioRequest::parse) and
    /// [`Sqe::request`](crate::Sqe::request) take).
    fn iovecs(&self, at: usize, n: usize) -> Vec<libc::iovec>
    where
        Self: Sized,
    {
        let empty = libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        };
        let mut v = vec![empty; n];
        match self.read(at, &mut v) {
            Ok(()) => v,
            Err(_) => Vec::new(),
        }
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

/// The error for memory that is not there (an address not mapped, or past the address space's
/// end): `EFAULT`, as the kernel says it.
pub(crate) fn no_such_address() -> io::Error {
    io::Error::from_raw_os_error(libc::EFAULT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ByteMemory;

    #[test]
    fn iovecs_are_all_read_or_none() {
        let m = ByteMemory::new(0x1000, 32);
        m.write(0x1000, &[0x5000u64, 512, 0x6000, 1024]).unwrap();
        let v = m.iovecs(0x1000, 2);
        let got: Vec<(usize, usize)> = v.iter().map(|i| (i.iov_base as usize, i.iov_len)).collect();
        assert_eq!(got, [(0x5000, 512), (0x6000, 1024)]);
        assert!(m.iovecs(0x1000, 3).is_empty());
        assert!(m.iovecs(0x10, 1).is_empty());
    }
}
