//! [`ControlError`]: every failure of the control plane, naming the socket, pid or input at fault.

use std::io;
use std::path::PathBuf;

/// A control-plane failure.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
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

    /// A metrics address is not acceptable.
    #[error("metrics address '{addr}': {reason}")]
    MetricsAddress {
        /// The address given.
        addr: String,
        /// What is wrong with it.
        reason: String,
    },
}
