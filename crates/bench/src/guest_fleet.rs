//! A fleet of real TCG guests run side by side under one memory arrangement, each guest's
//! throughput measured over a common window: the machinery of `density-eval` (N identical
//! guests) and of `broker-eval --guests` (four different ones).
//!
//! A run's timeline: the disk images are dropped from the host cache; every guest starts at
//! once (and the broker, if any); each prints `start` when its workload begins after boot,
//! then one result line per phase (`disk` runs, or `mem` passes); the window opens `warmup`
//! after the last `start` and closes at the first guest's `done`; a guest's throughput is its
//! 4 KiB reads (disk blocks or memory pages) over its phases that began and ended inside the
//! window, over their time. Counters are read when the window opens and shortly before the
//! first guest's workload ends.
//!
//! How memory is limited is a [`FleetMemory`]: not at all (the reference), by the kernel (the
//! QEMUs in one cgroup v1 memory group with a swap file), or by memvisor (each QEMU under
//! `memvisor run` with a budget and an image cache limit, and a broker dividing a total, or
//! none: fixed shares).

use std::fs::{self, File};
use std::os::fd::AsFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memvisor_control::socket_dir;
use memvisor_testvm::{
    parse_result_line, qemu_binary, Accel, AccelChoice, DiskConfig, GuestConfig, GuestImage,
    MemPhaseKind, MemoryBackend, WorkloadResult,
};
use serde::Serialize;

use crate::bench_error::BenchError;
use crate::broker_eval::{major_faults, parent_of};
use crate::counters::field;
use crate::image_cache_worker::drop_cached;
use crate::interrupt;
use crate::kernel_swap::KernelSwapFile;
use crate::live_guest::{ConsoleLine, LiveGuest};
use crate::managed_process::status_of;
use crate::memory_cgroup::{group_name, MemoryCgroup};

const MIB: u64 = 1 << 20;
const MIBF: f64 = MIB as f64;

/// One guest of a fleet.
#[derive(Debug, Clone)]
pub struct FleetGuest {
    /// Its workload command line (`memvisor.run=`).
    pub workload: String,
    /// Its own raw disk image (attached read-only, `cache=writeback`).
    pub disk: PathBuf,
    /// False for a guest whose workload reports no phases (`idle`): it is not measured.
    pub measured: bool,
}

/// How a fleet's memory is limited.
#[derive(Debug, Clone)]
pub enum FleetMemory {
    /// Plain QEMUs, no limit (the reference).
    Unconstrained,
    /// Plain QEMUs in one memory group of `limit` bytes, with a swap file of `swap` bytes in
    /// the run's directory that exists only during the run.
    Kernel {
        /// The group's limit, bytes.
        limit: u64,
        /// The swap file's size, bytes.
        swap: u64,
        /// Run even if another swap area is active.
        allow_other_swap: bool,
    },
    /// Each QEMU under `memvisor run --budget BUDGET --image-cache IMAGE_CACHE`.
    Memvisor {
        /// Each guest's initial budget, bytes.
        budget: u64,
        /// Each guest's initial image cache limit, bytes.
        image_cache: u64,
        /// `--arena`, if set.
        arena: Option<u64>,
        /// More arguments of each `memvisor run` (before `--`).
        run_args: Vec<String>,
        /// `memvisor broker --total TOTAL ARGS...` beside them, or fixed shares.
        broker: Option<FleetBroker>,
    },
}

/// The broker of a memvisor fleet.
#[derive(Debug, Clone)]
pub struct FleetBroker {
    /// `--total`, bytes.
    pub total: u64,
    /// More arguments, as given.
    pub args: Vec<String>,
}

/// Everything one fleet run needs.
pub struct FleetSpec<'a> {
    /// Names the run in errors.
    pub label: String,
    /// The guest kernel and initramfs.
    pub image: &'a GuestImage,
    /// Guest RAM of every guest, MiB (a memfd).
    pub guest_mib: u64,
    /// The guests.
    pub guests: &'a [FleetGuest],
    /// A private (0700) directory of this run (control sockets, swap files).
    pub dir: &'a Path,
    /// How memory is limited.
    pub memory: FleetMemory,
    /// The `memvisor` binary.
    pub memvisor: &'a Path,
    /// Numbers the run's memory group.
    pub seq: u64,
    /// Seconds from the last guest's start to the window's opening.
    pub warmup_secs: f64,
    /// Seconds every workload runs.
    pub run_secs: f64,
    /// A guest silent for this long is stuck.
    pub quiet: Duration,
}

