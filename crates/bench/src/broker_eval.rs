//! `broker-eval` (issue 12): four processes with different access patterns share one memory
//! total smaller than their sum, divided three ways in the same run: `memvisor broker` in
//! utility mode (its defaults), an equal split of fixed budgets, and the kernel (all four in
//! one cgroup v1 memory group of the total, with a swap file); and, for reference, each with
//! all the memory it wants. Every worker runs for the same time ([`run_worker`]); throughput
//! is measured over a common window after a warm-up (while every worker runs), and a
//! variant's aggregate is the sum of each busy worker's throughput relative to its
//! unconstrained one (the weighted speedup utility-based partitioning is judged by).

use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bench_error::BenchError;
use crate::broker_eval_worker::WorkerKind;
use crate::interrupt;
use crate::kernel_swap::KernelSwapFile;
use crate::live_guest::LiveGuest;
use crate::managed_process::status_of;
use crate::memory_cgroup::{group_name, MemoryCgroup};
use crate::private_dir::{private_dir, run_dir};

/// How the total is divided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum BrokerVariant {
    /// Each worker under `memvisor run` with more budget than memory (the reference).
    Unconstrained,
    /// Each worker under `memvisor run` with a quarter of the total, fixed.
    Equal,
    /// As `Equal` at the start, then `memvisor broker --total TOTAL` (defaults otherwise).
    Utility,
    /// The four as plain processes in one memory cgroup limited to the total, swap on.
    Kernel,
}

impl BrokerVariant {
    /// Every variant, in run order.
    pub const ALL: [BrokerVariant; 4] = [
        Self::Unconstrained,
        Self::Equal,
        Self::Utility,
        Self::Kernel,
    ];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unconstrained => "unconstrained",
            Self::Equal => "equal split",
            Self::Utility => "memvisor broker (utility)",
            Self::Kernel => "kernel (one cgroup)",
        }
    }

    /// Its name on the command line (`--variants`).
    pub fn flag_name(self) -> &'static str {
        match self {
            Self::Unconstrained => "unconstrained",
            Self::Equal => "equal",
            Self::Utility => "utility",
            Self::Kernel => "kernel",
        }
    }

    /// A comma-separated list of [`Self::flag_name`]s, in the order given.
    pub fn parse_list(list: &str) -> Result<Vec<Self>, BenchError> {
        let mut out = Vec::new();
        for name in list.split(',').map(str::trim) {
            let v = Self::ALL
                .into_iter()
                .find(|v| v.flag_name() == name)
                .ok_or_else(|| {
                    BenchError::bad(
                        "--variants",
                        name,
                        "expected unconstrained, equal, utility or kernel",
                    )
                })?;
            if out.contains(&v) {
                return Err(BenchError::bad("--variants", name, "given twice"));
            }
            out.push(v);
        }
        Ok(out)
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct BrokerEvalConfig {
    /// This benchmark's executable (the workers run it with `worker`).
    pub exe: PathBuf,
    /// The memvisor binary.
    pub memvisor: PathBuf,
    /// A directory for the run's private directory (swap files, control sockets).
    pub work_dir: PathBuf,
    /// The workers' patterns.
    pub workers: Vec<WorkerKind>,
    /// Each worker's memory, MiB.
    pub worker_mib: u64,
    /// The memory total, bytes.
    pub total: u64,
    /// How long each worker runs after its fill, seconds.
    pub seconds: f64,
    /// Seconds after the last fill before the window opens (the broker's time to settle).
    pub warmup: f64,
    /// Repetitions.
    pub reps: usize,
    /// Run the kernel variant even if another swap area is active.
    pub allow_other_swap: bool,
}

/// One worker's numbers in one run.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerResult {
    /// Its pattern.
    pub kind: String,
    /// Page accesses per second over the window.
    pub pages_per_s: f64,
    /// Page-ins over the whole run (memvisor: the pager's; kernel: major faults).
    pub page_ins: u64,
    /// Its budget at the end (memvisor variants).
    pub budget_mib: Option<u64>,
    /// Words that read wrong (must be 0).
    pub errors: u64,
}

