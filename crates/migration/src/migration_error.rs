//! The crate's one error type.

use std::io;
use std::path::PathBuf;

use crate::role::Role;

/// Everything that can go wrong with a migration key, the handshake, or the framed stream.
///
/// Each message is one line that names what failed and where: the key file's path, the frame's
/// sequence number and announced message type, byte offsets and lengths, expected against got.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// A key file is unsafe or unusable: a symbolic link, not a regular file, owned by another
    /// user, accessible to group or others, the wrong size, or (when generating) already there.
    #[error("key file {} {problem}", path.display())]
    KeyFile {
        /// The key file's path as given.
        path: PathBuf,
        /// What is wrong, phrased to follow the path ("is a symbolic link; ...").
        problem: String,
    },
    /// Opening, reading or writing a key file failed.
    #[error("key file {}: cannot {action}: {source}", path.display())]
    KeyFileIo {
        /// The key file's path as given.
        path: PathBuf,
        /// What was being done ("open it", "read it", "create it", "write it").
        action: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Key bytes of the wrong length (see [`crate::MIN_KEY_LEN`] and [`crate::MAX_KEY_LEN`]).
    #[error("a migration key must be {min} to {max} bytes long, got {len} bytes")]
    KeyLength {
        /// The length given.
        len: usize,
        /// The shortest key accepted.
        min: usize,
        /// The longest key accepted.
        max: usize,
    },
    /// The operating system's random number generator failed.
    #[error("cannot get random bytes from the operating system: {0}")]
    Random(String),
    /// Reading from or writing to the underlying stream failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being read or written ("sending frame 3 (Pages message, 4198452 bytes)").
        context: String,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The peer closed the stream in the middle of a hello, a proof, or a frame.
    #[error(
        "unexpected end of stream: the peer closed it after {got} of {expected} bytes of {what}"
    )]
    UnexpectedEnd {
        /// What was being read ("frame 3 (announced as Pages, 4198420-byte payload + tag)").
        what: String,
        /// Bytes of it that arrived.
        got: usize,
        /// Bytes of it expected.
        expected: usize,
    },
    /// The peer's hello is not a memvisor migration hello (wrong magic or role byte).
    #[error("the peer is not a memvisor migration endpoint: {problem}")]
    NotMigrationPeer {
        /// What was wrong with its hello.
        problem: String,
    },
    /// The peer speaks another protocol version.
    #[error(
        "migration protocol version mismatch: we speak version {ours}, the peer speaks version \
         {theirs}; run the same memvisor version on both hosts"
    )]
    Version {
        /// Our [`crate::PROTOCOL_VERSION`].
        ours: u32,
        /// The version in the peer's hello.
        theirs: u32,
    },
    /// Both ends claim the same role.
    #[error(
        "both ends of the migration stream are the {role}; one must be the source and the other \
         the destination"
    )]
    RoleClash {
        /// The role both ends claim.
        role: Role,
    },
    /// The peer's handshake proof does not match ours: it holds a different key (or is an
    /// impostor without one).
    #[error("the peer's migration key differs from ours")]
    KeyMismatch,
    /// A frame's MAC does not verify: the bytes were corrupted or tampered with in transit, or a
    /// frame was replayed, reordered, dropped or reflected. The receiving direction is closed.
    #[error(
        "frame {sequence} (announced as {announced}, {payload_len}-byte payload) failed its \
         integrity check: the stream was corrupted, tampered with, replayed, reordered or cut; \
         nothing more is accepted from it"
    )]
    Integrity {
        /// The receiving direction's sequence number of the frame (0 for the first frame).
        sequence: u64,
        /// The message type its (unverified) header announced, or "unknown kind 0x..".
        announced: String,
        /// The payload length its (unverified) header announced.
        payload_len: u32,
    },
    /// A frame header announces a payload over [`crate::MAX_PAYLOAD`]; refused before
    /// allocating or reading it.
    #[error(
        "frame {sequence} announces a {len}-byte payload, over the {max}-byte limit; refused \
         before reading it"
    )]
    FrameTooLarge {
        /// The receiving direction's sequence number of the frame.
        sequence: u64,
        /// The announced payload length.
        len: u32,
        /// [`crate::MAX_PAYLOAD`].
        max: usize,
    },
    /// A frame header is malformed (length, magic, message type or payload length).
    #[error("bad frame header: {problem}")]
    FrameHeader {
        /// What is wrong with it.
        problem: String,
    },
    /// A message type byte that names no message.
    #[error("unknown message type {kind:#04x}")]
    UnknownKind {
        /// The type byte.
        kind: u8,
    },
    /// A payload does not decode as its message type.
    #[error("malformed {message} message: {problem}")]
    Malformed {
        /// The message type's name ("Begin", "Pages", ...).
        message: &'static str,
        /// What is wrong, with byte offsets and lengths.
        problem: String,
    },
    /// A page of a `Pages` message does not match the CRC32C it carries.
    #[error(
        "Pages message: page {page} of region {region} fails its CRC32C check (carried \
         {expected:#010x}, the data has {actual:#010x})"
    )]
    Checksum {
        /// The region index.
        region: u32,
        /// The page's number within the region.
        page: u64,
        /// The CRC32C the message carries for it.
        expected: u32,
        /// The CRC32C of the page's data.
        actual: u32,
    },
    /// A message given to [`crate::MemoryStream::send`] breaks the message rules; nothing was
    /// sent.
    #[error("cannot send {message} message: {problem}")]
    InvalidMessage {
        /// The message type's name.
        message: &'static str,
        /// Which rule it breaks.
        problem: String,
    },
    /// A direction of the stream failed earlier and cannot be used any more.
    #[error(
        "the migration stream can no longer {direction} after an earlier error: {first_error}"
    )]
    Unusable {
        /// "send" or "receive".
        direction: &'static str,
        /// The error that closed this direction.
        first_error: String,
    },

    /// The peer gave up and said why.
    #[error("the peer aborted the migration: {reason}")]
    PeerAborted {
        /// The peer's reason.
        reason: String,
    },

    /// A message arrived where another was expected.
    #[error("expected {expected}, got a {got} message")]
    Unexpected {
        /// What the protocol expects here.
        expected: &'static str,
        /// The message's type.
        got: &'static str,
    },

    /// The two ends' guest-memory regions differ, or a message names pages outside them.
    #[error("guest memory does not match: {reason}")]
    RegionMismatch {
        /// What differs.
        reason: String,
    },

    /// The destination acknowledged other counts than the source sent.
    #[error(
        "the destination acknowledged {acknowledged_pages} pages ({acknowledged_bytes} bytes), \
         the source sent {sent_pages} ({sent_bytes} bytes)"
    )]
    Incomplete {
        /// Pages sent.
        sent_pages: u64,
        /// Page bytes sent.
        sent_bytes: u64,
        /// Pages acknowledged.
        acknowledged_pages: u64,
        /// Page bytes acknowledged.
        acknowledged_bytes: u64,
    },

    /// Post-copy: the source finished its push with pages still remote here.
    #[error(
        "the source finished with {left} pages never sent after the switch-over; accesses to \
         them wait"
    )]
    RemoteLeft {
        /// Pages still remote.
        left: usize,
    },

    /// Post-copy recovery: a resumed connection's destination lists a page as remote that
    /// this source did not name at the pause (another migration's destination, or a bug).
    #[error(
        "the destination lists pages {first}..{end} of region {region} as remote, which this \
         source did not name at the pause"
    )]
    RemoteMismatch {
        /// The region's index.
        region: u32,
        /// The run's first page.
        first: u64,
        /// One past its last page.
        end: u64,
    },

    /// Post-copy recovery: a destination waiting for its source to resume was offered
    /// something else.
    #[error(
        "this destination's guest runs on post-copy migration {migration:#018x}; it takes only \
         that migration's resume, a {got} is refused"
    )]
    AwaitingResume {
        /// The number of the migration that waits.
        migration: u64,
        /// What came instead ("Begin", "Resume of migration 0x...").
        got: String,
    },

    /// The migration was cancelled on this side.
    #[error("cancelled")]
    Cancelled,

    /// The pager could not read, track or place guest memory.
    #[error(transparent)]
    Pager(#[from] memvisor_pager::PagerError),
}

