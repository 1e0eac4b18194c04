//! [`Directory`]: an open directory whose entries are created, inspected, renamed and removed
//! relative to its descriptor (`openat`, `fstatat`, `renameat`, `unlinkat`), never following a
//! symbolic link in the last component.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What a directory entry is, as `lstat` sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct EntryKind {
    /// The `S_IFMT` bits of its mode.
    pub(crate) format: libc::mode_t,
    /// Its owner.
    pub(crate) uid: libc::uid_t,
}

/// An open directory.
#[derive(Debug)]
pub(crate) struct Directory {
    fd: OwnedFd,
}

fn c_name(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

fn check(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

impl Directory {
    /// Opens the directory `path` (the empty path is the current directory).
    pub(crate) fn open(path: &Path) -> io::Result<Self> {
        let path = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let c = c_name(path.as_os_str())?;
        // SAFETY: `c` is a NUL-terminated path that outlives the call.
        let fd = check(unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: `fd` was just returned by open and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Self { fd })
    }

    fn openat(&self, name: &OsStr, flags: libc::c_int, mode: libc::mode_t) -> io::Result<File> {
        let c = c_name(name)?;
        // SAFETY: the directory descriptor is open for the life of `self`; `c` is
        // NUL-terminated and outlives the call; `mode` is passed as the variadic argument
        // openat expects when O_CREAT is set (ignored otherwise).
        let fd = check(unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                libc::c_uint::from(mode),
            )
        })?;
        // SAFETY: `fd` was just returned by openat and is owned by nothing else.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Creates `name` for writing; fails if anything, even a dangling symbolic link, already
    /// has that name (`O_CREAT | O_EXCL | O_NOFOLLOW`).
    pub(crate) fn create_new(&self, name: &OsStr, mode: libc::mode_t) -> io::Result<File> {
        self.openat(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, mode)
    }

    /// Opens the existing `name` for writing, without creating, truncating or following a
    /// symbolic link, and without making a terminal the controlling one.
    pub(crate) fn open_existing_for_write(&self, name: &OsStr) -> io::Result<File> {
        self.openat(name, libc::O_WRONLY | libc::O_NOCTTY, 0)
    }

    /// What `name` is, without following a symbolic link; `None` if there is no such entry.
    pub(crate) fn entry_kind(&self, name: &OsStr) -> io::Result<Option<EntryKind>> {
        let c = c_name(name)?;
        // SAFETY: an all-zero `stat` is a valid value of this plain C struct.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the directory descriptor is open; `c` and `st` are live for the call, and
        // fstatat writes only into `st`.
        let r = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        match check(r) {
            Ok(_) => Ok(Some(EntryKind {
                format: st.st_mode & libc::S_IFMT,
                uid: st.st_uid,
            })),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Renames `from` to `to` within the directory (atomically replacing `to`).
    pub(crate) fn rename(&self, from: &OsStr, to: &OsStr) -> io::Result<()> {
        let (f, t) = (c_name(from)?, c_name(to)?);
        let dir = self.fd.as_raw_fd();
        // SAFETY: the descriptor is open; both names are NUL-terminated and outlive the call.
        check(unsafe { libc::renameat(dir, f.as_ptr(), dir, t.as_ptr()) }).map(drop)
    }

    /// Removes the entry `name` (not a directory).
    pub(crate) fn remove(&self, name: &OsStr) -> io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: the descriptor is open; `c` is NUL-terminated and outlives the call.
        check(unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) }).map(drop)
    }

    /// Flushes the directory's entries to disk (after a rename).
    pub(crate) fn sync(&self) -> io::Result<()> {
        // SAFETY: fsync on a descriptor this object owns.
        check(unsafe { libc::fsync(self.fd.as_raw_fd()) }).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_exclusively_and_never_follows_links() {
        let t = tempfile::tempdir().unwrap();
        let d = Directory::open(t.path()).unwrap();
        let victim = t.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, t.path().join("link")).unwrap();
        assert!(d.create_new(OsStr::new("link"), 0o600).is_err());
        assert!(d.open_existing_for_write(OsStr::new("link")).is_err());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        let kind = d.entry_kind(OsStr::new("link")).unwrap().unwrap();
        assert_eq!(kind.format, libc::S_IFLNK);
        assert_eq!(d.entry_kind(OsStr::new("absent")).unwrap(), None);
        d.create_new(OsStr::new("new"), 0o600).unwrap();
        assert!(d.create_new(OsStr::new("new"), 0o600).is_err());
        d.rename(OsStr::new("new"), OsStr::new("renamed")).unwrap();
        d.remove(OsStr::new("renamed")).unwrap();
        assert_eq!(d.entry_kind(OsStr::new("renamed")).unwrap(), None);
    }
}
