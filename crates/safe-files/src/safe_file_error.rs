//! [`SafeFileError`]: why an output file could not be created or committed.

use std::io;
use std::path::PathBuf;

/// Errors of [`OutputFile`](crate::OutputFile); each names the file.
#[derive(Debug, thiserror::Error)]
pub enum SafeFileError {
    /// The target is a symbolic link: memvisor never writes through one.
    #[error("{}: is a symbolic link; refusing to write through it (name the file itself)", path.display())]
    Symlink {
        /// The target.
        path: PathBuf,
    },
    /// The target exists and is neither a regular file nor something that may be written in
    /// place.
    #[error("{}: is {what}; refusing to write to or replace it", path.display())]
    NotRegular {
        /// The target.
        path: PathBuf,
        /// What it is (`a directory`, `a block device`, `a FIFO owned by uid 1000`, ...).
        what: String,
    },
    /// A system call on the target or its temporary file failed.
    #[error("{}: cannot {op}: {source}", path.display())]
    Io {
        /// What was being done (`create a temporary file in`, `write`, `rename into place`).
        op: &'static str,
        /// The file (or directory) concerned.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
}
