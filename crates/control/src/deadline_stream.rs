//! [`DeadlineStream`]: a socket whose reads and writes share one deadline, so a request's
//! whole exchange is bounded in time however slowly the peer dribbles its bytes (a per-read
//! timeout would restart with every byte).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A socket with read and write timeouts.
pub trait TimeoutSocket {
    /// Sets the read timeout (`None`: block).
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
    /// Sets the write timeout (`None`: block).
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()>;
}

impl TimeoutSocket for UnixStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, timeout)
    }
}

impl TimeoutSocket for TcpStream {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, timeout)
    }
}

/// A borrowed socket (a handshake bounded in time on a socket that outlives it).
impl<T: TimeoutSocket + ?Sized> TimeoutSocket for &T {
    fn set_read_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_read_timeout(timeout)
    }
    fn set_write_timeout(&self, timeout: Option<Duration>) -> io::Result<()> {
        (**self).set_write_timeout(timeout)
    }
}

/// A socket every read and write of which must finish before one deadline.
#[derive(Debug)]
pub struct DeadlineStream<S> {
    socket: S,
    deadline: Instant,
}

impl<S: TimeoutSocket> DeadlineStream<S> {
    /// `socket` with a deadline `limit` from now.
    pub fn new(socket: S, limit: Duration) -> Self {
        Self {
            socket,
            deadline: Instant::now() + limit,
        }
    }

    /// Moves the deadline to `limit` from now (the next request's).
    pub fn restart(&mut self, limit: Duration) {
        self.deadline = Instant::now() + limit;
    }

    /// Moves the deadline to at least `limit` from now.
    pub fn extend_to_at_least(&mut self, limit: Duration) {
        self.deadline = self.deadline.max(Instant::now() + limit);
    }

    /// The socket.
    pub fn socket(&self) -> &S {
        &self.socket
    }

    /// Time left, or a `TimedOut` error when none is.
    fn remaining(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "request deadline passed",
            ));
        }
        Ok(left)
    }
}

impl<S: TimeoutSocket + Read> Read for DeadlineStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.remaining()?;
        self.socket.set_read_timeout(Some(left))?;
        self.socket.read(buf)
    }
}

impl<S: TimeoutSocket + Write> Write for DeadlineStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.remaining()?;
        self.socket.set_write_timeout(Some(left))?;
        self.socket.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.socket.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_deadline_even_when_bytes_trickle() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            for _ in 0..10 {
                if b.write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let start = Instant::now();
        let mut s = DeadlineStream::new(a, Duration::from_millis(350));
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        let err = loop {
            match s.read(&mut byte) {
                Ok(0) => panic!("closed early"),
                Ok(_) => got.push(byte[0]),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{err}"
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(!got.is_empty() && got.len() < 10, "{}", got.len());
        drop(s);
        writer.join().unwrap();
    }
}
