//! [`run_one`]: one guest under one host policy: a memory cgroup for QEMU alone, the guest
//! booted through memvisor-testvm, one host sample and one policy tick a second, and the
//! numbers of the measured phase.

use std::fs::File;
use std::path::Path;
use std::process::Command;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use memvisor_scrub::drop_range;
use memvisor_testvm::{
    qemu_binary, DiskConfig, DiskPattern, DiskPhase, GuestConfig, GuestImage, MemoryBackend,
    RunningGuest,
};
use serde::Serialize;

use crate::bench_error::BenchError;
use crate::dirty_probe::DirtyProbe;
use crate::host_policy::HostPolicy;
use crate::host_sample::{HostSample, HostSampler};
use crate::interrupt;
use crate::managed_cache::ManagedCache;
use crate::memory_cgroup::{group_name, MemoryCgroup};
use crate::policy_driver::{PolicyCounters, PolicyDriver};
use crate::scrub_eval_config::ScrubEvalConfig;

const PAGE: u64 = 4096;

/// What a run does about the image's host cache: a host policy beside QEMU, or memvisor's
/// host-cache management inside it (`memvisor run --host-cache ... --image-cache ...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunPolicy {
    /// A host-side policy; QEMU runs on its own.
    Host(HostPolicy),
    /// QEMU under `memvisor run` with this host-cache setting, its budget above the guest's
    /// RAM (nothing is paged).
    Managed(ManagedCache),
}

impl std::fmt::Display for RunPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunPolicy::Host(p) => p.fmt(f),
            RunPolicy::Managed(m) => m.fmt(f),
        }
    }
}

