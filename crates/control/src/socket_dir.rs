//! Where control sockets live: `DIR/PID.sock`, DIR mode 0700.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::control_error::ControlError;
use crate::launch_env;

/// The control directory: `$MEMVISOR_CONTROL_DIR`, else `/run/memvisor` for root, else
/// `$XDG_RUNTIME_DIR/memvisor`, else `/tmp/memvisor-UID`.
pub fn default_control_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(launch_env::CONTROL_DIR).filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from("/run/memvisor");
    }
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d).join("memvisor"),
        None => PathBuf::from(format!("/tmp/memvisor-{uid}")),
    }
}

/// The socket of process `pid` in `dir`.
pub fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("{pid}.sock"))
}

/// Creates `dir` (mode 0700, missing parents too) if needed, and refuses it unless it is a
/// real directory (not a symlink) owned by this effective user and closed to everyone else:
/// sockets are never put where another user could replace or read them.
pub fn prepare_control_dir(dir: &Path) -> Result<(), ControlError> {
    let io = |op: &'static str| {
        move |source| ControlError::Io {
            op,
            path: dir.to_path_buf(),
            source,
        }
    };
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        // An existing non-directory: reported by the checks below.
        Err(_) if fs::symlink_metadata(dir).is_ok() => {}
        Err(e) => return Err(io("create control directory")(e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(io("stat control directory"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if let Some(reason) = unsafe_dir_reason(&meta, uid) {
        return Err(ControlError::Io {
            op: "refuse control directory",
            path: dir.to_path_buf(),
            source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, reason),
        });
    }
    Ok(())
}

/// Why a directory with metadata `meta` (not following symlinks) is not a private directory
/// of user `uid`, or `None` when it is.
fn unsafe_dir_reason(meta: &fs::Metadata, uid: u32) -> Option<String> {
    if meta.file_type().is_symlink() {
        return Some("is a symbolic link".into());
    }
    if !meta.is_dir() {
        return Some("not a directory".into());
    }
    if meta.uid() != uid {
        return Some(format!("owned by uid {}, not uid {uid}", meta.uid()));
    }
    if meta.mode() & 0o077 != 0 {
        return Some(format!(
            "mode {:o} lets other users in (must be 0700)",
            meta.mode() & 0o777
        ));
    }
    None
}

/// The control directories to look in: `$MEMVISOR_CONTROL_DIR` alone when set, else this
/// user's [`default_control_dir`] and, for root, every other user's private directory
/// (`/run/user/UID/memvisor`, `/tmp/memvisor-UID`) that is a real directory owned by that UID
/// and closed to others.
pub fn control_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![default_control_dir()];
    // SAFETY: geteuid has no preconditions and cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    if root && std::env::var_os(launch_env::CONTROL_DIR).is_none_or(|d| d.is_empty()) {
        dirs.extend(other_users_dirs(Path::new("/run/user"), Path::new("/tmp")));
    }
    dirs
}

/// Per-user control directories under `run_user` (`UID/memvisor`) and `tmp`
/// (`memvisor-UID`) that are private directories of that UID.
pub fn other_users_dirs(run_user: &Path, tmp: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut consider = |path: PathBuf, uid: u32| {
        let private =
            fs::symlink_metadata(&path).is_ok_and(|m| unsafe_dir_reason(&m, uid).is_none());
        if private && !found.contains(&path) {
            found.push(path);
        }
    };
    for entry in fs::read_dir(run_user).into_iter().flatten().flatten() {
        if let Some(uid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) {
            consider(entry.path().join("memvisor"), uid);
        }
    }
    for entry in fs::read_dir(tmp).into_iter().flatten().flatten() {
        let name = entry.file_name();
        if let Some(uid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("memvisor-"))
            .and_then(|u| u.parse().ok())
        {
            consider(entry.path(), uid);
        }
    }
    found.sort();
    found
}

/// The directory of [`control_dirs`] holding `pid`'s socket, else the first one (where a
/// missing socket is then reported).
pub fn find_socket_dir(pid: u32) -> PathBuf {
    let dirs = control_dirs();
    dirs.iter()
        .find(|d| fs::symlink_metadata(socket_path(d, pid)).is_ok())
        .unwrap_or(&dirs[0])
        .clone()
}

/// Pids that have a socket in `dir`, ascending (a missing directory has none).
pub fn list_managed_pids(dir: &Path) -> Result<Vec<u32>, ControlError> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ControlError::Io {
                op: "list control directory",
                path: dir.to_path_buf(),
                source,
            })
        }
    };
    let mut pids: Vec<u32> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".sock")?.parse().ok())
        .collect();
    pids.sort_unstable();
    Ok(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn lists_sockets_and_prepares_dir() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("a/ctl");
        assert!(list_managed_pids(&d).unwrap().is_empty());
        prepare_control_dir(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        prepare_control_dir(&d).unwrap();
        for n in ["12.sock", "3.sock", "x.sock", "4.txt"] {
            fs::write(d.join(n), b"").unwrap();
        }
        assert_eq!(list_managed_pids(&d).unwrap(), vec![3, 12]);
        assert_eq!(socket_path(&d, 5), d.join("5.sock"));
        let f = t.path().join("file");
        fs::write(&f, b"").unwrap();
        assert!(prepare_control_dir(&f).is_err());
    }

    #[test]
    fn refuses_symlinked_open_or_foreign_dirs() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        prepare_control_dir(&real).unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let e = prepare_control_dir(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
        let e = prepare_control_dir(&real).unwrap_err().to_string();
        assert!(e.contains("lets other users in"), "{e}");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            let foreign = t.path().join("foreign");
            fs::create_dir(&foreign).unwrap();
            fs::set_permissions(&foreign, fs::Permissions::from_mode(0o700)).unwrap();
            std::os::unix::fs::chown(&foreign, Some(65534), Some(65534)).unwrap();
            let e = prepare_control_dir(&foreign).unwrap_err().to_string();
            assert!(e.contains("owned by uid 65534"), "{e}");
        }
    }

    #[test]
    fn finds_other_users_private_dirs() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: needs root to create other users' directories");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let (run_user, tmp) = (t.path().join("run-user"), t.path().join("tmp"));
        let private = |path: &Path, uid: u32, mode: u32| {
            fs::create_dir_all(path).unwrap();
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
            std::os::unix::fs::chown(path, Some(uid), Some(uid)).unwrap();
        };
        private(&run_user.join("1000/memvisor"), 1000, 0o700);
        private(&run_user.join("1001/memvisor"), 1000, 0o700); // wrong owner
        private(&tmp.join("memvisor-65534"), 65534, 0o700);
        private(&tmp.join("memvisor-1002"), 1002, 0o755); // open to others
        fs::create_dir_all(&tmp).unwrap();
        std::os::unix::fs::symlink(run_user.join("1000/memvisor"), tmp.join("memvisor-1000"))
            .unwrap();
        assert_eq!(
            other_users_dirs(&run_user, &tmp),
            vec![run_user.join("1000/memvisor"), tmp.join("memvisor-65534")]
        );
    }
}
