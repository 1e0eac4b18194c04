//! [`vswapper_eval`]: issue 10's evaluation of the swap mapper and the false-read preventer
//! (seed 004) with real QEMU (TCG) guests: each case runs under three variants alternated in one
//! run — memvisor with the mapper (the default), memvisor with `--swap-mapper off`, and the
//! kernel (QEMU in a cgroup v1 memory group limited to the same budget, swapping to a swap file
//! of its own) — and reports the guest's run time, the bytes written to and read from swap, the
//! bytes memvisor read back from the image, and whether the guest verified every byte.
//!
//! Cases (each a guest workload, `tools/guest/workload.c`):
//! * `page-cache`: the guest reads a disk larger than the budget twice, verifying it (its page
//!   cache holds more disk data than the host keeps in memory: seed 004's main case);
//! * `mixed`: a disk pass, a memory workload, a second disk pass (file reads beside a memory
//!   workload, as seed 004's pbzip2 runs);
//! * `small-ram`: a guest with less RAM than its disk reads it twice (its page cache recycles
//!   pages, so reads overwrite pages that were paged out: false reads);
//! * `small-ram-noinit`: the same with `init_on_alloc=0` on the guest kernel's command line
//!   (Debian's kernel zeroes every page it allocates, a CPU write that pages a recycled page in
//!   before the disk read can overwrite it: the false reads the preventer cannot see);
//! * `no-disk`: a memory workload only (the mapper must cost nothing there);
//! * `balloon`: `page-cache` with a virtio-balloon that the host inflates to leave the guest
//!   3/8 of its RAM once the first pass has read the disk (QMP, [`BalloonTrigger`]): the guest
//!   gives up page cache the host may have paged out, in the middle of its second pass (seed
//!   004's dynamic case: balloons respond late, host swapping does the rest).

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use memvisor_control::{socket_dir, RegionStatus};
use memvisor_testvm::{
    qemu_binary, DiskAio, DiskCache, DiskConfig, GuestConfig, GuestImage, GuestRun, MemoryBackend,
    RunningGuest, WorkloadResult,
};

use crate::balloon_trigger::{BalloonInflation, BalloonTrigger};
use crate::bench_error::BenchError;
use crate::counters::field;
use crate::kernel_swap::KernelSwapFile;
use crate::managed_process::status_of;
use crate::memory_cgroup::{group_name, MemoryCgroup};
use crate::results_file::create_results_dir;

const MIB: u64 = 1 << 20;

/// One guest scenario.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvalCase {
    /// Name in the report.
    pub name: &'static str,
    /// Guest RAM, MiB.
    pub guest_mib: u64,
    /// Disk size, MiB (0: no disk).
    pub disk_mib: u64,
    /// The guest workload command line.
    pub workload: String,
    /// Extra guest kernel command-line words.
    pub kernel_args: Vec<&'static str>,
    /// The guest's memory after the host inflates its balloon, MiB, once the guest has read
    /// its whole disk once (`None`: no balloon device).
    pub balloon_mib: Option<u64>,
}

impl EvalCase {
    /// The cases at full size (1 GiB guests, 512 MiB disks) or `quick` (small).
    pub fn all(quick: bool) -> Vec<EvalCase> {
        let (ram, disk, mem) = if quick {
            (512, 256, 192)
        } else {
            (1024, 512, 384)
        };
        let pass = |mib: u64| format!("disk /dev/vda seq --reads {} --verify", mib * 256);
        vec![
            EvalCase {
                name: "page-cache",
                guest_mib: ram,
                disk_mib: disk,
                workload: format!("{}; {}", pass(disk), pass(disk)),
                kernel_args: Vec::new(),
                balloon_mib: None,
            },
            EvalCase {
                name: "mixed",
                guest_mib: ram,
                disk_mib: disk,
                workload: format!(
                    "{}; mem {mem} --patterns seq,zipf; {}",
                    pass(disk),
                    pass(disk)
                ),
                kernel_args: Vec::new(),
                balloon_mib: None,
            },
            EvalCase {
                name: "small-ram",
                guest_mib: ram / 4,
                disk_mib: disk,
                workload: format!("{}; {}", pass(disk), pass(disk)),
                kernel_args: Vec::new(),
                balloon_mib: None,
            },
            EvalCase {
                name: "small-ram-noinit",
                guest_mib: ram / 4,
                disk_mib: disk,
                workload: format!("{}; {}", pass(disk), pass(disk)),
                kernel_args: vec!["init_on_alloc=0"],
                balloon_mib: None,
            },
            EvalCase {
                name: "no-disk",
                guest_mib: ram,
                disk_mib: 0,
                workload: format!("mem {} --patterns seq,zipf", ram * 3 / 4),
                kernel_args: Vec::new(),
                balloon_mib: None,
            },
            EvalCase {
                name: "balloon",
                guest_mib: ram,
                disk_mib: disk,
                workload: format!("{}; {}", pass(disk), pass(disk)),
                kernel_args: Vec::new(),
                balloon_mib: Some(ram * 3 / 8),
            },
        ]
    }
}

