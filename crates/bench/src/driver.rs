//! The driver role: for each workload, run the variants alternately (kernel, memvisor, kernel,
//! memvisor, ...) `reps` times, each in its own process and memory cgroup, with the kernel
//! baseline's swap file active for the whole run; collect every report.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_pager::{CpuWakeLatency, CPU_LATENCY_DEVICE};
use memvisor_safe_files::OutputFile;
use serde::{Deserialize, Serialize};

use crate::bench_error::BenchError;
use crate::interrupt;
use crate::kernel_swap::KernelSwapFile;
use crate::memory_cgroup::{group_name, CgroupUsage, MemoryCgroup};
use crate::page_pattern::PAGE;
use crate::results_file::{create_results_dir, write_results_file};
use crate::variant::Variant;
use crate::workload_report::WorkloadReport;
use crate::workload_spec::WorkloadSpec;

/// What the driver runs.
#[derive(Debug, Clone)]
pub struct DriverArgs {
    /// Data set bytes.
    pub size: usize,
    /// Resident budget: the region's budget and the kernel variant's cgroup limit (plus
    /// `kernel_slack`).
    pub budget: usize,
    /// Bytes added to the kernel variant's cgroup limit for the process's own memory (binary,
    /// stack, heap, the random workloads' per-page counters), which the region's budget does not
    /// cover either.
    pub kernel_slack: usize,
    /// Where the region's swap file and the kernel's swap file go.
    pub swap_dir: PathBuf,
    /// Workloads, run one after the other.
    pub workloads: Vec<WorkloadSpec>,
    /// Variants, alternated within each repetition.
    pub variants: Vec<Variant>,
    /// Repetitions of each (workload, variant).
    pub reps: u32,
    /// Output directory (results.jsonl, results.csv, summary.md, logs/).
    pub out_dir: PathBuf,
    /// Run even if some other swap area is active.
    pub allow_other_swap: bool,
    /// The executable that runs the workload role (this program).
    pub exe: PathBuf,
}

/// One workload process's result, as the driver records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Repetition (0-based).
    pub rep: u32,
    /// Variant spelling.
    pub variant: String,
    /// Whether it is the kernel baseline.
    pub kernel: bool,
    /// Workload spelling.
    pub workload: String,
    /// Wall-clock seconds of the whole process, start to exit.
    pub wall_secs: f64,
    /// The process's memory cgroup.
    pub cgroup: CgroupUsage,
    /// What the process reported.
    pub report: WorkloadReport,
}

/// The variants in the order of repetition `rep`: rotated by `rep`, so that over as many
/// repetitions as there are variants each runs once in every position. A run's position
/// mattered: on the development VM the variant right after the kernel's was about 1 s slower on
/// sequential passes (13% to 30%), whichever it was (the kernel's 2 GiB of swap writes were
/// still being absorbed below the VM, presumably).
fn rotated(variants: &[Variant], rep: usize) -> impl Iterator<Item = &Variant> {
    let n = variants.len().max(1);
    variants.iter().cycle().skip(rep % n).take(variants.len())
}

impl RunRecord {
    /// A phased workload's phases as records of their own, workload `WORKLOAD#PHASE`, whose
    /// run is the phase (summarized and compared like any workload); none for others.
    pub fn phase_records(&self) -> Vec<RunRecord> {
        self.report
            .phases
            .iter()
            .map(|phase| {
                let mut r = self.clone();
                r.workload = format!("{}#{}", self.workload, phase.name);
                r.report.workload = r.workload.clone();
                r.report.run = phase.report.clone();
                r.report.phases = Vec::new();
                r
            })
            .collect()
    }
}

/// Runs everything; records are also appended to `out_dir/results.jsonl` as they complete.
pub fn drive(args: &DriverArgs) -> Result<Vec<RunRecord>, BenchError> {
    interrupt::install();
    let pages = (args.size / PAGE) as u64;
    for w in &args.workloads {
        w.validate(pages)?;
    }
    MemoryCgroup::check_available()?;
    let logs = args.out_dir.join("logs");
    create_results_dir(&args.out_dir)?;
    create_results_dir(&logs)?;
    let jsonl = args.out_dir.join("results.jsonl");
    // Rewritten whole after every run (a few lines each): complete at every moment.
    let mut lines = String::new();
    write_results_file(&jsonl, &lines)?;
    // The kernel's swap: twice the data set (plus slack), so it stays under half full and the
    // kernel keeps the swap copies of pages it reads back (it drops them above half full, which
    // would force rewrites of clean pages; memvisor's swap file is sparse and never "full").
    let _swap = if args.variants.iter().any(Variant::is_kernel) {
        let bytes = (2 * args.size as u64 + (64 << 20)).next_multiple_of(1 << 20);
        let s = KernelSwapFile::create(&args.swap_dir, bytes, args.allow_other_swap)?;
        eprintln!(
            "swap file {} active ({} MiB)",
            s.path().display(),
            bytes >> 20
        );
        Some(s)
    } else {
        None
    };
    let total = args.workloads.len() * args.reps as usize * args.variants.len();
    let mut records = Vec::with_capacity(total);
    let mut seq = 0u64;
    for workload in &args.workloads {
        for rep in 0..args.reps {
            for variant in rotated(&args.variants, rep as usize) {
                if interrupt::requested() {
                    return Err(BenchError::Interrupted);
                }
                seq += 1;
                let rec = run_one(args, workload, variant, rep, seq, &logs)?;
                eprintln!(
                    "[{seq}/{total}] {workload} / {variant} rep {rep}: run {:.2} s ({:.1} us/access), fill {:.2} s, majflt {}, pswpin {}, pswpout {}, cgroup peak {} MiB",
                    rec.report.run.secs,
                    rec.report.run.us_per_access(),
                    rec.report.fill.secs,
                    rec.report.run.counters.majflt,
                    rec.report.run.counters.pswpin,
                    rec.report.run.counters.pswpout,
                    rec.cgroup.peak_bytes >> 20,
                );
                for r in std::iter::once(rec.clone()).chain(rec.phase_records()) {
                    let line = serde_json::to_string(&r).unwrap_or_default();
                    lines.push_str(&line);
                    lines.push('\n');
                    records.push(r);
                }
                write_results_file(&jsonl, &lines)?;
            }
        }
    }
    Ok(records)
}

