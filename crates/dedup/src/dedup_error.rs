//! [`DedupError`]: every failure of the dedup crate, with the pid, path or address at fault.

use std::io;
use std::path::PathBuf;

/// An error of page scanning, KSM reading or KSM tuning.
#[derive(Debug, thiserror::Error)]
pub enum DedupError {
    /// The process is gone (it exited before or during the scan).
    #[error("pid {pid}: process not running (exited or never existed; {what})")]
    ProcessGone {
        /// The process.
        pid: i32,
        /// What was being done when it was noticed.
        what: String,
    },
    /// The caller may not read the process's memory.
    #[error("pid {pid}: permission denied {what} (needs root or CAP_SYS_PTRACE over the process)")]
    PermissionDenied {
        /// The process.
        pid: i32,
        /// What was denied.
        what: String,
    },
    /// Reading a process's memory failed for another reason.
    #[error("pid {pid}: reading {len} bytes at {address:#x}: {source}")]
    ReadMemory {
        /// The process.
        pid: i32,
        /// Start of the read.
        address: u64,
        /// Bytes requested.
        len: usize,
        /// The OS error.
        source: io::Error,
    },
    /// A file (under /proc or /sys) could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A line of a text file did not parse.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        message: String,
    },
    /// A userfaultfd or `PAGEMAP_SCAN` operation on an owned range failed.
    #[error("dirty tracking of [{start:#x}, +{len:#x}): {what}: {source}")]
    DirtyTracking {
        /// Start of the range.
        start: usize,
        /// Length of the range.
        len: usize,
        /// The operation.
        what: &'static str,
        /// The OS error.
        source: io::Error,
    },
    /// The KSM settings lock stayed held by another process for the whole wait.
    #[error(
        "{}: KSM settings are locked by {holder} (another memvisor dedup --ksm-tune?); gave up after {:.1} s",
        path.display(),
        waited.as_secs_f64()
    )]
    KsmLockBusy {
        /// The lock file.
        path: PathBuf,
        /// Who holds it: `pid N (COMM)` when known.
        holder: String,
        /// How long this process waited.
        waited: std::time::Duration,
    },
    /// A caller-supplied argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

impl DedupError {
    /// Classifies an I/O error on `/proc/PID/...` or process memory of `pid`.
    pub fn from_process_io(pid: i32, what: impl Into<String>, e: io::Error) -> Self {
        let what = what.into();
        match e.raw_os_error() {
            Some(libc::ESRCH) | Some(libc::ENOENT) => Self::ProcessGone { pid, what },
            Some(libc::EPERM) | Some(libc::EACCES) => Self::PermissionDenied { pid, what },
            _ => Self::File {
                path: PathBuf::from(format!("/proc/{pid}")),
                source: io::Error::new(e.kind(), format!("{what}: {e}")),
            },
        }
    }
}
