//! Changing what ksmd does: [`KsmSettings`] (`run`, `pages_to_scan`, `sleep_millisecs`), a
//! guard that restores them, and where ksmd is.

use std::path::Path;
use std::time::Duration;

use crate::ksm_settings_lock::{KsmSettingsLock, KSM_LOCK_TIMEOUT};
use crate::ksm_status::{read_number, KSM_SYSFS};
use crate::DedupError;

/// The settings memvisor steers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KsmSettings {
    /// `run` (0 stop, 1 run).
    pub run: u64,
    /// Pages per wake-up.
    pub pages_to_scan: u64,
    /// Sleep between wake-ups.
    pub sleep_millisecs: u64,
}

impl KsmSettings {
    /// Reads the current settings.
    pub fn read() -> Result<Self, DedupError> {
        let dir = Path::new(KSM_SYSFS);
        let get = |name: &str| -> Result<u64, DedupError> {
            let p = dir.join(name);
            read_number(&p)?
                .and_then(|v| u64::try_from(v).ok())
                .ok_or_else(|| DedupError::File {
                    path: p,
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "KSM not available"),
                })
        };
        Ok(Self {
            run: get("run")?,
            pages_to_scan: get("pages_to_scan")?,
            sleep_millisecs: get("sleep_millisecs")?,
        })
    }

    /// Writes the settings (root only).
    pub fn apply(&self) -> Result<(), DedupError> {
        let dir = Path::new(KSM_SYSFS);
        for (name, v) in [
            ("pages_to_scan", self.pages_to_scan),
            ("sleep_millisecs", self.sleep_millisecs),
            ("run", self.run),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, format!("{v}\n"))
                .map_err(|source| DedupError::File { path: p, source })?;
        }
        Ok(())
    }
}

/// Holds the KSM settings as they were when created and writes them back when dropped; also
/// holds the [`KsmSettingsLock`], so memvisor processes, tests and benchmarks that change the
/// global KSM settings run one at a time.
#[derive(Debug)]
pub struct KsmSettingsGuard {
    saved: KsmSettings,
    _lock: KsmSettingsLock,
}

impl KsmSettingsGuard {
    /// Waits for the lock (up to [`KSM_LOCK_TIMEOUT`]), then records the current settings.
    pub fn acquire() -> Result<Self, DedupError> {
        Self::acquire_within(KSM_LOCK_TIMEOUT)
    }

    /// Waits up to `timeout` for the lock, then records the current settings; a lock still
    /// busy then is an error naming its holder.
    pub fn acquire_within(timeout: Duration) -> Result<Self, DedupError> {
        let lock = KsmSettingsLock::acquire(timeout)?;
        Ok(Self {
            saved: KsmSettings::read()?,
            _lock: lock,
        })
    }

    /// The settings that will be restored.
    pub fn saved(&self) -> KsmSettings {
        self.saved
    }

    /// Writes the saved settings back now (dropping the guard does it too).
    pub fn restore(&self) -> Result<(), DedupError> {
        self.saved.apply()
    }
}

impl Drop for KsmSettingsGuard {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!(
                "memvisor: could not restore KSM settings {:?}: {e}",
                self.saved
            );
        }
    }
}

/// The pid of the `ksmd` kernel thread.
pub fn ksmd_pid() -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == "ksmd").then_some(pid)
    })
}
