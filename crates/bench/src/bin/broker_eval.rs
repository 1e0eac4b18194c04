//! `broker-eval`: four processes (or, with `--guests`, four TCG guests) with different access
//! patterns under one memory total, divided by `memvisor broker` (utility, defaults), by an
//! equal split, and by the kernel (issue 12). Parsing and error reporting only; see
//! `memvisor_bench::broker_eval` and `memvisor_bench::broker_eval_guests`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memvisor_bench::broker_eval::{broker_eval, broker_markdown, BrokerEvalConfig, BrokerVariant};
use memvisor_bench::broker_eval_guests::{guest_broker_eval, GuestBrokerEvalConfig};
use memvisor_bench::broker_eval_guests_report::guest_broker_markdown;
use memvisor_bench::broker_eval_worker::{run_worker, WorkerKind};
use memvisor_bench::managed_process::memvisor_next_to;
use memvisor_bench::results_file::{create_results_dir, write_results_pair};
use memvisor_bench::{interrupt, BenchError};
use memvisor_control::ByteSize;
use memvisor_testvm::GuestImage;

#[derive(Parser)]
#[command(
    name = "broker-eval",
    about = "Four processes (stream, zipf, a loop, idle), or four TCG guests (--guests: stream, zipf, disk, idle), under one memory total: memvisor broker (utility), an equal split, the kernel"
)]
struct Cli {
    #[command(subcommand)]
    worker: Option<Worker>,
    /// 45 s runs with 15 s of warm-up instead of 90 and 30 (the smoke test; processes only).
    #[arg(long, conflicts_with = "guests")]
    quick: bool,
    /// Repetitions (the variant order rotates).
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// The memory total [default: 640M; with --guests 512M].
    #[arg(long)]
    total: Option<String>,
    /// Each worker's memory, MiB (processes).
    #[arg(long, default_value_t = 384, conflicts_with = "guests")]
    worker_mib: u64,
    /// Four real TCG guests instead of processes: stream, zipf, a disk read again and again,
    /// idle.
    #[arg(long)]
    guests: bool,
    /// --guests: each guest's RAM, MiB.
    #[arg(long, default_value_t = 256, requires = "guests")]
    guest_mib: u64,
    /// --guests: the memory of the stream and zipf guests' workloads, MiB.
    #[arg(long, default_value_t = 160, requires = "guests")]
    mem_mib: u64,
    /// --guests: each guest's disk image, MiB (the disk guest reads all of it, repeatedly).
    #[arg(long, default_value_t = 160, requires = "guests")]
    disk_mib: u64,
    /// --guests: how long each workload runs, seconds.
    #[arg(long, default_value_t = 110, requires = "guests")]
    seconds: u64,
    /// --guests: seconds from the last guest's start to the window (the broker settles).
    #[arg(long, default_value_t = 40.0, requires = "guests")]
    warmup: f64,
    /// --guests: the kernel's group gets this per QEMU on top of the total (QEMU's own
    /// memory, outside memvisor's budgets).
    #[arg(long, default_value = "96M", requires = "guests")]
    qemu_allowance: String,
    /// --guests: the variants to run (comma-separated: unconstrained, equal, utility, kernel);
    /// ratios need unconstrained among them.
    #[arg(
        long,
        default_value = "unconstrained,equal,utility,kernel",
        requires = "guests"
    )]
    variants: String,
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
    let default_total = if cli.guests { "512M" } else { "640M" };
    let total = size("--total", cli.total.as_deref().unwrap_or(default_total))?;
    if cli.guests {
        return run_guests(&cli, memvisor_next_to(&exe), total);
    }
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

/// A size flag's value in bytes.
fn size(what: &'static str, value: &str) -> Result<u64, BenchError> {
    match ByteSize::parse(value) {
        Ok(ByteSize::Bytes(b)) => Ok(b),
        _ => Err(BenchError::bad(what, value, "expected a size such as 640M")),
    }
}

/// `--guests`: the four TCG guests.
fn run_guests(cli: &Cli, memvisor: PathBuf, total: u64) -> Result<(), BenchError> {
    let config = GuestBrokerEvalConfig {
        memvisor,
        work_dir: cli.work_dir.clone(),
        guest_mib: cli.guest_mib,
        mem_mib: cli.mem_mib,
        disk_mib: cli.disk_mib,
        total,
        qemu_allowance: size("--qemu-allowance", &cli.qemu_allowance)?,
        seconds: cli.seconds,
        warmup_secs: cli.warmup,
        reps: cli.reps,
        variants: BrokerVariant::parse_list(&cli.variants)?,
        allow_other_swap: cli.allow_other_swap,
    };
    config.validate()?;
    let image = GuestImage::locate_or_build().map_err(|source| BenchError::Guest {
        run: "guest image".into(),
        source,
    })?;
    let runs = guest_broker_eval(&config, &image, |r| {
        let cells: Vec<String> = r
            .fleet
            .per_guest
            .iter()
            .map(|g| {
                format!(
                    "{:.0}/s in={} budget={}",
                    g.reads_per_s,
                    g.page_ins,
                    g.budget_mib.map_or("-".into(), |b| format!("{b:.0}M"))
                )
            })
            .collect();
        eprintln!(
            "broker-eval: {} rep {}: window {:.0} s, broker changes {}: {}",
            r.variant.name(),
            r.rep,
            r.fleet.window_s,
            r.fleet.broker_changes,
            cells.join("; ")
        );
    })?;
    let md = guest_broker_markdown(&config, &runs);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_of_the_other_mode_are_refused() {
        let parse = |args: &[&str]| Cli::try_parse_from([&["broker-eval"], args].concat());
        assert!(parse(&[]).is_ok());
        assert!(parse(&["--guests"]).is_ok());
        assert!(parse(&["--guests", "--seconds", "30", "--variants", "kernel"]).is_ok());
        assert!(parse(&["--quick", "--worker-mib", "256"]).is_ok());
        // Processes only with --guests, guests only without it: an error, not ignored.
        assert!(parse(&["--guests", "--quick"]).is_err());
        assert!(parse(&["--guests", "--worker-mib", "256"]).is_err());
        assert!(parse(&["--seconds", "30"]).is_err());
        assert!(parse(&["--variants", "kernel"]).is_err());
    }
}