/// How the guest's memory is managed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalVariant {
    /// `memvisor run` with the swap mapper and the false-read preventer (the default).
    Mapper,
    /// `memvisor run --swap-mapper off`.
    NoMapper,
    /// QEMU in a memory cgroup of the budget, the kernel swapping.
    Kernel,
}

impl EvalVariant {
    /// Name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Self::Mapper => "memvisor (mapper)",
            Self::NoMapper => "memvisor --swap-mapper off",
            Self::Kernel => "kernel swap",
        }
    }
}

/// What one guest run measured.
#[derive(Debug, Clone)]
pub struct EvalRun {
    /// The case.
    pub case: &'static str,
    /// The variant.
    pub variant: EvalVariant,
    /// Repetition.
    pub rep: usize,
    /// Wall time from QEMU's start to its exit, seconds.
    pub wall_secs: f64,
    /// Sum of the guest's phase times, seconds (boot excluded).
    pub guest_secs: f64,
    /// Each phase's name (`disk`, or the memory phase: `write`, `seq`, `zipf`...) and time in
    /// seconds, in the order the guest ran them.
    pub phases: Vec<(&'static str, f64)>,
    /// Bytes written to swap (memvisor: its swap file; kernel: `pswpout`).
    pub swap_written: u64,
    /// Bytes read from swap.
    pub swap_read: u64,
    /// memvisor: bytes read back from the image instead of swap.
    pub image_read: u64,
    /// memvisor: bytes of swap writes avoided and of false reads avoided.
    pub writes_avoided: u64,
    /// memvisor: bytes not read because a disk read overwrote them.
    pub false_reads_avoided: u64,
    /// Whether the guest verified every byte (it must).
    pub verified: bool,
    /// When the balloon was inflated (seconds after QEMU started) and the smallest memory the
    /// guest got down to (`None`: no balloon).
    pub balloon: Option<BalloonInflation>,
}

/// The evaluation's settings.
#[derive(Debug, Clone)]
pub struct VswapperEvalConfig {
    /// The `memvisor` binary.
    pub memvisor: PathBuf,
    /// Budget of every variant, bytes.
    pub budget: u64,
    /// Cases to run.
    pub cases: Vec<EvalCase>,
    /// Variants, in the order of the first repetition (rotated by one each repetition).
    pub variants: Vec<EvalVariant>,
    /// Repetitions of every case and variant.
    pub reps: usize,
    /// Where disk images, swap files and control sockets go.
    pub work_dir: PathBuf,
    /// Allow other swap areas to be active during the kernel variant.
    pub allow_other_swap: bool,
    /// Throttle the memvisor variants' reads and writes on the work directory's device to this
    /// many bytes per second (cgroup v1 `blkio.throttle`): a slow swap disk. The kernel
    /// variant cannot be throttled the same way (its swap writes are issued by reclaim, not
    /// charged to QEMU's group), so it is refused with this.
    pub throttle_bps: Option<u64>,
    /// How QEMU submits disk I/O (`aio=`; `native` with `cache=none`, as QEMU requires).
    pub disk_aio: DiskAio,
}

/// A cgroup v1 blkio group limiting reads and writes on one device, removed on drop.
struct BlkioThrottle {
    dir: PathBuf,
}

impl BlkioThrottle {
    /// A group limiting the device holding `path` to `bps` bytes per second each way.
    fn create(path: &Path, bps: u64) -> Result<Self, BenchError> {
        use std::os::unix::fs::MetadataExt;
        let dev = fs::metadata(path)
            .map_err(|e| BenchError::io("stat", path, e))?
            .dev();
        let (major, minor) = (libc::major(dev), libc::minor(dev));
        let dir = Path::new("/sys/fs/cgroup/blkio").join(format!(
            "{}-vse-{}",
            crate::kernel_swap::PREFIX,
            std::process::id()
        ));
        fs::create_dir(&dir).map_err(|e| BenchError::io("create blkio cgroup", &dir, e))?;
        let group = Self { dir };
        for f in [
            "blkio.throttle.read_bps_device",
            "blkio.throttle.write_bps_device",
        ] {
            let p = group.dir.join(f);
            fs::write(&p, format!("{major}:{minor} {bps}"))
                .map_err(|e| BenchError::io("write", &p, e))?;
        }
        Ok(group)
    }

