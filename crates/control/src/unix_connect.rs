//! [`connect_within`]: `connect(2)` to a Unix stream socket that gives up after a time limit.
//!
//! `UnixStream::connect` blocks for as long as the listener's backlog stays full, and anyone
//! can make a socket whose backlog is full and never drains (listen, never accept): a root
//! tool that walks other users' control directories (the broker, `memvisor top`) would hang
//! there for good. Linux bounds a blocking Unix `connect` by the socket's send timeout
//! (`SO_SNDTIMEO`; it then fails with `EAGAIN`), so the socket is made by hand, the timeout
//! set, and only then connected.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Connects to the Unix stream socket at `path`, waiting at most `limit` for room in its
/// backlog. Running out of time is an error of kind `TimedOut`; a path too long for a socket
/// address (or holding a NUL byte) is `InvalidInput`. The stream's write timeout is left at
/// `limit`: the caller sets its own timeouts.
pub fn connect_within(path: &Path, limit: Duration) -> io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: sockaddr_un is plain old data; all zeroes is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path too long for a Unix socket address, or holding a NUL byte",
        ));
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket(2) just returned this descriptor; nothing else owns it.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    let tv = libc::timeval {
        tv_sec: limit.as_secs().min(i32::MAX as u64) as libc::time_t,
        // At least 1 µs: a zero timeout would mean "block forever".
        tv_usec: (limit.subsec_micros() as libc::suseconds_t).max(if limit.as_secs() == 0 {
            1
        } else {
            0
        }),
    };
    // SAFETY: `tv` is a live timeval and the length is its size.
    let r = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            (&tv as *const libc::timeval).cast(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    loop {
        // SAFETY: `addr` is a live sockaddr_un and `len` covers its family, the path and the
        // path's terminating NUL, all inside it.
        let r = unsafe {
            libc::connect(
                socket.as_raw_fd(),
                (&addr as *const libc::sockaddr_un).cast(),
                len as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(UnixStream::from(socket));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("its backlog stayed full for {} ms", limit.as_millis()),
                ))
            }
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::time::Instant;

    #[test]
    fn connects_and_gives_up_on_a_backlog_that_never_drains() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let first = connect_within(&path, Duration::from_secs(2)).unwrap();
        // The listener never accepts; a backlog of 0 is full with the one pending connection.
        // SAFETY: listen(2) on a live listening socket only changes its backlog.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
        let start = Instant::now();
        let e = connect_within(&path, Duration::from_millis(300)).unwrap_err();
        let took = start.elapsed();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(3),
            "{took:?}"
        );
        drop(first);
        assert_eq!(
            connect_within(&dir.path().join("none.sock"), Duration::from_secs(1))
                .unwrap_err()
                .kind(),
            io::ErrorKind::NotFound
        );
        let long = dir.path().join("x".repeat(200));
        assert_eq!(
            connect_within(&long, Duration::from_secs(1))
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
