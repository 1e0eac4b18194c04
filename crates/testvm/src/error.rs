//! The one error type of the harness.

use std::path::PathBuf;

/// Everything that can go wrong while building, configuring, or running a test guest.
///
/// Messages name the file, program, or console line at fault; failures of a running guest carry
/// the last console lines, which usually say why.
#[derive(Debug, thiserror::Error)]
pub enum TestVmError {
    /// A file the harness needs is not there.
    #[error("{what} not found at {path}")]
    MissingFile {
        /// What the file is, e.g. "guest kernel".
        what: &'static str,
        /// Where it was expected.
        path: PathBuf,
    },
    /// `scripts/guest-image` failed.
    #[error("building the guest image with {script} failed ({status}): {stderr}")]
    ImageBuild {
        /// The script that ran.
        script: PathBuf,
        /// Its exit status.
        status: String,
        /// The tail of its standard error.
        stderr: String,
    },
    /// The QEMU binary is not on `PATH` (nor where `MEMVISOR_QEMU` points).
    #[error(
        "{program} not found (install qemu-system-x86 with scripts/install, or set MEMVISOR_QEMU)"
    )]
    QemuNotFound {
        /// The program looked for.
        program: String,
    },
    /// The guest configuration cannot be turned into a QEMU command line.
    #[error("invalid guest configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// `MEMVISOR_ACCEL` holds something other than `tcg`, `kvm` or `auto`.
    #[error("MEMVISOR_ACCEL={value:?} is not one of tcg, kvm, auto")]
    InvalidAccel {
        /// The value found.
        value: String,
    },
    /// `workload make-disk-image` failed.
    #[error("creating disk image {path} failed ({status}): {output}")]
    DiskImage {
        /// The image being created.
        path: PathBuf,
        /// The workload's exit status.
        status: String,
        /// What it printed.
        output: String,
    },
    /// A program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// Any other I/O failure, with what was being done.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (and on which path).
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The guest did not finish in time; QEMU (and its process group) was killed.
    #[error(
        "guest timed out after {seconds:.1} s and was killed; last console lines:\n{console_tail}"
    )]
    Timeout {
        /// The timeout.
        seconds: f64,
        /// The last console lines.
        console_tail: String,
    },
    /// QEMU exited with a failure status.
    #[error(
        "QEMU exited with {status}; stderr: {stderr_tail}; last console lines:\n{console_tail}"
    )]
    QemuFailed {
        /// The exit status.
        status: String,
        /// The tail of QEMU's standard error.
        stderr_tail: String,
        /// The last console lines.
        console_tail: String,
    },
    /// The guest powered off without the workload's final `done` line (crash, OOM kill, panic).
    #[error("guest ended ({status}) without a MEMVISOR-RESULT done line; last console lines:\n{console_tail}")]
    NoResult {
        /// QEMU's exit status.
        status: String,
        /// The last console lines.
        console_tail: String,
    },
    /// The workload (or the guest's init) reported an error, e.g. bad arguments.
    #[error("guest workload error: {message}")]
    Workload {
        /// The workload's message.
        message: String,
        /// The last console lines.
        console_tail: String,
    },
    /// A `MEMVISOR-RESULT` line could not be parsed.
    #[error("console line {line}: {reason}: {text:?}")]
    ResultLine {
        /// 1-based line number in the console output (0 when parsing a lone line).
        line: usize,
        /// The line.
        text: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The workload read back data that differs from what was written.
    #[error("guest data corruption: {errors} bad reads, first at {first_bad}; last console lines:\n{console_tail}")]
    Corruption {
        /// Number of bad page or block reads.
        errors: u64,
        /// The first bad page or block, e.g. "page 1234".
        first_bad: String,
        /// The last console lines.
        console_tail: String,
    },
}

/// Shorthand for results of this crate.
pub type Result<T, E = TestVmError> = std::result::Result<T, E>;
