//! `memvisor dedup`: the memory fingerprint of processes (duplicate pages within and across
//! them, zero pages, lookahead hits), what the kernel's KSM merges now, and optionally a control
//! loop steering ksmd's rate from the measured arrival of new duplicates.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use memvisor_dedup::{
    DedupError, KsmSettingsGuard, KsmStatus, KsmTuner, KsmTunerConfig, PassStats, ProcessKsmStat,
    ProcessMemory, Scanner, ScannerConfig, PAGE_SIZE,
};

/// Arguments of `memvisor dedup`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  memvisor dedup $(pgrep qemu-system)\n  memvisor dedup --ksm-tune --interval 10 --passes 30 $(pgrep qemu-system)"
)]
pub struct DedupArgs {
    /// Processes to scan.
    #[arg(value_name = "PID", required = true)]
    pids: Vec<i32>,
    /// Also scan file-backed mappings (libraries, mapped files), not only anonymous and memfd
    /// memory.
    #[arg(long)]
    include_files: bool,
    /// Disable the lookahead (try page X+1 against Y+1 after X matched Y).
    #[arg(long)]
    no_lookahead: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Steer ksmd's pages_to_scan and sleep_millisecs from the rate of new duplicates (root);
    /// the settings are restored when the passes end or on SIGINT/SIGTERM.
    #[arg(long)]
    ksm_tune: bool,
    /// Seconds between passes.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS", value_parser = crate::seconds_arg::seconds)]
    interval: f64,
    /// With --ksm-tune: seconds to wait for another process holding the KSM settings lock
    /// (in /run/memvisor) before giving up.
    #[arg(long, default_value_t = 120.0, value_name = "SECONDS")]
    ksm_lock_wait: f64,
    /// Number of passes (default: 1, or 30 with --ksm-tune).
    #[arg(long, value_name = "N")]
    passes: Option<u32>,
}

/// Errors of `memvisor dedup`.
#[derive(Debug, thiserror::Error)]
pub enum DedupCommandError {
    /// A library error.
    #[error(transparent)]
    Dedup(#[from] DedupError),
    /// Some processes could not be scanned (each was reported).
    #[error("{failed} of {total} processes could not be scanned (see above)")]
    SomeFailed {
        /// How many failed.
        failed: usize,
        /// How many were given.
        total: usize,
    },
    /// A bad argument.
    #[error("{0}")]
    Argument(String),
}

/// Set by SIGINT or SIGTERM during `--ksm-tune`: the loop ends and the KSM settings are restored.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

fn catch_interrupts() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic (async-signal-safe); `sigaction` gets a
        // zeroed, then filled, struct that outlives the call.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_interrupt as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Sleeps `d`, waking early if interrupted; returns whether it was.
fn sleep_unless_interrupted(d: Duration) -> bool {
    let end = Instant::now() + d;
    while !INTERRUPTED.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= end {
            return false;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(50)));
    }
    true
}

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "?".into())
}

fn mib(pages: u64) -> f64 {
    (pages * PAGE_SIZE as u64) as f64 / (1 << 20) as f64
}

