//! [`QmpError`]: every failure of the QMP client, naming the address, the command or event
//! waited for, and QEMU's own error class and description.

use std::io;

use crate::qmp_address::QmpAddress;

/// A QMP failure. Every message is one line and says where (the address) and during what (the
/// command, the greeting, the event waited for).
#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    /// A QMP address could not be parsed.
    #[error("QMP address '{text}': {reason}")]
    Address {
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The socket could not be connected.
    #[error("connecting to QMP {address}: {source}")]
    Connect {
        /// The address.
        address: QmpAddress,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Reading from or writing to the socket failed.
    #[error("QMP {address}: {action}: {source}")]
    Io {
        /// The address.
        address: QmpAddress,
        /// What was under way (`waiting for the reply to 'query-status'`).
        action: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The deadline passed.
    #[error("QMP {address}: timed out after {timeout_ms} ms {action}")]
    TimedOut {
        /// The address.
        address: QmpAddress,
        /// What was under way (`waiting for the QMP greeting`).
        action: String,
        /// The time allowed, in milliseconds.
        timeout_ms: u64,
    },

    /// QEMU closed the connection.
    #[error("QMP {address}: connection closed by QEMU {action}")]
    Closed {
        /// The address.
        address: QmpAddress,
        /// What was under way.
        action: String,
    },

    /// QEMU sent a line longer than the limit; it was refused (and is skipped) unread.
    #[error("QMP {address}: line too long (over {limit} bytes) {action}")]
    TooLong {
        /// The address.
        address: QmpAddress,
        /// What was under way.
        action: String,
        /// The limit in bytes ([`crate::MAX_LINE_BYTES`]).
        limit: usize,
    },

    /// A line is not a QMP message ([`crate::parse_reply`]).
    #[error("malformed QMP line ({reason}): '{excerpt}'")]
    Malformed {
        /// What is wrong with it.
        reason: String,
        /// The start of the line, escaped to one line.
        excerpt: String,
    },

    /// QEMU sent something the protocol does not allow here.
    #[error("QMP {address}: {action}: {reason}")]
    Protocol {
        /// The address.
        address: QmpAddress,
        /// What was under way.
        action: String,
        /// What was wrong.
        reason: String,
    },

    /// QEMU answered a command with an error.
    #[error("QMP {address}: command '{command}' failed: {class}: {desc}")]
    Command {
        /// The address.
        address: QmpAddress,
        /// The command sent.
        command: String,
        /// QEMU's error class (`CommandNotFound`, `GenericError`, ...).
        class: String,
        /// QEMU's description.
        desc: String,
    },

    /// A command's return value does not have the expected shape.
    #[error("QMP {address}: unexpected return from '{command}': {reason}")]
    UnexpectedReturn {
        /// The address.
        address: QmpAddress,
        /// The command sent.
        command: String,
        /// What was wrong, with the value.
        reason: String,
    },

    /// The migration ended in `failed` or `cancelled` while another status was waited for.
    #[error("QMP {address}: migration {status} while waiting for status {wanted}: {desc}")]
    MigrationFailed {
        /// The address.
        address: QmpAddress,
        /// `failed` or `cancelled`.
        status: String,
        /// The statuses waited for, joined with `|`.
        wanted: String,
        /// QEMU's `error-desc`, or a note that it gave none.
        desc: String,
    },

    /// The migration did not reach a wanted status in time.
    #[error("QMP {address}: timed out after {timeout_ms} ms waiting for migration status {wanted}; last status '{last}'")]
    MigrationTimedOut {
        /// The address.
        address: QmpAddress,
        /// The statuses waited for, joined with `|`.
        wanted: String,
        /// The last status seen.
        last: String,
        /// The time allowed, in milliseconds.
        timeout_ms: u64,
    },
}
