//! [`PolicyDriver`]: carries out a [`HostPolicy`] for one running guest, one tick a second, and
//! counts what it cost and what it dropped.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memvisor_dedup::{is_exited, thread_cpu_time};
use memvisor_scrub::{
    cachestat, describe_vm, drop_range, MemInfo, ScrubControlConfig, ScrubController, ScrubOptions,
    Scrubber, Vm,
};
use serde::Serialize;

use crate::bench_error::BenchError;
use crate::dirty_probe::DirtyProbe;
use crate::host_policy::HostPolicy;

/// What a policy did during one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PolicyCounters {
    /// CPU time of the policy's actions (the scrubs or the drops), in seconds.
    pub cpu_s: f64,
    /// Actions taken (scrubs, or whole-image drops).
    pub actions: u64,
    /// Of the scrubs, how many the timer started (the rest: cgroup memory pressure).
    pub timer_scrubs: u64,
    /// Image pages that left the page cache through the policy's actions.
    pub dropped_pages: u64,
    /// Image pages the scrubber found in the guest (summed over scrubs).
    pub in_guest: u64,
    /// Image pages the scrubber found in the guest but kept because they were dirty.
    pub kept_dirty: u64,
    /// Image pages in the guest kept because the rest of their large folio was not.
    pub kept_busy: u64,
    /// Cached image pages whose content the guest did not hold.
    pub kept_not_in_guest: u64,
    /// Of those, pages holding content the guest evicted (the replacement heuristic).
    pub kept_evicted_by_guest: u64,
    /// Guest pages indexed at the last scrub.
    pub guest_pages: u64,
    /// Probe pages that were dirty when a scrub started (summed over scrubs).
    pub dirty_checked: u64,
    /// Of those, pages that were gone from the page cache after the scrub: must be 0.
    pub dirty_dropped: u64,
    /// Errors the scrubber reported (VM or image), with what failed.
    pub errors: Vec<String>,
}

/// The state of one policy for one guest.
pub struct PolicyDriver {
    policy: HostPolicy,
    image: PathBuf,
    image_file: File,
    drop_period_ticks: u64,
    ticks: u64,
    controller: ScrubController,
    scrubber: Scrubber,
    vm: Option<Vm>,
    probe: Option<DirtyProbe>,
    counters: PolicyCounters,
}

impl PolicyDriver {
    /// A driver for `policy` on `image`: drop-all every `drop_period`; scrub under
    /// `control` (one tick per call of [`PolicyDriver::tick`]), checking `probe`'s dirty pages
    /// around every scrub.
    pub fn new(
        policy: HostPolicy,
        image: &Path,
        drop_period: Duration,
        control: ScrubControlConfig,
        probe: Option<DirtyProbe>,
    ) -> Result<Self, BenchError> {
        let image_file = File::options()
            .read(true)
            .write(true)
            .open(image)
            .map_err(|e| BenchError::io("open image for the host policy", image, e))?;
        Ok(Self {
            policy,
            image: image.to_path_buf(),
            image_file,
            drop_period_ticks: drop_period.as_secs().max(1),
            ticks: 0,
            controller: ScrubController::new(control),
            scrubber: Scrubber::new(ScrubOptions::default()),
            vm: None,
            probe,
            counters: PolicyCounters::default(),
        })
    }

    /// What the policy did so far.
    pub fn counters(&self) -> &PolicyCounters {
        &self.counters
    }

    /// One tick (a second) for QEMU `pid`, with the memory the guest's cgroup sees.
    pub fn tick(&mut self, pid: u32, mem: &MemInfo) -> Result<(), BenchError> {
        self.ticks += 1;
        match self.policy {
            HostPolicy::Default => Ok(()),
            HostPolicy::DropAll => {
                if self.ticks % self.drop_period_ticks == 0 {
                    self.drop_all()?;
                }
                Ok(())
            }
            HostPolicy::Scrub => {
                if let Some(reason) = self.controller.tick(mem) {
                    if self.vm.is_none() {
                        self.vm = self.find_vm(pid);
                    }
                    if let Some(vm) = self.vm.clone() {
                        let (cached, dropped) = self.scrub(&vm)?;
                        self.controller.scrubbed(reason, cached, dropped);
                        self.counters.actions += 1;
                        if reason == memvisor_scrub::ScrubReason::Timer {
                            self.counters.timer_scrubs += 1;
                        }
                    }
                }
                Ok(())
            }
        }
    }

    fn drop_all(&mut self) -> Result<(), BenchError> {
        let cpu0 = thread_cpu_time();
        let before = self.cached_pages()?;
        drop_range(&self.image_file, 0, 0)
            .map_err(|e| BenchError::io("posix_fadvise(DONTNEED)", &self.image, e))?;
        let after = self.cached_pages()?;
        self.counters.cpu_s += (thread_cpu_time() - cpu0).as_secs_f64();
        self.counters.actions += 1;
        self.counters.dropped_pages += before.saturating_sub(after);
        Ok(())
    }

    /// The VM once QEMU has mapped its RAM and opened the image.
    fn find_vm(&self, pid: u32) -> Option<Vm> {
        let vm = describe_vm(pid as i32).ok()?;
        let has_image = vm
            .images
            .iter()
            .any(|p| p.canonicalize().ok() == self.image.canonicalize().ok());
        (has_image && !vm.ram.is_empty()).then_some(vm)
    }

    /// One scrub; returns (image pages cached before, pages dropped).
    fn scrub(&mut self, vm: &Vm) -> Result<(u64, u64), BenchError> {
        let dirty_before = match &self.probe {
            Some(p) => p.dirty_pages()?,
            None => Vec::new(),
        };
        let cpu0 = thread_cpu_time();
        let report = self.scrubber.scrub_vm(vm);
        self.counters.cpu_s += (thread_cpu_time() - cpu0).as_secs_f64();
        if let Some(p) = &self.probe {
            self.counters.dirty_checked += dirty_before.len() as u64;
            self.counters.dirty_dropped += p.gone(&dirty_before)?;
        }
        self.counters.guest_pages = report.guest_pages;
        // A guest that exits during a scrub ends its run (it exits by itself after its measured
        // phase): that is not the policy failing.
        if let Some(e) = report.error.as_ref().filter(|_| !is_exited(vm.pid)) {
            self.counters.errors.push(e.clone());
        }
        let mut cached = 0;
        let mut dropped = 0;
        for image in &report.images {
            if let Some(e) = &image.error {
                self.counters
                    .errors
                    .push(format!("{}: {e}", image.path.display()));
            }
            cached += image.cached_before;
            dropped += image.dropped;
            self.counters.in_guest += image.in_guest;
            self.counters.kept_dirty += image.kept_dirty;
            self.counters.kept_busy += image.kept_busy;
            self.counters.kept_not_in_guest += image.kept_not_in_guest;
            self.counters.kept_evicted_by_guest += image.kept_evicted_by_guest;
        }
        self.counters.dropped_pages += dropped;
        Ok((cached, dropped))
    }

    fn cached_pages(&self) -> Result<u64, BenchError> {
        cachestat(self.image_file.as_fd(), 0, 0)
            .map(|s| s.nr_cache)
            .map_err(|e| BenchError::io("cachestat", &self.image, e))
    }
}
