//! [`OwnMemory`]: this process's memory, copied with `process_vm_readv` on itself, for the
//! structures the preload library finds by address rather than being handed (the kernel's AIO
//! ring, liburing's ring structure and the queues it points to, an io_uring entry's iovecs).
//! Memory that is not mapped readable (a ring torn down behind the library's back, an address
//! a misread structure gave) fails with `EFAULT` instead of faulting the program.

use std::io;

use crate::program_memory::ProgramMemory;

/// This process's memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnMemory;

impl ProgramMemory for OwnMemory {
    fn read_bytes(&self, at: usize, out: &mut [u8]) -> io::Result<()> {
        let len = out.len();
        let local = libc::iovec {
            iov_base: out.as_mut_ptr().cast(),
            iov_len: len,
        };
        let remote = libc::iovec {
            iov_base: at as *mut libc::c_void,
            iov_len: len,
        };
        // SAFETY: `local` is `out`'s own memory, writable for `len` bytes; the kernel reads the
        // remote range (this process's) itself and fails with EFAULT where it is not mapped.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n as usize != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{n} of {len} bytes at {at:#x} read"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_memory_is_copied_and_unmapped_memory_is_an_error() {
        let values = [7u32, 8, 9];
        let mut out = [0u32; 3];
        OwnMemory.read(values.as_ptr() as usize, &mut out).unwrap();
        assert_eq!(out, values);
        let e = OwnMemory.read(16, &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        let e = OwnMemory.read(usize::MAX - 3, &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
    }
}
