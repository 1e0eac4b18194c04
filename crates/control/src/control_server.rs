//! [`ControlServer`]: a thread serving a managed process's control socket.

use std::io::{BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::control_error::ControlError;
use crate::peer_credentials::PeerCredentials;
use crate::process_status::ProcessStatus;
use crate::protocol::{
    decode_request, encode_response, read_line_limited, Request, Response, MAX_REQUEST_BYTES,
};
use crate::socket_dir::{prepare_control_dir, socket_path};

/// How long a client may take to send a request before it is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once (one thread each); more are refused.
const MAX_CLIENTS: usize = 8;

/// What a managed process does with requests.
pub trait ControlHandler: Send + Sync {
    /// The current status.
    fn status(&self) -> ProcessStatus;
    /// Applies a new budget and/or policy; `Err` is a one-line reason.
    fn set(&self, budget_bytes: Option<u64>, policy: Option<&str>) -> Result<(), String>;
}

/// A listening control socket at `DIR/PID.sock` (mode 0600) and the thread serving it (one
/// short-lived thread per connection, at most 8 at once). Only
/// root and the process's own effective user may talk to it (`SO_PEERCRED`). Dropping the
/// server does not stop the thread; [`remove_socket`](Self::remove_socket) unlinks the socket.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
}

impl ControlServer {
    /// Binds `dir/PID.sock` for this process and starts serving it with `handler`.
    /// `thread_init` runs first on the serving thread.
    pub fn start(
        dir: &Path,
        handler: Arc<dyn ControlHandler>,
        thread_init: fn(),
    ) -> Result<Self, ControlError> {
        prepare_control_dir(dir)?;
        let path = socket_path(dir, std::process::id());
        let io = |op: &'static str| {
            let path = path.clone();
            move |source| ControlError::Io { op, path, source }
        };
        // A socket left by a dead process with the same pid.
        if path.exists() {
            std::fs::remove_file(&path).map_err(io("remove stale socket"))?;
        }
        let listener = UnixListener::bind(&path).map_err(io("bind control socket"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io("chmod 0600 control socket"))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let owner = unsafe { libc::geteuid() };
        std::thread::Builder::new()
            .name("memvisor-control".into())
            .spawn(move || {
                thread_init();
                let active = Arc::new(AtomicUsize::new(0));
                for stream in listener.incoming().flatten() {
                    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
                        active.fetch_sub(1, Ordering::AcqRel);
                        let _ = (&stream).write_all(&encode_response(&Response::error(
                            "too many control connections",
                        )));
                        continue;
                    }
                    let (handler, in_thread) = (handler.clone(), active.clone());
                    let spawned = std::thread::Builder::new()
                        .name("memvisor-control-client".into())
                        .spawn(move || {
                            thread_init();
                            serve_connection(stream, owner, handler.as_ref());
                            in_thread.fetch_sub(1, Ordering::AcqRel);
                        });
                    if spawned.is_err() {
                        active.fetch_sub(1, Ordering::AcqRel);
                    }
                }
            })
            .map_err(io("start control thread"))?;
        Ok(Self { path })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Unlinks the socket (at process exit).
    pub fn remove_socket(&self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Serves one client until it closes, errs, or sends garbage.
fn serve_connection(stream: UnixStream, owner: u32, handler: &dyn ControlHandler) {
    let allowed = PeerCredentials::of(&stream).is_ok_and(|c| c.may_control(owner));
    let _ = stream.set_read_timeout(Some(CLIENT_TIMEOUT));
    let _ = stream.set_write_timeout(Some(CLIENT_TIMEOUT));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    if !allowed {
        // Answer the first request rather than close at once: a client still sending it would
        // otherwise see a broken pipe instead of the reason.
        let _ = read_line_limited(&mut reader, MAX_REQUEST_BYTES);
        let _ = writer.write_all(&encode_response(&Response::error(
            "permission denied: only root or the process's user may control it",
        )));
        return;
    }
    loop {
        let line = match read_line_limited(&mut reader, MAX_REQUEST_BYTES) {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                let _ = writer.write_all(&encode_response(&Response::error(e.to_string())));
                return;
            }
        };
        let response = match decode_request(&line) {
            Ok(Request::Status) => Response::status(handler.status()),
            Ok(Request::Set {
                budget_bytes,
                policy,
            }) => match handler.set(budget_bytes, policy.as_deref()) {
                Ok(()) => Response::status(handler.status()),
                Err(e) => Response::error(e),
            },
            Err(e) => Response::error(e.to_string()),
        };
        if writer.write_all(&encode_response(&response)).is_err() {
            return;
        }
    }
}