/// One variant's run.
#[derive(Debug, Clone, Serialize)]
pub struct VariantRun {
    /// The variant.
    pub variant: BrokerVariant,
    /// Repetition.
    pub rep: usize,
    /// Per worker.
    pub workers: Vec<WorkerResult>,
    /// Window length, seconds.
    pub window_s: f64,
    /// Budget changes the broker made (utility).
    pub broker_changes: usize,
    /// The broker's log, each line with the seconds since the last worker's fill.
    pub broker_log: Vec<String>,
}

/// A started worker (or the broker): a [`LiveGuest`], which runs it in its own process group
/// (killed on drop) and stamps each output line with the host time it arrived.
struct Worker(LiveGuest);

impl Worker {
    fn spawn(command: Command, label: &str) -> Result<Self, BenchError> {
        LiveGuest::spawn(command, label).map(Self)
    }

    fn lines(&self) -> Vec<(Instant, String)> {
        self.0.lines().into_iter().map(|l| (l.at, l.text)).collect()
    }

    /// When it printed a line starting with `prefix`, if it did.
    fn said(&self, prefix: &str) -> Option<(Instant, String)> {
        self.lines()
            .into_iter()
            .find(|(_, l)| l.starts_with(prefix))
    }

    /// Accesses done by host time `at`, interpolated between its progress lines.
    fn done_at(&self, at: Instant) -> Option<f64> {
        let points: Vec<(Instant, f64)> = self
            .lines()
            .into_iter()
            .filter_map(|(t, l)| {
                let n = l
                    .strip_prefix("progress ")?
                    .split(' ')
                    .nth(1)?
                    .parse()
                    .ok()?;
                Some((t, n))
            })
            .collect();
        let after = points.iter().position(|(t, _)| *t >= at)?;
        if after == 0 {
            return Some(points[0].1);
        }
        let (t0, n0) = points[after - 1];
        let (t1, n1) = points[after];
        let f = (at - t0).as_secs_f64() / (t1 - t0).as_secs_f64().max(1e-9);
        Some(n0 + (n1 - n0) * f)
    }
}

/// Runs every variant `reps` times (the order rotating) and returns the runs.
pub fn broker_eval(
    config: &BrokerEvalConfig,
    mut progress: impl FnMut(&VariantRun),
) -> Result<Vec<VariantRun>, BenchError> {
    let private = private_dir(&config.work_dir, "broker-eval-")?;
    let swap_bytes = config.worker_mib * config.workers.len() as u64 * (1 << 20);
    let kernel_swap = KernelSwapFile::create(private.path(), swap_bytes, config.allow_other_swap)?;
    let mut out = Vec::new();
    let mut seq = 0;
    for rep in 0..config.reps {
        let n = BrokerVariant::ALL.len();
        for i in 0..n {
            let variant = BrokerVariant::ALL[(i + rep) % n];
            seq += 1;
            let dir = run_dir(private.path(), seq as u64)?;
            let run = run_one(config, &dir, variant, rep, seq);
            let _ = fs::remove_dir_all(&dir);
            let run = run?;
            progress(&run);
            out.push(run);
            if interrupt::requested() {
                return Err(BenchError::Interrupted);
            }
        }
    }
    drop(kernel_swap);
    Ok(out)
}

