//! [`HostSample`]: what the host looks like once a second while a guest runs: the page cache
//! held for its image, QEMU's read counters, and its memory cgroup.

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use memvisor_scrub::{cachestat, MemInfo};
use serde::Serialize;

use crate::bench_error::BenchError;
use crate::counters::field;

/// One sample (pages are 4 KiB; counters are cumulative since the guest started).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct HostSample {
    /// Seconds since QEMU was started.
    pub t_s: f64,
    /// Pages of the image in the host page cache (`cachestat` `nr_cache`).
    pub image_cached_pages: u64,
    /// Of those, dirty or under writeback.
    pub image_dirty_pages: u64,
    /// QEMU's `rchar` (`/proc/PID/io`): bytes it asked `read`-like calls for, cache hits or not.
    pub qemu_rchar: u64,
    /// QEMU's `read_bytes`: bytes it caused to be read from storage.
    pub qemu_read_bytes: u64,
    /// The cgroup's `memory.usage_in_bytes`.
    pub cgroup_usage: u64,
    /// The cgroup's page cache other than shmem (`memory.stat` `cache - shmem`).
    pub cgroup_file_cache: u64,
    /// The cgroup's shmem: the guest's RAM (a memfd).
    pub cgroup_shmem: u64,
    /// The cgroup's anonymous memory (QEMU itself, TCG's code buffer).
    pub cgroup_rss: u64,
    /// CPU seconds the host policy has used so far.
    pub policy_cpu_s: f64,
    /// Image pages the host policy has dropped so far.
    pub policy_dropped_pages: u64,
}

/// Reads samples for one guest.
#[derive(Debug)]
pub struct HostSampler {
    image_path: PathBuf,
    image: File,
    qemu_pid: u32,
    cgroup_dir: PathBuf,
    limit: u64,
}

impl HostSampler {
    /// Watches `image` (opened read-write: `cachestat` needs write access), QEMU `qemu_pid`, and
    /// the cgroup at `cgroup_dir` whose limit is `limit` bytes.
    pub fn new(
        image: &Path,
        qemu_pid: u32,
        cgroup_dir: &Path,
        limit: u64,
    ) -> Result<Self, BenchError> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(image)
            .map_err(|e| BenchError::io("open image for sampling", image, e))?;
        Ok(Self {
            image_path: image.to_path_buf(),
            image: file,
            qemu_pid,
            cgroup_dir: cgroup_dir.to_path_buf(),
            limit,
        })
    }

    /// A sample at `t_s`; QEMU's counters are 0 once it has exited.
    pub fn sample(&self, t_s: f64) -> Result<HostSample, BenchError> {
        let st = cachestat(self.image.as_fd(), 0, 0)
            .map_err(|e| BenchError::io("cachestat", &self.image_path, e))?;
        let io = fs::read_to_string(format!("/proc/{}/io", self.qemu_pid)).unwrap_or_default();
        let stat = self.cgroup_stat();
        Ok(HostSample {
            t_s,
            image_cached_pages: st.nr_cache,
            image_dirty_pages: st.unclean(),
            qemu_rchar: colon_field(&io, "rchar"),
            qemu_read_bytes: colon_field(&io, "read_bytes"),
            cgroup_usage: self.cgroup_usage(),
            cgroup_file_cache: field(&stat, "cache").saturating_sub(field(&stat, "shmem")),
            cgroup_shmem: field(&stat, "shmem"),
            cgroup_rss: field(&stat, "rss"),
            policy_cpu_s: 0.0,
            policy_dropped_pages: 0,
        })
    }

    /// The cgroup seen as a machine, for the scrubbing frequency control: total = the limit,
    /// free = limit - usage, cached = page cache without shmem (the guests' RAM is a memfd and
    /// not a cache a scrub can shrink), dirty from `memory.stat`.
    pub fn cgroup_meminfo(&self) -> MemInfo {
        let stat = self.cgroup_stat();
        MemInfo {
            total: self.limit,
            free: self.limit.saturating_sub(self.cgroup_usage()),
            cached: field(&stat, "cache").saturating_sub(field(&stat, "shmem")),
            dirty: field(&stat, "dirty"),
        }
    }

    fn cgroup_stat(&self) -> String {
        fs::read_to_string(self.cgroup_dir.join("memory.stat")).unwrap_or_default()
    }

    fn cgroup_usage(&self) -> u64 {
        fs::read_to_string(self.cgroup_dir.join("memory.usage_in_bytes"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    }
}

/// The value of a `key: value` line (as in `/proc/PID/io`), 0 if absent.
pub fn colon_field(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_io_fields() {
        let io = "rchar: 1200\nwchar: 5\nsyscr: 3\nread_bytes: 400\nwrite_bytes: 0\n";
        assert_eq!(colon_field(io, "rchar"), 1200);
        assert_eq!(colon_field(io, "read_bytes"), 400);
        assert_eq!(colon_field(io, "cancelled_write_bytes"), 0);
        assert_eq!(colon_field("rchar: x\n", "rchar"), 0);
    }

    #[test]
    fn samples_a_file_in_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        std::fs::write(&path, vec![1u8; 8 * 4096]).unwrap();
        // No such process or cgroup: their counters read as 0, the image is still sampled.
        let s = HostSampler::new(&path, u32::MAX, dir.path(), 1 << 30).unwrap();
        let sample = s.sample(1.5).unwrap();
        assert_eq!(sample.t_s, 1.5);
        assert_eq!(sample.image_cached_pages, 8);
        assert_eq!(sample.qemu_rchar, 0);
        let m = s.cgroup_meminfo();
        assert_eq!((m.total, m.free), (1 << 30, 1 << 30));
    }
}
