//! [`BenchError`]: everything that can go wrong in a benchmark run, with the path, pid or
//! spec it concerns.

use std::io;
use std::path::PathBuf;

/// An error of the benchmark (workload or driver).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A command-line value did not parse.
    #[error("bad {what} {value:?}: {reason}")]
    BadArgument {
        /// What was being parsed ("workload", "variant", ...).
        what: &'static str,
        /// The offending text.
        value: String,
        /// Why it was refused.
        reason: String,
    },
    /// A file or directory operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done ("read", "create swap file", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A results file could not be created or moved into place (the message names it).
    #[error(transparent)]
    Output(#[from] memvisor_safe_files::SafeFileError),
    /// An external command (mkswap, swapon, ...) failed or could not start.
    #[error("{command} failed: {detail}")]
    Command {
        /// The command line.
        command: String,
        /// Exit status and stderr, or the spawn error.
        detail: String,
    },
    /// A thread of a multi-threaded workload panicked.
    #[error("a workload thread panicked")]
    ThreadPanicked,
    /// The kernel-swap baseline cannot run here.
    #[error("kernel baseline unavailable: {0}")]
    Unsupported(String),
    /// The pager refused to build the region or failed while running.
    #[error("memvisor region: {0}")]
    Pager(#[from] memvisor_pager::PagerError),
    /// A word the workload read was not what it last wrote there.
    #[error("data verification failed at page {page} word {word}: expected {expected:#x}, read {found:#x}")]
    Corrupt {
        /// Page index in the data set.
        page: u64,
        /// 8-byte word index within the page.
        word: u64,
        /// What the page should hold.
        expected: u64,
        /// What it held.
        found: u64,
    },
    /// A workload child failed or printed no report.
    #[error("workload child (pid {pid}) of {variant} / {workload}: {detail}")]
    Child {
        /// Child pid.
        pid: u32,
        /// Variant name.
        variant: String,
        /// Workload spec.
        workload: String,
        /// Exit status, signal or parse error, with its stderr tail.
        detail: String,
    },
    /// redis (under `memvisor run`) misbehaved: no answer, a wrong reply, a wrong value.
    #[error("redis at {addr}: {detail}")]
    Redis {
        /// The server's address.
        addr: String,
        /// What went wrong.
        detail: String,
    },
    /// The control socket of a managed process did not answer.
    #[error("memvisor control socket of pid {pid}: {source}")]
    Control {
        /// The managed process.
        pid: u32,
        /// The cause.
        source: memvisor_control::ControlError,
    },
    /// A real guest of the scrub evaluation failed (boot, timeout, workload error, corruption).
    #[error("guest of run {run}: {source}")]
    Guest {
        /// The run, e.g. `scrub / random`.
        run: String,
        /// What the guest harness reported.
        source: memvisor_testvm::TestVmError,
    },
    /// The run was interrupted (SIGINT / SIGTERM); everything set up was torn down.
    #[error("interrupted")]
    Interrupted,
}

impl BenchError {
    /// A [`BenchError::Io`] for `path`.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// A [`BenchError::BadArgument`].
    pub fn bad(what: &'static str, value: impl Into<String>, reason: impl Into<String>) -> Self {
        Self::BadArgument {
            what,
            value: value.into(),
            reason: reason.into(),
        }
    }
}
