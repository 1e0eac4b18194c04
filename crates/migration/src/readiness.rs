//! [`wait_readable`]: `poll(2)` for input on a few descriptors, the one raw call a post-copy
//! end needs to serve its connection and its pager's wanted pages from one thread.

use std::io;
use std::os::fd::RawFd;
use std::time::Duration;

/// Waits up to `timeout` until one of `fds` has input (or an error or hang-up to report), and
/// says which do; all `false` when the time ran out. An interrupted wait counts as time out.
pub(crate) fn wait_readable(fds: &[RawFd], timeout: Duration) -> io::Result<Vec<bool>> {
    let mut polled: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    // SAFETY: `polled` is a live array of `polled.len()` pollfds; poll writes only their
    // `revents`. Descriptors that are not open are reported as POLLNVAL, not touched.
    let r = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![false; fds.len()]);
        }
        return Err(e);
    }
    Ok(polled.iter().map(|p| p.revents != 0).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;

    #[test]
    fn tells_which_descriptor_has_input() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        let (c, _d) = std::os::unix::net::UnixStream::pair().unwrap();
        let fds = [a.as_raw_fd(), c.as_raw_fd()];
        assert_eq!(
            wait_readable(&fds, Duration::from_millis(1)).unwrap(),
            vec![false, false]
        );
        b.write_all(b"x").unwrap();
        assert_eq!(
            wait_readable(&fds, Duration::from_secs(5)).unwrap(),
            vec![true, false]
        );
    }
}
