//! `density-eval`: seed 001's density experiment (issue 12): the most identical TCG guests that
//! each keep a fraction of their unconstrained throughput under one host memory total,
//! memvisor with its broker against the kernel. Parsing and error reporting only; see
//! `memvisor_bench::density_eval`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use memvisor_bench::density_eval::density_eval;
use memvisor_bench::density_eval_config::{
    parse_guest_counts, parse_keep, parse_run_secs, DensityEvalConfig,
};
use memvisor_bench::density_eval_report::{density_json, density_markdown};
use memvisor_bench::managed_process::memvisor_next_to;
use memvisor_bench::results_file::{create_results_dir, write_results_pair};
use memvisor_bench::{interrupt, BenchError};
use memvisor_testvm::GuestImage;

#[derive(Parser)]
#[command(
    name = "density-eval",
    about = "The most identical TCG guests that each keep 80% of their unconstrained throughput under one memory total: memvisor with its broker against the kernel"
)]
struct Cli {
    /// Smoke run: 128 MiB guests, 160 MiB disks, --total 256M, 2 and 3 guests, 40 s runs in
    /// 5 s phases, 15 s warm-up, one repetition (the other flags still apply).
    #[arg(long)]
    quick: bool,
    /// The host memory total [default: 768M; quick 256M].
    #[arg(long, allow_hyphen_values = true)]
    total: Option<String>,
    /// Guest counts to sweep, comma-separated [default: 2,3,4,5,6; quick 2,3].
    #[arg(long, allow_hyphen_values = true)]
    guests: Option<String>,
    /// The fraction of its unconstrained throughput every guest must keep.
    #[arg(long, default_value = "0.8", allow_hyphen_values = true)]
    keep: String,
    /// Guest RAM, MiB [default: 192; quick 128].
    #[arg(long, allow_hyphen_values = true)]
    guest_mib: Option<String>,
    /// Each guest's disk image, MiB [default: 256; quick 160].
    #[arg(long, allow_hyphen_values = true)]
    disk_mib: Option<String>,
    /// How long each guest's workload runs, seconds, a multiple of the phase (10 s; quick 5 s)
    /// [default: 150; quick 40].
    #[arg(long, allow_hyphen_values = true)]
    seconds: Option<String>,
    /// Seconds after the last guest's workload started before the window opens [default: 45;
    /// quick 15].
    #[arg(long, allow_hyphen_values = true)]
    warmup: Option<String>,
    /// Reads a second each guest asks for (paced, open loop; the report adds each guest's
    /// p99 read latency) [default: as fast as it can].
    #[arg(long, allow_hyphen_values = true)]
    rate: Option<String>,
    /// The guests read uniformly random blocks, not Zipf 0.99: the whole disk is the working
    /// set (a disk smaller than guest RAM gives a working set of known size).
    #[arg(long)]
    uniform: bool,
    /// Each guest first reads its whole disk once, as fast as it can, so that its page cache
    /// fills its RAM before the measured phases (the warm-up must cover it).
    #[arg(long)]
    fill: bool,
    /// Kernel variant: memory of each QEMU itself (heap, TCG's code buffer) its group allows
    /// on top of the total (memvisor's budgets do not count it either).
    #[arg(long, default_value = "96M", allow_hyphen_values = true)]
    qemu_allowance: String,
    /// Memvisor variant: memory per guest its broker's total gets on top of the total, for the
    /// part of QEMU's own memory memvisor pages under its budgets (TCG's code buffer), which
    /// --qemu-allowance covers for the kernel
    #[arg(long, default_value = "0", allow_hyphen_values = true)]
    memvisor_allowance: String,
    /// Memvisor variant: `memvisor run --arena` [default: memvisor's own, twice host RAM].
    #[arg(long, allow_hyphen_values = true)]
    arena: Option<String>,
    /// Memvisor variant: one more argument of `memvisor broker` after `--total`; repeat it for
    /// several (`--broker-arg=--hysteresis --broker-arg=8M`).
    #[arg(long = "broker-arg", value_name = "ARG", allow_hyphen_values = true)]
    broker_arg: Vec<String>,
    /// Memvisor variant: one more argument of each `memvisor run` before `--`; repeat it for
    /// several (`--run-arg=--malloc --run-arg=jemalloc`).
    #[arg(long = "run-arg", value_name = "ARG", allow_hyphen_values = true)]
    run_arg: Vec<String>,
    /// Repetitions (the variant order rotates) [default: 2; quick 1].
    #[arg(long, allow_hyphen_values = true)]
    reps: Option<String>,
    /// Where the run's private 0700 directory (disk images, swap files, sockets) goes.
    #[arg(long, default_value = "target/density-eval")]
    work_dir: PathBuf,
    /// Where results.md and results.json go.
    #[arg(long, default_value = "target/density-eval")]
    out_dir: PathBuf,
    /// Run the kernel variant even if another swap area is active.
    #[arg(long)]
    allow_other_swap: bool,
    /// The memvisor binary [default: next to this one].
    #[arg(long)]
    memvisor: Option<PathBuf>,
}

