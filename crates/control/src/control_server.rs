//! [`ControlServer`]: a thread serving a managed process's control socket.

use std::io::{BufReader, ErrorKind, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::connection_limits::{ConnectionLimits, Refusal};
use crate::control_error::ControlError;
use crate::deadline_stream::DeadlineStream;
use crate::host_memory::mem_total_bytes;
use crate::migrate_rules::MigrateRules;
use crate::peer_credentials::PeerCredentials;
use crate::process_status::ProcessStatus;
use crate::protocol::{
    decode_request, encode_response, read_line_limited, Request, Response, MAX_REQUEST_BYTES,
};
use crate::set_rules::SetRules;
use crate::socket_dir::{prepare_control_dir, socket_path};

/// Time a client has to send a request and read its answer (the handler's own time aside);
/// counted from when the server starts waiting for the request, however slowly bytes arrive.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Time an answer gets to go out after the handler ran.
const ANSWER_TIME: Duration = Duration::from_secs(2);
/// Time an error or busy answer gets to go out.
const ERROR_ANSWER_TIME: Duration = Duration::from_millis(500);
/// Connections served at once (one thread each); more are answered "busy".
pub const MAX_CONNECTIONS: usize = 8;
/// Connections of one user served at once, so one user cannot take every place.
pub const MAX_CONNECTIONS_PER_UID: usize = 4;

/// What a managed process does with requests.
pub trait ControlHandler: Send + Sync {
    /// The current status.
    fn status(&self) -> ProcessStatus;
    /// Applies a new budget and/or policy, already checked with [`SetRules`] (host RAM, the
    /// chunk size of [`status`](Self::status), a live policy); `Err` is a one-line reason.
    fn set(&self, budget_bytes: Option<u64>, policy: Option<&str>) -> Result<(), String>;
    /// Sets (`Some`) or lifts (`None`) the limit on the host cache of the image with path
    /// `image` as the status shows it, or of every image (`None`, also those found later);
    /// a limit already checked with [`SetRules::check_image_cache`]. Processes without images
    /// refuse.
    fn set_image_cache(&self, image: Option<&str>, limit_bytes: Option<u64>) -> Result<(), String> {
        let _ = (image, limit_bytes);
        Err("this process does not manage disk images".into())
    }
    /// Starts, finishes or cancels a live migration (a start already checked with
    /// [`MigrateRules`]); `Err` is a one-line reason. Processes that cannot migrate refuse.
    fn migrate(&self, command: MigrateCommand) -> Result<(), String> {
        let _ = command;
        Err("this process cannot migrate its memory".into())
    }
}

/// A migration request, checked, as the handler gets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrateCommand {
    /// Start sending memory to `to`.
    Start {
        /// The destination.
        to: std::net::SocketAddr,
        /// The shared key file.
        key_file: PathBuf,
        /// Bytes per second at most.
        max_bandwidth: Option<u64>,
        /// Rounds end once a round's changes fit this long at the measured rate.
        downtime_limit_ms: u64,
        /// When the pages changed last follow after the switch-over.
        post_copy: crate::PostCopy,
    },
    /// Send the last round and wait for the destination's acknowledgement.
    Finish,
    /// Stop and let the destination discard what it received.
    Cancel,
}

/// A listening control socket at `DIR/PID.sock` (mode 0600) and the thread serving it: one
/// short-lived thread per connection, at most [`MAX_CONNECTIONS`] at once and
/// [`MAX_CONNECTIONS_PER_UID`] per peer user (`SO_PEERCRED`), more get a busy answer; each
/// request must arrive within [`REQUEST_DEADLINE`]; `set` requests are checked with
/// [`SetRules`] before the handler sees them. Only root and the process's own effective user
/// get answers. Dropping the server does not stop the thread;
/// [`remove_socket`](Self::remove_socket) unlinks the socket.
#[derive(Debug)]
pub struct ControlServer {
    path: PathBuf,
}

