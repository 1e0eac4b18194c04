//! [`KernelSwapFile`]: a swap file activated for the kernel baseline (created exclusively, mode
//! 0600, allocated with `fallocate(2)`, then `mkswap`, `swapon`), deactivated and removed on
//! drop; and the checks around it (no other swap active, leftovers of killed runs cleaned up).

use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::bench_error::BenchError;

/// Name prefix of everything this benchmark creates (swap files, cgroups): `PREFIX-PID...`.
pub const PREFIX: &str = "memvisor-kbench";

/// An active swap file, removed on drop.
#[derive(Debug)]
pub struct KernelSwapFile {
    path: PathBuf,
    /// The file as created: `mkswap`, `swapon` and `swapoff` reach it through this descriptor
    /// (`/proc/PID/fd/N`), not through its name in a directory others may write (where the name
    /// could be swapped for a symbolic link to a disk between creation and use). `None` for a
    /// stale swap file of a dead run, known only by name.
    file: Option<fs::File>,
    active: bool,
}

impl KernelSwapFile {
    /// Creates and activates a swap file of `bytes` in `dir`. Fails if another swap area is
    /// active (unless `allow_other_swap`), after removing leftovers of dead runs.
    pub fn create(dir: &Path, bytes: u64, allow_other_swap: bool) -> Result<Self, BenchError> {
        remove_stale_swaps();
        let others = active_swaps()?;
        if !others.is_empty() && !allow_other_swap {
            return Err(BenchError::Unsupported(format!(
                "other swap already active ({}): the baseline must swap only to its own file \
                 (swapoff it, or pass --allow-other-swap)",
                others.join(", ")
            )));
        }
        let path = dir.join(format!("{PREFIX}-{}.swap", std::process::id()));
        let file = allocate_exclusive(&path, bytes)?;
        let mut swap = Self {
            path,
            file: Some(file),
            active: false,
        };
        let by_fd = swap.by_descriptor().unwrap_or_default();
        run("mkswap", &[&by_fd])?;
        swap_call(true, &by_fd)?;
        swap.active = true;
        Ok(swap)
    }

    /// `/proc/PID/fd/N` of the file created, if this process created it.
    fn by_descriptor(&self) -> Option<String> {
        self.file
            .as_ref()
            .map(|f| format!("/proc/{}/fd/{}", std::process::id(), f.as_raw_fd()))
    }

    /// The swap file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for KernelSwapFile {
    fn drop(&mut self) {
        let p = self.path.display().to_string();
        if self.active {
            let off = match self.by_descriptor() {
                Some(by_fd) => swap_call(false, &by_fd),
                None => run("swapoff", &[&p]),
            };
            if let Err(e) = off {
                eprintln!("warning: {e}");
            }
        }
        if let Err(e) = fs::remove_file(&self.path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("warning: remove {p}: {e}");
            }
        }
    }
}

/// Creates `path` as a new file of `bytes` allocated (not sparse) bytes, mode 0600; fails if
/// anything, even a symbolic link, already has that name (the swap directory may be shared).
fn allocate_exclusive(path: &Path, bytes: u64) -> Result<fs::File, BenchError> {
    let file = fs::File::options()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| BenchError::io("create swap file", path, e))?;
    let len = libc::off_t::try_from(bytes).map_err(|_| {
        BenchError::io(
            "size swap file",
            path,
            std::io::Error::from(std::io::ErrorKind::InvalidInput),
        )
    })?;
    // SAFETY: fallocate on a descriptor owned by `file`, which outlives the call.
    if unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) } != 0 {
        let e = std::io::Error::last_os_error();
        let _ = fs::remove_file(path);
        return Err(BenchError::io("allocate swap file", path, e));
    }
    Ok(file)
}

/// `swapon(2)` (`on`) or `swapoff(2)` of `path` (a `/proc/PID/fd/N` link of this process's own
/// file: the kernel opens what the descriptor refers to).
fn swap_call(on: bool, path: &str) -> Result<(), BenchError> {
    let call = if on { "swapon" } else { "swapoff" };
    let failed = |detail: String| BenchError::Command {
        command: format!("{call}({path})"),
        detail,
    };
    let c = std::ffi::CString::new(path).map_err(|e| failed(e.to_string()))?;
    // SAFETY: `c` is a NUL-terminated path that outlives the call; no other pointer is passed.
    let r = unsafe {
        if on {
            libc::swapon(c.as_ptr(), 0)
        } else {
            libc::swapoff(c.as_ptr())
        }
    };
    if r != 0 {
        return Err(failed(std::io::Error::last_os_error().to_string()));
    }
    Ok(())
}

/// Active swap areas (`/proc/swaps`, header skipped).
pub fn active_swaps() -> Result<Vec<String>, BenchError> {
    let text =
        fs::read_to_string("/proc/swaps").map_err(|e| BenchError::io("read", "/proc/swaps", e))?;
    Ok(text
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(unescape))
        .collect())
}

/// `/proc/swaps` escapes blanks in names as `\040`.
fn unescape(s: &str) -> String {
    s.replace("\\040", " ")
}

/// The pid in a `PREFIX-PID...` name, if it has that form.
pub fn owner_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?.strip_prefix('-')?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// Whether process `pid` exists.
pub fn pid_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Swapoff and remove swap files of this benchmark whose process is gone.
fn remove_stale_swaps() {
    for s in active_swaps().unwrap_or_default() {
        let name = Path::new(&s)
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(pid) = owner_pid(&name) {
            if !pid_alive(pid) {
                eprintln!("removing swap file {s} left by a dead run (pid {pid})");
                drop(KernelSwapFile {
                    path: s.into(),
                    file: None,
                    active: true,
                });
            }
        }
    }
}

/// Runs a command to completion; non-zero exit is an error carrying its stderr.
pub fn run(program: &str, args: &[&str]) -> Result<(), BenchError> {
    let line = format!("{program} {}", args.join(" "));
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| BenchError::Command {
            command: line.clone(),
            detail: e.to_string(),
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(BenchError::Command {
            command: line,
            detail: format!(
                "{}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_files_are_created_exclusively() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("swap");
        allocate_exclusive(&p, 1 << 20).unwrap();
        let meta = fs::metadata(&p).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(meta.len(), 1 << 20);
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert!(meta.blocks() * 512 >= 1 << 20, "sparse");
        // An existing name, or a planted symlink, is refused and left alone.
        assert!(allocate_exclusive(&p, 4096).is_err());
        let victim = t.path().join("victim");
        fs::write(&victim, b"keep").unwrap();
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(allocate_exclusive(&link, 4096).is_err());
        assert_eq!(fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn names_and_pids() {
        assert_eq!(owner_pid("memvisor-kbench-123.swap"), Some(123));
        assert_eq!(owner_pid("memvisor-kbench-77-3"), Some(77));
        assert_eq!(owner_pid("memvisor-kbenchx-1"), None);
        assert_eq!(owner_pid("other-1"), None);
        assert!(pid_alive(std::process::id()));
        assert_eq!(unescape("/a\\040b"), "/a b");
    }
}
