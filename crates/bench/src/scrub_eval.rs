//! [`scrub_eval`]: the whole evaluation: one disk image, every pattern × policy as one guest
//! run, and the reports (Markdown table, CSV samples, JSON, SVG) written to the output
//! directory.

use std::fs;
use std::path::PathBuf;

use memvisor_testvm::GuestImage;

use crate::results_file::{create_results_dir, write_results_file};
use serde::Serialize;

use crate::bench_error::BenchError;
use crate::host_cache_plot::host_cache_svg;
use crate::interrupt;
use crate::scrub_eval_config::ScrubEvalConfig;
use crate::scrub_eval_report::{scrub_eval_csv, scrub_eval_markdown};
use crate::scrub_eval_run::{run_one, EvalRun, RunPolicy};

/// What an evaluation produced.
#[derive(Debug, Clone, Serialize)]
pub struct ScrubEvalResult {
    /// The driver's pid (names its cgroups `memvisor-kbench-PID-N` and its image).
    pub pid: u32,
    /// Guest RAM, image, host-cache allowance, overhead and cgroup limit, in MiB.
    pub guest_mib: u64,
    /// Image size, MiB.
    pub image_mib: u64,
    /// Host-cache allowance, MiB.
    pub host_cache_mib: u64,
    /// QEMU overhead allowance, MiB.
    pub overhead_mib: u64,
    /// The cgroup limit, MiB.
    pub cgroup_limit_mib: u64,
    /// Seconds of the measured phase.
    pub measure_s: f64,
    /// `/proc/loadavg` before and after.
    pub loadavg_before: String,
    /// See `loadavg_before`.
    pub loadavg_after: String,
    /// Every run.
    pub runs: Vec<EvalRun>,
    /// The files written.
    pub files: Vec<PathBuf>,
}

/// Runs the evaluation and writes `scrub-eval.{md,csv,json,svg}` into `config.out_dir`.
pub fn scrub_eval(config: &ScrubEvalConfig) -> Result<ScrubEvalResult, BenchError> {
    interrupt::install();
    let image = GuestImage::locate_or_build().map_err(|source| BenchError::Guest {
        run: "set-up".into(),
        source,
    })?;
    create_results_dir(&config.work_dir)?;
    create_results_dir(&config.out_dir)?;
    let disk = config
        .work_dir
        .canonicalize()
        .map_err(|e| BenchError::io("resolve work directory", &config.work_dir, e))?
        .join(format!("scrub-eval-{}.img", std::process::id()));
    image
        .make_disk_image(&disk, config.image_mib)
        .map_err(|source| BenchError::Guest {
            run: "set-up".into(),
            source,
        })?;
    let loadavg_before = loadavg();
    let mut runs = Vec::new();
    let mut seq = 0;
    let outcome = (|| -> Result<(), BenchError> {
        for &pattern in &config.patterns {
            let managed = config.managed.iter().map(|&m| RunPolicy::Managed(m));
            for policy in config
                .policies
                .iter()
                .map(|&p| RunPolicy::Host(p))
                .chain(managed)
            {
                seq += 1;
                eprintln!("scrub-eval: {policy} / {pattern} ...");
                let run = run_one(config, &image, &disk, policy, pattern, seq)?;
                eprintln!(
                    "scrub-eval: {policy} / {pattern}: host cache {:.1} MiB, hit ratio {:.3}, guest {:.2} MB/s, policy CPU {:.2} s",
                    run.mean_host_cache_mib, run.host_hit_ratio, run.guest_mbps, run.counters.cpu_s
                );
                runs.push(run);
            }
        }
        Ok(())
    })();
    let _ = fs::remove_file(&disk);
    outcome?;
    let loadavg_after = loadavg();

    let subtitle = format!(
        "one {} MiB guest (TCG) reading its {} MiB image, QEMU in a {} MiB memory cgroup; load {} → {}",
        config.guest_mib,
        config.image_mib,
        config.cgroup_limit() >> 20,
        loadavg_before,
        loadavg_after
    );
    let files = [
        ("scrub-eval.md", scrub_eval_markdown(&runs)),
        ("scrub-eval.csv", scrub_eval_csv(&runs)),
        ("scrub-eval.svg", host_cache_svg(&runs, &subtitle)),
    ];
    let mut written = Vec::new();
    for (name, text) in files {
        let path = config.out_dir.join(name);
        write_results_file(&path, &text)?;
        written.push(path);
    }
    let json_path = config.out_dir.join("scrub-eval.json");
    written.push(json_path.clone());
    let result = ScrubEvalResult {
        pid: std::process::id(),
        guest_mib: config.guest_mib,
        image_mib: config.image_mib,
        host_cache_mib: config.host_cache_mib,
        overhead_mib: config.overhead_mib,
        cgroup_limit_mib: config.cgroup_limit() >> 20,
        measure_s: config.measure.as_secs_f64(),
        loadavg_before,
        loadavg_after,
        runs,
        files: written,
    };
    let json = serde_json::to_string_pretty(&result)
        .map_err(|e| BenchError::bad("report", "scrub-eval.json", e.to_string()))?;
    write_results_file(&json_path, &json)?;
    Ok(result)
}

/// The first three fields of `/proc/loadavg`.
fn loadavg() -> String {
    fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}
