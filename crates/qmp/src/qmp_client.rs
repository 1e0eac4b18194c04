//! [`QmpClient`]: a blocking QMP client. It connects, reads the greeting, negotiates
//! capabilities, then sends commands (each with a fresh numeric `id`) and waits for the reply
//! with that id; events read meanwhile are queued. Every exchange is bounded by one deadline
//! for the whole reply, and lines over [`MAX_LINE_BYTES`] are refused.

use std::collections::VecDeque;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::line_reader::{LineError, LineReader};
use crate::migration_info::MigrationInfo;
use crate::qmp_address::QmpAddress;
use crate::qmp_error::QmpError;
use crate::qmp_event::QmpEvent;
use crate::qmp_reply::{parse_reply, QmpReply, MAX_LINE_BYTES};
use crate::qmp_stream::QmpStream;
use crate::run_state::RunState;

/// How often [`QmpClient::wait_migration_status`] polls `query-migrate`.
const MIGRATION_POLL: Duration = Duration::from_millis(20);

/// A connection to one QEMU's QMP monitor, past capabilities negotiation.
#[derive(Debug)]
pub struct QmpClient {
    address: QmpAddress,
    stream: QmpStream,
    lines: LineReader,
    /// The deadline of each command's whole exchange.
    timeout: Duration,
    next_id: u64,
    events: VecDeque<QmpEvent>,
    greeting: Value,
}

/// `timeout` from now (saturating far in the future rather than overflowing).
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .or_else(|| now.checked_add(Duration::from_secs(100 * 365 * 86_400)))
        .unwrap_or(now)
}

/// `timeout` in milliseconds, for messages.
fn millis(timeout: Duration) -> u64 {
    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)
}

impl QmpClient {
    /// Connects, reads the greeting, negotiates capabilities (`qmp_capabilities`, no optional
    /// capability), all within `timeout`, which is also each later command's timeout
    /// ([`QmpClient::set_timeout`]). Errors name the address.
    pub fn connect(address: &QmpAddress, timeout: Duration) -> Result<Self, QmpError> {
        let deadline = deadline_after(timeout);
        let stream = QmpStream::connect(address, deadline).map_err(|source| {
            if matches!(
                source.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ) {
                QmpError::TimedOut {
                    address: address.clone(),
                    action: "connecting".to_string(),
                    timeout_ms: millis(timeout),
                }
            } else {
                QmpError::Connect {
                    address: address.clone(),
                    source,
                }
            }
        })?;
        let mut client = QmpClient {
            address: address.clone(),
            stream,
            lines: LineReader::default(),
            timeout,
            next_id: 1,
            events: VecDeque::new(),
            greeting: Value::Null,
        };
        let action = "waiting for the QMP greeting";
        client.greeting = match client.read_reply(deadline, timeout, action)? {
            QmpReply::Greeting(greeting) => greeting,
            other => return Err(client.protocol(action, format!("got {}", describe(&other)))),
        };
        client.execute_before("qmp_capabilities", None, None, deadline, timeout)?;
        Ok(client)
    }

    /// The address connected to.
    pub fn address(&self) -> &QmpAddress {
        &self.address
    }

    /// The greeting's `QMP` member (`{"version": ..., "capabilities": [...]}`).
    pub fn greeting(&self) -> &Value {
        &self.greeting
    }