impl FleetSpec<'_> {
    fn fail(&self, detail: impl Into<String>) -> BenchError {
        BenchError::Command {
            command: self.label.clone(),
            detail: detail.into(),
        }
    }
}

/// One guest's numbers in one run.
#[derive(Debug, Clone, Serialize)]
pub struct GuestResult {
    /// Its slot (its own disk image); ratios compare the same slot across variants.
    pub slot: usize,
    /// 4 KiB reads (disk blocks or memory pages) per second over its phases inside the
    /// window (the guest's clock); 0 for a guest that is not measured.
    pub reads_per_s: f64,
    /// Phases inside the window.
    pub phases_in_window: usize,
    /// Seconds those phases lasted.
    pub measured_s: f64,
    /// Reads over the whole workload.
    pub reads_total: u64,
    /// Paced guests (`--rate`): the highest 99th percentile read latency of its phases inside
    /// the window, microseconds (from when each read was due).
    pub p99_us: Option<f64>,
    /// Blocks or pages that read back wrong (the run fails unless 0).
    pub errors: u64,
    /// Over the window: memvisor, the pager's page-ins (chunks read from swap or the image);
    /// otherwise QEMU's major faults.
    pub page_ins: u64,
    /// Memvisor: bytes the pager read from swap over the window, MiB.
    pub swap_read_mib: Option<f64>,
    /// Memvisor: bytes the pager wrote to swap over the window, MiB.
    pub swap_written_mib: Option<f64>,
    /// Memvisor: bytes paged back in from the image (swap mapper) over the window, MiB.
    pub image_read_mib: Option<f64>,
    /// Memvisor: the budget as the window closed, MiB.
    pub budget_mib: Option<f64>,
    /// Memvisor: the image's host cache limit as the window closed, MiB.
    pub image_cache_limit_mib: Option<f64>,
    /// The image's pages in the host page cache as the window closed (`cachestat`), MiB.
    pub image_cached_mib: f64,
}

/// The memory group of a run (accounting only, or the kernel's limit), as the window closed.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GroupMemory {
    /// `memory.limit_in_bytes` (kernel), MiB.
    pub limit_mib: Option<f64>,
    /// `memory.usage_in_bytes`, MiB.
    pub usage_mib: f64,
    /// `memory.max_usage_in_bytes` over the run, MiB.
    pub peak_mib: f64,
    /// `memory.stat` `rss`: the QEMUs' own anonymous memory (heap, TCG's code buffer), MiB.
    pub rss_mib: f64,
    /// `shmem`: guest RAM in memory (memfds), MiB.
    pub shmem_mib: f64,
    /// `cache - shmem`: file pages, the images' host cache above all, MiB.
    pub file_cache_mib: f64,
    /// `swap` (0 without swap accounting), MiB.
    pub swap_mib: f64,
}

/// One phase a guest reported: a `disk` run or a `mem` read pass.
#[derive(Debug, Clone, Copy)]
struct ConsolePhase {
    /// When its line arrived (the phase's end).
    at: Instant,
    /// Its length by the guest's clock.
    ms: f64,
    reads: u64,
    /// Verified, and no block read wrong.
    ok: bool,
    errors: u64,
    /// Paced: its 99th percentile read latency, microseconds.
    p99_us: Option<f64>,
}

/// A guest's console, parsed.
#[derive(Debug, Default)]
struct Console {
    start: Option<Instant>,
    phases: Vec<ConsolePhase>,
    done: Option<(Instant, bool, u64)>,
    error: Option<String>,
    /// Pages that read wrong outside the measured phases (a `mem` verification).
    bad_pages: u64,
}

/// A `mem` phase that reads the memory in a pattern (not the write, not the verification).
fn is_read_pass(kind: MemPhaseKind) -> bool {
    !matches!(kind, MemPhaseKind::Write | MemPhaseKind::Verify)
}

