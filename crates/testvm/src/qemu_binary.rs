//! Finding the QEMU binary.

use std::path::PathBuf;

use crate::error::{Result, TestVmError};

/// The QEMU program the harness runs unless `MEMVISOR_QEMU` names another.
pub const QEMU_PROGRAM: &str = "qemu-system-x86_64";

/// The QEMU binary: `$MEMVISOR_QEMU` if set, else `qemu-system-x86_64` from `PATH`.
///
/// Fails with [`TestVmError::QemuNotFound`] when it is not there, so tests can tell "QEMU not
/// installed" from any other failure.
pub fn qemu_binary() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("MEMVISOR_QEMU").filter(|p| !p.is_empty()) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(TestVmError::QemuNotFound {
                program: path.display().to_string(),
            })
        };
    }
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path_var)
        .map(|dir| dir.join(QEMU_PROGRAM))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| TestVmError::QemuNotFound {
            program: QEMU_PROGRAM.to_string(),
        })
}