    fn procs_path(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }
}

impl Drop for BlkioThrottle {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}

/// `pswpin`/`pswpout` of `/proc/vmstat`, in pages.
fn vmstat_swap() -> Result<(u64, u64), BenchError> {
    let t = fs::read_to_string("/proc/vmstat")
        .map_err(|e| BenchError::io("read", "/proc/vmstat", e))?;
    Ok((field(&t, "pswpin"), field(&t, "pswpout")))
}

/// The guest's phases in order, each as its name and seconds (their sum is the guest's time,
/// boot excluded).
fn phase_secs(run: &GuestRun) -> Vec<(&'static str, f64)> {
    run.results
        .iter()
        .filter_map(|r| match r {
            WorkloadResult::Disk(d) => Some(("disk", d.ms / 1000.0)),
            WorkloadResult::Mem(m) => Some((m.kind.as_str(), m.ms / 1000.0)),
            _ => None,
        })
        .collect()
}

/// `phases` as one CSV field or report word: `disk=3.10 write=1.52 ...`.
pub fn phases_text(phases: &[(&'static str, f64)]) -> String {
    phases
        .iter()
        .map(|(name, secs)| format!("{name}={secs:.2}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs every case under every variant, `reps` times, alternating the variants.
pub fn vswapper_eval(
    config: &VswapperEvalConfig,
    image: &GuestImage,
    mut progress: impl FnMut(&EvalRun),
) -> Result<Vec<EvalRun>, BenchError> {
    create_results_dir(&config.work_dir)?;
    // Disk images, swap files and run directories go in a private (0700) directory of this run
    // inside the work directory (which may be a shared one such as /var/tmp), removed at the end.
    let private = tempfile::Builder::new()
        .prefix("vswapper-eval-")
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir_in(&config.work_dir)
        .map_err(|e| BenchError::io("create a private directory in", &config.work_dir, e))?;
    let dir = private.path();
    let mut out = Vec::new();
    for case in &config.cases {
        let disk = dir.join(format!("vswapper-{}.img", case.name));
        if case.disk_mib > 0 {
            image
                .make_disk_image(&disk, case.disk_mib)
                .map_err(|source| BenchError::Guest {
                    run: format!("{} (disk image)", case.name),
                    source,
                })?;
        }
        let guest = {
            let mut g = GuestConfig::new(case.guest_mib, case.workload.clone())
                .backend(MemoryBackend::Memfd)
                .timeout(Duration::from_secs(1800));
            if case.disk_mib > 0 {
                let mut d = DiskConfig::new(&disk).aio(config.disk_aio);
                if config.disk_aio == DiskAio::Native {
                    d = d.cache(DiskCache::None);
                }
                g = g.disk(d);
            }
            for a in &case.kernel_args {
                g = g.kernel_arg(*a);
            }
            if case.balloon_mib.is_some() {
                g = g
                    .free_page_reporting(true)
                    .qmp_socket(dir.join(format!("qmp-{}.sock", case.name)));
            }
            g
        };
        for rep in 0..config.reps {
            let n = config.variants.len();
            for i in 0..n {
                let variant = config.variants[(i + rep) % n];
                let run = run_one(config, dir, image, case, &guest, variant, rep)?;
                progress(&run);
                out.push(run);
            }
        }
        let _ = fs::remove_file(&disk);
    }
    Ok(out)
}

/// One guest run; `dir` is the evaluation's private directory.
fn run_one(
    config: &VswapperEvalConfig,
    dir: &Path,
    image: &GuestImage,
    case: &EvalCase,
    guest: &GuestConfig,
    variant: EvalVariant,
    rep: usize,
) -> Result<EvalRun, BenchError> {
    let label = format!("{} / {} / rep {rep}", case.name, variant.name());
    let guest_err = |source| BenchError::Guest {
        run: label.clone(),
        source,
    };
    let qemu = qemu_binary().map_err(guest_err)?;
    let args = guest.qemu_args(image).map_err(guest_err)?;
    let run_dir = dir.join(format!("run-{rep}"));
    fs::create_dir_all(&run_dir).map_err(|e| BenchError::io("create", &run_dir, e))?;
    let balloon = match (case.balloon_mib, &guest.qmp_socket) {
        (Some(mib), Some(socket)) => {
            // A socket left by the last run would be connected to before QEMU listens.
            let _ = fs::remove_file(socket);
            Some(BalloonTrigger::start(
                socket.clone(),
                case.disk_mib * MIB,
                mib * MIB,
            ))
        }
        _ => None,
    };
    let launch = GuestLaunch {
        qemu: &qemu,
        args: &args,
        guest,
    };
    let result = run_variant(config, &run_dir, case, &launch, variant, rep, &label);
    let inflation = balloon.map(BalloonTrigger::finish).transpose();
    let _ = fs::remove_dir_all(&run_dir);
    let run = result?;
    let balloon =
        match inflation {
            Ok(Some(None)) => return Err(BenchError::bad(
                "balloon",
                label,
                "the guest ended before it had read its disk once: the balloon was never inflated",
            )),
            Ok(at) => at.flatten(),
            Err(e) => return Err(BenchError::bad("balloon", label, e)),
        };
    Ok(EvalRun { balloon, ..run })
}

/// How QEMU is started for one guest: the binary, its arguments and the guest they describe.
struct GuestLaunch<'a> {
    qemu: &'a Path,
    args: &'a [std::ffi::OsString],
    guest: &'a GuestConfig,
}

/// One guest run under `variant` (the kernel's swap, or `memvisor run`), its files in
/// `run_dir`.
fn run_variant(
    config: &VswapperEvalConfig,
    run_dir: &Path,
    case: &EvalCase,
    launch: &GuestLaunch<'_>,
    variant: EvalVariant,
    rep: usize,
    label: &str,
) -> Result<EvalRun, BenchError> {
    let GuestLaunch { qemu, args, guest } = *launch;
    let guest_err = |source| BenchError::Guest {
        run: label.to_string(),
        source,
    };
    let dir = run_dir.parent().unwrap_or(run_dir);
    let run_dir = run_dir.to_path_buf();
    let result = match variant {
        EvalVariant::Kernel if config.throttle_bps.is_some() => {
            return Err(BenchError::bad(
                "variant",
                "kernel",
                "cannot be throttled like memvisor (reclaim's swap writes are not charged to \
                 QEMU's blkio group): leave it out with --throttle",
            ));
        }
        EvalVariant::Kernel => {
            let _swap =
                KernelSwapFile::create(dir, case.guest_mib * MIB * 2, config.allow_other_swap)?;
            let cgroup = MemoryCgroup::create(&group_name(rep as u64), Some(config.budget))?;
            // QEMU alone joins the group: a shell writes its own pid, then becomes QEMU.
            let mut cmd = Command::new("sh");
            cmd.arg("-c")
                .arg("echo $$ > \"$0\" && exec \"$@\"")
                .arg(cgroup.procs_path())
                .arg(qemu)
                .args(args);
            let before = vmstat_swap()?;
            let started = Instant::now();
            let run = RunningGuest::spawn(cmd)
                .and_then(|g| g.wait(guest.timeout))
                .map_err(guest_err)?;
            let wall = started.elapsed().as_secs_f64();
            let after = vmstat_swap()?;
            drop(cgroup);
            let phases = phase_secs(&run);
            EvalRun {
                case: case.name,
                variant,
                rep,
                wall_secs: wall,
                guest_secs: phases.iter().map(|p| p.1).sum(),
                phases,
                swap_written: (after.1 - before.1) * 4096,
                swap_read: (after.0 - before.0) * 4096,
                image_read: 0,
                writes_avoided: 0,
                false_reads_avoided: 0,
                verified: run.ok(),
                balloon: None,
            }
        }
        EvalVariant::Mapper | EvalVariant::NoMapper => {
            let ctl = run_dir.join("ctl");
            let throttle = match config.throttle_bps {
                Some(bps) => Some(BlkioThrottle::create(&run_dir, bps)?),
                None => None,
            };
            let mut cmd = match &throttle {
                // The run joins the throttled group first: a shell writes its own pid, then
                // becomes `memvisor run`.
                Some(t) => {
                    let mut c = Command::new("sh");
                    c.arg("-c")
                        .arg("echo $$ > \"$0\" && exec \"$@\"")
                        .arg(t.procs_path())
                        .arg(&config.memvisor);
                    c
                }
                None => Command::new(&config.memvisor),
            };
            cmd.env("MEMVISOR_CONTROL_DIR", &ctl)
                .arg("run")
                .args(["--budget", &config.budget.to_string()])
                .arg("--swap-mapper")
                .arg(if variant == EvalVariant::Mapper {
                    "on"
                } else {
                    "off"
                })
                .arg("--swap-dir")
                .arg(&run_dir)
                .arg("--")
                .arg(qemu)
                .args(args);
            let size = case.guest_mib * MIB;
            let stop = Arc::new(AtomicBool::new(false));
            let last: Arc<Mutex<Option<RegionStatus>>> = Arc::new(Mutex::new(None));
            let poller = {
                let (stop, last, ctl) = (stop.clone(), last.clone(), ctl.clone());
                thread::spawn(move || {
                    while !stop.load(Ordering::Acquire) {
                        let pid = socket_dir::list_managed_pids(&ctl)
                            .ok()
                            .and_then(|p| p.first().copied());
                        if let Some(st) = pid.and_then(|p| status_of(&ctl, p).ok()) {
                            if let Some(g) = st
                                .regions
                                .iter()
                                .find(|r| r.kind == "guest-memfd" && r.size_bytes == size)
                            {
                                *last.lock().unwrap_or_else(|e| e.into_inner()) = Some(g.clone());
                            }
                        }
                        thread::sleep(Duration::from_millis(100));
                    }
                })
            };
            let started = Instant::now();
            let run = RunningGuest::spawn(cmd).and_then(|g| g.wait(guest.timeout));
            let wall = started.elapsed().as_secs_f64();
            stop.store(true, Ordering::Release);
            let _ = poller.join();
            let run = run.map_err(guest_err)?;
            let g = last
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| {
                    BenchError::bad("run", label, "memvisor stat never showed guest RAM")
                })?;
            let phases = phase_secs(&run);
            EvalRun {
                case: case.name,
                variant,
                rep,
                wall_secs: wall,
                guest_secs: phases.iter().map(|p| p.1).sum(),
                phases,
                swap_written: g.bytes_written,
                swap_read: g.bytes_read,
                image_read: g.image_read_bytes,
                writes_avoided: g.swap_write_bytes_avoided,
                false_reads_avoided: g.false_read_bytes_avoided,
                verified: run.ok(),
                balloon: None,
            }
        }
    };
    Ok(result)
}

/// Median of `v` (0 for none).
fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One Markdown table row per case and variant (medians over repetitions), with the speedup
/// of each variant over memvisor without the mapper.
pub fn vswapper_markdown(runs: &[EvalRun]) -> String {
    let mut s = String::from(
        "| case | variant | runs | guest s (median) | wall s | vs mapper off | swap written MiB | swap read MiB | image re-read MiB | false reads avoided MiB | verified |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut cases: Vec<&str> = runs.iter().map(|r| r.case).collect();
    cases.dedup();
    for case in cases {
        let of = |v: EvalVariant| -> Vec<&EvalRun> {
            runs.iter()
                .filter(|r| r.case == case && r.variant == v)
                .collect()
        };
        let off = median(
            of(EvalVariant::NoMapper)
                .iter()
                .map(|r| r.guest_secs)
                .collect(),
        );
        for v in [
            EvalVariant::Mapper,
            EvalVariant::NoMapper,
            EvalVariant::Kernel,
        ] {
            let rs = of(v);
            if rs.is_empty() {
                continue;
            }
            let m = |f: &dyn Fn(&EvalRun) -> f64| median(rs.iter().map(|r| f(r)).collect());
            let guest = m(&|r| r.guest_secs);
            let mib = |f: &dyn Fn(&EvalRun) -> u64| m(&|r| f(r) as f64 / MIB as f64);
            let _ = writeln!(
                s,
                "| {case} | {} | {} | {guest:.2} | {:.2} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} |",
                v.name(),
                rs.len(),
                m(&|r| r.wall_secs),
                if off > 0.0 && guest > 0.0 {
                    format!("{:.2}x", off / guest)
                } else {
                    "-".into()
                },
                mib(&|r| r.swap_written),
                mib(&|r| r.swap_read),
                mib(&|r| r.image_read),
                mib(&|r| r.false_reads_avoided),
                if rs.iter().all(|r| r.verified) {
                    "all"
                } else {
                    "NO"
                },
            );
        }
    }
    s
}

/// The runs as CSV, one line per run.
pub fn vswapper_csv(runs: &[EvalRun]) -> String {
    let mut s = String::from(
        "case,variant,rep,wall_secs,guest_secs,swap_written,swap_read,image_read,writes_avoided,false_reads_avoided,verified,balloon_secs,balloon_reached_bytes,phases\n",
    );
    for r in runs {
        let _ = writeln!(
            s,
            "{},{},{},{:.3},{:.3},{},{},{},{},{},{},{},{},{}",
            r.case,
            r.variant.name(),
            r.rep,
            r.wall_secs,
            r.guest_secs,
            r.swap_written,
            r.swap_read,
            r.image_read,
            r.writes_avoided,
            r.false_reads_avoided,
            r.verified,
            r.balloon
                .map_or(String::new(), |b| format!("{:.1}", b.at_secs)),
            r.balloon
                .and_then(|b| b.reached_bytes)
                .map_or(String::new(), |b| b.to_string()),
            phases_text(&r.phases)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(variant: EvalVariant, guest_secs: f64, written: u64) -> EvalRun {
        EvalRun {
            case: "page-cache",
            variant,
            rep: 0,
            wall_secs: guest_secs + 2.0,
            guest_secs,
            phases: vec![("disk", guest_secs / 2.0), ("seq", guest_secs / 2.0)],
            swap_written: written,
            swap_read: 0,
            image_read: 0,
            writes_avoided: 0,
            false_reads_avoided: 0,
            verified: true,
            balloon: None,
        }
    }

    #[test]
    fn the_table_has_medians_and_the_speedup_over_mapper_off() {
        let runs = vec![
            run(EvalVariant::Mapper, 2.0, 10 * MIB),
            run(EvalVariant::NoMapper, 3.0, 800 * MIB),
            run(EvalVariant::Mapper, 4.0, 30 * MIB),
            run(EvalVariant::NoMapper, 5.0, 900 * MIB),
            run(EvalVariant::Kernel, 9.0, 700 * MIB),
        ];
        let md = vswapper_markdown(&runs);
        assert!(
            md.contains("| page-cache | memvisor (mapper) | 2 | 3.00 | 5.00 | 1.33x | 20 |"),
            "{md}"
        );
        assert!(
            md.contains("| page-cache | kernel swap | 1 | 9.00 | 11.00 | 0.44x | 700 |"),
            "{md}"
        );
        let csv = vswapper_csv(&runs);
        assert_eq!(csv.lines().count(), 6);
        assert!(
            csv.lines().nth(1).unwrap().ends_with(",disk=1.00 seq=1.00"),
            "{csv}"
        );
    }

    #[test]
    fn cases_scale_with_quick() {
        let full = EvalCase::all(false);
        assert_eq!(full.len(), 6);
        assert_eq!(full[5].balloon_mib, Some(384));
        assert!(full[..5].iter().all(|c| c.balloon_mib.is_none()));
        assert_eq!(full[3].kernel_args, vec!["init_on_alloc=0"]);
        assert_eq!(full[0].workload.matches("--reads 131072").count(), 2);
        assert_eq!(full[2].guest_mib, 256);
        assert_eq!(EvalCase::all(true)[0].disk_mib, 256);
    }
}
