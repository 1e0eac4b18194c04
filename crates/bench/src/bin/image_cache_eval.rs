//! `image-cache-eval`: one disk image read by a VMM-like process, its host page cache held to
//! a size by the kernel (a memory cgroup) or by `memvisor run --image-cache` (a CAR model per
//! image), against no limit (issue 12). Parsing and error reporting only; see
//! `memvisor_bench::image_cache_eval`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use memvisor_bench::image_cache_eval::{
    image_cache_eval, image_cache_markdown, CacheVariant, ImageCacheEvalConfig,
};
use memvisor_bench::image_cache_worker::{run_image_worker, ImageWorkload};
use memvisor_bench::managed_process::memvisor_next_to;
use memvisor_bench::results_file::{create_results_dir, write_results_pair};
use memvisor_bench::{interrupt, BenchError};
use memvisor_control::ByteSize;

#[derive(Parser)]
#[command(
    name = "image-cache-eval",
    about = "A disk image's host cache held to one size by the kernel (cgroup) and by memvisor run --image-cache (CAR), against no limit"
)]
struct Cli {
    #[command(subcommand)]
    worker: Option<Worker>,
    #[command(flatten)]
    workload: WorkloadArgs,
    /// Image size.
    #[arg(long, default_value = "1G")]
    image: String,
    /// Cache sizes: each is run by the kernel and by memvisor.
    #[arg(long, value_delimiter = ',', default_value = "64M")]
    cache: Vec<String>,
    /// Further sizes run by memvisor only (the seed's "same rate with a smaller cache").
    #[arg(long, value_delimiter = ',', default_value = "16M")]
    memvisor_only: Vec<String>,
    /// Repetitions (the variant order rotates).
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Where the image and sockets go.
    #[arg(long, default_value = "/var/tmp/image-cache-eval")]
    work_dir: PathBuf,
    /// Where results.md and results.json go.
    #[arg(long, default_value = "target/image-cache-eval")]
    out_dir: PathBuf,
}

#[derive(clap::Args, Clone)]
struct WorkloadArgs {
    /// Zipf exponent of the 4 KiB reads.
    #[arg(long, default_value_t = 0.99)]
    alpha: f64,
    /// A sequential scan after this many 4 KiB reads (0: none).
    #[arg(long, default_value_t = 20000)]
    scan_every: u64,
    /// Bytes per scan.
    #[arg(long, default_value_t = 128 << 20)]
    scan_bytes: u64,
    /// Guest RAM of the worker, bytes.
    #[arg(long, default_value_t = 16 << 20)]
    ram_bytes: u64,
    /// Warm-up seconds.
    #[arg(long, default_value_t = 20.0)]
    warmup: f64,
    /// Measured seconds.
    #[arg(long, default_value_t = 30.0)]
    seconds: f64,
}

impl WorkloadArgs {
    fn workload(&self) -> ImageWorkload {
        ImageWorkload {
            alpha: self.alpha,
            scan_every: self.scan_every,
            scan_bytes: self.scan_bytes,
            ram_bytes: self.ram_bytes,
            warmup_s: self.warmup,
            measure_s: self.seconds,
        }
    }
}

#[derive(Subcommand)]
enum Worker {
    /// The VMM-like process (the benchmark starts it).
    Worker {
        /// The image.
        image: PathBuf,
        #[command(flatten)]
        workload: WorkloadArgs,
    },
}

fn size(what: &'static str, text: &str) -> Result<u64, BenchError> {
    match ByteSize::parse(text) {
        Ok(ByteSize::Bytes(b)) if b >= 1 << 20 => Ok(b),
        _ => Err(BenchError::BadArgument {
            what,
            value: text.to_string(),
            reason: "expected a size of at least 1M, such as 64M".into(),
        }),
    }
}

fn run(cli: Cli) -> Result<(), BenchError> {
    if let Some(Worker::Worker { image, workload }) = &cli.worker {
        return run_image_worker(image, &workload.workload());
    }
    interrupt::install();
    let exe = std::env::current_exe().map_err(|e| BenchError::io("locate", "/proc/self/exe", e))?;
    let image_bytes = size("--image", &cli.image)?;
    if !image_bytes.is_power_of_two() {
        return Err(BenchError::BadArgument {
            what: "--image",
            value: cli.image.clone(),
            reason: "must be a power of two (1G, 512M)".into(),
        });
    }
    let mut variants = vec![CacheVariant::Unlimited, CacheVariant::MemvisorNoLimit];
    for c in &cli.cache {
        let b = size("--cache", c)?;
        variants.push(CacheVariant::Kernel(b));
        variants.push(CacheVariant::Memvisor(b));
    }
    for c in &cli.memvisor_only {
        variants.push(CacheVariant::Memvisor(size("--memvisor-only", c)?));
    }
    let config = ImageCacheEvalConfig {
        memvisor: memvisor_next_to(&exe),
        exe,
        work_dir: cli.work_dir.clone(),
        image_bytes,
        workload: cli.workload.workload(),
        variants,
        reps: cli.reps,
    };
    let runs = image_cache_eval(&config, |r| {
        eprintln!(
            "image-cache-eval: {} rep {}: {:.0} reads/s, {:.1} KiB from the device per read, {} MiB cached, errors {}",
            r.name,
            r.rep,
            r.reads_per_s,
            r.storage_bytes_per_read / 1024.0,
            r.cached_bytes >> 20,
            r.errors
        );
    })?;
    let md = image_cache_markdown(&runs);
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
            eprintln!("image-cache-eval: error: {e}");
            ExitCode::FAILURE
        }
    }
}
