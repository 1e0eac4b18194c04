//! [`read_own`]: copying values out of this process's memory without dereferencing it, for the
//! structures the library finds by address rather than being handed (the kernel's AIO ring,
//! liburing's ring structure and the queues it points to, an io_uring entry's iovecs).
//!
//! The copy is `process_vm_readv` on this process: memory that is not mapped readable (a ring
//! torn down behind the library's back, an address a misread structure gave) fails with
//! `EFAULT` instead of faulting the program.

use std::io;

/// Types every bit pattern is a valid value of, which may therefore be filled from raw bytes.
///
/// # Safety
///
/// Implement only for `repr(C)` (or primitive) types made of integers and raw pointers.
pub unsafe trait PlainData: Copy {}

// SAFETY: an integer.
unsafe impl PlainData for u32 {}
// SAFETY: a pointer and an integer, `repr(C)`.
unsafe impl PlainData for libc::iovec {}

/// Copies `out.len()` values from address `at` of this process into `out`, or fails with
/// `EFAULT` if that memory is not mapped readable (or another error of `process_vm_readv`).
pub fn read_own<T: PlainData>(at: usize, out: &mut [T]) -> io::Result<()> {
    let len = std::mem::size_of_val(out);
    let local = libc::iovec {
        iov_base: out.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: at as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` is `out`'s own memory, writable for `len` bytes, and any bytes written
    // there are valid values (`T: PlainData`); the kernel reads the remote range (this
    // process's) itself and fails with EFAULT where it is not mapped.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_memory_is_copied_and_unmapped_memory_is_an_error() {
        let values = [7u32, 8, 9];
        let mut out = [0u32; 3];
        read_own(values.as_ptr() as usize, &mut out).unwrap();
        assert_eq!(out, values);
        let e = read_own(16, &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
    }
}
