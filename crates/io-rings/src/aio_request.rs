//! [`AioRequest`]: one Linux AIO control block (`struct iocb`, what `io_submit(2)` is given)
//! as the library reads it: a read into memory, a write to a file, or something else.
//!
//! QEMU's `aio=native` submits its disk reads and writes this way (`libaio`'s `io_submit`,
//! `cache.direct=on` required); the kernel completes them without a library call, so the
//! preload library acts at submission and finds the completions in the context's ring later
//! ([`AioRing`](crate::AioRing)). The layout is the kernel's UAPI
//! (`linux/aio_abi.h`), which `libaio`'s `struct iocb` mirrors.

use libc::{c_int, iovec};

use crate::plain_data::PlainData;

/// `struct iocb` (64 bytes, little-endian x86-64 layout).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Iocb {
    /// Returned in the completion event's `data`.
    pub aio_data: u64,
    /// Set by the kernel (`KIOCB_KEY`).
    pub aio_key: u32,
    /// `RWF_*` flags.
    pub aio_rw_flags: i32,
    /// `IOCB_CMD_*`.
    pub aio_lio_opcode: u16,
    /// Request priority.
    pub aio_reqprio: i16,
    /// The file.
    pub aio_fildes: u32,
    /// The buffer (`PREAD`/`PWRITE`) or the iovec array (`PREADV`/`PWRITEV`).
    pub aio_buf: u64,
    /// Bytes (`PREAD`/`PWRITE`) or iovecs (`PREADV`/`PWRITEV`).
    pub aio_nbytes: u64,
    /// File offset.
    pub aio_offset: i64,
    /// Reserved.
    pub aio_reserved2: u64,
    /// `IOCB_FLAG_*`.
    pub aio_flags: u32,
    /// The eventfd signalled at completion (`IOCB_FLAG_RESFD`).
    pub aio_resfd: u32,
}

// SAFETY: `repr(C)` integers, 64 bytes without padding.
unsafe impl PlainData for Iocb {}

const IOCB_CMD_PREAD: u16 = 0;
const IOCB_CMD_PWRITE: u16 = 1;
const IOCB_CMD_PREADV: u16 = 7;
const IOCB_CMD_PWRITEV: u16 = 8;

/// Most iovecs one request may carry (the kernel's `UIO_MAXIOV`).
const MAX_IOVECS: u64 = 1024;

/// What one control block asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AioRequest {
    /// A positional read of `fd` at `offset` into `buffers` (`(address, length)`), with
    /// `RWF_*` flags `flags`.
    Read {
        /// The file.
        fd: c_int,
        /// File offset.
        offset: i64,
        /// `RWF_*` flags.
        flags: c_int,
        /// `(address, length)` of each buffer, in order.
        buffers: Vec<(usize, usize)>,
    },
    /// A positional write of bytes `[from, to)` of `fd`.
    Write {
        /// The file.
        fd: c_int,
        /// First byte written.
        from: u64,
        /// End of the bytes written (`u64::MAX`: anywhere to the file's end, `RWF_APPEND`).
        to: u64,
    },
    /// Anything else (`fsync`, `poll`, a malformed block): passed on, nothing to do.
    Other,
}

impl AioRequest {
    /// Reads `iocb`. For a vectored request, `iovecs` is asked for the `count` iovecs at
    /// `address` (it returns none if it cannot give them; the request is then `Other`, and
    /// the kernel refuses it on its own).
    pub fn parse(iocb: &Iocb, iovecs: impl FnOnce(usize, usize) -> Vec<iovec>) -> Self {
        let Ok(fd) = c_int::try_from(iocb.aio_fildes) else {
            return Self::Other;
        };
        let reading = match iocb.aio_lio_opcode {
            IOCB_CMD_PREAD | IOCB_CMD_PREADV if iocb.aio_offset >= 0 => true,
            IOCB_CMD_PWRITE | IOCB_CMD_PWRITEV => false,
            _ => return Self::Other,
        };
        let vectored = matches!(iocb.aio_lio_opcode, IOCB_CMD_PREADV | IOCB_CMD_PWRITEV);
        let Some(buffers) = buffers(vectored, iocb.aio_buf, iocb.aio_nbytes, iovecs) else {
            return Self::Other;
        };
        Self::transfer(reading, fd, iocb.aio_offset, iocb.aio_rw_flags, buffers)
    }

    /// A read (`reading`) or write of `fd` at `offset` (negative: at the file position) with
    /// `RWF_*` flags `flags`, through `buffers`.
    pub fn transfer(
        reading: bool,
        fd: c_int,
        offset: i64,
        flags: c_int,
        buffers: Vec<(usize, usize)>,
    ) -> Self {
        if reading {
            return Self::Read {
                fd,
                offset,
                flags,
                buffers,
            };
        }
        let len = buffers
            .iter()
            .fold(0u64, |t, &(_, l)| t.saturating_add(l as u64));
        // At the file position or appending: anywhere in the file.
        let (from, to) = if offset < 0 || flags & libc::RWF_APPEND != 0 {
            (0, u64::MAX)
        } else {
            (offset as u64, (offset as u64).saturating_add(len))
        };
        Self::Write { fd, from, to }
    }
}

