//! Passing a file descriptor to QEMU over its QMP Unix socket (`SCM_RIGHTS`), as QMP's
//! `getfd` command expects: the descriptor rides on the bytes of the command itself, and QEMU
//! files it under the command's `fdname` for a later `fd:NAME` URI.
//!
//! `memvisor migrate` hands QEMU the device-state connection this way: a TCP connection made
//! by memvisor with `TCP_NODELAY`. QEMU 7.2's own `tcp:` migration socket keeps Nagle's
//! algorithm on, and the last short segment of the device state then waits for the
//! destination's delayed acknowledgement (40 to 60 ms here, all of it guest downtime).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::net::UnixStream;

/// Sends a prefix of `bytes` (at least one byte, unless `bytes` is empty) on `socket` with
/// `fd` attached; returns how many bytes went. The caller writes the rest as usual.
pub(crate) fn send_with_fd(
    socket: &UnixStream,
    bytes: &[u8],
    fd: BorrowedFd<'_>,
) -> io::Result<usize> {
    if bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "a descriptor must ride on at least one byte",
        ));
    }
    let raw: libc::c_int = fd.as_raw_fd();
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) } as usize;
    // u64 elements: the control buffer must be aligned for `cmsghdr`.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: an all-zero msghdr is a valid empty message.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` points at a control buffer of `space` bytes, room for one header with one
    // c_int (CMSG_SPACE above), so CMSG_FIRSTHDR is non-null and CMSG_DATA lies inside it.
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&msg);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>(), raw);
    }
    loop {
        // SAFETY: `msg` and everything it points at (the iovec over `bytes`, the control
        // buffer) live across the call; sendmsg only reads them.
        let sent = unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
        if sent >= 0 {
            return Ok(sent as usize);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, FromRawFd, OwnedFd};

    /// Receives up to `buf.len()` bytes and the one descriptor sent with them.
    fn receive_with_fd(socket: &UnixStream, buf: &mut [u8]) -> (usize, Option<OwnedFd>) {
        let mut control = [0u64; 8];
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: an all-zero msghdr is a valid empty message.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: the buffers `msg` points at live across the call.
        let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, 0) };
        assert!(n >= 0, "{}", io::Error::last_os_error());
        // SAFETY: recvmsg filled `msg`; CMSG_FIRSTHDR checks the length it reported.
        let header = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        let fd = (!header.is_null()).then(|| {
            // SAFETY: a non-null header inside the control buffer, of SCM_RIGHTS with one fd.
            unsafe {
                assert_eq!((*header).cmsg_type, libc::SCM_RIGHTS);
                let raw = std::ptr::read_unaligned(libc::CMSG_DATA(header).cast::<libc::c_int>());
                OwnedFd::from_raw_fd(raw)
            }
        });
        (n as usize, fd)
    }

    #[test]
    fn the_descriptor_arrives_with_the_bytes() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut left, right) = UnixStream::pair().unwrap();
        let sent = send_with_fd(&a, b"{\"execute\": \"getfd\"}\n", right.as_fd()).unwrap();
        assert_eq!(sent, 21);
        let mut buf = [0u8; 64];
        let (n, fd) = receive_with_fd(&b, &mut buf);
        assert_eq!(&buf[..n], b"{\"execute\": \"getfd\"}\n");
        // The received descriptor is the same socket: what goes in at `left` comes out of it.
        let mut passed = UnixStream::from(fd.expect("no descriptor received"));
        left.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        passed.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"ping");
        assert!(send_with_fd(&a, b"", right.as_fd()).is_err());
    }
}