/// The pid of a child of `parent` (QEMU under `memvisor run`), waiting up to 10 s. Found by
/// the parent pid in `/proc/N/stat` (kernels without `CONFIG_PROC_CHILDREN` have no
/// `/proc/N/task/N/children`).
fn first_child(parent: u32) -> Result<u32, BenchError> {
    let ppid_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let child = std::fs::read_dir("/proc").ok().and_then(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .find(|&pid| ppid_of(pid) == Some(parent))
        });
        if let Some(pid) = child {
            return Ok(pid);
        }
        if Instant::now() > until {
            return Err(BenchError::bad(
                "memvisor run",
                parent.to_string(),
                "started no QEMU within 10 s",
            ));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// The result of one guest run.
#[derive(Debug, Clone, Serialize)]
pub struct EvalRun {
    /// Host policy.
    pub policy: String,
    /// Guest pattern of the measured phase.
    pub pattern: String,
    /// Seconds (since QEMU started) when the measured phase began (its end minus its
    /// duration; the guest exits right after it).
    pub measure_start_s: f64,
    /// Seconds when QEMU exited.
    pub end_s: f64,
    /// Mean image pages in the host page cache during the measured phase, in MiB.
    pub mean_host_cache_mib: f64,
    /// Mean over the measured phase of the image's cached MiB beyond the group's whole page
    /// cache: image pages charged outside the group (to the driver, e.g. pulled in by the
    /// scrubber's own reads). Should be about 0.
    pub mean_outside_group_mib: f64,
    /// Peak image pages in the host page cache over the run, in MiB.
    pub peak_host_cache_mib: f64,
    /// `1 - read_bytes / rchar` of QEMU over the measured phase.
    pub host_hit_ratio: f64,
    /// Guest read throughput of the measured phase (MB/s, the guest's own clock).
    pub guest_mbps: f64,
    /// Reads the guest did in the measured phase.
    pub guest_reads: u64,
    /// True if every block the guest read (warm-up and measured phase) verified.
    pub guest_verified: bool,
    /// Boot time (QEMU start to the workload's start line).
    pub boot_s: f64,
    /// The cgroup's peak usage (MiB) and how often it hit its limit.
    pub cgroup_peak_mib: f64,
    /// `memory.failcnt`.
    pub cgroup_failcnt: u64,
    /// What the host policy did.
    pub counters: PolicyCounters,
    /// One sample a second.
    pub samples: Vec<HostSample>,
}

/// Boots one guest reading `disk` with `pattern` under `policy` and measures it.
pub fn run_one(
    config: &ScrubEvalConfig,
    image: &GuestImage,
    disk: &Path,
    run_policy: RunPolicy,
    pattern: DiskPattern,
    seq: u64,
) -> Result<EvalRun, BenchError> {
    let label = format!("{run_policy} / {pattern}");
    let (policy, managed) = match run_policy {
        RunPolicy::Host(p) => (p, None),
        RunPolicy::Managed(m) => (HostPolicy::Default, Some(m)),
    };
    // Start from an empty host cache, so that what the guest pulls in is charged to its group.
    let file = File::open(disk).map_err(|e| BenchError::io("open image", disk, e))?;
    drop_range(&file, 0, 0).map_err(|e| BenchError::io("posix_fadvise(DONTNEED)", disk, e))?;
    let probe = if policy == HostPolicy::Scrub && config.probe_pages > 0 {
        let p = DirtyProbe::open(disk, 0, config.probe_pages)?;
        p.dirty()?;
        Some(p)
    } else {
        None
    };

    let limit = config.cgroup_limit();
    let cgroup = MemoryCgroup::create(&group_name(seq), Some(limit))?;
    // Reclaim in the group takes page cache, never the guest's RAM (no swapping).
    cgroup.set("memory.swappiness", "0")?;

    let guest = GuestConfig::new(config.guest_mib, config.workload(pattern))
        .backend(MemoryBackend::Memfd)
        .disk(DiskConfig::new(disk))
        .timeout(config.measure + Duration::from_secs(180));
    let guest_err = |source| BenchError::Guest {
        run: label.clone(),
        source,
    };
    // QEMU alone joins the group: a shell writes its own pid, then becomes QEMU (or
    // `memvisor run`, which starts QEMU in the group).
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg("echo $$ > \"$0\" && exec \"$@\"")
        .arg(cgroup.procs_path());
    let control_dir = config
        .work_dir
        .join(format!("ctl-{}-{seq}", std::process::id()));
    if let Some(m) = managed {
        command
            .env("MEMVISOR_CONTROL_DIR", &control_dir)
            .arg(&config.memvisor)
            .arg("run")
            .args(["--budget", &format!("{}M", config.guest_mib + 32)])
            .args(m.run_args())
            .arg("--swap-dir")
            .arg(&config.work_dir)
            .arg("--");
    }
    command
        .arg(qemu_binary().map_err(guest_err)?)
        .args(guest.qemu_args(image).map_err(guest_err)?);
    let started = Instant::now();
    let running = RunningGuest::spawn(command).map_err(guest_err)?;
    let pid = running.pid();
    let timeout = guest.timeout;
    let (done_tx, done_rx) = mpsc::channel();
    let waiter = thread::spawn(move || {
        let result = running.wait(timeout);
        let _ = done_tx.send(started.elapsed());
        result
    });

    // The process that reads the image: QEMU, a child of `memvisor run` in managed runs.
    let qemu_pid = if managed.is_some() {
        match first_child(pid) {
            Ok(q) => q,
            Err(e) => {
                kill_group(pid);
                let _ = waiter.join();
                return Err(e);
            }
        }
    } else {
        pid
    };
    let sampler = HostSampler::new(disk, qemu_pid, cgroup.dir(), limit)?;
    let mut driver = PolicyDriver::new(policy, disk, config.drop_period, config.control, probe)?;
    let mut samples = Vec::new();
    let mut managed_dropped_pages = 0;
    let mut next = started;
    let end_s = loop {
        next += Duration::from_secs(1);
        let wait = next.saturating_duration_since(Instant::now());
        if let Ok(end) = done_rx.recv_timeout(wait) {
            break end.as_secs_f64();
        }
        if interrupt::requested() {
            kill_group(pid);
            let _ = waiter.join();
            return Err(BenchError::Interrupted);
        }
        let mut sample = sampler.sample(started.elapsed().as_secs_f64())?;
        if let Err(e) = driver.tick(pid, &sampler.cgroup_meminfo()) {
            kill_group(pid);
            let _ = waiter.join();
            return Err(e);
        }
        sample.policy_cpu_s = driver.counters().cpu_s;
        sample.policy_dropped_pages = driver.counters().dropped_pages;
        if managed.is_some() {
            // What the library dropped so far (`memvisor stat`): blocks the guest held, the
            // model's victims and reconciliation; a missed answer keeps the last.
            if let Ok(st) = crate::managed_process::status_of(&control_dir, qemu_pid) {
                managed_dropped_pages = st
                    .images
                    .iter()
                    .map(|i| {
                        (i.host_cache_dropped_bytes
                            + i.cache_evicted_dropped_bytes
                            + i.cache_reconciled_bytes
                            + i.cache_folio_dropped_bytes)
                            / PAGE
                    })
                    .sum();
            }
            sample.policy_dropped_pages = managed_dropped_pages;
        }
        samples.push(sample);
    };
    let run = waiter
        .join()
        .map_err(|_| BenchError::bad("guest", label.clone(), "the waiting thread panicked"))?
        .map_err(guest_err)?
        .verified()
        .map_err(guest_err)?;
    let usage = cgroup.usage();
    drop(cgroup);
    let _ = std::fs::remove_dir_all(&control_dir);

    let phases: Vec<&DiskPhase> = run.disk_phases().collect();
    let measured = phases
        .last()
        .copied()
        .filter(|_| phases.len() == 2)
        .ok_or_else(|| {
            BenchError::bad(
                "guest",
                label.clone(),
                format!("expected 2 disk phases, got {}", phases.len()),
            )
        })?;
    let measure_start_s = end_s - measured.ms / 1e3;
    let window: Vec<&HostSample> = samples
        .iter()
        .filter(|s| s.t_s >= measure_start_s && s.t_s <= end_s)
        .collect();
    let mib = |pages: f64| pages * PAGE as f64 / (1u64 << 20) as f64;
    let mean_host_cache_mib = if window.is_empty() {
        0.0
    } else {
        mib(window
            .iter()
            .map(|s| s.image_cached_pages as f64)
            .sum::<f64>()
            / window.len() as f64)
    };
    let mean_outside_group_mib = if window.is_empty() {
        0.0
    } else {
        window
            .iter()
            .map(|s| (s.image_cached_pages * PAGE).saturating_sub(s.cgroup_file_cache) as f64)
            .sum::<f64>()
            / window.len() as f64
            / (1u64 << 20) as f64
    };
    let host_hit_ratio = match (window.first(), window.last()) {
        (Some(a), Some(b)) if b.qemu_rchar > a.qemu_rchar => {
            1.0 - (b.qemu_read_bytes.saturating_sub(a.qemu_read_bytes)) as f64
                / (b.qemu_rchar - a.qemu_rchar) as f64
        }
        _ => 0.0,
    };
    Ok(EvalRun {
        policy: run_policy.to_string(),
        pattern: pattern.to_string(),
        measure_start_s,
        end_s,
        mean_host_cache_mib,
        mean_outside_group_mib,
        peak_host_cache_mib: mib(samples
            .iter()
            .map(|s| s.image_cached_pages)
            .max()
            .unwrap_or(0) as f64),
        host_hit_ratio,
        guest_mbps: measured.mbps,
        guest_reads: measured.reads,
        guest_verified: phases.iter().all(|p| p.verified && p.ok),
        boot_s: run.boot.map_or(0.0, |b| b.as_secs_f64()),
        cgroup_peak_mib: usage.peak_bytes as f64 / (1u64 << 20) as f64,
        cgroup_failcnt: usage.failcnt,
        counters: PolicyCounters {
            dropped_pages: if managed.is_some() {
                managed_dropped_pages
            } else {
                driver.counters().dropped_pages
            },
            ..driver.counters().clone()
        },
        samples,
    })
}

/// SIGKILL to the guest's process group (QEMU leads it).
fn kill_group(pid: u32) {
    if let Ok(pid) = libc::pid_t::try_from(pid) {
        if pid > 1 {
            // SAFETY: kill(2) on a process group we started; no memory effects.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
    }
}