/// The `(address, length)` buffers of a request whose buffer field holds `address` and whose
/// length field `length`: one buffer, or (`vectored`) `length` iovecs at `address`, which
/// `iovecs` gives. `None`: no iovecs, too many, or not given.
pub fn buffers(
    vectored: bool,
    address: u64,
    length: u64,
    iovecs: impl FnOnce(usize, usize) -> Vec<iovec>,
) -> Option<Vec<(usize, usize)>> {
    if !vectored {
        return Some(vec![(address as usize, length as usize)]);
    }
    if length == 0 || length > MAX_IOVECS || address == 0 {
        return None;
    }
    let v = iovecs(address as usize, length as usize);
    (v.len() == length as usize)
        .then(|| v.iter().map(|i| (i.iov_base as usize, i.iov_len)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iocb(op: u16, fd: u32, buf: u64, n: u64, off: i64) -> Iocb {
        Iocb {
            aio_lio_opcode: op,
            aio_fildes: fd,
            aio_buf: buf,
            aio_nbytes: n,
            aio_offset: off,
            ..Iocb::default()
        }
    }

    fn no_iovecs(_: usize, _: usize) -> Vec<iovec> {
        panic!("a plain request reads no iovecs")
    }

    #[test]
    fn the_layout_is_the_kernels() {
        assert_eq!(std::mem::size_of::<Iocb>(), 64);
        assert_eq!(std::mem::offset_of!(Iocb, aio_lio_opcode), 16);
        assert_eq!(std::mem::offset_of!(Iocb, aio_fildes), 20);
        assert_eq!(std::mem::offset_of!(Iocb, aio_buf), 24);
        assert_eq!(std::mem::offset_of!(Iocb, aio_offset), 40);
        assert_eq!(std::mem::offset_of!(Iocb, aio_resfd), 60);
    }

    #[test]
    fn plain_and_vectored_reads_and_writes() {
        assert_eq!(
            AioRequest::parse(&iocb(0, 5, 0x1000, 4096, 8192), no_iovecs),
            AioRequest::Read {
                fd: 5,
                offset: 8192,
                flags: 0,
                buffers: vec![(0x1000, 4096)]
            }
        );
        assert_eq!(
            AioRequest::parse(&iocb(1, 5, 0x1000, 4096, 8192), no_iovecs),
            AioRequest::Write {
                fd: 5,
                from: 8192,
                to: 12288
            }
        );
        let v = |_: usize, n: usize| -> Vec<iovec> {
            (0..n)
                .map(|i| iovec {
                    iov_base: (0x10000 * (i + 1)) as *mut libc::c_void,
                    iov_len: 512 * (i + 1),
                })
                .collect()
        };
        assert_eq!(
            AioRequest::parse(&iocb(7, 3, 0x500, 2, 0), v),
            AioRequest::Read {
                fd: 3,
                offset: 0,
                flags: 0,
                buffers: vec![(0x10000, 512), (0x20000, 1024)]
            }
        );
        assert_eq!(
            AioRequest::parse(&iocb(8, 3, 0x500, 2, 100), v),
            AioRequest::Write {
                fd: 3,
                from: 100,
                to: 100 + 1536
            }
        );
    }

    #[test]
    fn appending_writes_may_touch_anything_and_odd_blocks_are_other() {
        let mut append = iocb(1, 5, 0x1000, 4096, 0);
        append.aio_rw_flags = libc::RWF_APPEND;
        assert_eq!(
            AioRequest::parse(&append, no_iovecs),
            AioRequest::Write {
                fd: 5,
                from: 0,
                to: u64::MAX
            }
        );
        // fsync, a negative read offset, a descriptor out of range, too many or missing iovecs.
        assert_eq!(
            AioRequest::parse(&iocb(2, 5, 0, 0, 0), no_iovecs),
            AioRequest::Other
        );
        assert_eq!(
            AioRequest::parse(&iocb(0, 5, 0x1000, 1, -1), no_iovecs),
            AioRequest::Other
        );
        assert_eq!(
            AioRequest::parse(&iocb(0, u32::MAX, 0x1000, 1, 0), no_iovecs),
            AioRequest::Other
        );
        assert_eq!(
            AioRequest::parse(&iocb(7, 5, 0x1000, 5000, 0), no_iovecs),
            AioRequest::Other
        );
        assert_eq!(
            AioRequest::parse(&iocb(7, 5, 0x1000, 2, 0), |_, _| Vec::new()),
            AioRequest::Other
        );
    }
}
