//! Output files that are safe to create as a privileged user in a directory other users can
//! write (`/tmp`, `/var/tmp`, a shared results directory).
//!
//! [`OutputFile::create`] never follows a symbolic link and never replaces anything but a
//! regular file:
//!
//! - the data goes to a temporary file beside the target, created through a descriptor of the
//!   target's directory with `O_CREAT | O_EXCL | O_NOFOLLOW` under a random name (mode 0666
//!   minus the umask), so nothing planted in the directory is opened or truncated;
//! - [`OutputFile::commit`] syncs it and renames it over the target, but only if the target is
//!   absent or a regular file; a symbolic link is refused with an error naming it;
//! - an existing character device or FIFO owned by this user or root (`/dev/null`, a named
//!   pipe) is written in place, directly, and never replaced; `-`, `/dev/stdout` and
//!   `/dev/stderr` are the standard streams;
//! - dropping an uncommitted [`OutputFile`] removes its temporary file: the target is written
//!   whole or not at all.
//!
//! [`create_output_dir`] makes a directory for such files and refuses a symbolic link or a
//! directory of another user in its place.
//!
//! ```
//! use std::io::Write;
//! use memvisor_safe_files::OutputFile;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("results.csv");
//! let mut out = OutputFile::create(&path)?;
//! writeln!(out, "policy,miss_ratio")?;
//! out.commit()?;
//! assert_eq!(std::fs::read_to_string(&path)?, "policy,miss_ratio\n");
//!
//! std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link"))?;
//! let refused = OutputFile::create(&dir.path().join("link")).unwrap_err();
//! assert!(refused.to_string().contains("symbolic link"), "{refused}");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod directory;
mod output_dir;
mod output_file;
mod safe_file_error;
mod temp_name;

pub use output_dir::create_output_dir;
pub use output_file::OutputFile;
pub use safe_file_error::SafeFileError;
