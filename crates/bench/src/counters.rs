//! [`Counters`]: the process's and the system's counters at one instant — page faults and CPU
//! time (`getrusage`), the process's block I/O (`/proc/self/io`), swap-ins and swap-outs
//! (`/proc/vmstat`, system-wide) and the swap disk's sectors (`/sys/dev/block/M:m/stat`,
//! device-wide) — and their differences between two instants.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::bench_error::BenchError;

/// Counter values at one instant (or, from [`Counters::since`], over an interval).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Counters {
    /// Major page faults of this process (all threads).
    pub majflt: u64,
    /// Minor page faults of this process.
    pub minflt: u64,
    /// User CPU seconds of this process.
    pub user_secs: f64,
    /// System CPU seconds of this process.
    pub sys_secs: f64,
    /// Voluntary context switches.
    pub voluntary_switches: u64,
    /// Bytes this process caused to be read from storage (`/proc/self/io` `read_bytes`).
    pub read_bytes: u64,
    /// Bytes this process caused to be written (`write_bytes`).
    pub write_bytes: u64,
    /// Pages swapped in, system-wide (`pswpin`).
    pub pswpin: u64,
    /// Pages swapped out, system-wide (`pswpout`).
    pub pswpout: u64,
    /// Bytes read from the swap directory's block device, by everybody.
    pub disk_read_bytes: u64,
    /// Bytes written to that device, by everybody.
    pub disk_write_bytes: u64,
}

impl Counters {
    /// Reads every counter now; `disk_stat` is the device's `stat` file (see
    /// [`disk_stat_path`]), `None` leaves the disk counters at 0.
    pub fn now(disk_stat: Option<&Path>) -> Result<Self, BenchError> {
        let mut c = Self::default();
        // SAFETY: `rusage` is plain data for which all-zero is valid; getrusage fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `ru` is a valid, writable rusage.
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return Err(BenchError::io(
                "getrusage",
                "RUSAGE_SELF",
                std::io::Error::last_os_error(),
            ));
        }
        c.majflt = ru.ru_majflt as u64;
        c.minflt = ru.ru_minflt as u64;
        c.user_secs = ru.ru_utime.tv_sec as f64 + ru.ru_utime.tv_usec as f64 * 1e-6;
        c.sys_secs = ru.ru_stime.tv_sec as f64 + ru.ru_stime.tv_usec as f64 * 1e-6;
        c.voluntary_switches = ru.ru_nvcsw as u64;
        let io = read("/proc/self/io")?;
        c.read_bytes = field(&io, "read_bytes:");
        c.write_bytes = field(&io, "write_bytes:");
        let vm = read("/proc/vmstat")?;
        c.pswpin = field(&vm, "pswpin");
        c.pswpout = field(&vm, "pswpout");
        if let Some(p) = disk_stat {
            // Fields 3 and 7: sectors read and written (512 bytes each).
            let s = read(p)?;
            let f: Vec<u64> = s
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            c.disk_read_bytes = f.get(2).copied().unwrap_or(0) * 512;
            c.disk_write_bytes = f.get(6).copied().unwrap_or(0) * 512;
        }
        Ok(c)
    }

    /// The change from `earlier` to `self`.
    pub fn since(&self, earlier: &Self) -> Self {
        Self {
            majflt: self.majflt.saturating_sub(earlier.majflt),
            minflt: self.minflt.saturating_sub(earlier.minflt),
            user_secs: self.user_secs - earlier.user_secs,
            sys_secs: self.sys_secs - earlier.sys_secs,
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            pswpin: self.pswpin.saturating_sub(earlier.pswpin),
            pswpout: self.pswpout.saturating_sub(earlier.pswpout),
            disk_read_bytes: self.disk_read_bytes.saturating_sub(earlier.disk_read_bytes),
            disk_write_bytes: self
                .disk_write_bytes
                .saturating_sub(earlier.disk_write_bytes),
        }
    }
}

/// The `stat` file of the block device holding `dir` (`/sys/dev/block/MAJOR:MINOR/stat`), if
/// it is a block device (not tmpfs).
pub fn disk_stat_path(dir: &Path) -> Option<PathBuf> {
    let dev = fs::metadata(dir).ok()?.dev();
    let p = PathBuf::from(format!(
        "/sys/dev/block/{}:{}/stat",
        libc::major(dev),
        libc::minor(dev)
    ));
    p.exists().then_some(p)
}

/// The first `KEY value` line's value (`/proc/vmstat`, `/proc/self/io` style), 0 if absent.
pub fn field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let mut it = l.split_whitespace();
            (it.next() == Some(key)).then(|| it.next()?.parse().ok())?
        })
        .unwrap_or(0)
}

fn read(path: impl AsRef<Path>) -> Result<String, BenchError> {
    let path = path.as_ref();
    fs::read_to_string(path).map_err(|e| BenchError::io("read", path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_read_and_subtract() {
        let a = Counters::now(disk_stat_path(Path::new("/")).as_deref()).unwrap();
        let v: Vec<u8> = vec![1; 8 << 20];
        std::hint::black_box(&v);
        let b = Counters::now(None).unwrap();
        let d = b.since(&a);
        assert!(d.minflt > 0, "{d:?}");
        assert_eq!(d.disk_read_bytes, 0);
        assert_eq!(field("pswpin 12\npswpout 34\n", "pswpout"), 34);
        assert_eq!(field("read_bytes: 7\n", "read_bytes:"), 7);
        assert_eq!(field("x 1\n", "y"), 0);
    }
}
