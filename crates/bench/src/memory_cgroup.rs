//! [`MemoryCgroup`]: a cgroup v1 memory group for one workload process — limited to the budget
//! for the kernel variant, unlimited (accounting only) for memvisor — removed on drop.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::bench_error::BenchError;
use crate::counters::field;
use crate::kernel_swap::{owner_pid, pid_alive, PREFIX};

/// Where the cgroup v1 memory controller is mounted.
pub const MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";

/// What the group saw over its life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CgroupUsage {
    /// `memory.limit_in_bytes` (the kernel's "unlimited" is a huge number).
    pub limit_bytes: u64,
    /// `memory.memsw.limit_in_bytes`, 0 if the file is absent.
    pub memsw_limit_bytes: u64,
    /// `memory.max_usage_in_bytes`: peak memory charged.
    pub peak_bytes: u64,
    /// `memory.memsw.max_usage_in_bytes`: peak memory + swap charged (0 if absent).
    pub memsw_peak_bytes: u64,
    /// `memory.failcnt`: times the limit was hit.
    pub failcnt: u64,
    /// `memory.stat` `pgmajfault`.
    pub pgmajfault: u64,
    /// `memory.swappiness`.
    pub swappiness: u64,
}

/// A memory cgroup, `rmdir`ed on drop.
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
}

impl MemoryCgroup {
    /// Checks that the cgroup v1 memory controller is mounted and writable here.
    pub fn check_available() -> Result<(), BenchError> {
        let root = Path::new(MEMORY_ROOT);
        if !root.join("memory.limit_in_bytes").exists() {
            return Err(BenchError::Unsupported(format!(
                "no cgroup v1 memory controller at {MEMORY_ROOT}"
            )));
        }
        Ok(())
    }

    /// Creates group `name` under the memory root with `limit` bytes (`None`: unlimited).
    pub fn create(name: &str, limit: Option<u64>) -> Result<Self, BenchError> {
        Self::check_available()?;
        remove_stale_groups();
        let dir = Path::new(MEMORY_ROOT).join(name);
        fs::create_dir(&dir).map_err(|e| BenchError::io("create cgroup", &dir, e))?;
        let group = Self { dir };
        if let Some(limit) = limit {
            group.write("memory.limit_in_bytes", &limit.to_string())?;
        }
        Ok(group)
    }

    /// The file a process writes its pid to in order to join.
    pub fn procs_path(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    /// The group's counters now.
    pub fn usage(&self) -> CgroupUsage {
        let num = |f: &str| -> u64 {
            fs::read_to_string(self.dir.join(f))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0)
        };
        let stat = fs::read_to_string(self.dir.join("memory.stat")).unwrap_or_default();
        CgroupUsage {
            limit_bytes: num("memory.limit_in_bytes"),
            memsw_limit_bytes: num("memory.memsw.limit_in_bytes"),
            peak_bytes: num("memory.max_usage_in_bytes"),
            memsw_peak_bytes: num("memory.memsw.max_usage_in_bytes"),
            failcnt: num("memory.failcnt"),
            pgmajfault: field(&stat, "pgmajfault"),
            swappiness: num("memory.swappiness"),
        }
    }

    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Sets a control file, e.g. `memory.swappiness` to `0`.
    pub fn set(&self, file: &str, value: &str) -> Result<(), BenchError> {
        self.write(file, value)
    }

    fn write(&self, file: &str, value: &str) -> Result<(), BenchError> {
        let p = self.dir.join(file);
        fs::write(&p, value).map_err(|e| BenchError::io("write cgroup file", p, e))
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        // A process that just exited may still be listed for a moment.
        let mut last = None;
        for _ in 0..100 {
            match fs::remove_dir(&self.dir) {
                Ok(()) => return,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
                Err(e) => last = Some(e),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(e) = last {
            eprintln!("warning: rmdir {}: {e}", self.dir.display());
        }
    }
}

/// Removes empty groups of this benchmark whose process is gone.
fn remove_stale_groups() {
    let Ok(entries) = fs::read_dir(MEMORY_ROOT) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = owner_pid(&name) {
            if !pid_alive(pid) && fs::remove_dir(e.path()).is_ok() {
                eprintln!("removed cgroup {name} left by a dead run (pid {pid})");
            }
        }
    }
}

/// The group name for run `seq` of this process.
pub fn group_name(seq: u64) -> String {
    format!("{PREFIX}-{}-{seq}", std::process::id())
}