    /// Sets the time allowed for each later command's whole exchange.
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// The time allowed for each command's whole exchange.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends a command and waits for its reply (matched by id), returning its `return` value;
    /// QEMU's error reply is [`QmpError::Command`] with its class and description. Events that
    /// arrive meanwhile are queued ([`QmpClient::take_events`]); replies to earlier, timed-out
    /// commands are dropped.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value, QmpError> {
        let timeout = self.timeout;
        self.execute_before(command, arguments, None, deadline_after(timeout), timeout)
    }

    /// Whether this connection can pass descriptors to QEMU ([`pass_fd`](Self::pass_fd)): a
    /// Unix socket can, TCP cannot.
    pub fn can_pass_fds(&self) -> bool {
        self.stream.can_pass_fds()
    }

    /// `getfd`: gives QEMU a duplicate of `fd` under `name` (for a later `fd:NAME` URI, such
    /// as `migrate`'s); replaces one of the same name. Only over a Unix socket
    /// ([`can_pass_fds`](Self::can_pass_fds)); QEMU owns its duplicate, the caller keeps `fd`.
    pub fn pass_fd(&mut self, name: &str, fd: BorrowedFd<'_>) -> Result<(), QmpError> {
        let timeout = self.timeout;
        self.execute_before(
            "getfd",
            Some(json!({ "fdname": name })),
            Some(fd),
            deadline_after(timeout),
            timeout,
        )
        .map(drop)
    }

    /// The events read so far and not yet taken, oldest first. Events are read while the
    /// client waits for a reply or an event; this does not read the socket.
    pub fn take_events(&mut self) -> Vec<QmpEvent> {
        self.events.drain(..).collect()
    }

    /// The first event called `name`: the oldest queued one, or the next one read within
    /// `timeout` (other events read meanwhile are queued).
    pub fn wait_event(&mut self, name: &str, timeout: Duration) -> Result<QmpEvent, QmpError> {
        if let Some(at) = self.events.iter().position(|e| e.name == name) {
            if let Some(event) = self.events.remove(at) {
                return Ok(event);
            }
        }
        let deadline = deadline_after(timeout);
        let action = format!("waiting for event '{name}'");
        loop {
            if let QmpReply::Event(event) = self.read_reply(deadline, timeout, &action)? {
                if event.name == name {
                    return Ok(event);
                }
                self.events.push_back(event);
            }
        }
    }

    /// `query-status`: the VM's run state.
    pub fn query_status(&mut self) -> Result<RunState, QmpError> {
        let value = self.execute("query-status", None)?;
        RunState::from_return(&value).map_err(|reason| self.unexpected("query-status", reason))
    }

    /// `migrate-set-capabilities` with each `(capability, state)`.
    pub fn set_migration_capabilities(
        &mut self,
        capabilities: &[(&str, bool)],
    ) -> Result<(), QmpError> {
        let list: Vec<Value> = capabilities
            .iter()
            .map(|(capability, state)| json!({"capability": capability, "state": state}))
            .collect();
        self.execute(
            "migrate-set-capabilities",
            Some(json!({ "capabilities": list })),
        )
        .map(drop)
    }

    /// `query-migrate-capabilities`: every migration capability and its state.
    pub fn query_migration_capabilities(&mut self) -> Result<Vec<(String, bool)>, QmpError> {
        let value = self.execute("query-migrate-capabilities", None)?;
        let Some(list) = value.as_array() else {
            return Err(
                self.unexpected("query-migrate-capabilities", format!("not a list: {value}"))
            );
        };
        list.iter()
            .map(|c| {
                match (
                    c.get("capability").and_then(Value::as_str),
                    c.get("state").and_then(Value::as_bool),
                ) {
                    (Some(name), Some(state)) => Ok((name.to_string(), state)),
                    _ => Err(self.unexpected(
                        "query-migrate-capabilities",
                        format!("an entry without capability and state: {c}"),
                    )),
                }
            })
            .collect()
    }

    /// `query-migrate-parameters`: the migration parameters, as QEMU returns them.
    pub fn query_migration_parameters(&mut self) -> Result<Value, QmpError> {
        self.execute("query-migrate-parameters", None)
    }

    /// `migrate-set-parameters` with `parameters` as its arguments
    /// (`{"downtime-limit": 300, "max-bandwidth": 1073741824}`).
    pub fn set_migration_parameters(&mut self, parameters: Value) -> Result<(), QmpError> {
        self.execute("migrate-set-parameters", Some(parameters))
            .map(drop)
    }

    /// `migrate` to `uri` (`tcp:HOST:PORT`, `unix:PATH`, ...); returns once QEMU has started
    /// the migration (see [`QmpClient::wait_migration_status`]).
    pub fn migrate(&mut self, uri: &str) -> Result<(), QmpError> {
        self.execute("migrate", Some(json!({ "uri": uri })))
            .map(drop)
    }

    /// `migrate-incoming` on `uri`, on a QEMU started with `-incoming defer`.
    pub fn migrate_incoming(&mut self, uri: &str) -> Result<(), QmpError> {
        self.execute("migrate-incoming", Some(json!({ "uri": uri })))
            .map(drop)
    }

    /// `migrate-continue` from the paused `state` (`pre-switchover`, with capability
    /// `pause-before-switchover`).
    pub fn migrate_continue(&mut self, state: &str) -> Result<(), QmpError> {
        self.execute("migrate-continue", Some(json!({ "state": state })))
            .map(drop)
    }

    /// `migrate_cancel`: cancels the outgoing migration.
    pub fn migrate_cancel(&mut self) -> Result<(), QmpError> {
        self.execute("migrate_cancel", None).map(drop)
    }

    /// `query-migrate`: the current or last migration's state.
    pub fn query_migrate(&mut self) -> Result<MigrationInfo, QmpError> {
        let value = self.execute("query-migrate", None)?;
        MigrationInfo::from_return(&value)
            .map_err(|reason| self.unexpected("query-migrate", reason))
    }

    /// Polls `query-migrate` every ~20 ms until its status is one of `wanted`. A status of
    /// `failed` or `cancelled` that is not wanted is [`QmpError::MigrationFailed`] with QEMU's
    /// `error-desc`; not getting there within `timeout` (plus at most one command timeout) is
    /// [`QmpError::MigrationTimedOut`] naming the last status.
    pub fn wait_migration_status(
        &mut self,
        wanted: &[&str],
        timeout: Duration,
    ) -> Result<MigrationInfo, QmpError> {
        self.wait_migration_status_every(wanted, timeout, MIGRATION_POLL)
    }

    /// [`wait_migration_status`](Self::wait_migration_status), polling every `poll`: shorter
    /// while the guest is paused (each poll interval may add to the downtime).
    pub fn wait_migration_status_every(
        &mut self,
        wanted: &[&str],
        timeout: Duration,
        poll: Duration,
    ) -> Result<MigrationInfo, QmpError> {
        let deadline = deadline_after(timeout);
        loop {
            let info = self.query_migrate()?;
            if wanted.contains(&info.status.as_str()) {
                return Ok(info);
            }
            if matches!(info.status.as_str(), "failed" | "cancelled") {
                return Err(QmpError::MigrationFailed {
                    address: self.address.clone(),
                    wanted: wanted.join("|"),
                    desc: info
                        .error_desc
                        .unwrap_or_else(|| "QEMU gave no error-desc".to_string()),
                    status: info.status,
                });
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(QmpError::MigrationTimedOut {
                    address: self.address.clone(),
                    wanted: wanted.join("|"),
                    last: info.status,
                    timeout_ms: millis(timeout),
                });
            }
            std::thread::sleep(left.min(poll));
        }
    }

    /// `quit`: QEMU exits. Its connection closing before or instead of the reply is success.
    pub fn quit(&mut self) -> Result<(), QmpError> {
        match self.execute("quit", None) {
            Ok(_) | Err(QmpError::Closed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sends `command` (with `id`) and waits until `deadline` for its reply.
    fn execute_before(
        &mut self,
        command: &str,
        arguments: Option<Value>,
        fd: Option<BorrowedFd<'_>>,
        deadline: Instant,
        timeout: Duration,
    ) -> Result<Value, QmpError> {
        let id = self.next_id;
        self.next_id += 1;
        let mut message = json!({ "execute": command, "id": id });
        if let Some(arguments) = arguments {
            message["arguments"] = arguments;
        }
        let mut bytes = message.to_string().into_bytes();
        bytes.push(b'\n');
        let sending = format!("sending '{command}'");
        let written = match fd {
            Some(fd) => self.stream.write_all_with_fd_before(&bytes, fd, deadline),
            None => self.stream.write_all_before(&bytes, deadline),
        };
        written.map_err(|e| self.io_error(e, &sending, timeout))?;
        let action = format!("waiting for the reply to '{command}'");
        let id = Value::from(id);
        loop {
            match self.read_reply(deadline, timeout, &action)? {
                QmpReply::Return {
                    id: Some(got),
                    value,
                } if got == id => return Ok(value),
                // No id: QEMU could not read the command at all.
                QmpReply::Error {
                    id: got,
                    class,
                    desc,
                } if got.as_ref().is_none_or(|got| *got == id) => {
                    return Err(QmpError::Command {
                        address: self.address.clone(),
                        command: command.to_string(),
                        class,
                        desc,
                    })
                }
                QmpReply::Event(event) => self.events.push_back(event),
                // A late reply to a timed-out command, or a stray greeting.
                _ => {}
            }
        }
    }

    /// The next message read before `deadline` (blank lines are skipped).
    fn read_reply(
        &mut self,
        deadline: Instant,
        timeout: Duration,
        action: &str,
    ) -> Result<QmpReply, QmpError> {
        loop {
            let line = self
                .lines
                .read_line(&mut self.stream.reader_before(deadline));
            let line = match line {
                Ok(line) => line,
                Err(LineError::TooLong) => {
                    return Err(QmpError::TooLong {
                        address: self.address.clone(),
                        action: action.to_string(),
                        limit: MAX_LINE_BYTES,
                    })
                }
                Err(LineError::Closed) => {
                    return Err(QmpError::Closed {
                        address: self.address.clone(),
                        action: action.to_string(),
                    })
                }
                Err(LineError::Io(e)) => return Err(self.io_error(e, action, timeout)),
            };
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return parse_reply(&line).map_err(|e| self.protocol(action, e.to_string()));
        }
    }

    /// The error for a failed read or write during `action`.
    fn io_error(&self, source: io::Error, action: &str, timeout: Duration) -> QmpError {
        let address = self.address.clone();
        let action = action.to_string();
        match source.kind() {
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => QmpError::TimedOut {
                address,
                action,
                timeout_ms: millis(timeout),
            },
            io::ErrorKind::BrokenPipe
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::UnexpectedEof => QmpError::Closed { address, action },
            _ => QmpError::Io {
                address,
                action,
                source,
            },
        }
    }

    /// A [`QmpError::Protocol`] during `action`.
    fn protocol(&self, action: &str, reason: String) -> QmpError {
        QmpError::Protocol {
            address: self.address.clone(),
            action: action.to_string(),
            reason,
        }
    }

    /// A [`QmpError::UnexpectedReturn`] from `command`.
    fn unexpected(&self, command: &str, reason: String) -> QmpError {
        QmpError::UnexpectedReturn {
            address: self.address.clone(),
            command: command.to_string(),
            reason,
        }
    }
}

/// What a reply is, for messages.
fn describe(reply: &QmpReply) -> String {
    match reply {
        QmpReply::Greeting(_) => "a greeting".to_string(),
        QmpReply::Return { .. } => "a command return".to_string(),
        QmpReply::Error { class, desc, .. } => format!("an error: {class}: {desc}"),
        QmpReply::Event(event) => format!("event '{}'", event.name),
    }
}
