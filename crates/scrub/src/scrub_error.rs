//! [`ScrubError`]: every failure of the scrubber, naming the VM, file and offset at fault.

use std::io;
use std::path::PathBuf;

use memvisor_dedup::DedupError;

/// An error of VM discovery, page-cache inspection or scrubbing.
#[derive(Debug, thiserror::Error)]
pub enum ScrubError {
    /// Reading the guest's memory failed (the VM exited, permission denied, ...).
    #[error("VM pid {pid}: {source}")]
    Guest {
        /// The VMM's pid.
        pid: i32,
        /// The underlying error.
        source: DedupError,
    },
    /// An operation on a disk image (or another file) failed.
    #[error("{}: {what}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The operation (with the offset where it applies).
        what: String,
        /// The OS error.
        source: io::Error,
    },
    /// A line of a text file (such as `/proc/meminfo`) did not parse.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// No QEMU process matched.
    #[error("{0}")]
    NoVm(String),
    /// A caller-supplied argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl ScrubError {
    pub(crate) fn file(
        path: impl Into<PathBuf>,
        what: impl Into<String>,
        source: io::Error,
    ) -> Self {
        Self::File {
            path: path.into(),
            what: what.into(),
            source,
        }
    }
}
