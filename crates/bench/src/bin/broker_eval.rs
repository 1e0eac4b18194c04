//! `broker-eval`: four processes with different access patterns under one memory total,
//! divided by `memvisor broker` (utility, defaults), by an equal split, and by the kernel
//! (issue 12). Parsing and error reporting only; see `memvisor_bench::broker_eval`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memvisor_bench::broker_eval::{broker_eval, broker_markdown, BrokerEvalConfig};
use memvisor_bench::broker_eval_worker::{run_worker, WorkerKind};
use memvisor_bench::managed_process::memvisor_next_to;
use memvisor_bench::results_file::{create_results_dir, write_results_pair};
use memvisor_bench::{interrupt, BenchError};
use memvisor_control::ByteSize;

#[derive(Parser)]
#[command(
    name = "broker-eval",
    about = "Four processes (stream, zipf, a loop, idle) under one memory total: memvisor broker (utility), an equal split, the kernel"
)]
struct Cli {
    #[command(subcommand)]
    worker: Option<Worker>,
    /// 45 s runs with 15 s of warm-up instead of 90 and 30 (the smoke test).
    #[arg(long)]
    quick: bool,
    /// Repetitions (the variant order rotates).
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// The memory total.
    #[arg(long, default_value = "640M")]
    total: String,
    /// Each worker's memory, MiB.
    #[arg(long, default_value_t = 384)]
    worker_mib: u64,
    /// Where the run's private directory (swap files, sockets) goes.
    #[arg(long, default_value = "target/broker-eval")]
    work_dir: PathBuf,
    /// Where results.md and results.json go.
    #[arg(long, default_value = "target/broker-eval")]
    out_dir: PathBuf,
    /// Run the kernel variant even if another swap area is active.
    #[arg(long)]
    allow_other_swap: bool,
}

#[derive(Subcommand)]
enum Worker {
    /// One worker (the benchmark starts these).
    Worker {
        /// stream, zipf, idle or loop:MIB.
        kind: String,
        /// Its memory, MiB.
        mib: u64,
        /// Seconds to run after the fill.
        seconds: f64,
    },
}

fn run(cli: Cli) -> Result<(), BenchError> {
    if let Some(Worker::Worker { kind, mib, seconds }) = cli.worker {
        return run_worker(&kind.parse()?, mib, seconds);
    }
    interrupt::install();
    let exe = std::env::current_exe().map_err(|e| BenchError::io("locate", "/proc/self/exe", e))?;
    let total = match ByteSize::parse(&cli.total) {
        Ok(ByteSize::Bytes(b)) => b,
        _ => {
            return Err(BenchError::BadArgument {
                what: "--total",
                value: cli.total.clone(),
                reason: "expected a size such as 640M".into(),
            })
        }
    };
    let (seconds, warmup) = if cli.quick {
        (45.0, 15.0)
    } else {
        (90.0, 30.0)
    };
    let config = BrokerEvalConfig {
        memvisor: memvisor_next_to(&exe),
        exe,
        work_dir: cli.work_dir.clone(),
        workers: ["stream", "zipf", "loop:224", "idle"]
            .iter()
            .map(|k| k.parse::<WorkerKind>())
            .collect::<Result<_, _>>()?,
        worker_mib: cli.worker_mib,
        total,
        seconds,
        warmup,
        reps: cli.reps,
        allow_other_swap: cli.allow_other_swap,
    };
    let runs = broker_eval(&config, |r| {
        let cells: Vec<String> = r
            .workers
            .iter()
            .map(|w| {
                format!(
                    "{} {:.0}/s in={} budget={}",
                    w.kind,
                    w.pages_per_s,
                    w.page_ins,
                    w.budget_mib.map_or("-".into(), |b| format!("{b}M"))
                )
            })
            .collect();
        eprintln!(
            "broker-eval: {} rep {}: window {:.0} s, broker changes {}: {}",
            r.variant.name(),
            r.rep,
            r.window_s,
            r.broker_changes,
            cells.join("; ")
        );
    })?;
    let md = broker_markdown(&runs);
    print!("{md}");
    create_results_dir(&cli.out_dir)?;
    let json = serde_json::to_string_pretty(&runs).unwrap_or_default();
    write_results_pair(&cli.out_dir, &md, &json)?;
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("broker-eval: error: {e}");
            ExitCode::FAILURE
        }
    }
}
