//! [`EventFd`]: a counter descriptor one thread writes to wake another's `poll`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A non-blocking, close-on-exec `eventfd`.
#[derive(Debug)]
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with counter 0.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd takes an initial value and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: eventfd returned a fresh descriptor that nothing else owns.
        Ok(Self(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to the counter: a `poll` for `POLLIN` on it returns.
    pub fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to a descriptor this value owns. A full
        // counter (EAGAIN) still leaves the descriptor readable, which is all a signal needs.
        unsafe {
            libc::write(
                self.0.as_raw_fd(),
                (&one as *const u64).cast(),
                size_of::<u64>(),
            );
        }
    }

    /// Resets the counter to 0 (after a `poll` said it is readable).
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from a descriptor this value owns; a counter
        // already at 0 makes the non-blocking read fail with EAGAIN, which is fine.
        unsafe {
            libc::read(
                self.0.as_raw_fd(),
                (&mut v as *mut u64).cast(),
                size_of::<u64>(),
            );
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fd_readiness::readable_within;

    fn readable(e: &EventFd) -> bool {
        readable_within(e.as_raw_fd(), 0).unwrap()
    }

    #[test]
    fn signal_then_clear() {
        let e = EventFd::new().unwrap();
        assert!(!readable(&e));
        e.signal();
        e.signal();
        assert!(readable(&e));
        e.clear();
        assert!(!readable(&e));
    }
}
