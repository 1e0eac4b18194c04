//! [`OutputFile`]: an output written to an exclusive temporary file and renamed over its target
//! on commit, or written in place when the target is a device, a FIFO or a standard stream.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use crate::directory::{Directory, EntryKind};
use crate::safe_file_error::SafeFileError;
use crate::temp_name::temp_name;

/// Attempts at a fresh temporary name before giving up (each collision is a 2^-64 event or a
/// file someone planted under a name they guessed).
const NAME_ATTEMPTS: usize = 16;

/// An output file being written; see the [crate documentation](crate).
#[derive(Debug)]
pub struct OutputFile {
    target: PathBuf,
    sink: Option<Sink>,
}

#[derive(Debug)]
enum Sink {
    /// A temporary file in the target's directory, renamed over the target on commit.
    Replace {
        dir: Directory,
        name: OsString,
        temp: OsString,
        file: File,
    },
    /// An existing device or FIFO, written directly.
    InPlace(File),
    /// Standard output (`-`, `/dev/stdout`).
    Stdout,
    /// Standard error (`/dev/stderr`).
    Stderr,
}

/// What an entry of kind `format` is, for messages.
fn describe(format: libc::mode_t) -> &'static str {
    match format {
        libc::S_IFDIR => "a directory",
        libc::S_IFBLK => "a block device",
        libc::S_IFCHR => "a character device",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFLNK => "a symbolic link",
        _ => "not a regular file",
    }
}

/// Whether an existing entry may be written in place: a character device or FIFO owned by this
/// user or root (so not one another user planted).
fn writable_in_place(kind: EntryKind) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    matches!(kind.format, libc::S_IFCHR | libc::S_IFIFO) && (kind.uid == euid || kind.uid == 0)
}

impl OutputFile {
    /// Starts writing `path`; see the [crate documentation](crate) for what is refused.
    /// Nothing at `path` changes until [`commit`](Self::commit) (unless it is written in
    /// place).
    pub fn create(path: &Path) -> Result<Self, SafeFileError> {
        let special = match path.as_os_str().as_encoded_bytes() {
            b"-" | b"/dev/stdout" => Some(Sink::Stdout),
            b"/dev/stderr" => Some(Sink::Stderr),
            _ => None,
        };
        if let Some(sink) = special {
            return Ok(Self {
                target: path.to_path_buf(),
                sink: Some(sink),
            });
        }
        let io_error = |op, source| SafeFileError::Io {
            op,
            path: path.to_path_buf(),
            source,
        };
        let Some(name) = path.file_name().filter(|_| !path.ends_with("..")) else {
            return Err(SafeFileError::NotRegular {
                path: path.to_path_buf(),
                what: "not a file name".into(),
            });
        };
        let parent = path.parent().unwrap_or(Path::new(""));
        let dir = Directory::open(parent).map_err(|e| io_error("open its directory", e))?;
        let sink = match dir.entry_kind(name).map_err(|e| io_error("stat", e))? {
            None => Self::temp_sink(dir, name)
                .map_err(|e| io_error("create a temporary file beside", e))?,
            Some(kind) if kind.format == libc::S_IFREG => Self::temp_sink(dir, name)
                .map_err(|e| io_error("create a temporary file beside", e))?,
            Some(kind) if kind.format == libc::S_IFLNK => {
                return Err(SafeFileError::Symlink {
                    path: path.to_path_buf(),
                })
            }
            Some(kind) if writable_in_place(kind) => {
                let file = dir
                    .open_existing_for_write(name)
                    .map_err(|e| io_error("open for writing", e))?;
                // The entry may have been swapped between the check and the open.
                let opened = file.metadata().map_err(|e| io_error("stat", e))?;
                let ft = opened.file_type();
                if !(ft.is_char_device() || ft.is_fifo()) {
                    return Err(SafeFileError::NotRegular {
                        path: path.to_path_buf(),
                        what: "replaced while being opened".into(),
                    });
                }
                Sink::InPlace(file)
            }
            Some(kind) => {
                let owner = if matches!(kind.format, libc::S_IFCHR | libc::S_IFIFO) {
                    format!(" owned by uid {}", kind.uid)
                } else {
                    String::new()
                };
                return Err(SafeFileError::NotRegular {
                    path: path.to_path_buf(),
                    what: format!("{}{owner}", describe(kind.format)),
                });
            }
        };
        Ok(Self {
            target: path.to_path_buf(),
            sink: Some(sink),
        })
    }