fn parse_console(lines: &[ConsoleLine]) -> Console {
    let mut c = Console::default();
    for l in lines {
        match parse_result_line(&l.text, 0) {
            Some(Ok(WorkloadResult::Start { .. })) => c.start = c.start.or(Some(l.at)),
            Some(Ok(WorkloadResult::Disk(d))) => c.phases.push(ConsolePhase {
                at: l.at,
                ms: d.ms,
                reads: d.reads,
                ok: d.verified && d.ok,
                errors: d.errors,
                p99_us: d.paced.map(|p| p.p99_us),
            }),
            Some(Ok(WorkloadResult::Mem(m))) if is_read_pass(m.kind) => {
                c.phases.push(ConsolePhase {
                    at: l.at,
                    ms: m.ms,
                    reads: m.reads,
                    ok: m.ok,
                    errors: m.errors,
                    p99_us: None,
                })
            }
            Some(Ok(WorkloadResult::Mem(m))) if !m.ok || m.errors > 0 => {
                // The write or the final verification: not throughput, but every page counts.
                c.bad_pages += m.errors.max(1);
            }
            Some(Ok(WorkloadResult::Done(d))) => c.done = Some((l.at, d.ok, d.errors)),
            Some(Ok(WorkloadResult::Error { message })) => c.error = Some(message),
            Some(Err(e)) => c.error = Some(e.to_string()),
            _ => {}
        }
    }
    c
}

/// A phase that ended (its line arrived) `at` after `phase_ms` began (arrival minus its
/// duration) at or after `open` and ended at or before `close`.
pub fn inside_window(at: Instant, phase_ms: f64, open: Instant, close: Instant) -> bool {
    at.checked_sub(Duration::from_secs_f64(phase_ms.max(0.0) / 1000.0))
        .is_some_and(|began| began >= open && at <= close)
}

/// Reads per second over the phases (arrival, ms, reads) [`inside_window`]: (reads/s,
/// phases, seconds).
pub fn rate_in_window(
    phases: &[(Instant, f64, u64)],
    open: Instant,
    close: Instant,
) -> (f64, usize, f64) {
    let mut reads = 0u64;
    let mut ms = 0.0;
    let mut n = 0;
    for &(at, phase_ms, phase_reads) in phases {
        if inside_window(at, phase_ms, open, close) {
            reads += phase_reads;
            ms += phase_ms;
            n += 1;
        }
    }
    let rate = if ms > 0.0 {
        reads as f64 / (ms / 1000.0)
    } else {
        0.0
    };
    (rate, n, ms / 1000.0)
}

/// Writes a raw disk image of `mib` MiB whose every 4 KiB block is verifiable (the guest
/// workload's pattern) at `path`, and writes it back, so that dropping it from the host cache
/// before each run drops all of it. `what` names it in errors.
pub fn make_disk(image: &GuestImage, path: &Path, mib: u64, what: &str) -> Result<(), BenchError> {
    image
        .make_disk_image(path, mib)
        .map_err(|source| BenchError::Guest {
            run: what.to_string(),
            source,
        })?;
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| BenchError::io("sync", path, e))
}

/// What one fleet run measured.
#[derive(Debug, Clone, Serialize)]
pub struct FleetRun {
    /// Seconds from starting the QEMUs to the last guest's workload start (boot).
    pub boot_s: f64,
    /// Window length, seconds.
    pub window_s: f64,
    /// Per guest, in the order given.
    pub per_guest: Vec<GuestResult>,
    /// The kernel's swap-ins over the window (`pswpin`, host-wide), MiB.
    pub kernel_swap_in_mib: f64,
    /// The kernel's swap-outs over the window (`pswpout`, host-wide), MiB.
    pub kernel_swap_out_mib: f64,
    /// The QEMUs' memory group.
    pub group: GroupMemory,
    /// Budget and image cache changes the broker made.
    pub broker_changes: usize,
    /// The broker's output, each line with the seconds since the window opened.
    pub broker_log: Vec<String>,
}

#[cfg(test)]
impl FleetRun {
    /// A run whose guests read `rates` a second and nothing else of note (report tests).
    pub(crate) fn with_rates(rates: &[f64]) -> Self {
        Self {
            boot_s: 10.0,
            window_s: 60.0,
            per_guest: rates
                .iter()
                .enumerate()
                .map(|(slot, &reads_per_s)| GuestResult {
                    slot,
                    reads_per_s,
                    phases_in_window: 5,
                    measured_s: 50.0,
                    reads_total: 1000,
                    p99_us: None,
                    errors: 0,
                    page_ins: 7,
                    swap_read_mib: None,
                    swap_written_mib: None,
                    image_read_mib: None,
                    budget_mib: None,
                    image_cache_limit_mib: None,
                    image_cached_mib: 3.0,
                })
                .collect(),
            kernel_swap_in_mib: 0.0,
            kernel_swap_out_mib: 0.0,
            group: GroupMemory::default(),
            broker_changes: 0,
            broker_log: Vec::new(),
        }
    }
}