fn number<T: std::str::FromStr>(flag: &'static str, text: &str) -> Result<T, BenchError> {
    text.trim()
        .parse()
        .map_err(|_| BenchError::bad(flag, text, "expected a whole number"))
}

fn config(cli: &Cli) -> Result<DensityEvalConfig, BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("locate", "/proc/self/exe", e))?;
    let memvisor = cli
        .memvisor
        .clone()
        .unwrap_or_else(|| memvisor_next_to(&exe));
    let mut c = DensityEvalConfig::sized(memvisor, cli.work_dir.clone(), cli.quick);
    if let Some(t) = &cli.total {
        c.total = memvisor_bench::byte_size::parse_bytes("--total", t)? as u64;
    }
    if let Some(g) = &cli.guests {
        c.guests = parse_guest_counts(g)?;
    }
    c.keep = parse_keep(&cli.keep)?;
    if let Some(m) = &cli.guest_mib {
        c.guest_mib = number("--guest-mib", m)?;
    }
    if let Some(m) = &cli.disk_mib {
        c.disk_mib = number("--disk-mib", m)?;
    }
    if let Some(s) = &cli.seconds {
        c.phases = parse_run_secs(s, c.phase_secs)?;
    }
    if let Some(w) = &cli.warmup {
        c.warmup_secs = match w.trim().parse::<f64>() {
            Ok(x) if (0.0..=3600.0).contains(&x) => x,
            _ => return Err(BenchError::bad("--warmup", w, "seconds in 0..3600")),
        };
    }
    if let Some(r) = &cli.rate {
        c.rate = Some(
            r.trim()
                .parse()
                .map_err(|_| BenchError::bad("--rate", r, "reads a second, such as 1500"))?,
        );
    }
    c.qemu_allowance =
        memvisor_bench::byte_size::parse_bytes("--qemu-allowance", &cli.qemu_allowance)? as u64;
    c.memvisor_allowance =
        memvisor_bench::byte_size::parse_bytes("--memvisor-allowance", &cli.memvisor_allowance)?
            as u64;
    if let Some(a) = &cli.arena {
        c.arena = Some(memvisor_bench::byte_size::parse_bytes("--arena", a)? as u64);
    }
    if let Some(r) = &cli.reps {
        c.reps = number("--reps", r)?;
    }
    c.allow_other_swap = cli.allow_other_swap;
    c.broker_args = cli.broker_arg.clone();
    c.run_args = cli.run_arg.clone();
    c.fill = cli.fill;
    c.uniform = cli.uniform;
    c.validate()?;
    if !c.memvisor.is_file() {
        return Err(BenchError::bad(
            "--memvisor",
            c.memvisor.display().to_string(),
            "no such file (build it: cargo build --release -p memvisor -p memvisor-preload)",
        ));
    }
    Ok(c)
}

fn run(cli: &Cli) -> Result<(), BenchError> {
    let config = config(cli)?;
    interrupt::install();
    let image = GuestImage::locate_or_build().map_err(|source| BenchError::Guest {
        run: "guest image".into(),
        source,
    })?;
    create_results_dir(&cli.out_dir)?;
    let write = |runs: &[memvisor_bench::density_eval::DensityRun]| -> Result<String, BenchError> {
        let md = density_markdown(&config, runs);
        write_results_pair(&cli.out_dir, &md, &density_json(&config, runs))?;
        Ok(md)
    };
    let mut write_error = None;
    let runs = density_eval(&config, &image, |runs| {
        if let Some(r) = runs.last() {
            let cells: Vec<String> = r
                .fleet
                .per_guest
                .iter()
                .map(|g| {
                    let p99 = g.p99_us.map_or(String::new(), |p| format!(" p99={p:.0}us"));
                    format!("{:.0}/s in={}{p99}", g.reads_per_s, g.page_ins)
                })
                .collect();
            eprintln!(
                "density-eval: {} guests, {} rep {}: boot {:.0} s, window {:.0} s, kernel swap \
                 in/out {:.0}/{:.0} MiB, group peak {:.0} MiB, broker changes {}: {}",
                r.guests,
                r.variant.name(),
                r.rep,
                r.fleet.boot_s,
                r.fleet.window_s,
                r.fleet.kernel_swap_in_mib,
                r.fleet.kernel_swap_out_mib,
                r.fleet.group.peak_mib,
                r.fleet.broker_changes,
                cells.join("; ")
            );
        }
        // Results so far, in case a later run fails.
        if let Err(e) = write(runs) {
            write_error.get_or_insert(e);
        }
    })?;
    if let Some(e) = write_error {
        return Err(e);
    }
    print!("{}", write(&runs)?);
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("density-eval: {e}");
            ExitCode::FAILURE
        }
    }
}
