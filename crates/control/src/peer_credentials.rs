//! [`PeerCredentials`]: who is on the other end of a Unix socket (`SO_PEERCRED`).

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

/// Credentials of a connected peer, as the kernel recorded them at `connect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCredentials {
    /// Peer process id.
    pub pid: i32,
    /// Peer user id.
    pub uid: u32,
    /// Peer group id.
    pub gid: u32,
}

impl PeerCredentials {
    /// Reads the peer's credentials of `stream`.
    pub fn of(stream: &UnixStream) -> io::Result<Self> {
        let mut cred = libc::ucred {
            pid: 0,
            uid: 0,
            gid: 0,
        };
        let mut len = size_of::<libc::ucred>() as libc::socklen_t;
        // SAFETY: `cred` and `len` are live, writable and describe a ucred-sized buffer.
        let r = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_PEERCRED,
                (&mut cred as *mut libc::ucred).cast(),
                &mut len,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            pid: cred.pid,
            uid: cred.uid,
            gid: cred.gid,
        })
    }

    /// Whether this peer may control a process running as effective user `owner`: root or
    /// the same user.
    pub fn may_control(&self, owner: u32) -> bool {
        self.uid == 0 || self.uid == owner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_credentials() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = PeerCredentials::of(&a).unwrap();
        assert_eq!(c.pid as u32, std::process::id());
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        assert_eq!(c.uid, uid);
        assert!(c.may_control(uid));
        let other = PeerCredentials { uid: 1234, ..c };
        assert!(!other.may_control(4321));
        assert!(PeerCredentials { uid: 0, ..c }.may_control(4321));
    }
}
