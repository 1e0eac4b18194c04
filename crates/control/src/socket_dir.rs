//! Where control sockets live: `DIR/PID.sock`, DIR mode 0700.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
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

/// Creates `dir` (mode 0700) if needed and checks it belongs to this user (or root) and is
/// not accessible to others.
pub fn prepare_control_dir(dir: &Path) -> Result<(), ControlError> {
    let io = |op: &'static str| {
        move |source| ControlError::Io {
            op,
            path: dir.to_path_buf(),
            source,
        }
    };
    if !dir.exists() {
        fs::create_dir_all(dir).map_err(io("create control directory"))?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
            .map_err(io("chmod 0700 control directory"))?;
    }
    let meta = fs::symlink_metadata(dir).map_err(io("stat control directory"))?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let bad = |reason: &str| ControlError::Io {
        op: "check control directory",
        path: dir.to_path_buf(),
        source: std::io::Error::new(std::io::ErrorKind::PermissionDenied, reason.to_string()),
    };
    if !meta.is_dir() {
        return Err(bad("not a directory"));
    }
    if meta.uid() != uid && meta.uid() != 0 {
        return Err(bad("owned by another user"));
    }
    if meta.mode() & 0o077 != 0 {
        if meta.uid() == uid {
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(io("chmod 0700 control directory"))?;
        } else {
            return Err(bad("accessible to other users"));
        }
    }
    Ok(())
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

    #[test]
    fn lists_sockets_and_prepares_dir() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("ctl");
        assert!(list_managed_pids(&d).unwrap().is_empty());
        prepare_control_dir(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        fs::set_permissions(&d, fs::Permissions::from_mode(0o755)).unwrap();
        prepare_control_dir(&d).unwrap();
        assert_eq!(fs::metadata(&d).unwrap().mode() & 0o777, 0o700);
        for n in ["12.sock", "3.sock", "x.sock", "4.txt"] {
            fs::write(d.join(n), b"").unwrap();
        }
        assert_eq!(list_managed_pids(&d).unwrap(), vec![3, 12]);
        assert_eq!(socket_path(&d, 5), d.join("5.sock"));
        let f = t.path().join("file");
        fs::write(&f, b"").unwrap();
        assert!(prepare_control_dir(&f).is_err());
    }
}
