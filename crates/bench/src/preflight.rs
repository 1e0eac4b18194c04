//! [`preflight`]: can the kernel baseline and the pager run here? Root, the cgroup v1 memory
//! controller, userfaultfd, no other swap active, and `swapon` of a small swap file in the swap
//! directory (some containers refuse it).

use std::path::Path;

use crate::bench_error::BenchError;
use crate::kernel_swap::KernelSwapFile;
use crate::memory_cgroup::MemoryCgroup;

/// Checks everything the driver needs; `Err(Unsupported)` says what is missing.
pub fn preflight(swap_dir: &Path, allow_other_swap: bool) -> Result<(), BenchError> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err(BenchError::Unsupported(
            "not root (swapon and cgroups need it)".into(),
        ));
    }
    MemoryCgroup::check_available()?;
    memvisor_pager::Region::check_supported()
        .map_err(|e| BenchError::Unsupported(format!("userfaultfd: {e}")))?;
    if !swap_dir.is_dir() {
        return Err(BenchError::bad(
            "swap directory",
            swap_dir.display().to_string(),
            "not a directory",
        ));
    }
    match KernelSwapFile::create(swap_dir, 16 << 20, allow_other_swap) {
        Ok(swap) => {
            drop(swap);
            Ok(())
        }
        Err(e @ BenchError::Unsupported(_)) => Err(e),
        Err(e) => Err(BenchError::Unsupported(format!("swapon refused: {e}"))),
    }
}
