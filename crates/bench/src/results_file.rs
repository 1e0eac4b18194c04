//! [`write_results_file`], [`write_results_pair`] and [`create_results_dir`]: how the
//! benchmarks write their results, safely even as root in a shared directory (see
//! [`memvisor_safe_files`]).

use std::io::Write;
use std::path::Path;

use memvisor_safe_files::{create_output_dir, OutputFile};

use crate::bench_error::BenchError;

/// Writes `text` to `path` whole or not at all, never through a symbolic link.
pub fn write_results_file(path: &Path, text: &str) -> Result<(), BenchError> {
    let mut out = OutputFile::create(path)?;
    out.write_all(text.as_bytes())
        .map_err(|e| BenchError::io("write", path, e))?;
    out.commit()?;
    Ok(())
}

/// Writes an evaluation's `results.md` (`markdown`) and `results.json` (`json`) in `dir`, each
/// as [`write_results_file`] does.
pub fn write_results_pair(dir: &Path, markdown: &str, json: &str) -> Result<(), BenchError> {
    write_results_file(&dir.join("results.md"), markdown)?;
    write_results_file(&dir.join("results.json"), json)
}

/// Creates the results directory `path` if needed; refuses a symbolic link or another user's
/// directory in its place.
pub fn create_results_dir(path: &Path) -> Result<(), BenchError> {
    Ok(create_output_dir(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_refuses_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("out");
        create_results_dir(&dir).unwrap();
        let p = dir.join("summary.md");
        write_results_file(&p, "# results\n").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "# results\n");
        write_results_pair(&dir, "# md\n", "{}").unwrap();
        assert_eq!(
            std::fs::read_to_string(dir.join("results.md")).unwrap(),
            "# md\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.join("results.json")).unwrap(),
            "{}"
        );
        let victim = t.path().join("victim");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join("results.csv")).unwrap();
        let e = write_results_file(&dir.join("results.csv"), "x").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }
}