    fn temp_sink(dir: Directory, name: &OsStr) -> io::Result<Sink> {
        let mut last = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..NAME_ATTEMPTS {
            let temp = temp_name(name);
            match dir.create_new(&temp, 0o666) {
                Ok(file) => {
                    return Ok(Sink::Replace {
                        dir,
                        name: name.to_os_string(),
                        temp,
                        file,
                    })
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }

    /// The target path.
    pub fn path(&self) -> &Path {
        &self.target
    }

    /// The open file written to (the temporary file, or the device), e.g. to hand a duplicate
    /// of it to a child process as its output; `None` for a standard stream.
    pub fn file(&self) -> Option<&File> {
        match self.sink.as_ref()? {
            Sink::Replace { file, .. } | Sink::InPlace(file) => Some(file),
            Sink::Stdout | Sink::Stderr => None,
        }
    }

    /// Finishes the output: syncs the temporary file and renames it over the target, which
    /// must still be absent or a regular file (a symbolic link or anything else put there
    /// meanwhile is refused, and the temporary file removed). For in-place targets and
    /// standard streams, flushes.
    pub fn commit(mut self) -> Result<(), SafeFileError> {
        let target = self.target.clone();
        let io_error = |op, source| SafeFileError::Io {
            op,
            path: target.clone(),
            source,
        };
        let Some(sink) = self.sink.take() else {
            return Ok(());
        };
        match sink {
            Sink::Replace {
                dir,
                name,
                temp,
                file,
            } => {
                let outcome = (|| {
                    file.sync_all().map_err(|e| io_error("sync", e))?;
                    match dir.entry_kind(&name).map_err(|e| io_error("stat", e))? {
                        None => {}
                        Some(k) if k.format == libc::S_IFREG => {}
                        Some(k) if k.format == libc::S_IFLNK => {
                            return Err(SafeFileError::Symlink {
                                path: target.clone(),
                            })
                        }
                        Some(k) => {
                            return Err(SafeFileError::NotRegular {
                                path: target.clone(),
                                what: describe(k.format).into(),
                            })
                        }
                    }
                    dir.rename(&temp, &name)
                        .map_err(|e| io_error("rename into place", e))?;
                    dir.sync().map_err(|e| io_error("sync the directory of", e))
                })();
                if outcome.is_err() {
                    let _ = dir.remove(&temp);
                }
                outcome
            }
            Sink::InPlace(mut file) => file.flush().map_err(|e| io_error("write", e)),
            Sink::Stdout => io::stdout().flush().map_err(|e| io_error("write", e)),
            Sink::Stderr => io::stderr().flush().map_err(|e| io_error("write", e)),
        }
    }
}

impl Write for OutputFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.sink.as_mut() {
            Some(Sink::Replace { file, .. } | Sink::InPlace(file)) => file.write(buf),
            Some(Sink::Stdout) => io::stdout().write(buf),
            Some(Sink::Stderr) => io::stderr().write(buf),
            None => Err(io::Error::other("output already committed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.sink.as_mut() {
            Some(Sink::Replace { file, .. } | Sink::InPlace(file)) => file.flush(),
            Some(Sink::Stdout) => io::stdout().flush(),
            Some(Sink::Stderr) => io::stderr().flush(),
            None => Ok(()),
        }
    }
}

impl Drop for OutputFile {
    fn drop(&mut self) {
        if let Some(Sink::Replace { dir, temp, .. }) = self.sink.take() {
            let _ = dir.remove(&temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};

    fn entries(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn writes_whole_or_not_at_all() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("out.txt");
        fs::write(&path, b"old").unwrap();
        let mut out = OutputFile::create(&path).unwrap();
        out.write_all(b"new").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"old");
        drop(out);
        assert_eq!(fs::read(&path).unwrap(), b"old");
        assert_eq!(entries(t.path()), ["out.txt"]);
        let mut out = OutputFile::create(&path).unwrap();
        out.write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"new");
        assert_eq!(entries(t.path()), ["out.txt"]);
    }

    #[test]
    fn refuses_symlinks_and_directories() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let link = t.path().join("link");
        symlink(&victim, &link).unwrap();
        let e = OutputFile::create(&link).unwrap_err().to_string();
        assert!(e.contains("link: is a symbolic link"), "{e}");
        symlink(t.path().join("nowhere"), t.path().join("dangling")).unwrap();
        assert!(OutputFile::create(&t.path().join("dangling")).is_err());
        assert!(!t.path().join("nowhere").exists());
        let e = OutputFile::create(t.path()).unwrap_err().to_string();
        assert!(e.contains("is a directory"), "{e}");
        let e = OutputFile::create(&t.path().join("missing/x.csv"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("missing/x.csv: cannot open its directory"),
            "{e}"
        );
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn a_symlink_planted_before_commit_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let victim = t.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let path = t.path().join("out");
        let mut out = OutputFile::create(&path).unwrap();
        out.write_all(b"data").unwrap();
        symlink(&victim, &path).unwrap();
        let e = out.commit().unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
        assert_eq!(entries(t.path()), ["out", "victim"]);
    }

    #[test]
    fn devices_are_written_in_place() {
        let mut out = OutputFile::create(Path::new("/dev/null")).unwrap();
        out.write_all(b"discarded").unwrap();
        out.commit().unwrap();
        let meta = fs::symlink_metadata("/dev/null").unwrap();
        assert!(meta.file_type().is_char_device());
        let out = OutputFile::create(Path::new("-")).unwrap();
        assert!(out.file().is_none());
        out.commit().unwrap();
    }

    #[test]
    fn the_temporary_file_respects_the_umask() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("out");
        let out = OutputFile::create(&path).unwrap();
        let mode = out.file().unwrap().metadata().unwrap().mode() & 0o777;
        assert_eq!(mode, 0o666 & !current_umask());
        out.commit().unwrap();
        let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o600));
    }

    fn current_umask() -> u32 {
        // SAFETY: umask has no preconditions; the old mask is restored at once.
        let old = unsafe { libc::umask(0o022) };
        // SAFETY: as above.
        unsafe { libc::umask(old) };
        old
    }
}