impl MigrationError {
    /// Whether this is the connection's failure (broken, timed out, cut short, frames that do
    /// not verify or decode), not either end's: a post-copy push may go on over a new
    /// connection after it.
    pub fn is_connection_failure(&self) -> bool {
        matches!(
            self,
            MigrationError::Io { .. }
                | MigrationError::UnexpectedEnd { .. }
                | MigrationError::Integrity { .. }
                | MigrationError::FrameTooLarge { .. }
                | MigrationError::FrameHeader { .. }
                | MigrationError::UnknownKind { .. }
                | MigrationError::Malformed { .. }
                | MigrationError::Checksum { .. }
        )
    }

    /// An [`UnexpectedEnd`](Self::UnexpectedEnd) of a part read at byte `offset` of a larger
    /// record of `expected` bytes, told in bytes of that record; other errors as they are.
    pub(crate) fn within(self, offset: usize, expected: usize) -> Self {
        match self {
            MigrationError::UnexpectedEnd { what, got, .. } => MigrationError::UnexpectedEnd {
                what,
                got: got + offset,
                expected,
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_line_and_carry_context() {
        let errors = [
            MigrationError::KeyFile {
                path: PathBuf::from("/x/k"),
                problem: "is readable by group or others (mode 0644); chmod 600 it".into(),
            },
            MigrationError::Integrity {
                sequence: 7,
                announced: "Pages".into(),
                payload_len: 4096,
            },
            MigrationError::Checksum {
                region: 2,
                page: 9,
                expected: 1,
                actual: 2,
            },
            MigrationError::KeyMismatch,
        ];
        for error in &errors {
            let text = error.to_string();
            assert!(!text.contains('\n'), "{text}");
        }
        assert_eq!(
            errors[0].to_string(),
            "key file /x/k is readable by group or others (mode 0644); chmod 600 it"
        );
        assert!(errors[1]
            .to_string()
            .starts_with("frame 7 (announced as Pages"));
        assert!(errors[2].to_string().contains("page 9 of region 2"));
        assert_eq!(
            errors[3].to_string(),
            "the peer's migration key differs from ours"
        );
    }
}
