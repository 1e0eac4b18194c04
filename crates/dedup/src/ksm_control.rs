//! Changing what ksmd does: [`KsmSettings`] (`run`, `pages_to_scan`, `sleep_millisecs`) with a
//! guard that restores them, marking memory `MADV_MERGEABLE`, and ksmd's CPU time.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

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
/// holds an exclusive lock (`flock` on a file in /tmp), so tests and benchmarks that change the
/// global KSM settings run one at a time, across processes.
#[derive(Debug)]
pub struct KsmSettingsGuard {
    saved: KsmSettings,
    _lock: File,
}

impl KsmSettingsGuard {
    /// Waits for the lock, then records the current settings.
    pub fn acquire() -> Result<Self, DedupError> {
        let path = Path::new("/tmp/memvisor-ksm-settings.lock");
        let lock = File::options()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| DedupError::File {
                path: path.into(),
                source,
            })?;
        // SAFETY: flock on a valid descriptor has no memory-safety preconditions.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } < 0 {
            return Err(DedupError::File {
                path: path.into(),
                source: std::io::Error::last_os_error(),
            });
        }
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

/// Marks `[start, start + len)` `MADV_MERGEABLE`, so ksmd scans it.
///
/// # Safety
/// The range must be a page-aligned private anonymous mapping this process owns (madvise
/// changes how the kernel treats it, not its content).
pub unsafe fn madvise_mergeable(start: *mut u8, len: usize) -> Result<(), DedupError> {
    // SAFETY: the caller guarantees the range is mapped and owned; MADV_MERGEABLE does not
    // change the memory's content.
    let r = unsafe { libc::madvise(start.cast(), len, libc::MADV_MERGEABLE) };
    if r < 0 {
        return Err(DedupError::DirtyTracking {
            start: start as usize,
            len,
            what: "madvise(MADV_MERGEABLE)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// Marks `[start, start + len)` `MADV_UNMERGEABLE`: KSM unmerges its pages at once (each gets
/// its own copy again) and stops scanning it.
///
/// # Safety
/// As [`madvise_mergeable`].
pub unsafe fn madvise_unmergeable(start: *mut u8, len: usize) -> Result<(), DedupError> {
    // SAFETY: the caller guarantees the range is mapped and owned; unmerging keeps contents.
    let r = unsafe { libc::madvise(start.cast(), len, libc::MADV_UNMERGEABLE) };
    if r < 0 {
        return Err(DedupError::DirtyTracking {
            start: start as usize,
            len,
            what: "madvise(MADV_UNMERGEABLE)",
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The pid of the `ksmd` kernel thread.
pub fn ksmd_pid() -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: i32 = e.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
        (comm.trim() == "ksmd").then_some(pid)
    })
}

/// CPU time (user + system) of process or thread `pid`, from `/proc/PID/stat`.
pub fn process_cpu_time(pid: i32) -> Result<Duration, DedupError> {
    let path = format!("/proc/{pid}/stat");
    let text = std::fs::read_to_string(&path)
        .map_err(|e| DedupError::from_process_io(pid, format!("reading {path}"), e))?;
    let ticks = parse_stat_cpu_ticks(&text).map_err(|message| DedupError::Parse {
        path: path.into(),
        line: 1,
        message,
    })?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Ok(Duration::from_nanos(
        ticks.saturating_mul(1_000_000_000 / hz),
    ))
}

/// utime + stime (fields 14 and 15) of a `/proc/PID/stat` line, in clock ticks.
pub fn parse_stat_cpu_ticks(stat: &str) -> Result<u64, String> {
    let (_, rest) = stat
        .rsplit_once(')')
        .ok_or("no ')' after the command name")?;
    // `rest` starts at field 3 (state).
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let get = |n: usize| -> Result<u64, String> {
        fields
            .get(n - 3)
            .ok_or(format!("field {n} missing"))?
            .parse()
            .map_err(|_| format!("field {n} is not a number"))
    };
    Ok(get(14)?.saturating_add(get(15)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_ticks() {
        let line = "123 (a b) c) S 2 0 0 0 -1 69238880 0 0 0 0 17 4 0 0 20 0 1 0 5 0 0";
        assert_eq!(parse_stat_cpu_ticks(line), Ok(21));
        assert!(parse_stat_cpu_ticks("123 (x").is_err());
        assert!(parse_stat_cpu_ticks("1 (x) S 2")
            .unwrap_err()
            .contains("field 14"));
        assert!(process_cpu_time(std::process::id() as i32).is_ok());
    }
}
