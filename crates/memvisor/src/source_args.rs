//! The request source of a command: `--trace FILE [--format F]` or `--workload SPEC`.

use std::path::Path;

use memvisor_sim::RequestSource;
use memvisor_trace::{TraceFormat, WorkloadSpec};

/// A command-line argument with a bad value.
#[derive(Debug, thiserror::Error)]
#[error("{arg}: {reason}")]
pub struct ArgError {
    /// The argument, as spelled on the command line.
    pub arg: &'static str,
    /// What is wrong with its value.
    pub reason: String,
}

/// An [`ArgError`] for `arg`.
pub fn bad(arg: &'static str, reason: impl ToString) -> ArgError {
    ArgError {
        arg,
        reason: reason.to_string(),
    }
}

/// Checks that `--trace` names a file that can be read as a trace, saying what it is otherwise.
fn check_trace_file(path: &Path) -> Result<(), ArgError> {
    let problem = match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => "is a directory; name a trace file in it".to_string(),
        Ok(m) if m.is_file() => return Ok(()),
        Ok(_) => "is not a regular file".to_string(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => "no such file".to_string(),
        Err(e) => e.to_string(),
    };
    Err(bad("--trace", format!("{}: {problem}", path.display())))
}

/// The source named by `--trace` (with `--format`, or the format its name implies), else by
/// `--workload`, else `default_workload`.
pub fn request_source(
    trace: Option<&Path>,
    format: Option<&str>,
    workload: Option<&str>,
    default_workload: &str,
) -> Result<RequestSource, ArgError> {
    if let Some(path) = trace {
        check_trace_file(path)?;
        let format = match format {
            Some(f) => f.parse::<TraceFormat>().map_err(|e| bad("--format", e))?,
            None => TraceFormat::detect(path).ok_or_else(|| {
                bad(
                    "--format",
                    format!(
                        "cannot tell the format of {} from its name; give --format",
                        path.display()
                    ),
                )
            })?,
        };
        return Ok(RequestSource::Trace {
            path: path.to_path_buf(),
            format,
        });
    }
    let spec = workload.unwrap_or(default_workload);
    let workload: WorkloadSpec = spec.parse().map_err(|e| bad("--workload", e))?;
    Ok(RequestSource::Workload(workload))
}
