//! The workload role: allocate the data set (anonymous memory or a memvisor region), fill it,
//! run the access pattern with every read verified, and report times and counters.

use std::path::PathBuf;
use std::time::Instant;

use crate::bench_error::BenchError;
use crate::counters::{disk_stat_path, field, Counters};
use crate::page_pattern::{DataSet, SharedDataSet, PAGE};
use crate::variant::Variant;
use crate::workload_memory::WorkloadMemory;
use crate::workload_report::{NamedPhaseReport, PhaseReport, WorkloadReport};
use crate::workload_spec::{AccessOrder, WorkloadSpec};

/// What one workload process runs.
#[derive(Debug, Clone)]
pub struct WorkloadArgs {
    /// Who holds the memory.
    pub variant: Variant,
    /// Data set bytes (rounded down to whole 4 KiB pages).
    pub size: usize,
    /// Resident budget (for a region; the kernel variant's limit is the driver's cgroup).
    pub budget: usize,
    /// Swap directory (region swap file; the disk whose counters are read).
    pub swap_dir: PathBuf,
    /// The access pattern.
    pub workload: WorkloadSpec,
}

/// Runs the workload and returns its report; a verification failure is an error.
pub fn run_workload(args: &WorkloadArgs) -> Result<WorkloadReport, BenchError> {
    let size = args.size / PAGE * PAGE;
    if size == 0 {
        return Err(BenchError::bad(
            "size",
            args.size.to_string(),
            "at least one 4 KiB page",
        ));
    }
    let pages = (size / PAGE) as u64;
    args.workload.validate(pages)?;
    let disk = disk_stat_path(&args.swap_dir);
    let loadavg_start = std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string();
    // Everything the run needs besides the data set is allocated before the fill, so the
    // kernel variant's cgroup sees it from the start.
    let phases = args.workload.order().phases();
    let traces = phases
        .iter()
        .map(|phase| match phase.order.trace_spec(pages) {
            Some(t) => t
                .parse::<memvisor_trace::WorkloadSpec>()
                .map(Some)
                .map_err(|e| BenchError::bad("workload", args.workload.to_string(), e.to_string())),
            None => Ok(None),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let threads = args.workload.threads();
    // Modifications made to each page so far, where pages are not all modified equally often
    // (random orders; a sequential pass alone modifies each page once).
    let mut shadow: Vec<u32> = if traces.iter().any(Option::is_some) && args.workload.writes() {
        vec![0; pages as usize]
    } else {
        Vec::new()
    };
    // With several threads (one random order): each thread's accesses (page, modifications
    // so far), worked out now, in trace order.
    let mut thread_accesses: Vec<Vec<(u64, u64)>> = vec![Vec::new(); threads];
    if let (Some(Some(t)), true) = (traces.first(), threads > 1) {
        for req in t.requests() {
            let p = req.unit;
            let count = take_count(&mut shadow, p).unwrap_or(0);
            thread_accesses[(p % threads as u64) as usize].push((p, count));
        }
    }
    let mut memory = WorkloadMemory::new(&args.variant, size, args.budget, &args.swap_dir)?;

    let c0 = Counters::now(disk.as_deref())?;
    let r0 = memory.region_counters();
    let t0 = Instant::now();
    DataSet::new(memory.words()).fill();
    let fill_secs = t0.elapsed().as_secs_f64();
    let c1 = Counters::now(disk.as_deref())?;
    let r1 = memory.region_counters();

    let words = args.workload.words();
    let write = args.workload.writes();
    let t1 = Instant::now();
    let mut accesses = 0u64;
    let mut phase_reports = Vec::new();
    if threads > 1 {
        accesses = touch_in_threads(
            &SharedDataSet::new(memory.words()),
            &thread_accesses,
            words,
            write,
        )?;
    } else {
        for (phase, trace) in phases.iter().zip(&traces) {
            let (tp, cp, rp) = (
                Instant::now(),
                Counters::now(disk.as_deref())?,
                memory.region_counters(),
            );
            let mut data = DataSet::new(memory.words());
            let n = match (&phase.order, trace) {
                (AccessOrder::Sequential { passes }, _) => {
                    for pass in 0..*passes {
                        for p in 0..pages {
                            let unshadowed = if write { pass } else { 0 };
                            let count = take_count(&mut shadow, p).unwrap_or(unshadowed);
                            data.touch(p, count, words, write)?;
                        }
                    }
                    passes * pages
                }
                (_, Some(t)) => {
                    let mut n = 0;
                    for req in t.requests() {
                        n += 1;
                        let p = req.unit;
                        let count = take_count(&mut shadow, p).unwrap_or(0);
                        data.touch(p, count, words, write)?;
                    }
                    n
                }
                (_, None) => unreachable!("random orders have a trace"),
            };
            accesses += n;
            if phases.len() > 1 {
                let (cq, rq) = (Counters::now(disk.as_deref())?, memory.region_counters());
                phase_reports.push(NamedPhaseReport {
                    name: phase.name.to_string(),
                    report: PhaseReport {
                        secs: tp.elapsed().as_secs_f64(),
                        accesses: n,
                        counters: cq.since(&cp),
                        region: rq.zip(rp).map(|(b, a)| b.since(&a)),
                    },
                });
            }
        }
    }
    let run_secs = t1.elapsed().as_secs_f64();
    let c2 = Counters::now(disk.as_deref())?;
    let r2 = memory.region_counters();

    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let stats = memory.region().map(|r| r.stats());
    let region_errors = memory
        .region()
        .map(|r| r.take_errors().iter().map(|e| e.to_string()).collect())
        .unwrap_or_default();
    Ok(WorkloadReport {
        variant: args.variant.to_string(),
        workload: args.workload.to_string(),
        size: size as u64,
        budget: args.budget as u64,
        pages,
        pid: std::process::id(),
        loadavg_start,
        fill: PhaseReport {
            secs: fill_secs,
            accesses: pages,
            counters: c1.since(&c0),
            region: r1.zip(r0).map(|(b, a)| b.since(&a)),
        },
        run: PhaseReport {
            secs: run_secs,
            accesses,
            counters: c2.since(&c1),
            region: r2.zip(r1).map(|(b, a)| b.since(&a)),
        },
        phases: phase_reports,
        verified: true,
        vm_hwm_bytes: field(&status, "VmHWM:") * 1024,
        page_in_p50_nanos: stats.map_or(0, |s| s.page_in_p50_nanos),
        page_in_p99_nanos: stats.map_or(0, |s| s.page_in_p99_nanos),
        page_in_max_nanos: stats.map_or(0, |s| s.page_in_max_nanos),
        region_errors,
        swap_direct: memory.region().map(|r| r.swap_is_direct()),
    })
}

/// The modifications page `page` has had so far, counting this access as one more; `None`
/// when modifications are not shadowed (`shadow` empty).
fn take_count(shadow: &mut [u32], page: u64) -> Option<u64> {
    let c = shadow.get_mut(page as usize)?;
    *c += 1;
    Some(u64::from(*c - 1))
}

/// Makes each thread's accesses on its own thread, all at once; returns how many were made.
fn touch_in_threads(
    data: &SharedDataSet<'_>,
    per_thread: &[Vec<(u64, u64)>],
    words: usize,
    write: bool,
) -> Result<u64, BenchError> {
    std::thread::scope(|s| {
        let handles: Vec<_> = per_thread
            .iter()
            .map(|list| {
                s.spawn(move || {
                    for &(page, count) in list {
                        data.touch(page, count, words, write)?;
                    }
                    Ok::<u64, BenchError>(list.len() as u64)
                })
            })
            .collect();
        let mut total = 0;
        for h in handles {
            total += h.join().map_err(|_| BenchError::ThreadPanicked)??;
        }
        Ok(total)
    })
}
