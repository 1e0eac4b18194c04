//! [`QmpStream`]: the socket to QEMU (Unix or TCP), read and written against a deadline that
//! bounds a whole exchange (each read or write gets only the time left, so a peer dribbling
//! bytes cannot stretch it).

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::BorrowedFd;
use std::os::unix::net::UnixStream;
use std::time::Instant;

use crate::qmp_address::QmpAddress;

/// A connected QMP socket.
#[derive(Debug)]
pub(crate) enum QmpStream {
    /// `unix:PATH`.
    Unix(UnixStream),
    /// `tcp:HOST:PORT`.
    Tcp(TcpStream),
}

/// The `TimedOut` error of a passed deadline.
fn deadline_passed() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "deadline passed")
}

/// The time left before `deadline`, or a `TimedOut` error.
fn time_left(deadline: Instant) -> io::Result<std::time::Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(deadline_passed());
    }
    Ok(left)
}

/// A TCP connection to `host_port` (`HOST:PORT`, each address it resolves to tried in turn),
/// made before `deadline` (name resolution itself is not bounded), with `TCP_NODELAY`: QMP's
/// short exchanges, and the migration connection `memvisor migrate` hands to QEMU, must not
/// wait for delayed acknowledgements.
pub fn connect_tcp(host_port: &str, deadline: Instant) -> io::Result<TcpStream> {
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        "the host name resolves to no address",
    );
    for socket_address in host_port.to_socket_addrs()? {
        match TcpStream::connect_timeout(&socket_address, time_left(deadline)?) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

impl QmpStream {
    /// Connects to `address`; a TCP connection must be made before `deadline` (name resolution
    /// itself is not bounded; a Unix connection is immediate or refused).
    pub(crate) fn connect(address: &QmpAddress, deadline: Instant) -> io::Result<Self> {
        match address {
            QmpAddress::Unix(path) => Ok(QmpStream::Unix(UnixStream::connect(path)?)),
            QmpAddress::Tcp(host_port) => Ok(QmpStream::Tcp(connect_tcp(host_port, deadline)?)),
        }
    }

    /// Writes all of `bytes` before `deadline`.
    pub(crate) fn write_all_before(
        &mut self,
        mut bytes: &[u8],
        deadline: Instant,
    ) -> io::Result<()> {
        while !bytes.is_empty() {
            let left = time_left(deadline)?;
            let written = match self {
                QmpStream::Unix(s) => {
                    s.set_write_timeout(Some(left))?;
                    s.write(bytes)
                }
                QmpStream::Tcp(s) => {
                    s.set_write_timeout(Some(left))?;
                    s.write(bytes)
                }
            };
            match written {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => bytes = &bytes[n..],
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes all of `bytes` before `deadline`, with `fd` attached to the first of them
    /// (`SCM_RIGHTS`); only a Unix socket can carry a descriptor.
    pub(crate) fn write_all_with_fd_before(
        &mut self,
        bytes: &[u8],
        fd: BorrowedFd<'_>,
        deadline: Instant,
    ) -> io::Result<()> {
        let QmpStream::Unix(socket) = self else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a descriptor can be passed over a Unix socket only",
            ));
        };
        socket.set_write_timeout(Some(time_left(deadline)?))?;
        let sent = crate::fd_passing::send_with_fd(socket, bytes, fd)?;
        self.write_all_before(&bytes[sent..], deadline)
    }

    /// Whether descriptors can be passed ([`write_all_with_fd_before`](Self::write_all_with_fd_before)).
    pub(crate) fn can_pass_fds(&self) -> bool {
        matches!(self, QmpStream::Unix(_))
    }

    /// A reader of this stream whose every read ends by `deadline`.
    pub(crate) fn reader_before(&mut self, deadline: Instant) -> DeadlineReader<'_> {
        DeadlineReader {
            stream: self,
            deadline,
        }
    }
}

/// Reads from a [`QmpStream`], failing with `TimedOut` (or `WouldBlock`, from the socket
/// timeout) once the deadline has passed.
#[derive(Debug)]
pub(crate) struct DeadlineReader<'a> {
    stream: &'a mut QmpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = time_left(self.deadline)?;
        match self.stream {
            QmpStream::Unix(s) => {
                s.set_read_timeout(Some(left))?;
                s.read(buf)
            }
            QmpStream::Tcp(s) => {
                s.set_read_timeout(Some(left))?;
                s.read(buf)
            }
        }
    }
}
