//! The private directories a benchmark works in: one 0700 directory of the benchmark inside a
//! work directory that may be shared (such as /var/tmp), removed when dropped, and a 0700
//! directory per run inside it (control sockets, swap files, disk images).

use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::bench_error::BenchError;
use crate::results_file::create_results_dir;

/// A private (0700) directory for a benchmark's disk images, swap files and sockets inside
/// `work_dir` (which may be a shared one such as /var/tmp), removed when dropped.
pub fn private_dir(work_dir: &Path, prefix: &str) -> Result<tempfile::TempDir, BenchError> {
    create_results_dir(work_dir)?;
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(work_dir)
        .map_err(|e| BenchError::io("create a private directory in", work_dir, e))
}

/// A new 0700 directory `run-SEQ` inside `private`, for one run.
pub fn run_dir(private: &Path, seq: u64) -> Result<PathBuf, BenchError> {
    let dir = private.join(format!("run-{seq}"));
    fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| BenchError::io("create", &dir, e))?;
    Ok(dir)
}