/// One variant: start the workers (and the broker), wait for the window, collect.
fn run_one(
    config: &BrokerEvalConfig,
    dir: &Path,
    variant: BrokerVariant,
    rep: usize,
    seq: usize,
) -> Result<VariantRun, BenchError> {
    let ctl = dir.join("ctl");
    let swap = dir.join("swap");
    for d in [&ctl, &swap] {
        // 0700: memvisor refuses a control directory others can enter.
        fs::DirBuilder::new()
            .mode(0o700)
            .create(d)
            .map_err(|e| BenchError::io("create", d, e))?;
    }
    let n = config.workers.len() as u64;
    let mib = config.worker_mib;
    let group = match variant {
        BrokerVariant::Kernel => Some(MemoryCgroup::create(
            &group_name(seq as u64),
            Some(config.total + (16 << 20) * n),
        )?),
        _ => None,
    };
    let budget = match variant {
        BrokerVariant::Unconstrained => (mib + 64) << 20,
        _ => config.total / n,
    };
    let mut workers = Vec::new();
    for kind in &config.workers {
        let worker_args = [
            "worker".to_string(),
            kind.to_string(),
            mib.to_string(),
            config.seconds.to_string(),
        ];
        let command = match &group {
            Some(g) => {
                // The shell joins the group and becomes the worker (same pid).
                let mut c = Command::new("sh");
                c.arg("-c")
                    .arg(r#"echo $$ > "$0" && exec "$@""#)
                    .arg(g.procs_path())
                    .arg(&config.exe)
                    .args(worker_args);
                c
            }
            None => {
                let mut c = Command::new(&config.memvisor);
                c.env("MEMVISOR_CONTROL_DIR", &ctl)
                    .arg("run")
                    .arg("--budget")
                    .arg(budget.to_string())
                    .arg("--swap-dir")
                    .arg(&swap)
                    .arg("--")
                    .arg(&config.exe)
                    .args(worker_args);
                c
            }
        };
        workers.push(Worker::spawn(
            command,
            &format!("{} worker {kind}", variant.name()),
        )?);
    }
    let broker = match variant {
        BrokerVariant::Utility => {
            let mut c = Command::new(&config.memvisor);
            c.env("MEMVISOR_CONTROL_DIR", &ctl).args([
                "broker",
                "--total",
                &config.total.to_string(),
            ]);
            Some(Worker::spawn(c, "memvisor broker")?)
        }
        _ => None,
    };
    // Every worker filled: the window opens after the warm-up and closes a little before the
    // first worker's time is up.
    let wait = |what: &str, limit: Duration, ready: &dyn Fn() -> bool| -> Result<(), BenchError> {
        let deadline = Instant::now() + limit;
        while !ready() {
            if Instant::now() > deadline || interrupt::requested() {
                return Err(BenchError::Command {
                    command: format!("{} / rep {rep}", variant.name()),
                    detail: format!("{what} did not happen within {limit:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    };
    wait("every worker's fill", Duration::from_secs(300), &|| {
        workers.iter().all(|w| w.said("filled").is_some())
    })?;
    let filled = workers
        .iter()
        .filter_map(|w| w.said("filled").map(|s| s.0))
        .max()
        .unwrap_or_else(Instant::now);
    let first_end = workers
        .iter()
        .filter_map(|w| w.said("filled").map(|s| s.0))
        .min()
        .unwrap_or(filled)
        + Duration::from_secs_f64(config.seconds);
    let open = filled + Duration::from_secs_f64(config.warmup);
    let close = first_end - Duration::from_secs(1);
    if close <= open {
        return Err(BenchError::Command {
            command: format!("{} / rep {rep}", variant.name()),
            detail: "the fills took so long that no window is left: raise --seconds".into(),
        });
    }
    while Instant::now() < close {
        if interrupt::requested() {
            return Err(BenchError::Interrupted);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Counters and budgets as the window closes (every worker still runs).
    let counters: Vec<(u64, Option<u64>)> = workers
        .iter()
        .map(|w| {
            let pid = w.0.pid();
            match variant {
                BrokerVariant::Kernel => (major_faults(pid), None),
                _ => {
                    // `memvisor run` forks the workload: its managed child is the one.
                    let managed =
                        memvisor_control::socket_dir::list_managed_pids(&ctl).unwrap_or_default();
                    let mine = managed.into_iter().find(|p| parent_of(*p) == Some(pid));
                    match mine.map(|p| status_of(&ctl, p)) {
                        Some(Ok(s)) => (s.total(|r| r.page_ins), Some(s.budget_bytes >> 20)),
                        _ => (0, None),
                    }
                }
            }
        })
        .collect();
    wait(
        "every worker's end",
        Duration::from_secs_f64(config.seconds + 120.0),
        &|| workers.iter().all(|w| w.said("done").is_some()),
    )?;
    let window = (close - open).as_secs_f64();
    let mut results = Vec::new();
    for ((w, kind), (page_ins, budget_mib)) in workers.iter().zip(&config.workers).zip(counters) {
        let rate = match (w.done_at(open), w.done_at(close)) {
            (Some(a), Some(b)) => (b - a) / window,
            _ => 0.0,
        };
        let errors = w
            .said("done")
            .and_then(|(_, l)| l.split(' ').nth(2)?.parse().ok())
            .unwrap_or(u64::MAX);
        results.push(WorkerResult {
            kind: kind.to_string(),
            pages_per_s: rate,
            page_ins,
            budget_mib,
            errors,
        });
    }
    let broker_changes = broker.as_ref().map_or(0, |b| {
        b.lines()
            .iter()
            .filter(|(_, l)| l.contains("): budget "))
            .count()
    });
    let broker_log = broker.as_ref().map_or(Vec::new(), |b| {
        b.lines()
            .iter()
            .map(|(t, l)| {
                let s = if *t >= filled {
                    (*t - filled).as_secs_f64()
                } else {
                    -(filled - *t).as_secs_f64()
                };
                format!("{s:+.1}s {l}")
            })
            .collect()
    });
    drop(broker);
    drop(workers);
    drop(group);
    Ok(VariantRun {
        variant,
        rep,
        workers: results,
        window_s: window,
        broker_changes,
        broker_log,
    })
}

/// `majflt` of `/proc/PID/stat` (0 if it is gone).
pub(crate) fn major_faults(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            rest.split_whitespace().nth(9)?.parse().ok()
        })
        .unwrap_or(0)
}

/// The parent pid of `pid`.
pub(crate) fn parent_of(pid: u32) -> Option<u32> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The results as a markdown table: per variant (mean over reps), each worker's throughput,
/// its ratio to unconstrained, page-ins and budget, and the aggregate weighted speedup.
pub fn broker_markdown(runs: &[VariantRun]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let kinds: Vec<String> = runs
        .first()
        .map(|r| r.workers.iter().map(|w| w.kind.clone()).collect())
        .unwrap_or_default();
    let mean = |variant: BrokerVariant, k: usize, f: &dyn Fn(&WorkerResult) -> f64| -> f64 {
        let v: Vec<f64> = runs
            .iter()
            .filter(|r| r.variant == variant)
            .map(|r| f(&r.workers[k]))
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let _ = writeln!(
        out,
        "| variant | {} | aggregate (weighted speedup) | errors |",
        kinds
            .iter()
            .map(|k| format!("{k}: pages/s (x unconstrained), page-ins, budget"))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}---|---|", "---|".repeat(kinds.len()));
    for variant in BrokerVariant::ALL {
        if !runs.iter().any(|r| r.variant == variant) {
            continue;
        }
        let mut cells = Vec::new();
        let mut aggregate = 0.0;
        for (k, kind) in kinds.iter().enumerate() {
            let rate = mean(variant, k, &|w| w.pages_per_s);
            let base = mean(BrokerVariant::Unconstrained, k, &|w| w.pages_per_s);
            let ratio = if base > 0.0 { rate / base } else { 0.0 };
            if kind != "idle" {
                aggregate += ratio;
            }
            let budget = runs
                .iter()
                .filter(|r| r.variant == variant)
                .filter_map(|r| r.workers[k].budget_mib)
                .map(|b| b.to_string())
                .collect::<Vec<_>>();
            cells.push(format!(
                "{:.0} ({:.2}x), {:.0}, {}",
                rate,
                ratio,
                mean(variant, k, &|w| w.page_ins as f64),
                if budget.is_empty() {
                    "-".into()
                } else {
                    format!("{}M", budget.join("/"))
                }
            ));
        }
        let errors: u64 = runs
            .iter()
            .filter(|r| r.variant == variant)
            .flat_map(|r| r.workers.iter().map(|w| w.errors))
            .sum();
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} | {} |",
            variant.name(),
            cells.join(" | "),
            aggregate,
            errors
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_lists_parse_in_order_and_bad_names_name_the_flag() {
        assert_eq!(
            BrokerVariant::parse_list("unconstrained,kernel").unwrap(),
            vec![BrokerVariant::Unconstrained, BrokerVariant::Kernel]
        );
        assert_eq!(
            BrokerVariant::parse_list("utility, equal").unwrap(),
            vec![BrokerVariant::Utility, BrokerVariant::Equal]
        );
        let e = BrokerVariant::parse_list("kernel,swap")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--variants") && e.contains("swap"), "{e}");
        assert!(BrokerVariant::parse_list("kernel,kernel").is_err());
    }
}
