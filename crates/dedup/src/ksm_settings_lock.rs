//! [`KsmSettingsLock`]: the host-wide lock held while memvisor changes ksmd's settings, kept
//! where no other user can create, replace or hold it.
//!
//! The lock file is `ksm-settings.lock` in `/run/memvisor` for root (the control directory:
//! mode 0700, owned by root) and in the user's private control directory otherwise (KSM
//! settings are root's anyway). It is opened with `O_NOFOLLOW` and must be a regular file
//! owned by this user. The holder writes its pid into it, so a waiter that gives up can say
//! who holds it.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::DedupError;

/// The lock file's name in its directory.
const LOCK_FILE: &str = "ksm-settings.lock";
/// How long [`KsmSettingsLock::acquire`] waits for another holder by default.
pub const KSM_LOCK_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a busy lock is tried again.
const RETRY: Duration = Duration::from_millis(50);

/// An exclusive `flock` on the KSM settings lock file, released when dropped.
#[derive(Debug)]
pub struct KsmSettingsLock {
    file: File,
    path: PathBuf,
}

/// The directory of the lock: `/run/memvisor` for root, whatever the environment says, so
/// every root memvisor agrees on it; else this user's control directory.
pub fn ksm_lock_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        PathBuf::from("/run/memvisor")
    } else {
        memvisor_control::socket_dir::default_control_dir()
    }
}

fn file_error(path: &Path, source: std::io::Error) -> DedupError {
    DedupError::File {
        path: path.to_path_buf(),
        source,
    }
}

impl KsmSettingsLock {
    /// Takes the lock in [`ksm_lock_dir`], waiting up to `timeout` for another holder.
    pub fn acquire(timeout: Duration) -> Result<Self, DedupError> {
        let dir = ksm_lock_dir();
        memvisor_control::socket_dir::prepare_control_dir(&dir).map_err(|e| {
            file_error(
                &dir,
                std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()),
            )
        })?;
        Self::acquire_in(&dir, timeout)
    }

    /// Takes the lock in `dir`, a directory private to this user (the caller checked),
    /// waiting up to `timeout`; then fails naming the holder's pid when it is known.
    pub fn acquire_in(dir: &Path, timeout: Duration) -> Result<Self, DedupError> {
        let path = dir.join(LOCK_FILE);
        let mut file = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| file_error(&path, e))?;
        let meta = file.metadata().map_err(|e| file_error(&path, e))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_file() || meta.uid() != euid {
            return Err(file_error(
                &path,
                std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    format!("not a regular file owned by uid {euid}; refusing it as the KSM lock"),
                ),
            ));
        }
        let start = Instant::now();
        loop {
            // SAFETY: flock on a descriptor owned by `file`, which outlives the call.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                break;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) => {}
                Some(libc::EINTR) => continue,
                _ => return Err(file_error(&path, e)),
            }
            if start.elapsed() >= timeout {
                return Err(DedupError::KsmLockBusy {
                    path,
                    holder: holder_of(&mut file),
                    waited: start.elapsed(),
                });
            }
            std::thread::sleep(RETRY);
        }
        let pid = std::process::id();
        let record = (|| {
            file.set_len(0)?;
            file.seek(SeekFrom::Start(0))?;
            writeln!(file, "{pid}")
        })();
        record.map_err(|e| file_error(&path, e))?;
        Ok(Self { file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Who holds the lock, from the pid its holder wrote: `pid N (COMM)`, or `another process`.
fn holder_of(file: &mut File) -> String {
    let mut text = String::new();
    let pid = file
        .seek(SeekFrom::Start(0))
        .and_then(|_| file.take(32).read_to_string(&mut text))
        .ok()
        .and_then(|_| text.trim().parse::<u32>().ok());
    match pid {
        Some(pid) => match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            Ok(comm) => format!("pid {pid} ({})", comm.trim()),
            Err(_) => format!("pid {pid}"),
        },
        None => "another process".into(),
    }
}

impl Drop for KsmSettingsLock {
    fn drop(&mut self) {
        // Leave no stale pid behind; closing the file releases the lock.
        let _ = self.file.set_len(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn private_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        dir
    }

    #[test]
    fn a_busy_lock_times_out_naming_the_holder() {
        let tmp = private_dir();
        let dir = tmp.path();
        let held = KsmSettingsLock::acquire_in(dir, Duration::ZERO).unwrap();
        let start = Instant::now();
        let e = KsmSettingsLock::acquire_in(dir, Duration::from_millis(200))
            .unwrap_err()
            .to_string();
        assert!(start.elapsed() >= Duration::from_millis(200));
        assert!(start.elapsed() < Duration::from_secs(5));
        let want = format!(
            "{}: KSM settings are locked by pid {}",
            held.path().display(),
            std::process::id()
        );
        assert!(e.starts_with(&want), "{e}");
        assert_eq!(e.lines().count(), 1, "{e}");
        drop(held);
        let again = KsmSettingsLock::acquire_in(dir, Duration::ZERO).unwrap();
        drop(again);
    }

    #[test]
    fn a_lock_file_of_another_user_is_refused() {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: chown to another user needs root");
            return;
        }
        let tmp = private_dir();
        let path = tmp.path().join(LOCK_FILE);
        std::fs::write(&path, b"").unwrap();
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let e = KsmSettingsLock::acquire_in(tmp.path(), Duration::ZERO)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file owned by uid 0"), "{e}");
    }

    #[test]
    fn a_symlink_in_place_of_the_lock_is_refused() {
        let tmp = private_dir();
        let dir = tmp.path();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, dir.join(LOCK_FILE)).unwrap();
        let e = KsmSettingsLock::acquire_in(dir, Duration::ZERO).unwrap_err();
        assert!(e.to_string().contains(LOCK_FILE), "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }
}
