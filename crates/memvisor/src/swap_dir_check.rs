//! The checks `memvisor run` makes of `--swap-dir` before the program starts: that it is a
//! directory memvisor can create swap files in, and that its filesystem has room for them.
//!
//! `memvisor run` usually runs as root and the default swap directory (`/var/tmp`) is
//! world-writable, so the check never creates a named file there: it opens a nameless file
//! (`O_TMPFILE`), or, on a filesystem without it, a new file with `O_CREAT|O_EXCL|O_NOFOLLOW`
//! (a name another user planted, symlink or not, is refused, never followed or truncated).

use std::ffi::CString;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use memvisor_control::format_bytes;

/// What the swap directory can hold, as far as `memvisor run` can tell before the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwapRoom {
    /// Room for everything the arena can page out beyond the budget.
    Enough,
    /// Less room than the arena could page out; only what the program uses is stored (the
    /// arena is sparse), so this may never matter. Carries the free bytes and the arena's need.
    Sparse {
        /// Bytes free to memvisor on the filesystem.
        free: u64,
        /// Bytes the arena could page out (arena less budget).
        need: u64,
    },
}

/// Why the swap directory cannot be used; the message names what is wrong.
pub type SwapDirProblem = String;

/// Checks that `dir` is a directory in which a swap file can be created, and that it has room:
/// at least one chunk, and, if `arena_is_sized` (the user gave `--arena`), all of
/// `arena - budget`. Returns how much room there is.
pub fn check_swap_dir(
    dir: &Path,
    chunk: u64,
    arena: u64,
    budget: u64,
    arena_is_sized: bool,
) -> Result<SwapRoom, SwapDirProblem> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("does not exist ({e})"))?;
    if !meta.is_dir() {
        return Err("not a directory".into());
    }
    probe_create(dir)
        .map_err(|e| format!("not writable: cannot create a swap file there ({e})"))?;
    let free = free_bytes(dir).map_err(|e| format!("cannot read its free space ({e})"))?;
    if free < chunk {
        return Err(format!(
            "only {} free on its filesystem, less than one chunk ({})",
            format_bytes(free),
            format_bytes(chunk)
        ));
    }
    let need = arena.saturating_sub(budget);
    if free >= need {
        return Ok(SwapRoom::Enough);
    }
    if arena_is_sized {
        return Err(format!(
            "{} free on its filesystem, but the arena can page out {} beyond the budget \
             (--arena less --budget); free space, use another --swap-dir, or a smaller --arena",
            format_bytes(free),
            format_bytes(need)
        ));
    }
    Ok(SwapRoom::Sparse { free, need })
}

/// Creates and closes a file in `dir` that never has a name (or, without `O_TMPFILE`, one
/// that did not exist before and is removed at once).
fn probe_create(dir: &Path) -> io::Result<()> {
    let tmpfile = OpenOptions::new()
        .read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(dir);
    match tmpfile {
        Ok(_) => Ok(()),
        // EOPNOTSUPP: the filesystem has no O_TMPFILE; EISDIR: the kernel predates it.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            let probe = dir.join(format!(".memvisor-probe-{}-{nanos:09}", std::process::id()));
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
                .open(&probe)?;
            std::fs::remove_file(&probe)
        }
        Err(e) => Err(e),
    }
}

/// Bytes an unprivileged writer may still use on `dir`'s filesystem (`statvfs` `f_bavail`).
pub fn free_bytes(dir: &Path) -> io::Result<u64> {
    let path = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
    // SAFETY: statvfs is plain data; all zeros is a valid value for the kernel to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a NUL-terminated string and `st` a valid, writable statvfs.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_planted_probe_name_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"DATA").unwrap();
        let swap = dir.path().join("swap");
        std::fs::create_dir(&swap).unwrap();
        for pid in std::process::id()..std::process::id() + 50 {
            std::os::unix::fs::symlink(&victim, swap.join(format!(".memvisor-probe-{pid}")))
                .unwrap();
        }
        let room = check_swap_dir(&swap, 4096, 1 << 20, 0, false).unwrap();
        assert_eq!(room, SwapRoom::Enough);
        assert_eq!(std::fs::read(&victim).unwrap(), b"DATA");
        // Nothing is left behind.
        assert_eq!(std::fs::read_dir(&swap).unwrap().count(), 50);
    }

    #[test]
    fn room_is_checked_against_the_arena() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).unwrap();
        assert!(free > 0);
        let huge = free.saturating_mul(4).max(1 << 50);
        assert!(matches!(
            check_swap_dir(dir.path(), 4096, huge, 0, false).unwrap(),
            SwapRoom::Sparse { need, .. } if need == huge
        ));
        let err = check_swap_dir(dir.path(), 4096, huge, 0, true).unwrap_err();
        assert!(err.contains("beyond the budget"), "{err}");
        let err = check_swap_dir(dir.path(), huge, huge, 0, false).unwrap_err();
        assert!(err.contains("less than one chunk"), "{err}");
        let err = check_swap_dir(&dir.path().join("missing"), 4096, 0, 0, false).unwrap_err();
        assert!(err.contains("does not exist"), "{err}");
    }
}
