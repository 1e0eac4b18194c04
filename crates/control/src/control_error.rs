//! [`ControlError`]: every failure of the control plane, naming the socket, pid or input at fault.

use std::io;
use std::path::PathBuf;

/// A control-plane failure.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// Reading a message failed (a timeout shows as `WouldBlock` or `TimedOut`).
    #[error("reading a control message: {0}")]
    Read(#[source] io::Error),

    /// A message could not be decoded.
    #[error("bad control message: {0}")]
    Decode(String),

    /// A message is longer than the protocol allows.
    #[error("control message longer than {limit} bytes")]
    TooLong {
        /// The limit in bytes.
        limit: usize,
    },

    /// The peer speaks another protocol version.
    #[error("control protocol version {got} not supported (this memvisor speaks {want})")]
    Version {
        /// Version received.
        got: u32,
        /// Version spoken here.
        want: u32,
    },

    /// No managed process with this pid has a control socket.
    #[error("no memvisor-managed process {pid}: {path} does not exist")]
    NoSuchProcess {
        /// Process id asked for.
        pid: u32,
        /// Socket path looked for.
        path: PathBuf,
    },

    /// A socket or directory operation failed.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// Socket or directory path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The managed process answered with an error.
    #[error("process {pid}: {message}")]
    Remote {
        /// Process id.
        pid: u32,
        /// Its error message.
        message: String,
    },

    /// A size argument could not be parsed.
    #[error("invalid size '{input}': {reason}")]
    Size {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The caller may not reach the control directory or socket.
    #[error("permission denied on {path} (process {pid}): run as root or as the process's user")]
    PermissionDenied {
        /// Process id asked for.
        pid: u32,
        /// Directory or socket refused.
        path: PathBuf,
    },

    /// A process's socket path holds something else than a socket (a symlink, a file).
    #[error(
        "{path} is not a socket (a symlink or another kind of file): not used for process {pid}"
    )]
    NotASocket {
        /// Process id asked for.
        pid: u32,
        /// The path.
        path: PathBuf,
    },

    /// A process's socket is served by another process.
    #[error("{path} is served by process {server}, not by process {pid}: refused")]
    WrongServer {
        /// Process id asked for.
        pid: u32,
        /// The socket.
        path: PathBuf,
        /// The process the kernel says listens on it.
        server: i32,
    },

    /// A socket is left by a process that is gone.
    #[error("process {pid} is not running (stale socket {path} {outcome})")]
    StaleSocket {
        /// Process id of the socket.
        pid: u32,
        /// The socket.
        path: PathBuf,
        /// `removed`, or why it was left.
        outcome: &'static str,
    },

    /// The process is stopped (SIGSTOP, or traced) and cannot answer.
    #[error("process {pid} is stopped (SIGSTOP){action}")]
    Stopped {
        /// Process id.
        pid: u32,
        /// What that means for the request (`"; not changed"`), or empty.
        action: &'static str,
    },

    /// The process did not answer in time.
    #[error("timed out after {secs} s waiting for process {pid}{note}")]
    TimedOut {
        /// Process id.
        pid: u32,
        /// Seconds waited.
        secs: u64,
        /// What may still happen (a `set` may still be applied), or empty.
        note: &'static str,
    },

    /// The process serves as many control connections as it allows.
    #[error("process {pid} is busy: {message}")]
    Busy {
        /// Process id.
        pid: u32,
        /// Its explanation.
        message: String,
    },

    /// A migration request is refused.
    #[error("migrate: {what}: {reason}")]
    Migrate {
        /// The part at fault (destination, key file, bandwidth limit, downtime limit).
        what: String,
        /// Why it is refused.
        reason: String,
    },

    /// A budget is out of range.
    #[error("budget {reason}")]
    Budget {
        /// The budget asked for, in bytes.
        bytes: u64,
        /// Why it is refused, starting with the budget (`1T is more than ...`).
        reason: String,
    },

    /// An image cache limit is refused.
    #[error("image cache limit {reason}")]
    ImageCache {
        /// The limit asked for, in bytes.
        bytes: u64,
        /// Why it is refused, starting with the limit (`4K is less than 1M`).
        reason: String,
    },

    /// A policy spec is refused.
    #[error("policy '{spec}': {reason}")]
    Policy {
        /// The spec given.
        spec: String,
        /// Why it is refused.
        reason: String,
    },

    /// A host fact could not be read.
    #[error("{0}")]
    Host(String),

    /// A metrics address is not acceptable.
    #[error("metrics address '{addr}': {reason}")]
    MetricsAddress {
        /// The address given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
}
