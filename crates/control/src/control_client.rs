//! [`ControlClient`]: talks to one managed process's control socket, and says in one line why
//! it cannot: no such process, permission denied, stale socket, stopped, busy, timed out.

use std::fs;
use std::io::{BufReader, ErrorKind, Write};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::control_error::ControlError;
use crate::deadline_stream::DeadlineStream;
use crate::peer_credentials::PeerCredentials;
use crate::process_state::ProcessState;
use crate::process_status::ProcessStatus;
use crate::protocol::{
    decode_response, encode_request, read_line_limited, Request, Response, MAX_RESPONSE_BYTES,
};
use crate::socket_dir::socket_path;
use crate::unix_connect::connect_within;

/// How long to wait for the answer to a `status` request.
pub const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// How long to wait for the answer to a `set` request (it may page out memory first).
pub const SET_TIMEOUT: Duration = Duration::from_secs(5);

/// A connection to a managed process.
#[derive(Debug)]
pub struct ControlClient {
    pid: u32,
    stream: BufReader<DeadlineStream<UnixStream>>,
}

impl ControlClient {
    /// Connects to process `pid`'s socket in `dir`. A socket whose process is gone is removed
    /// when this user owns it (or is root).
    pub fn connect(dir: &Path, pid: u32) -> Result<Self, ControlError> {
        let path = socket_path(dir, pid);
        let io = |op: &'static str, path: &Path| {
            let path = path.to_path_buf();
            move |source| ControlError::Io { op, path, source }
        };
        match fs::symlink_metadata(&path) {
            // Not a symlink to another process's socket, nor anything else but a socket.
            Ok(m) if !m.file_type().is_socket() => {
                return Err(ControlError::NotASocket { pid, path })
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(ControlError::NoSuchProcess { pid, path })
            }
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                return Err(ControlError::PermissionDenied {
                    pid,
                    path: dir.to_path_buf(),
                })
            }
            Err(e) => return Err(io("look up", &path)(e)),
        }
        // A stopped process does not accept: connecting could wait on its full backlog.
        if ProcessState::of(pid) == ProcessState::Stopped {
            return Err(ControlError::Stopped { pid, action: "" });
        }
        // Bounded: a listener that never accepts (its backlog full) must not hang the caller.
        let stream = match connect_within(&path, STATUS_TIMEOUT) {
            Ok(s) => s,
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                return Err(ControlError::TimedOut {
                    pid,
                    secs: STATUS_TIMEOUT.as_secs(),
                    note: " to accept the connection (its socket's backlog stayed full)",
                })
            }
            Err(e) if e.kind() == ErrorKind::PermissionDenied => {
                return Err(ControlError::PermissionDenied { pid, path })
            }
            Err(e)
                if e.kind() == ErrorKind::ConnectionRefused
                    && matches!(
                        ProcessState::of(pid),
                        ProcessState::Gone | ProcessState::Zombie
                    ) =>
            {
                return Err(remove_stale_socket(pid, path))
            }
            Err(e) => return Err(io("connect to", &path)(e)),
        };
        // The file name says whose socket it is; the kernel says who serves it. Only the
        // managed process itself serves its socket: anything else (another user's server under
        // a borrowed pid) is not believed, nor sent a request.
        let server = PeerCredentials::of(&stream).map_err(io("read the peer of", &path))?;
        if u32::try_from(server.pid).ok() != Some(pid) {
            return Err(ControlError::WrongServer {
                pid,
                path,
                server: server.pid,
            });
        }
        Ok(Self {
            pid,
            stream: BufReader::new(DeadlineStream::new(stream, STATUS_TIMEOUT)),
        })
    }

    /// Sends `request` and returns the status the process answers with. A stopped process is
    /// reported at once, and nothing is sent to it (a request it read later would still be
    /// carried out).
    pub fn request(&mut self, request: &Request) -> Result<ProcessStatus, ControlError> {
        let pid = self.pid;
        let (timeout, action, note, stopped_late) = match request {
            Request::Status => (STATUS_TIMEOUT, "", "", ""),
            Request::Set { .. }
            | Request::SetImageCache { .. }
            | Request::Migrate { .. }
            | Request::MigrateFinish
            | Request::MigrateCancel => (
                SET_TIMEOUT,
                "; not changed",
                " (the change may still be applied)",
                " while the request was pending (the change may still be applied)",
            ),
        };
        if ProcessState::of(pid) == ProcessState::Stopped {
            return Err(ControlError::Stopped { pid, action });
        }
        let remote = |message: String| ControlError::Remote { pid, message };
        let late = |e: &std::io::Error| {
            matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock).then(|| {
                if ProcessState::of(pid) == ProcessState::Stopped {
                    ControlError::Stopped {
                        pid,
                        action: stopped_late,
                    }
                } else {
                    ControlError::TimedOut {
                        pid,
                        secs: timeout.as_secs(),
                        note,
                    }
                }
            })
        };
        self.stream.get_mut().restart(timeout);
        // A server that is full answers "busy" and closes without reading: the write then
        // fails, but the answer is there to be read.
        let sent = self.stream.get_mut().write_all(&encode_request(request));
        if let Err(e) = &sent {
            if let Some(err) = late(e) {
                return Err(err);
            }
        }
        let line = match read_line_limited(&mut self.stream, MAX_RESPONSE_BYTES) {
            Ok(Some(line)) => line,
            Ok(None) => {
                return Err(remote(match sent {
                    Err(e) => format!("sending request: {e}"),
                    Ok(()) => "closed the connection without answering".into(),
                }))
            }
            Err(ControlError::Read(e)) => {
                return Err(late(&e).unwrap_or_else(|| remote(format!("reading answer: {e}"))))
            }
            Err(e) => return Err(remote(e.to_string())),
        };
        match decode_response(&line).map_err(|e| remote(e.to_string()))? {
            Response::Status { status, .. } => Ok(*status),
            Response::Busy { error, .. } => Err(ControlError::Busy {
                pid,
                message: error,
            }),
            Response::Error { error, .. } => Err(remote(error)),
        }
    }

    /// The process's status.
    pub fn status(&mut self) -> Result<ProcessStatus, ControlError> {
        self.request(&Request::Status)
    }

    /// Starts, finishes or cancels a live migration; returns the status (its `migration`
    /// shows the progress).
    pub fn migrate(&mut self, request: &Request) -> Result<ProcessStatus, ControlError> {
        self.request(request)
    }

    /// Sets a new budget and/or policy; returns the new status.
    pub fn set(
        &mut self,
        budget_bytes: Option<u64>,
        policy: Option<String>,
    ) -> Result<ProcessStatus, ControlError> {
        self.request(&Request::Set {
            budget_bytes,
            policy,
        })
    }

    /// Sets (`Some`) or lifts (`None`) the limit on the host cache of `image` (every image if
    /// `None`); returns the new status.
    pub fn set_image_cache(
        &mut self,
        limit_bytes: Option<u64>,
        image: Option<String>,
    ) -> Result<ProcessStatus, ControlError> {
        self.request(&Request::SetImageCache { limit_bytes, image })
    }
}

/// The error for the socket `path` of `pid`, which is gone; removes the socket when this user
/// owns it or is root.
fn remove_stale_socket(pid: u32, path: PathBuf) -> ControlError {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let owner = fs::symlink_metadata(&path).map(|m| m.uid()).ok();
    let outcome = if me != 0 && owner != Some(me) {
        "left in place: owned by another user"
    } else if fs::remove_file(&path).is_ok() {
        "removed"
    } else {
        "left in place: could not remove it"
    };
    ControlError::StaleSocket { pid, path, outcome }
}