/// Counters of one guest at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct GuestCounters {
    page_ins: u64,
    swap_read: u64,
    swap_written: u64,
    image_read: u64,
    budget: Option<u64>,
    image_limit: Option<u64>,
    image_cached: u64,
}

/// Sleeps until `at`, failing on an interrupt or a guest that exited.
fn sleep_until(spec: &FleetSpec, guests: &mut [LiveGuest], at: Instant) -> Result<(), BenchError> {
    while Instant::now() < at {
        if interrupt::requested() {
            return Err(BenchError::Interrupted);
        }
        for g in guests.iter_mut() {
            if g.exited() {
                return Err(g.failure(&format!("{}: exited before the window closed", spec.label)));
            }
        }
        std::thread::sleep(Duration::from_millis(100).min(at - Instant::now()));
    }
    Ok(())
}

/// Runs the fleet once: start every guest (and the broker), wait for the window, check that
/// every guest verified everything it read, collect.
pub fn run_fleet(spec: &FleetSpec) -> Result<FleetRun, BenchError> {
    let n = spec.guests.len();
    let guest_err = |source| BenchError::Guest {
        run: spec.label.clone(),
        source,
    };
    for g in spec.guests {
        drop_cached(&g.disk)?;
    }
    let ctl = spec.dir.join("ctl");
    let swap_dir = spec.dir.join("swap");
    for d in [&ctl, &swap_dir] {
        // 0700: memvisor refuses a control directory others can enter.
        fs::DirBuilder::new()
            .mode(0o700)
            .create(d)
            .map_err(|e| BenchError::io("create", d, e))?;
    }
    let (limit, _swap) = match &spec.memory {
        // The kernel's swap file exists only during its runs (other benchmarks refuse to run
        // beside a foreign swap area).
        FleetMemory::Kernel {
            limit,
            swap,
            allow_other_swap,
        } => (
            Some(*limit),
            Some(KernelSwapFile::create(spec.dir, *swap, *allow_other_swap)?),
        ),
        _ => (None, None),
    };
    let memvisor = matches!(spec.memory, FleetMemory::Memvisor { .. });
    let group = MemoryCgroup::create(&group_name(spec.seq), limit)?;
    let qemu = qemu_binary().map_err(guest_err)?;
    let mut guests = Vec::new();
    let spawned = Instant::now();
    for (slot, guest) in spec.guests.iter().enumerate() {
        let args = GuestConfig::new(spec.guest_mib, guest.workload.clone())
            .backend(MemoryBackend::Memfd)
            .accel(AccelChoice::Fixed(Accel::Tcg))
            .disk(DiskConfig::new(&guest.disk))
            .qemu_args(spec.image)
            .map_err(guest_err)?;
        // The shell joins the group and becomes QEMU (or `memvisor run`, whose child QEMU
        // stays in it).
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(group.procs_path());
        if let FleetMemory::Memvisor {
            budget,
            image_cache,
            arena,
            run_args,
            ..
        } = &spec.memory
        {
            c.env("MEMVISOR_CONTROL_DIR", &ctl)
                .arg(spec.memvisor)
                .arg("run")
                .args(["--budget", &budget.to_string()])
                .args(["--image-cache", &image_cache.to_string()]);
            if let Some(arena) = arena {
                c.args(["--arena", &arena.to_string()]);
            }
            c.args(run_args);
            c.arg("--swap-dir").arg(&swap_dir).arg("--");
        }
        c.arg(&qemu).args(&args);
        guests.push(LiveGuest::spawn(
            c,
            format!("{} / guest {slot}", spec.label),
        )?);
    }
    let mut broker = match &spec.memory {
        FleetMemory::Memvisor {
            broker: Some(b), ..
        } => {
            let mut c = Command::new(spec.memvisor);
            c.env("MEMVISOR_CONTROL_DIR", &ctl)
                .args(["broker", "--total", &b.total.to_string()]);
            c.args(&b.args);
            Some(LiveGuest::spawn(c, format!("{} / broker", spec.label))?)
        }
        _ => None,
    };
    // Every workload started (boots under TCG: a minute or two for several guests at once).
    let boot_limit = Duration::from_secs(180 + 60 * n as u64);
    let mut starts = Vec::new();
    for g in guests.iter_mut() {
        let left = boot_limit.saturating_sub(spawned.elapsed());
        starts.push(g.wait_for("the workload's start", left, |lines| {
            parse_console(lines).start
        })?);
    }
    let last_start = starts.iter().copied().max().unwrap_or(spawned);
    let first_start = starts.iter().copied().min().unwrap_or(spawned);
    let boot_s = (last_start - spawned).as_secs_f64();
    let open = last_start + Duration::from_secs_f64(spec.warmup_secs);
    // Counters near the end: while every guest still runs.
    let sample_at = first_start + Duration::from_secs_f64(spec.run_secs - 1.5);
    if sample_at <= open {
        return Err(spec.fail(format!(
            "the guests started {:.0} s apart, leaving no window after the warm-up: raise \
             --seconds",
            (last_start - first_start).as_secs_f64()
        )));
    }
    let managed: Vec<Option<u32>> = if memvisor {
        let pids = socket_dir::list_managed_pids(&ctl).unwrap_or_default();
        guests
            .iter()
            .map(|g| {
                pids.iter()
                    .copied()
                    .find(|p| parent_of(*p) == Some(g.pid()))
            })
            .collect()
    } else {
        vec![None; n]
    };
    let counters = |guests: &[LiveGuest]| -> Vec<GuestCounters> {
        guests
            .iter()
            .zip(&managed)
            .zip(spec.guests)
            .map(|((g, m), guest)| {
                let image_cached = File::open(&guest.disk)
                    .ok()
                    .and_then(|f| memvisor_pager::cachestat(f.as_fd(), 0, 0).ok())
                    .map_or(0, |c| c.nr_cache * 4096);
                match m.map(|p| status_of(&ctl, p)) {
                    Some(Ok(s)) => GuestCounters {
                        page_ins: s.total(|r| r.page_ins),
                        swap_read: s.total(|r| r.bytes_read),
                        swap_written: s.total(|r| r.bytes_written),
                        image_read: s.total(|r| r.image_read_bytes),
                        budget: Some(s.budget_bytes),
                        image_limit: s.images.first().and_then(|i| i.cache_limit_bytes),
                        image_cached,
                    },
                    _ => GuestCounters {
                        page_ins: major_faults(g.pid()),
                        image_cached,
                        ..GuestCounters::default()
                    },
                }
            })
            .collect()
    };
    sleep_until(spec, &mut guests, open)?;
    let vm_open = vmstat_swap()?;
    let at_open = counters(&guests);
    sleep_until(spec, &mut guests, sample_at)?;
    let vm_end = vmstat_swap()?;
    let at_end = counters(&guests);
    let group_memory = group_memory(&group, limit.is_some());
    if memvisor && managed.iter().any(Option::is_none) {
        return Err(spec.fail("a guest's QEMU had no memvisor control socket"));
    }
    // Every guest to its end; a silent one is stuck.
    for g in guests.iter_mut() {
        let st = g.wait_exit_while_talking(Duration::from_secs(120), Some(spec.quiet))?;
        if !st.success() {
            return Err(g.failure(&format!("exited with {st}")));
        }
    }
    let consoles: Vec<Console> = guests.iter().map(|g| parse_console(&g.lines())).collect();
    // Every block and page every guest read must have verified.
    for (slot, (c, g)) in consoles.iter().zip(&guests).enumerate() {
        let bad = match (&c.error, c.done) {
            (Some(e), _) => Some(format!("reported an error: {e}")),
            (None, None) => Some("printed no done line".into()),
            (None, Some((_, ok, errors))) if !ok || errors > 0 => Some(format!(
                "found {errors} blocks or pages that read wrong (ok={ok})"
            )),
            _ if c.bad_pages > 0 || c.phases.iter().any(|p| !p.ok || p.errors > 0) => {
                Some("a phase did not verify".to_string())
            }
            _ => None,
        };
        if let Some(bad) = bad {
            return Err(g.failure(&format!("guest {slot} {bad}")));
        }
    }
    let close = consoles
        .iter()
        .filter_map(|c| c.done.map(|d| d.0))
        .min()
        .unwrap_or(sample_at);
    let mut per_guest = Vec::new();
    for (slot, (c, guest)) in consoles.iter().zip(spec.guests).enumerate() {
        let phases: Vec<(Instant, f64, u64)> =
            c.phases.iter().map(|p| (p.at, p.ms, p.reads)).collect();
        let (rate, count, secs) = rate_in_window(&phases, open, close);
        let p99_us = c
            .phases
            .iter()
            .filter(|p| inside_window(p.at, p.ms, open, close))
            .filter_map(|p| p.p99_us)
            .reduce(f64::max);
        if count == 0 && guest.measured {
            return Err(spec.fail(format!(
                "guest {slot} had no whole phase inside the {:.0} s window: raise --seconds",
                close.saturating_duration_since(open).as_secs_f64()
            )));
        }
        let (a, b) = (at_open[slot], at_end[slot]);
        let mib = |x: u64, y: u64| memvisor.then(|| y.saturating_sub(x) as f64 / MIBF);
        per_guest.push(GuestResult {
            slot,
            reads_per_s: rate,
            phases_in_window: count,
            measured_s: secs,
            reads_total: c.phases.iter().map(|p| p.reads).sum(),
            p99_us,
            errors: c.done.map_or(0, |d| d.2),
            page_ins: b.page_ins.saturating_sub(a.page_ins),
            swap_read_mib: mib(a.swap_read, b.swap_read),
            swap_written_mib: mib(a.swap_written, b.swap_written),
            image_read_mib: mib(a.image_read, b.image_read),
            budget_mib: b.budget.map(|x| x as f64 / MIBF),
            image_cache_limit_mib: b.image_limit.map(|x| x as f64 / MIBF),
            image_cached_mib: b.image_cached as f64 / MIBF,
        });
    }
    let (broker_changes, broker_log) = match broker.as_mut() {
        Some(b) => {
            if b.exited() {
                return Err(b.failure("the broker exited while the guests ran"));
            }
            let lines = b.lines();
            let changes = lines
                .iter()
                .filter(|l| {
                    (l.text.contains(": budget ") || l.text.contains(": cache "))
                        && l.text.contains(" -> ")
                        && !l.text.contains(" failed: ")
                })
                .count();
            let log = lines
                .iter()
                .map(|l| {
                    let s = if l.at >= open {
                        (l.at - open).as_secs_f64()
                    } else {
                        -(open - l.at).as_secs_f64()
                    };
                    format!("{s:+.1}s {}", l.text)
                })
                .collect();
            (changes, log)
        }
        None => (0, Vec::new()),
    };
    drop(broker);
    drop(guests);
    drop(group);
    let pages = |a: u64, b: u64| b.saturating_sub(a) as f64 * 4096.0 / MIBF;
    Ok(FleetRun {
        boot_s,
        window_s: close.saturating_duration_since(open).as_secs_f64(),
        per_guest,
        kernel_swap_in_mib: pages(vm_open.0, vm_end.0),
        kernel_swap_out_mib: pages(vm_open.1, vm_end.1),
        group: group_memory,
        broker_changes,
        broker_log,
    })
}

