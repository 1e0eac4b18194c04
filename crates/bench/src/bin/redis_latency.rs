//! `redis-latency`: seed 000's redis experiment under memvisor (issue 4 item 4): redis-server
//! under `memvisor run` per policy and chunk size, GET latency against request rate, the
//! pager's page-ins per point, and a stress program's fault counts per policy. Parsing and
//! reporting only; see `memvisor_bench::redis_experiment`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use memvisor_bench::byte_size::parse_bytes;
use memvisor_bench::hot_scan_stress::StressSettings;
use memvisor_bench::redis_experiment::{run_redis_experiment, ExperimentSettings};
use memvisor_bench::redis_report::{redis_markdown, redis_svg};
use memvisor_bench::results_file::{create_results_dir, write_results_file};
use memvisor_bench::BenchError;

#[derive(Parser)]
#[command(
    name = "redis-latency",
    about = "redis-server under memvisor run: GET latency against request rate per policy"
)]
struct Cli {
    /// Small data, few short points: a structural smoke run (~1 min), not a measurement.
    #[arg(long)]
    quick: bool,
    /// Budget of redis under memvisor run [96M; --quick 16M].
    #[arg(long)]
    budget: Option<String>,
    /// Policies, comma-separated.
    #[arg(long, default_value = "fifo,clock,chunk-queues", value_delimiter = ',')]
    policies: Vec<String>,
    /// Chunk size of every policy's series and of the stress runs.
    #[arg(long, default_value = "64K")]
    chunk_size: String,
    /// Further chunk sizes, each one series with --compare-policy [256K,1M; --quick none].
    #[arg(long, value_delimiter = ',')]
    compare_chunk_sizes: Vec<String>,
    /// Policy of the chunk-size comparison.
    #[arg(long, default_value = "clock")]
    compare_policy: String,
    /// Keys in the data set [16384; --quick 2048].
    #[arg(long)]
    keys: Option<u64>,
    /// Bytes per value.
    #[arg(long, default_value = "16K")]
    value_size: String,
    /// Offered GET rates per second, comma-separated [250,500,1000,1500,2000,3000; --quick 500,2000].
    #[arg(long, value_delimiter = ',')]
    rates: Vec<f64>,
    /// Seconds per load point [6; --quick 1].
    #[arg(long)]
    point: Option<f64>,
    /// Seconds of unrecorded load at the first rate before the points [5; --quick 0.5].
    #[arg(long)]
    warmup: Option<f64>,
    /// Zipf exponent of key popularity.
    #[arg(long, default_value_t = 0.99)]
    alpha: f64,
    /// Swap directory of memvisor run.
    #[arg(long, default_value = "/var/tmp")]
    swap_dir: PathBuf,
    /// Output directory (report.json, report.md, redis-latency.svg unless --svg).
    #[arg(long, default_value = "target/redis-latency")]
    out: PathBuf,
    /// Where to write the plot [OUT/redis-latency.svg].
    #[arg(long)]
    svg: Option<PathBuf>,
    /// The memvisor binary [next to this one].
    #[arg(long)]
    memvisor: Option<PathBuf>,
    /// The redis server.
    #[arg(long, default_value = "redis-server")]
    redis_server: PathBuf,
    /// Stress program's mapping [256M; --quick 32M].
    #[arg(long)]
    stress_size: Option<String>,
    /// Stress program's page accesses [600000; --quick 100000].
    #[arg(long)]
    stress_accesses: Option<u64>,
    /// Budget of the stress runs [the redis budget].
    #[arg(long)]
    stress_budget: Option<String>,
}

fn sibling(name: &str) -> Result<PathBuf, BenchError> {
    let exe = std::env::current_exe().map_err(|e| BenchError::io("locate", "self", e))?;
    Ok(exe.with_file_name(name))
}

fn on_path(p: &Path) -> Option<PathBuf> {
    if p.components().count() > 1 {
        return p.exists().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| c.is_file())
}

