//! [`transfer_result`]: what an io_uring read or write completion means for its caller. The
//! pager's rings (demand reader, parallel page reads, the page-out writer) all transfer whole
//! buffers, so anything short of the full length is an error.

use std::io;

/// Which way a transfer went, for a short one's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transfer {
    Read,
    Write,
}

/// The outcome of a completion with result `res` for a transfer of `len` bytes: `Ok` once all
/// bytes moved, the errno if it failed, a short read (`UnexpectedEof`) or short write
/// (`WriteZero`) error otherwise.
pub(crate) fn transfer_result(res: i32, len: usize, transfer: Transfer) -> io::Result<()> {
    if res < 0 {
        return Err(io::Error::from_raw_os_error(-res));
    }
    if res as usize == len {
        return Ok(());
    }
    let (kind, what) = match transfer {
        Transfer::Read => (io::ErrorKind::UnexpectedEof, "read"),
        Transfer::Write => (io::ErrorKind::WriteZero, "write"),
    };
    Err(io::Error::new(
        kind,
        format!("short {what}: {res} of {len} bytes"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_failed_and_short_transfers() {
        assert!(transfer_result(4096, 4096, Transfer::Read).is_ok());
        let e = transfer_result(-libc::EIO, 4096, Transfer::Write).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        let e = transfer_result(2048, 4096, Transfer::Read).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(e.to_string(), "short read: 2048 of 4096 bytes");
        let e = transfer_result(0, 8192, Transfer::Write).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WriteZero);
        assert_eq!(e.to_string(), "short write: 0 of 8192 bytes");
    }
}
