//! One io_uring submission queue entry (`struct io_uring_sqe`, 64 bytes) as the library reads
//! it ([`Sqe`], [`Sqe::request`]): a read into memory, a write to a file, or something else.
//!
//! QEMU's `aio=io_uring` prepares reads and writes with liburing's `io_uring_prep_readv` and
//! `io_uring_prep_writev` (opcodes `READV`, `WRITEV`); the plain and fixed-buffer opcodes
//! carry one buffer. The layout is the kernel's UAPI (`linux/io_uring.h`).

use libc::{c_int, iovec};

use crate::aio_request::{buffers, AioRequest};
use crate::plain_data::PlainData;

/// `struct io_uring_sqe`, the fields the library reads (the rest is `rest`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Sqe {
    /// `IORING_OP_*`.
    pub opcode: u8,
    /// `IOSQE_*`.
    pub flags: u8,
    /// Request priority.
    pub ioprio: u16,
    /// The file (an index into the registered files with `IOSQE_FIXED_FILE`).
    pub fd: i32,
    /// File offset (`u64::MAX`: the file position).
    pub off: u64,
    /// The buffer, or the iovec array.
    pub addr: u64,
    /// Bytes, or iovecs.
    pub len: u32,
    /// `RWF_*` flags.
    pub rw_flags: u32,
    /// Returned in the completion's `user_data`.
    pub user_data: u64,
    /// The rest of the 64 bytes.
    pub rest: [u64; 3],
}

// SAFETY: `repr(C)` integers, 64 bytes without padding.
unsafe impl PlainData for Sqe {}

const IORING_OP_READV: u8 = 1;
const IORING_OP_WRITEV: u8 = 2;
const IORING_OP_READ_FIXED: u8 = 4;
const IORING_OP_WRITE_FIXED: u8 = 5;
const IORING_OP_READ: u8 = 22;
const IORING_OP_WRITE: u8 = 23;
/// `IOSQE_FIXED_FILE`: `fd` is an index into the ring's registered files.
const IOSQE_FIXED_FILE: u8 = 1;

impl Sqe {
    /// What the entry asks for. A read or write through a registered file (`IOSQE_FIXED_FILE`)
    /// has no descriptor the library can name: it gets descriptor -1 (a read keeps its buffers,
    /// to be pinned). `iovecs` gives the `count` iovecs at `address` of a vectored request
    /// (none if it cannot).
    pub fn request(&self, iovecs: impl FnOnce(usize, usize) -> Vec<iovec>) -> AioRequest {
        let reading = match self.opcode {
            IORING_OP_READV | IORING_OP_READ | IORING_OP_READ_FIXED => true,
            IORING_OP_WRITEV | IORING_OP_WRITE | IORING_OP_WRITE_FIXED => false,
            _ => return AioRequest::Other,
        };
        let vectored = matches!(self.opcode, IORING_OP_READV | IORING_OP_WRITEV);
        let Some(buffers) = buffers(vectored, self.addr, u64::from(self.len), iovecs) else {
            return AioRequest::Other;
        };
        let fd: c_int = if self.flags & IOSQE_FIXED_FILE != 0 {
            -1
        } else {
            self.fd
        };
        // `u64::MAX` (-1): at the file position.
        let offset = i64::try_from(self.off).unwrap_or(-1);
        AioRequest::transfer(reading, fd, offset, self.rw_flags as c_int, buffers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqe(opcode: u8, fd: i32, addr: u64, len: u32, off: u64) -> Sqe {
        Sqe {
            opcode,
            fd,
            addr,
            len,
            off,
            user_data: 9,
            ..Sqe::default()
        }
    }

    fn no_iovecs(_: usize, _: usize) -> Vec<iovec> {
        panic!("a plain request reads no iovecs")
    }

    #[test]
    fn the_layout_is_the_kernels() {
        assert_eq!(std::mem::size_of::<Sqe>(), 64);
        assert_eq!(std::mem::offset_of!(Sqe, fd), 4);
        assert_eq!(std::mem::offset_of!(Sqe, off), 8);
        assert_eq!(std::mem::offset_of!(Sqe, addr), 16);
        assert_eq!(std::mem::offset_of!(Sqe, len), 24);
        assert_eq!(std::mem::offset_of!(Sqe, rw_flags), 28);
        assert_eq!(std::mem::offset_of!(Sqe, user_data), 32);
    }

    #[test]
    fn reads_and_writes_plain_vectored_and_fixed() {
        assert_eq!(
            sqe(IORING_OP_READ, 4, 0x1000, 4096, 8192).request(no_iovecs),
            AioRequest::Read {
                fd: 4,
                offset: 8192,
                flags: 0,
                buffers: vec![(0x1000, 4096)]
            }
        );
        let v = |_: usize, n: usize| -> Vec<iovec> {
            (0..n)
                .map(|i| iovec {
                    iov_base: (0x10000 * (i + 1)) as *mut libc::c_void,
                    iov_len: 4096,
                })
                .collect()
        };
        assert_eq!(
            sqe(IORING_OP_READV, 4, 0x500, 2, 0).request(v),
            AioRequest::Read {
                fd: 4,
                offset: 0,
                flags: 0,
                buffers: vec![(0x10000, 4096), (0x20000, 4096)]
            }
        );
        assert_eq!(
            sqe(IORING_OP_WRITEV, 4, 0x500, 2, 100).request(v),
            AioRequest::Write {
                fd: 4,
                from: 100,
                to: 100 + 8192
            }
        );
        let mut fixed = sqe(IORING_OP_WRITE_FIXED, 0, 0x1000, 512, 0);
        fixed.flags = IOSQE_FIXED_FILE;
        assert_eq!(
            fixed.request(no_iovecs),
            AioRequest::Write {
                fd: -1,
                from: 0,
                to: 512
            }
        );
        // At the file position: anywhere.
        assert_eq!(
            sqe(IORING_OP_WRITE, 4, 0x1000, 512, u64::MAX).request(no_iovecs),
            AioRequest::Write {
                fd: 4,
                from: 0,
                to: u64::MAX
            }
        );
    }

    #[test]
    fn other_opcodes_and_malformed_entries_are_other() {
        // NOP, FSYNC, a vectored read with no or too many iovecs, or iovecs not given.
        for s in [
            sqe(0, 4, 0, 0, 0),
            sqe(3, 4, 0, 0, 0),
            sqe(IORING_OP_READV, 4, 0x500, 0, 0),
            sqe(IORING_OP_READV, 4, 0x500, 5000, 0),
        ] {
            assert_eq!(s.request(no_iovecs), AioRequest::Other, "{s:?}");
        }
        assert_eq!(
            sqe(IORING_OP_READV, 4, 0x500, 2, 0).request(|_, _| Vec::new()),
            AioRequest::Other
        );
    }
}
