//! `hot-scan-stress`: the stress program of the redis experiment (run under `memvisor run` by
//! `redis-latency`): a hot set with scans over a mapping of `--size` bytes; see
//! `memvisor_bench::hot_scan_stress`. Parsing and error reporting only.

use std::process::ExitCode;

use clap::Parser;
use memvisor_bench::byte_size::parse_bytes;
use memvisor_bench::hot_scan_stress::{run_stress, StressSettings};

#[derive(Parser)]
#[command(
    name = "hot-scan-stress",
    about = "A hot set polluted by scans, for memvisor run"
)]
struct Cli {
    /// Bytes mapped (with the public mmap, so memvisor run manages them).
    #[arg(long, default_value = "256M")]
    size: String,
    /// Page accesses after the fill.
    #[arg(long, default_value_t = 2_000_000)]
    accesses: u64,
    /// Fraction of pages that are hot.
    #[arg(long, default_value_t = 0.25)]
    hot: f64,
    /// Accesses between scans.
    #[arg(long, default_value_t = 50_000)]
    scan_every: u64,
    /// Cold pages per scan.
    #[arg(long, default_value_t = 8192)]
    scan_len: u64,
    /// Seed of the access sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = parse_bytes("size", &cli.size).and_then(|size| {
        run_stress(&StressSettings {
            size,
            accesses: cli.accesses,
            hot: cli.hot,
            scan_every: cli.scan_every,
            scan_len: cli.scan_len,
            seed: cli.seed,
        })
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hot-scan-stress: {e}");
            ExitCode::from(1)
        }
    }
}