fn settings(cli: &Cli) -> Result<ExperimentSettings, BenchError> {
    let q = cli.quick;
    let memvisor = match &cli.memvisor {
        Some(p) => p.clone(),
        None => sibling("memvisor")?,
    };
    if !memvisor.is_file() {
        return Err(BenchError::bad(
            "--memvisor",
            memvisor.display().to_string(),
            "not found (cargo build --release -p memvisor -p memvisor-preload)",
        ));
    }
    let stress_program = sibling("hot-scan-stress")?;
    let redis_server = on_path(&cli.redis_server).ok_or_else(|| {
        BenchError::bad(
            "--redis-server",
            cli.redis_server.display().to_string(),
            "not found (apt-get install redis-server)",
        )
    })?;
    let budget = cli
        .budget
        .clone()
        .unwrap_or_else(|| if q { "16M" } else { "96M" }.into());
    let compare_chunk_sizes = if cli.compare_chunk_sizes.is_empty() && !q {
        vec!["256K".to_string(), "1M".to_string()]
    } else {
        // `--compare-chunk-sizes ''`: no comparison.
        cli.compare_chunk_sizes
            .iter()
            .filter(|c| !c.is_empty())
            .cloned()
            .collect()
    };
    let rates = if cli.rates.is_empty() {
        if q {
            vec![500.0, 2000.0]
        } else {
            vec![250.0, 500.0, 1000.0, 1500.0, 2000.0, 3000.0]
        }
    } else {
        cli.rates.clone()
    };
    if rates.iter().any(|r| !(*r > 0.0 && r.is_finite())) || cli.policies.is_empty() {
        return Err(BenchError::bad(
            "--rates/--policies",
            format!("{rates:?} {:?}", cli.policies),
            "rates must be positive, at least one policy",
        ));
    }
    let secs = |what: &'static str, v: f64| {
        if v.is_finite() && v >= 0.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(BenchError::bad(what, v.to_string(), "seconds must be >= 0"))
        }
    };
    let stress_size = parse_bytes(
        "--stress-size",
        cli.stress_size
            .as_deref()
            .unwrap_or(if q { "32M" } else { "256M" }),
    )?;
    let pages = (stress_size / 4096) as u64;
    Ok(ExperimentSettings {
        memvisor,
        stress_program,
        redis_server,
        stress_budget: cli.stress_budget.clone().unwrap_or_else(|| budget.clone()),
        budget,
        policies: cli.policies.clone(),
        chunk_size: cli.chunk_size.clone(),
        compare_chunk_sizes,
        compare_policy: cli.compare_policy.clone(),
        keys: cli.keys.unwrap_or(if q { 2048 } else { 16384 }),
        value_size: parse_bytes("--value-size", &cli.value_size)?,
        rates,
        point: secs("--point", cli.point.unwrap_or(if q { 1.0 } else { 6.0 }))?,
        warmup: secs("--warmup", cli.warmup.unwrap_or(if q { 0.5 } else { 5.0 }))?,
        alpha: cli.alpha,
        swap_dir: cli.swap_dir.clone(),
        work_dir: cli.out.join("run"),
        stress: StressSettings {
            size: stress_size,
            accesses: cli
                .stress_accesses
                .unwrap_or(if q { 100_000 } else { 600_000 }),
            hot: 0.25,
            scan_every: 50_000.min(pages.max(1)),
            scan_len: (pages / 8).max(1),
            seed: 1,
        },
    })
}

fn run(cli: &Cli) -> Result<(), BenchError> {
    let e = settings(cli)?;
    create_results_dir(&cli.out)?;
    create_results_dir(&e.work_dir)?;
    let report = run_redis_experiment(&e, &mut std::io::stderr())?;
    let md = redis_markdown(&report);
    let subtitle = format!(
        "{} keys x {} B values, budget {}, Zipf alpha {}, {} s per point, open-loop paced GETs on one connection",
        e.keys,
        e.value_size,
        e.budget,
        e.alpha,
        e.point.as_secs_f64()
    );
    let svg_path = cli
        .svg
        .clone()
        .unwrap_or_else(|| cli.out.join("redis-latency.svg"));
    let write = |path: &Path, text: &str| write_results_file(path, text);
    write(&svg_path, &redis_svg(&report, &subtitle))?;
    write(&cli.out.join("report.md"), &md)?;
    let json = serde_json::to_string_pretty(&report).unwrap_or_default();
    write(&cli.out.join("report.json"), &json)?;
    println!("{md}");
    println!("plot: {}", svg_path.display());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("redis-latency: {e}");
            ExitCode::from(1)
        }
    }
}
