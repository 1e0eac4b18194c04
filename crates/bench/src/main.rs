//! `pager-vs-kernel`: the memvisor pager against the kernel's swap. `run` drives the
//! benchmark, `workload` is one measured process (started by `run`), `check` says whether the
//! kernel baseline can run here. Parsing and error reporting only; see the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use memvisor_bench::byte_size::parse_bytes;
use memvisor_bench::results_file::write_results_file;
use memvisor_bench::{
    csv, drive, preflight, run_workload, summary_markdown, BenchError, DriverArgs, Variant,
    WorkloadArgs, WorkloadSpec,
};

#[derive(Parser)]
#[command(
    name = "pager-vs-kernel",
    about = "memvisor's pager against the kernel's swap"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the benchmark: every workload, variants alternating, REPS times.
    Run(RunArgs),
    /// One workload process (the driver starts these).
    Workload(WorkloadCli),
    /// Check whether the kernel baseline can run here (exit 0), or say why not (exit 2).
    Check {
        /// Swap directory to test swapon in.
        #[arg(long, default_value = "/var/tmp")]
        swap_dir: PathBuf,
        /// Accept other active swap areas.
        #[arg(long)]
        allow_other_swap: bool,
    },
}

#[derive(Args)]
struct RunArgs {
    /// Small sizes and counts, one repetition: a smoke run of a few seconds.
    #[arg(long)]
    quick: bool,
    /// Data set size (default 1G; --quick 64M).
    #[arg(long)]
    size: Option<String>,
    /// Resident budget: memvisor's budget and the kernel's cgroup limit (default 256M; --quick 16M).
    #[arg(long)]
    budget: Option<String>,
    /// Added to the kernel cgroup's limit for the process's own memory (binary, heap, the
    /// random workloads' counters), which the region's budget does not cover either.
    #[arg(long, default_value = "4M")]
    kernel_slack: String,
    /// Directory of both swap files (same disk for both variants).
    #[arg(long, default_value = "/var/tmp")]
    swap_dir: PathBuf,
    /// Workload, repeatable (default: the standard set; see the README).
    #[arg(long = "workload")]
    workloads: Vec<String>,
    /// Variant, repeatable: kernel, memvisor[:chunk=..:policy=..:sample=..:resolve=..:dirty=..]
    /// (default: kernel and memvisor).
    #[arg(long = "variant")]
    variants: Vec<String>,
    /// Repetitions (default 3; --quick 1).
    #[arg(long)]
    reps: Option<u32>,
    /// Output directory.
    #[arg(long, default_value = "target/pager-vs-kernel")]
    out: PathBuf,
    /// Run even if another swap area is active (its I/O then mixes into the baseline).
    #[arg(long)]
    allow_other_swap: bool,
}

#[derive(Args)]
struct WorkloadCli {
    #[arg(long)]
    variant: String,
    #[arg(long)]
    size: String,
    #[arg(long)]
    budget: String,
    #[arg(long)]
    swap_dir: PathBuf,
    #[arg(long)]
    workload: String,
}

/// The standard workloads: full size, or `--quick`.
fn default_workloads(quick: bool) -> &'static [&'static str] {
    if quick {
        &[
            "seq:passes=2",
            "uniform:accesses=1000",
            "zipf:alpha=0.99:accesses=2000",
            "membench:passes=1",
        ]
    } else {
        &[
            "seq:passes=2",
            "uniform:accesses=8000",
            "zipf:alpha=0.99:accesses=8000",
            "membench:passes=2",
        ]
    }
}

fn run(cli: Cli) -> Result<ExitCode, BenchError> {
    match cli.command {
        Cmd::Workload(w) => {
            let args = WorkloadArgs {
                variant: w.variant.parse()?,
                size: parse_bytes("size", &w.size)?,
                budget: parse_bytes("budget", &w.budget)?,
                swap_dir: w.swap_dir,
                workload: w.workload.parse()?,
            };
            let report = run_workload(&args)?;
            println!("{}", serde_json::to_string(&report).unwrap_or_default());
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Check {
            swap_dir,
            allow_other_swap,
        } => match preflight(&swap_dir, allow_other_swap) {
            Ok(()) => {
                println!(
                    "kernel baseline available (swap dir {})",
                    swap_dir.display()
                );
                Ok(ExitCode::SUCCESS)
            }
            Err(BenchError::Unsupported(why)) => {
                println!("kernel baseline unavailable: {why}");
                Ok(ExitCode::from(2))
            }
            Err(e) => Err(e),
        },
        Cmd::Run(r) => {
            let size = parse_bytes(
                "size",
                r.size
                    .as_deref()
                    .unwrap_or(if r.quick { "64M" } else { "1G" }),
            )?;
            let budget = parse_bytes(
                "budget",
                r.budget
                    .as_deref()
                    .unwrap_or(if r.quick { "16M" } else { "256M" }),
            )?;
            let workloads: Vec<WorkloadSpec> = if r.workloads.is_empty() {
                default_workloads(r.quick)
                    .iter()
                    .map(|w| w.parse())
                    .collect::<Result<_, _>>()?
            } else {
                r.workloads
                    .iter()
                    .map(|w| w.parse())
                    .collect::<Result<_, _>>()?
            };
            let variants: Vec<Variant> = if r.variants.is_empty() {
                vec![Variant::KERNEL, "memvisor".parse()?]
            } else {
                r.variants
                    .iter()
                    .map(|v| v.parse())
                    .collect::<Result<_, _>>()?
            };
            let exe = std::env::current_exe()
                .map_err(|e| BenchError::io("locate", "/proc/self/exe", e))?;
            let args = DriverArgs {
                size,
                budget,
                kernel_slack: parse_bytes("kernel slack", &r.kernel_slack)?,
                swap_dir: r.swap_dir,
                workloads,
                variants,
                reps: r.reps.unwrap_or(if r.quick { 1 } else { 3 }),
                out_dir: r.out.clone(),
                allow_other_swap: r.allow_other_swap,
                exe,
            };
            let records = drive(&args)?;
            let md = summary_markdown(&records);
            print!("{md}");
            let write = |name: &str, text: &str| write_results_file(&r.out.join(name), text);
            write("summary.md", &md)?;
            write("results.csv", &csv(&records))?;
            write(
                "results.json",
                &serde_json::to_string_pretty(&records).unwrap_or_default(),
            )?;
            eprintln!("results in {}", r.out.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pager-vs-kernel: {e}");
            ExitCode::FAILURE
        }
    }
}
