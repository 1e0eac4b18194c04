//! `vswapper-eval`: the swap mapper and the false-read preventer (issue 10, seed 004) with real
//! QEMU guests, against memvisor without them and the kernel's swap. Parsing and error
//! reporting only; see `memvisor_bench::vswapper_eval`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use memvisor_bench::managed_process::memvisor_next_to;
use memvisor_bench::results_file::{create_results_dir, write_results_file};
use memvisor_bench::vswapper_eval::{
    phases_text, vswapper_csv, vswapper_eval, vswapper_markdown, EvalCase, EvalVariant,
    VswapperEvalConfig,
};
use memvisor_bench::BenchError;
use memvisor_testvm::{DiskAio, GuestImage};

#[derive(Parser)]
#[command(
    name = "vswapper-eval",
    about = "Run time and swap traffic of real QEMU guests under memvisor with and without the swap mapper, and under the kernel's swap"
)]
struct Cli {
    /// Small guests and disks (the smoke test).
    #[arg(long)]
    quick: bool,
    /// Budget of every variant (memvisor --budget; the kernel's cgroup limit).
    #[arg(long, default_value = "192M")]
    budget: String,
    /// Cases, comma-separated (page-cache, mixed, small-ram, small-ram-noinit, no-disk, balloon)
    /// [default: all].
    #[arg(long, value_delimiter = ',')]
    cases: Vec<String>,
    /// Variants, comma-separated (mapper, no-mapper, kernel) [default: all].
    #[arg(long, value_delimiter = ',')]
    variants: Vec<String>,
    /// Repetitions of each case and variant (the variant order rotates each time).
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Where disk images and swap files go: in a private (0700) directory made inside it for
    /// the run and removed afterwards (a shared directory such as /var/tmp is safe).
    #[arg(long, default_value = "target/vswapper-eval")]
    work_dir: PathBuf,
    /// Where results.md and results.csv go.
    #[arg(long, default_value = "target/vswapper-eval")]
    out_dir: PathBuf,
    /// Run the kernel variant even if another swap area is active.
    #[arg(long)]
    allow_other_swap: bool,
    /// Throttle memvisor's reads and writes on the work directory's device to this many MB/s
    /// (a slow swap disk; cgroup v1 blkio; not with the kernel variant).
    #[arg(long, value_name = "MB_PER_S")]
    throttle: Option<u64>,
    /// How QEMU submits disk I/O: threads (its default), native (Linux AIO, with cache=none),
    /// io_uring.
    #[arg(long, default_value = "threads")]
    aio: String,
    /// The memvisor binary [default: next to this one].
    #[arg(long)]
    memvisor: Option<PathBuf>,
}

fn parse_size(s: &str) -> Result<u64, BenchError> {
    memvisor_bench::byte_size::parse_bytes("--budget", s).map(|b| b as u64)
}

fn config(cli: &Cli) -> Result<VswapperEvalConfig, BenchError> {
    let all = EvalCase::all(cli.quick);
    let cases = if cli.cases.is_empty() {
        all
    } else {
        cli.cases
            .iter()
            .map(|n| {
                all.iter().find(|c| c.name == n).cloned().ok_or_else(|| {
                    BenchError::bad(
                        "case",
                        n.clone(),
                        "expected page-cache, mixed, small-ram, small-ram-noinit, no-disk or balloon",
                    )
                })
            })
            .collect::<Result<_, _>>()?
    };
    let variants = if cli.variants.is_empty() {
        vec![
            EvalVariant::Mapper,
            EvalVariant::NoMapper,
            EvalVariant::Kernel,
        ]
    } else {
        cli.variants
            .iter()
            .map(|v| match v.as_str() {
                "mapper" => Ok(EvalVariant::Mapper),
                "no-mapper" => Ok(EvalVariant::NoMapper),
                "kernel" => Ok(EvalVariant::Kernel),
                _ => Err(BenchError::bad(
                    "variant",
                    v.clone(),
                    "expected mapper, no-mapper or kernel",
                )),
            })
            .collect::<Result<_, _>>()?
    };
    if cli.reps == 0 {
        return Err(BenchError::bad("--reps", "0", "at least 1"));
    }
    let exe = std::env::current_exe().map_err(|e| BenchError::io("locate", "/proc/self/exe", e))?;
    Ok(VswapperEvalConfig {
        memvisor: cli
            .memvisor
            .clone()
            .unwrap_or_else(|| memvisor_next_to(&exe)),
        budget: parse_size(&cli.budget)?,
        cases,
        variants,
        reps: cli.reps,
        work_dir: cli.work_dir.clone(),
        allow_other_swap: cli.allow_other_swap,
        throttle_bps: match cli.throttle {
            Some(0) => return Err(BenchError::bad("--throttle", "0", "at least 1 MB/s")),
            t => t.map(|mb| mb * 1_000_000),
        },
        disk_aio: match cli.aio.as_str() {
            "threads" => DiskAio::Threads,
            "native" => DiskAio::Native,
            "io_uring" => DiskAio::IoUring,
            other => {
                return Err(BenchError::bad(
                    "--aio",
                    other,
                    "expected threads, native or io_uring",
                ))
            }
        },
    })
}

fn run(cli: &Cli) -> Result<(), BenchError> {
    let config = config(cli)?;
    let image = GuestImage::locate_or_build().map_err(|source| BenchError::Guest {
        run: "guest image".into(),
        source,
    })?;
    let runs = vswapper_eval(&config, &image, |r| {
        eprintln!(
            "{} / {} rep {}: guest {:.2} s, wall {:.2} s, swap written {} MiB, read {} MiB, image re-read {} MiB, false reads avoided {} MiB, verified {}{}; phases (s) {}",
            r.case,
            r.variant.name(),
            r.rep,
            r.guest_secs,
            r.wall_secs,
            r.swap_written >> 20,
            r.swap_read >> 20,
            r.image_read >> 20,
            r.false_reads_avoided >> 20,
            r.verified,
            r.balloon.map_or(String::new(), |b| format!(
                ", balloon inflated at {:.1} s, guest down to {} MiB",
                b.at_secs,
                b.reached_bytes.map_or("?".into(), |r| (r >> 20).to_string())
            )),
            phases_text(&r.phases)
        )
    })?;
    let md = vswapper_markdown(&runs);
    create_results_dir(&cli.out_dir)?;
    write_results_file(&cli.out_dir.join("results.md"), &md)?;
    write_results_file(&cli.out_dir.join("results.csv"), &vswapper_csv(&runs))?;
    print!("{md}");
    if runs.iter().any(|r| !r.verified) {
        return Err(BenchError::bad(
            "guest",
            "verification",
            "a guest found wrong bytes",
        ));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("vswapper-eval: {e}");
            ExitCode::FAILURE
        }
    }
}
