//! The TCP options of a migration connection, set with `setsockopt` (the standard library has
//! no call for them):
//!
//! - [`watch_peer`]: keepalive probes after 5 s of silence, every 2 s, 3 unanswered ones
//!   ending the connection. An end that is only waiting (a post-copy destination waiting for
//!   pushed pages) learns within about 11 s that the path to its peer is gone, instead of at
//!   its idle timeout (120 s), and waits for the source to resume sooner.
//! - [`set_cork`]: `TCP_CORK`, so a round of many short frames leaves in full segments.

use std::net::TcpStream;
use std::os::fd::AsRawFd;

/// Silence before the first keepalive probe, seconds.
pub(crate) const KEEPALIVE_IDLE_SECS: libc::c_int = 5;
/// Between probes, seconds.
pub(crate) const KEEPALIVE_INTERVAL_SECS: libc::c_int = 2;
/// Unanswered probes that end the connection.
pub(crate) const KEEPALIVE_PROBES: libc::c_int = 3;

/// Sets one `c_int` socket option; `false` if the kernel refused it.
fn set_int(tcp: &TcpStream, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from `&value`, which lives across
    // the call; the descriptor is the open socket `tcp` owns.
    let r = unsafe {
        libc::setsockopt(
            tcp.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    r == 0
}

/// Turns on keepalive probes with the timing above. Best effort: a connection without them
/// still ends at its read and write timeouts.
pub(crate) fn watch_peer(tcp: &TcpStream) {
    let _ = set_int(tcp, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)
        && set_int(
            tcp,
            libc::IPPROTO_TCP,
            libc::TCP_KEEPIDLE,
            KEEPALIVE_IDLE_SECS,
        )
        && set_int(
            tcp,
            libc::IPPROTO_TCP,
            libc::TCP_KEEPINTVL,
            KEEPALIVE_INTERVAL_SECS,
        )
        && set_int(tcp, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, KEEPALIVE_PROBES);
}

/// Corks (`on`) or uncorks `tcp`: corked, the kernel sends only full segments (uncorking sends
/// what is left at once; corked data would otherwise wait up to 200 ms).
pub(crate) fn set_cork(tcp: &TcpStream, on: bool) {
    let _ = set_int(tcp, libc::IPPROTO_TCP, libc::TCP_CORK, on.into());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_int(tcp: &TcpStream, level: libc::c_int, name: libc::c_int) -> libc::c_int {
        let mut value: libc::c_int = -1;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes to `&mut value`, which lives across
        // the call, and the length to `&mut len`; the descriptor is the open socket `tcp` owns.
        let r = unsafe {
            libc::getsockopt(
                tcp.as_raw_fd(),
                level,
                name,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(r, 0, "{}", std::io::Error::last_os_error());
        value
    }

    #[test]
    fn a_watched_connection_probes_its_peer_and_corks() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert_eq!(get_int(&tcp, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        watch_peer(&tcp);
        assert_ne!(get_int(&tcp, libc::SOL_SOCKET, libc::SO_KEEPALIVE), 0);
        let tcp_opt = |name| get_int(&tcp, libc::IPPROTO_TCP, name);
        assert_eq!(tcp_opt(libc::TCP_KEEPIDLE), KEEPALIVE_IDLE_SECS);
        assert_eq!(tcp_opt(libc::TCP_KEEPINTVL), KEEPALIVE_INTERVAL_SECS);
        assert_eq!(tcp_opt(libc::TCP_KEEPCNT), KEEPALIVE_PROBES);
        set_cork(&tcp, true);
        assert_ne!(tcp_opt(libc::TCP_CORK), 0);
        set_cork(&tcp, false);
        assert_eq!(tcp_opt(libc::TCP_CORK), 0);
    }
}