/// Runs `memvisor dedup`.
pub fn run(args: DedupArgs) -> Result<(), DedupCommandError> {
    if !(args.ksm_lock_wait >= 0.0 && args.ksm_lock_wait < 1e9) {
        return Err(DedupCommandError::Argument(format!(
            "--ksm-lock-wait {} must be a number of seconds, 0 or more",
            args.ksm_lock_wait
        )));
    }
    let passes = args
        .passes
        .unwrap_or(if args.ksm_tune { 30 } else { 1 })
        .max(1);
    let mut scanner = Scanner::new(ScannerConfig {
        lookahead: !args.no_lookahead,
        ..Default::default()
    });
    // Sources that cannot be opened are reported and skipped; the others are scanned.
    let mut open_errors: Vec<(i32, String)> = Vec::new();
    let mut scanned: Vec<(i32, u32)> = Vec::new();
    for &pid in &args.pids {
        match ProcessMemory::open(pid) {
            Ok(m) => {
                let id = scanner.add_source(Box::new(m.include_files(args.include_files)));
                scanned.push((pid, id));
            }
            Err(e) => {
                eprintln!("memvisor: {e}");
                open_errors.push((pid, e.to_string()));
            }
        }
    }
    let guard = if args.ksm_tune {
        catch_interrupts();
        Some(KsmSettingsGuard::acquire_within(Duration::from_secs_f64(
            args.ksm_lock_wait,
        ))?)
    } else {
        None
    };
    let mut tuner = KsmTuner::new(KsmTunerConfig::default());
    let mut last_sharing = KsmStatus::read().ok().map(|k| k.pages_sharing);
    let mut last_time = Instant::now();
    let mut stats = PassStats::default();
    for pass in 0..passes {
        if pass > 0 && sleep_unless_interrupted(Duration::from_secs_f64(args.interval)) {
            eprintln!("memvisor: interrupted; KSM settings restored");
            break;
        }
        stats = scanner.pass();
        if args.ksm_tune {
            let ksm = KsmStatus::read()?;
            let merged = last_sharing.map_or(0, |l| ksm.pages_sharing.saturating_sub(l));
            last_sharing = Some(ksm.pages_sharing);
            let unmerged = stats.new_duplicates.saturating_sub(stats.already_shared);
            let tracked =
                ksm.pages_shared + ksm.pages_sharing + ksm.pages_unshared + ksm.pages_volatile;
            let mergeable = if tracked > 0 {
                tracked
            } else {
                stats.pages_read
            };
            let now = Instant::now();
            let step = tuner.step(unmerged, merged, mergeable, now - last_time);
            last_time = now;
            step.settings.apply()?;
            eprintln!(
                "ksm-tune pass {}: {} unmerged duplicates, {} merged by KSM, {:.0} new/s, ksmd {} pages every {} ms ({:.0} pages/s)",
                pass + 1,
                unmerged,
                merged,
                step.duplicate_rate,
                step.settings.pages_to_scan,
                step.settings.sleep_millisecs,
                step.scan_rate
            );
        }
    }
    drop(guard);

    let reports = scanner.reports();
    let summary = scanner.summary();
    let ksm = KsmStatus::read().ok();
    let mut failed = open_errors.len();
    let mut rows = Vec::new();
    for &(pid, id) in &scanned {
        let r = &reports[id as usize];
        if r.error.is_some() {
            failed += 1;
        }
        rows.push((pid, r, ProcessKsmStat::read(pid).ok()));
    }
    let gbps = |pages: u64, d: Duration| {
        (pages * PAGE_SIZE as u64) as f64 / d.as_secs_f64().max(1e-9) / 1e9
    };
    if args.json {
        let procs: Vec<serde_json::Value> = rows
            .iter()
            .map(|(pid, r, k)| {
                serde_json::json!({
                    "pid": pid, "name": comm(*pid), "pages_read": r.pages_read,
                    "zero_pages": r.zero_pages, "absent_pages": r.absent_pages,
                    "unreadable_pages": r.unreadable_pages, "indexed": r.index.pages,
                    "unique": r.index.unique, "duplicates_within": r.index.duplicates_within,
                    "shared_with_others": r.index.shared_with_others,
                    "ksm_merging_pages": k.map(|k| k.merging_pages),
                    "ksm_zero_pages": k.map(|k| k.zero_pages),
                    "error": r.error,
                })
            })
            .chain(
                open_errors
                    .iter()
                    .map(|(pid, e)| serde_json::json!({"pid": pid, "error": e})),
            )
            .collect();
        let v = serde_json::json!({
            "processes": procs,
            "indexed_pages": summary.pages, "distinct": summary.distinct,
            "duplicate_pages": summary.duplicate_pages,
            "duplicates_within": summary.within_sources,
            "duplicates_across": summary.across_sources,
            "already_sharing_frame": stats.already_shared,
            "zero_pages": stats.zero_pages,
            "lookahead_hits": stats.lookahead_hits, "lookahead_misses": stats.lookahead_misses,
            "hash_mismatches": stats.hash_mismatches,
            "vanished_matches": stats.vanished_matches, "pages_hashed": stats.pages_hashed,
            "wall_s": stats.wall.as_secs_f64(), "cpu_s": stats.cpu.as_secs_f64(),
            "ksm": ksm.map(|k| serde_json::json!({
                "run": k.run, "pages_shared": k.pages_shared, "pages_sharing": k.pages_sharing,
                "pages_unshared": k.pages_unshared, "pages_volatile": k.pages_volatile,
                "full_scans": k.full_scans, "pages_to_scan": k.pages_to_scan,
                "sleep_millisecs": k.sleep_millisecs, "ksm_zero_pages": k.ksm_zero_pages,
            })),
        });
        println!("{v:#}");
    } else {
        println!(
            "{:>8} {:<16} {:>10} {:>9} {:>10} {:>11} {:>12} {:>12}",
            "pid", "name", "pages", "zero", "unique", "dup-within", "shared-other", "ksm-merging"
        );
        for (pid, r, k) in &rows {
            println!(
                "{:>8} {:<16} {:>10} {:>9} {:>10} {:>11} {:>12} {:>12}{}",
                pid,
                comm(*pid),
                r.pages_read,
                r.zero_pages,
                r.index.unique,
                r.index.duplicates_within,
                r.index.shared_with_others,
                k.map_or("-".into(), |k| k.merging_pages.to_string()),
                r.error
                    .as_deref()
                    .map_or(String::new(), |e| format!("  error: {e}"))
            );
        }
        for (pid, e) in &open_errors {
            println!("{pid:>8} error: {e}");
        }
        println!(
            "duplicates: {} pages ({:.1} MiB) could be freed by merging: {} within processes, {} across; {} already share a frame (KSM or same file page)",
            summary.duplicate_pages,
            mib(summary.duplicate_pages),
            summary.within_sources,
            summary.across_sources,
            stats.already_shared
        );
        let vanished = if stats.vanished_matches > 0 {
            format!(
                "; {} hash matches not compared (the other page's process exited or the page vanished)",
                stats.vanished_matches
            )
        } else {
            String::new()
        };
        println!(
            "indexed {} non-zero pages, {} distinct; {} zero pages; lookahead {} hits, {} misses; {} hash matches with different bytes{vanished}",
            summary.pages,
            summary.distinct,
            stats.zero_pages,
            stats.lookahead_hits,
            stats.lookahead_misses,
            stats.hash_mismatches
        );
        println!(
            "scan: {} pages in {:.3} s wall, {:.3} s CPU ({:.2} GB/s per core)",
            stats.pages_read,
            stats.wall.as_secs_f64(),
            stats.cpu.as_secs_f64(),
            gbps(stats.pages_read, stats.cpu)
        );
        match ksm {
            Some(k) => println!(
                "kernel KSM: run={} pages_shared={} pages_sharing={} ({:.1} MiB saved) unshared={} volatile={} full_scans={} (pages_to_scan={} sleep_millisecs={})",
                k.run,
                k.pages_shared,
                k.pages_sharing,
                mib(k.pages_sharing),
                k.pages_unshared,
                k.pages_volatile,
                k.full_scans,
                k.pages_to_scan,
                k.sleep_millisecs
            ),
            None => println!("kernel KSM: not available"),
        }
    }
    if failed > 0 {
        return Err(DedupCommandError::SomeFailed {
            failed,
            total: args.pids.len(),
        });
    }
    Ok(())
}
