//! [`SimError`]: what can go wrong in a simulation.

use std::path::PathBuf;

use memvisor_policy::PolicyError;
use memvisor_trace::TraceError;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// Reading or parsing the trace failed (the message names file and line or record).
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A policy could not be built.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The source produced no request.
    #[error("{source_name}: no requests to simulate")]
    EmptySource {
        /// The trace file or workload.
        source_name: String,
    },
    /// A cache size could not be parsed or is out of range.
    #[error("size {spec:?}: {reason}")]
    BadSize {
        /// The size as written.
        spec: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A sample period of zero.
    #[error("sample period must be at least 1 (got {0})")]
    BadSamplePeriod(u64),
    /// Writing an output file failed.
    #[error("{path}: {source}")]
    Output {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The run was cancelled because another job failed.
    #[error("cancelled")]
    Cancelled,
}
