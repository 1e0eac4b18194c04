//! [`create_output_dir`]: a directory for output files, created if missing, refused when it is
//! a symbolic link or belongs to another user.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;

use crate::safe_file_error::SafeFileError;

/// Creates `path` (and missing parents; mode 0777 minus the umask) unless it exists, then
/// checks that it is a real directory, not a symbolic link, owned by this user or root, so
/// that files put in it (through [`OutputFile`](crate::OutputFile)) do not land where another
/// user pointed.
pub fn create_output_dir(path: &Path) -> Result<(), SafeFileError> {
    let io_error = |op, source| SafeFileError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    if let Err(e) = fs::DirBuilder::new()
        .recursive(true)
        .mode(0o777)
        .create(path)
    {
        // An existing non-directory is described below.
        if fs::symlink_metadata(path).is_err() {
            return Err(io_error("create directory", e));
        }
    }
    let meta = fs::symlink_metadata(path).map_err(|e| io_error("stat", e))?;
    if meta.file_type().is_symlink() {
        return Err(SafeFileError::Symlink {
            path: path.to_path_buf(),
        });
    }
    if !meta.is_dir() {
        return Err(SafeFileError::NotRegular {
            path: path.to_path_buf(),
            what: "not a directory".into(),
        });
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if meta.uid() != euid && meta.uid() != 0 {
        return Err(SafeFileError::NotRegular {
            path: path.to_path_buf(),
            what: format!("a directory owned by uid {}, not by uid {euid}", meta.uid()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_and_refuses_links() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/b");
        create_output_dir(&d).unwrap();
        create_output_dir(&d).unwrap();
        assert!(d.is_dir());
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        let e = create_output_dir(&link).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        let f = t.path().join("file");
        fs::write(&f, b"").unwrap();
        let e = create_output_dir(&f).unwrap_err().to_string();
        assert!(e.contains("not a directory"), "{e}");
    }
}