/// Runs one workload process in its own memory cgroup and returns its record.
fn run_one(
    args: &DriverArgs,
    workload: &WorkloadSpec,
    variant: &Variant,
    rep: u32,
    seq: u64,
    logs: &Path,
) -> Result<RunRecord, BenchError> {
    let limit = variant
        .is_kernel()
        .then(|| (args.budget + args.kernel_slack) as u64);
    let group = MemoryCgroup::create(&group_name(seq), limit)?;
    let stem = logs.join(format!(
        "{seq:03}-{}",
        variant.to_string().split(':').next().unwrap_or("variant")
    ));
    let out_path = stem.with_extension("out");
    let err_path = stem.with_extension("err");
    // The child's output goes to temporary files, moved into place when it has exited.
    let out_log = OutputFile::create(&out_path)?;
    let err_log = OutputFile::create(&err_path)?;
    let child_end = |log: &OutputFile| -> Result<Stdio, BenchError> {
        let copy = log
            .file()
            .ok_or_else(|| std::io::Error::other("not a file"))
            .and_then(|f| f.try_clone())
            .map_err(|e| BenchError::io("duplicate", log.path(), e))?;
        Ok(Stdio::from(copy))
    };
    // A host tuned for wake-up latency: idle CPUs poll for the whole run (dropped with it).
    let _tuned = match variant {
        Variant::Kernel {
            cpu_wake_latency: true,
        } => {
            let mut q = CpuWakeLatency::open()
                .map_err(|e| BenchError::io("open", CPU_LATENCY_DEVICE, e))?;
            q.hold()
                .map_err(|e| BenchError::io("write", CPU_LATENCY_DEVICE, e))?;
            Some(q)
        }
        _ => None,
    };
    let started = Instant::now();
    // The shell joins the group, then becomes the workload (same pid): only the child is ever
    // limited, never the driver.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#"echo $$ > "$0" && exec "$@""#)
        .arg(group.procs_path())
        .arg(&args.exe)
        .arg("workload")
        .arg("--variant")
        .arg(variant.to_string())
        .arg("--size")
        .arg(args.size.to_string())
        .arg("--budget")
        .arg(args.budget.to_string())
        .arg("--swap-dir")
        .arg(&args.swap_dir)
        .arg("--workload")
        .arg(workload.to_string())
        .stdin(Stdio::null())
        .stdout(child_end(&out_log)?)
        .stderr(child_end(&err_log)?)
        .spawn()
        .map_err(|e| BenchError::Command {
            command: format!("{} workload", args.exe.display()),
            detail: e.to_string(),
        })?;
    let pid = child.id();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) => {}
            Err(e) => return Err(BenchError::io("wait for workload", format!("pid {pid}"), e)),
        }
        if interrupt::requested() {
            let _ = child.kill();
            let _ = child.wait();
            return Err(BenchError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let wall_secs = started.elapsed().as_secs_f64();
    out_log.commit()?;
    err_log.commit()?;
    // Ctrl-C reaches the child too (same process group): it died of it, not of a failure.
    if interrupt::requested() {
        return Err(BenchError::Interrupted);
    }
    let cgroup = group.usage();
    drop(group);
    let fail = |detail: String| BenchError::Child {
        pid,
        variant: variant.to_string(),
        workload: workload.to_string(),
        detail,
    };
    let stderr_tail = || {
        let s = fs::read_to_string(&err_path).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        let tail = lines[lines.len().saturating_sub(5)..].join(" | ");
        format!("{tail} (log {})", err_path.display())
    };
    if !status.success() {
        let oom = if cgroup.failcnt > 0 && variant.is_kernel() {
            " (the cgroup hit its limit: OOM kill? raise --kernel-slack)"
        } else {
            ""
        };
        return Err(fail(format!("{status}{oom}: {}", stderr_tail())));
    }
    let stdout = fs::read_to_string(&out_path).map_err(|e| BenchError::io("read", &out_path, e))?;
    let line = stdout.lines().last().unwrap_or("");
    let report: WorkloadReport = serde_json::from_str(line)
        .map_err(|e| fail(format!("no report on stdout ({e}): {}", stderr_tail())))?;
    if !report.verified {
        return Err(fail("data not verified".into()));
    }
    Ok(RunRecord {
        rep,
        variant: variant.to_string(),
        kernel: variant.is_baseline(),
        workload: workload.to_string(),
        wall_secs,
        cgroup,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_variant_runs_once_in_every_position_over_as_many_reps() {
        let variants: Vec<Variant> = ["kernel", "memvisor", "memvisor:poll=off"]
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        let order = |rep| {
            rotated(&variants, rep)
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(order(0), ["kernel", "memvisor", "memvisor:poll=off"]);
        assert_eq!(order(1), ["memvisor", "memvisor:poll=off", "kernel"]);
        assert_eq!(order(2), ["memvisor:poll=off", "kernel", "memvisor"]);
        assert_eq!(order(3), order(0));
        assert_eq!(rotated(&[], 5).count(), 0);
    }
}