impl ControlServer {
    /// Binds `dir/PID.sock` for this process and starts serving it with `handler`.
    /// `thread_init` runs first on the serving thread; returns once it has.
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
        // Wait until the accept thread has run `thread_init`: until then it carries the name of
        // the program thread that started it, and an embedder that knows its threads by name
        // (the preload library's credential mirror) would miss it.
        let (started_tx, started_rx) = std::sync::mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("memvisor-control".into())
            .spawn(move || {
                thread_init();
                let _ = started_tx.send(());
                let limits = ConnectionLimits::new(MAX_CONNECTIONS, MAX_CONNECTIONS_PER_UID);
                for stream in listener.incoming().flatten() {
                    // A peer whose credentials cannot be read counts as one unknown user.
                    let peer = PeerCredentials::of(&stream).ok();
                    let allowed = peer.is_some_and(|c| c.may_control(owner));
                    let slot = match limits.try_open(peer.map_or(u32::MAX, |c| c.uid)) {
                        Ok(slot) => slot,
                        Err(refusal) => {
                            answer_busy(stream, refusal);
                            continue;
                        }
                    };
                    let handler = handler.clone();
                    let _ = std::thread::Builder::new()
                        .name("memvisor-control-client".into())
                        .spawn(move || {
                            thread_init();
                            serve_connection(stream, allowed, handler.as_ref());
                            drop(slot);
                        });
                }
            })
            .map_err(io("start control thread"))?;
        let _ = started_rx.recv();
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

/// Refuses a connection over the limits with one busy line.
fn answer_busy(stream: UnixStream, refusal: Refusal) {
    let mut stream = DeadlineStream::new(stream, ERROR_ANSWER_TIME);
    let _ = stream.write_all(&encode_response(&Response::busy(format!(
        "{refusal} (limits: {MAX_CONNECTIONS} in all, {MAX_CONNECTIONS_PER_UID} per user); try again"
    ))));
}

/// The rules a `set` of this process must satisfy: host RAM and the process's chunk size.
fn set_rules(handler: &dyn ControlHandler) -> Result<SetRules, ControlError> {
    Ok(SetRules {
        host_ram_bytes: mem_total_bytes()?,
        chunk_bytes: handler.status().chunk_size,
    })
}

/// Answers one decoded request.
fn respond_to(request: Result<Request, ControlError>, handler: &dyn ControlHandler) -> Response {
    match request {
        Ok(Request::Status) => Response::status(handler.status()),
        Ok(Request::Set {
            budget_bytes,
            policy,
        }) => {
            let checked =
                set_rules(handler).and_then(|rules| rules.check(budget_bytes, policy.as_deref()));
            if let Err(e) = checked {
                return Response::error(e.to_string());
            }
            match handler.set(budget_bytes, policy.as_deref()) {
                Ok(()) => Response::status(handler.status()),
                Err(e) => Response::error(e),
            }
        }
        Ok(Request::SetImageCache { limit_bytes, image }) => {
            if let Some(bytes) = limit_bytes {
                if let Err(e) = set_rules(handler).and_then(|rules| rules.check_image_cache(bytes))
                {
                    return Response::error(e.to_string());
                }
            }
            match handler.set_image_cache(image.as_deref(), limit_bytes) {
                Ok(()) => Response::status(handler.status()),
                Err(e) => Response::error(e),
            }
        }
        Ok(Request::Migrate {
            to,
            key_file,
            max_bandwidth,
            downtime_limit_ms,
            post_copy,
        }) => {
            let to = match MigrateRules.check(&to, &key_file, max_bandwidth, downtime_limit_ms) {
                Ok(to) => to,
                Err(e) => return Response::error(e.to_string()),
            };
            migrate(
                handler,
                MigrateCommand::Start {
                    to,
                    key_file: key_file.into(),
                    max_bandwidth,
                    downtime_limit_ms,
                    post_copy,
                },
            )
        }
        Ok(Request::MigrateFinish) => migrate(handler, MigrateCommand::Finish),
        Ok(Request::MigrateCancel) => migrate(handler, MigrateCommand::Cancel),
        Err(e) => Response::error(e.to_string()),
    }
}

fn migrate(handler: &dyn ControlHandler, command: MigrateCommand) -> Response {
    match handler.migrate(command) {
        Ok(()) => Response::status(handler.status()),
        Err(e) => Response::error(e),
    }
}

/// Serves one client until it closes, errs, sends garbage or misses a request's deadline.
/// `allowed`: the peer is root or the process's user.
fn serve_connection(stream: UnixStream, allowed: bool, handler: &dyn ControlHandler) {
    let mut reader = BufReader::new(DeadlineStream::new(stream, REQUEST_DEADLINE));
    if !allowed {
        // Answer the first request rather than close at once: a client still sending it would
        // otherwise see a broken pipe instead of the reason.
        let _ = read_line_limited(&mut reader, MAX_REQUEST_BYTES);
        reader.get_mut().extend_to_at_least(ERROR_ANSWER_TIME);
        let _ = reader
            .get_mut()
            .write_all(&encode_response(&Response::error(
                "permission denied: only root or the process's user may control it",
            )));
        return;
    }
    loop {
        reader.get_mut().restart(REQUEST_DEADLINE);
        let line = match read_line_limited(&mut reader, MAX_REQUEST_BYTES) {
            Ok(Some(l)) => l,
            Ok(None) => return,
            Err(e) => {
                let e = match e {
                    ControlError::Read(io)
                        if matches!(io.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) =>
                    {
                        format!(
                            "request not received within {} s",
                            REQUEST_DEADLINE.as_secs()
                        )
                    }
                    e => e.to_string(),
                };
                reader.get_mut().extend_to_at_least(ERROR_ANSWER_TIME);
                let _ = reader
                    .get_mut()
                    .write_all(&encode_response(&Response::error(e)));
                return;
            }
        };
        let response = respond_to(decode_request(&line), handler);
        // The handler's time is not the client's: the answer gets its time to go out.
        reader.get_mut().extend_to_at_least(ANSWER_TIME);
        if reader
            .get_mut()
            .write_all(&encode_response(&response))
            .is_err()
        {
            return;
        }
    }
}
