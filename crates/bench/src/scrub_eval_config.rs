//! [`ScrubEvalConfig`]: sizes, durations and variants of the scrub evaluation, with the full and
//! the `--quick` presets.

use std::path::PathBuf;
use std::time::Duration;

use memvisor_scrub::ScrubControlConfig;
use memvisor_testvm::DiskPattern;

use crate::host_policy::HostPolicy;
use crate::managed_cache::ManagedCache;

/// Everything one evaluation needs.
#[derive(Debug, Clone)]
pub struct ScrubEvalConfig {
    /// Guest RAM (MiB, a memfd).
    pub guest_mib: u64,
    /// Disk image size (MiB); every guest reads its own image.
    pub image_mib: u64,
    /// What the cgroup leaves for the host page cache (MiB): limit = guest + overhead + this.
    pub host_cache_mib: u64,
    /// QEMU's own memory in the cgroup (MiB): its heap and TCG's code buffer.
    pub overhead_mib: u64,
    /// How long the measured phase of the guest workload runs.
    pub measure: Duration,
    /// Block size of the measured phase (the warm-up reads 64 KiB blocks).
    pub block: u64,
    /// Guest access patterns.
    pub patterns: Vec<DiskPattern>,
    /// Host policies.
    pub policies: Vec<HostPolicy>,
    /// Also run each pattern under `memvisor run` with each of these host-cache settings
    /// (e.g. `exclusive`: blocks leave the host cache right after each read into guest RAM),
    /// with a budget above the guest's RAM (no paging).
    pub managed: Vec<ManagedCache>,
    /// The `memvisor` binary for the managed runs.
    pub memvisor: PathBuf,
    /// Period of the drop-all policy.
    pub drop_period: Duration,
    /// The scrubbing frequency control.
    pub control: ScrubControlConfig,
    /// Pages at the start of the image made dirty (rewritten unchanged) before a scrub run.
    pub probe_pages: u64,
    /// Where the images go.
    pub work_dir: PathBuf,
    /// Where the CSV, JSON, Markdown and SVG go.
    pub out_dir: PathBuf,
}

impl ScrubEvalConfig {
    /// The full evaluation: 3 policies × 3 patterns, one 256 MiB guest reading a 384 MiB image
    /// for 40 s, 128 MiB left for the host cache; the scrubber at its defaults.
    pub fn full(work_dir: PathBuf, out_dir: PathBuf) -> Self {
        Self {
            guest_mib: 256,
            image_mib: 384,
            host_cache_mib: 128,
            overhead_mib: 128,
            measure: Duration::from_secs(40),
            block: 4096,
            patterns: vec![DiskPattern::Seq, DiskPattern::Random, DiskPattern::Zipf],
            policies: HostPolicy::ALL.to_vec(),
            managed: vec![ManagedCache::EXCLUSIVE],
            memvisor: std::env::current_exe()
                .map(|e| crate::managed_process::memvisor_next_to(&e))
                .unwrap_or_else(|_| PathBuf::from("memvisor")),
            drop_period: Duration::from_secs(5),
            control: ScrubControlConfig::default(),
            probe_pages: 64,
            work_dir,
            out_dir,
        }
    }

    /// The smoke run: one sequential pattern over a 96 MiB image for 6 s per policy; the scrub
    /// timer starts at 3 s so that a short run scrubs.
    pub fn quick(work_dir: PathBuf, out_dir: PathBuf) -> Self {
        Self {
            image_mib: 96,
            host_cache_mib: 64,
            measure: Duration::from_secs(6),
            patterns: vec![DiskPattern::Seq],
            control: ScrubControlConfig {
                initial_period: Duration::from_secs(3),
                min_period: Duration::from_secs(3),
                ..ScrubControlConfig::default()
            },
            drop_period: Duration::from_secs(3),
            ..Self::full(work_dir, out_dir)
        }
    }

    /// The cgroup's limit in bytes.
    pub fn cgroup_limit(&self) -> u64 {
        (self.guest_mib + self.overhead_mib + self.host_cache_mib) << 20
    }

    /// The guest's `memvisor.run`: a sequential warm-up pass over the whole image (64 KiB
    /// reads), then `pattern` for the measured time; both verify every block.
    pub fn workload(&self, pattern: DiskPattern) -> String {
        let warm_reads = (self.image_mib << 20) / 65536;
        format!(
            "disk /dev/vda seq --reads {warm_reads} --block 65536 --verify; disk /dev/vda {} {} --block {} --verify",
            pattern.as_str(),
            self.measure.as_secs_f64(),
            self.block
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_and_workload() {
        let c = ScrubEvalConfig::full("/w".into(), "/o".into());
        assert_eq!(c.cgroup_limit(), 512 << 20);
        assert_eq!(
            c.workload(DiskPattern::Zipf),
            "disk /dev/vda seq --reads 6144 --block 65536 --verify; disk /dev/vda zipf 40 --block 4096 --verify"
        );
        let q = ScrubEvalConfig::quick("/w".into(), "/o".into());
        assert!(q.control.validate().is_ok());
        assert_eq!(q.patterns, vec![DiskPattern::Seq]);
    }
}