/// The group's memory now.
fn group_memory(group: &MemoryCgroup, limited: bool) -> GroupMemory {
    let usage = group.usage();
    let stat = fs::read_to_string(group.dir().join("memory.stat")).unwrap_or_default();
    let num = |f: &str| -> u64 {
        fs::read_to_string(group.dir().join(f))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let mib = |b: u64| b as f64 / MIBF;
    GroupMemory {
        limit_mib: limited.then(|| mib(usage.limit_bytes)),
        usage_mib: mib(num("memory.usage_in_bytes")),
        peak_mib: mib(usage.peak_bytes),
        rss_mib: mib(field(&stat, "rss")),
        shmem_mib: mib(field(&stat, "shmem")),
        file_cache_mib: mib(field(&stat, "cache").saturating_sub(field(&stat, "shmem"))),
        swap_mib: mib(field(&stat, "swap")),
    }
}

/// `pswpin`, `pswpout` of `/proc/vmstat`, pages.
fn vmstat_swap() -> Result<(u64, u64), BenchError> {
    let t = fs::read_to_string("/proc/vmstat")
        .map_err(|e| BenchError::io("read", "/proc/vmstat", e))?;
    Ok((field(&t, "pswpin"), field(&t, "pswpout")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_phases_wholly_inside_the_window_count() {
        let t0 = Instant::now();
        let s = |x: f64| t0 + Duration::from_secs_f64(x);
        // Phases of 10 s ending at 10, 20, 30, 40 s; window [12, 35].
        let phases: Vec<(Instant, f64, u64)> = (1..=4)
            .map(|k: u32| (s(10.0 * f64::from(k)), 10_000.0, 1000 * u64::from(k)))
            .collect();
        let (rate, n, secs) = rate_in_window(&phases, s(12.0), s(35.0));
        // Only the phase of 20..30 s (3000 reads): the one of 10..20 began before the window.
        assert_eq!((n, secs), (1, 10.0));
        assert!((rate - 300.0).abs() < 1e-9);
        let (rate, n, _) = rate_in_window(&phases, s(10.0), s(40.0));
        assert_eq!(n, 3);
        assert!((rate - 9000.0 / 30.0).abs() < 1e-9);
        assert_eq!(rate_in_window(&phases, s(31.0), s(39.0)).1, 0);
    }

    #[test]
    fn the_console_gives_start_phases_and_done() {
        let t = Instant::now();
        let line = |text: &str| ConsoleLine {
            at: t,
            text: text.to_string(),
        };
        let c = parse_console(&[
            line("[    1.0] virtio_blk virtio1: [vda] 65536 512-byte logical blocks"),
            line("MEMVISOR-RESULT start uptime_ms=1500 mem_available_kib=100000 command=\"disk\""),
            line("MEMVISOR-RESULT phase=disk pattern=zipf dev=/dev/vda block=4096 blocks=40960 reads=5000 bytes=20480000 ms=5000.2 mbps=4.1 verified=1 ok=1 errors=0"),
            line("MEMVISOR-RESULT done ok=1 errors=0"),
        ]);
        assert!(c.start.is_some() && c.error.is_none());
        assert_eq!(c.phases.len(), 1);
        assert_eq!((c.phases[0].reads, c.phases[0].ok), (5000, true));
        assert_eq!(c.phases[0].p99_us, None);
        let paced = parse_console(&[line(
            "MEMVISOR-RESULT phase=disk pattern=zipf dev=/dev/vda block=4096 blocks=40960 reads=5000 bytes=20480000 ms=5000.2 mbps=4.1 verified=1 rate=1000.0 p50_us=40 p99_us=1290 ok=1 errors=0",
        )]);
        assert_eq!(paced.phases[0].p99_us, Some(1290.0));
        assert_eq!(c.done.map(|d| (d.1, d.2)), Some((true, 0)));
    }

    #[test]
    fn mem_read_passes_are_phases_and_a_bad_verification_counts() {
        let t = Instant::now();
        let line = |text: &str| ConsoleLine {
            at: t,
            text: text.to_string(),
        };
        let c = parse_console(&[
            line("MEMVISOR-RESULT start uptime_ms=1500 command=\"mem\""),
            line("MEMVISOR-RESULT phase=write mib=16 pages=4096 reads=4096 ms=10.0 mbps=1.0 ok=1 errors=0 anon_huge_kib=0"),
            line("MEMVISOR-RESULT phase=seq pass=1 mib=16 pages=4096 reads=4096 ms=20.0 mbps=1.0 ok=1 errors=0"),
            line("MEMVISOR-RESULT phase=zipf pass=2 mib=16 pages=4096 reads=4096 ms=30.0 mbps=1.0 ok=1 errors=0"),
            line("MEMVISOR-RESULT phase=verify mib=16 pages=4096 reads=4096 ms=5.0 mbps=1.0 ok=0 errors=3 first_bad_page=7"),
        ]);
        // The two read passes, not the write or the verification.
        let ms: Vec<f64> = c.phases.iter().map(|p| p.ms).collect();
        assert_eq!(ms, vec![20.0, 30.0]);
        assert_eq!(c.bad_pages, 3);
        let clean = parse_console(&[line(
            "MEMVISOR-RESULT phase=verify mib=16 pages=4096 reads=4096 ms=5.0 mbps=1.0 ok=1 errors=0",
        )]);
        assert_eq!((clean.phases.len(), clean.bad_pages), (0, 0));
    }
}
