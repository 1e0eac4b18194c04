//! [`readable_within`]: whether a descriptor is readable, by `poll` on it alone. The fault loop
//! asks it of the userfaultfd before work it may put off for a fault (map-ahead), the swap I/O
//! waits with it for write completions, and tests look at eventfds with it.

use std::io;
use std::os::fd::RawFd;

/// Whether `fd` is readable (or has an error or hang-up to report) within `timeout_ms`
/// milliseconds: 0 looks once, a negative timeout waits until it is. `Err`: `poll` itself failed
/// (`EINTR`).
pub(crate) fn readable_within(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd for the call's duration; poll writes only its `revents`.
    match unsafe { libc::poll(&mut p, 1, timeout_ms) } {
        r if r < 0 => Err(io::Error::last_os_error()),
        r => Ok(r > 0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_fd::EventFd;
    use std::os::fd::AsRawFd;

    #[test]
    fn an_eventfd_is_readable_once_signalled() {
        let e = EventFd::new().unwrap();
        assert!(!readable_within(e.as_raw_fd(), 0).unwrap());
        assert!(!readable_within(e.as_raw_fd(), 5).unwrap());
        e.signal();
        assert!(readable_within(e.as_raw_fd(), 0).unwrap());
        assert!(readable_within(e.as_raw_fd(), -1).unwrap());
        assert!(
            readable_within(-1, 0).is_ok_and(|r| !r),
            "poll ignores a negative descriptor"
        );
    }
}
