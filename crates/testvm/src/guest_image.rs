//! The built guest: kernel, initramfs, and the host copy of the workload program.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use crate::error::{Result, TestVmError};

/// The files `scripts/guest-image` produces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuestImage {
    /// The directory holding them (`target/guest` by default).
    pub dir: PathBuf,
    /// The guest kernel (a Debian cloud kernel).
    pub kernel: PathBuf,
    /// The busybox initramfs with the virtio modules, `/init` and the workload.
    pub initramfs: PathBuf,
    /// The static workload program, also runnable on the host (`make-disk-image`).
    pub workload: PathBuf,
}

/// The workspace root (this crate lives at `crates/testvm`).
fn workspace_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir
        .ancestors()
        .nth(2)
        .unwrap_or(manifest_dir)
        .to_path_buf()
}

/// Serializes builds within one process (the script also holds a file lock across processes).
static BUILD: Mutex<Option<GuestImage>> = Mutex::new(None);

impl GuestImage {
    /// For a test named `test`: the image, built if needed, or `None` after printing
    /// `SKIPPED` when QEMU is not installed and `CI` is not `true`. Under CI a missing QEMU
    /// fails the test (scripts/install provides it), as does any other error.
    pub fn for_test(test: &str) -> Option<Self> {
        match crate::qemu_binary::qemu_binary() {
            Ok(_) => {}
            Err(e @ TestVmError::QemuNotFound { .. }) => {
                if std::env::var("CI").as_deref() == Ok("true") {
                    panic!("{test}: {e} (CI=true: scripts/install must provide QEMU)");
                }
                eprintln!("SKIPPED {test}: {e}");
                return None;
            }
            Err(e) => panic!("{test}: {e}"),
        }
        Some(Self::locate_or_build().unwrap_or_else(|e| panic!("{test}: {e}")))
    }

    /// Where the image lives: `$MEMVISOR_GUEST_DIR`, else `target/guest` in the workspace.
    pub fn default_dir() -> PathBuf {
        match std::env::var_os("MEMVISOR_GUEST_DIR") {
            Some(dir) if !dir.is_empty() => PathBuf::from(dir),
            _ => workspace_root().join("target/guest"),
        }
    }

    /// The image already built in `dir`; fails naming the first missing file.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        let image = GuestImage {
            kernel: dir.join("vmlinuz"),
            initramfs: dir.join("initramfs.cpio"),
            workload: dir.join("workload"),
            dir,
        };
        for (what, path) in [
            ("guest kernel", &image.kernel),
            ("guest initramfs", &image.initramfs),
            ("guest workload program", &image.workload),
        ] {
            if !path.is_file() {
                return Err(TestVmError::MissingFile {
                    what,
                    path: path.clone(),
                });
            }
        }
        Ok(image)
    }

    /// Runs `scripts/guest-image` (a no-op when the image is current) once per process and
    /// returns the image in [`GuestImage::default_dir`].
    pub fn locate_or_build() -> Result<Self> {
        let mut built = BUILD
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(image) = built.as_ref() {
            return Ok(image.clone());
        }
        let dir = Self::default_dir();
        let script = workspace_root().join("scripts/guest-image");
        if !script.is_file() {
            return Err(TestVmError::MissingFile {
                what: "guest image builder",
                path: script,
            });
        }
        let output = Command::new(&script)
            .env("MEMVISOR_GUEST_DIR", &dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|source| TestVmError::Spawn {
                program: script.display().to_string(),
                source,
            })?;
        if !output.status.success() {
            return Err(TestVmError::ImageBuild {
                script,
                status: output.status.to_string(),
                stderr: tail_of(&String::from_utf8_lossy(&output.stderr), 10),
            });
        }
        let image = Self::from_dir(dir)?;
        *built = Some(image.clone());
        Ok(image)
    }

    /// Writes a disk image of `mib` MiB whose every 4 KiB unit carries the pattern that
    /// `disk ... --verify` checks in the guest (unit index, magic, derived words).
    pub fn make_disk_image(&self, path: &Path, mib: u64) -> Result<()> {
        let output = Command::new(&self.workload)
            .arg("make-disk-image")
            .arg(path)
            .arg(mib.to_string())
            .stdin(Stdio::null())
            .output()
            .map_err(|source| TestVmError::Spawn {
                program: self.workload.display().to_string(),
                source,
            })?;
        if output.status.success() {
            return Ok(());
        }
        Err(TestVmError::DiskImage {
            path: path.to_path_buf(),
            status: output.status.to_string(),
            output: String::from_utf8_lossy(&output.stdout).trim().to_string(),
        })
    }
}

/// The last `n` lines of `text`, joined by newlines.
pub(crate) fn tail_of(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_dir_names_the_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = GuestImage::from_dir(dir.path()).unwrap_err();
        assert!(
            matches!(&err, TestVmError::MissingFile { what: "guest kernel", path } if path.ends_with("vmlinuz")),
            "{err}"
        );
        std::fs::write(dir.path().join("vmlinuz"), b"k").unwrap();
        std::fs::write(dir.path().join("initramfs.cpio"), b"i").unwrap();
        let err = GuestImage::from_dir(dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("guest workload program not found at"),
            "{err}"
        );
        std::fs::write(dir.path().join("workload"), b"w").unwrap();
        assert!(GuestImage::from_dir(dir.path()).is_ok());
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail_of("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_of("a", 5), "a");
        assert_eq!(tail_of("", 5), "");
    }
}
