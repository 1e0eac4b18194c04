//! `scrub-eval`: memvisor's exclusive host cache (`memvisor scrub`) with real QEMU guests,
//! against the default host and a periodic drop of the whole image cache. Parsing and error
//! reporting only; see `memvisor_bench::scrub_eval`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use memvisor_bench::managed_cache::ManagedCache;
use memvisor_bench::{scrub_eval, BenchError, HostPolicy, ScrubEvalConfig};
use memvisor_testvm::DiskPattern;

#[derive(Parser)]
#[command(
    name = "scrub-eval",
    about = "Host cache size, hit ratio and guest I/O of real QEMU guests: default host, periodic drop-all, memvisor scrub"
)]
struct Cli {
    /// One short sequential run per policy with small sizes (the integration test).
    #[arg(long)]
    quick: bool,
    /// Where the report files go.
    #[arg(long, default_value = "target/scrub-eval")]
    out_dir: PathBuf,
    /// Where the disk image is created (and removed afterwards).
    #[arg(long, default_value = "target/scrub-eval")]
    work_dir: PathBuf,
    /// Guest patterns, comma-separated (seq, random, zipf).
    #[arg(long, value_delimiter = ',')]
    patterns: Vec<String>,
    /// Host policies, comma-separated (default, drop-all, scrub, exclusive; all by default).
    /// Also `memvisor` (QEMU under `memvisor run`, the host cache left alone), `exclusive`
    /// (`memvisor run --host-cache exclusive`), `image-cache=SIZE` (`memvisor run
    /// --image-cache SIZE`) and `exclusive+image-cache=SIZE`.
    #[arg(long, value_delimiter = ',')]
    policies: Vec<String>,
    /// The `memvisor` binary for the `memvisor run` policies [default: next to this program].
    #[arg(long)]
    memvisor: Option<PathBuf>,
    /// Seconds of the measured phase.
    #[arg(long)]
    measure_secs: Option<u64>,
    /// Guest RAM in MiB.
    #[arg(long)]
    guest_mib: Option<u64>,
    /// Disk image size in MiB.
    #[arg(long)]
    image_mib: Option<u64>,
    /// Memory the cgroup leaves for the host page cache, MiB.
    #[arg(long)]
    host_cache_mib: Option<u64>,
}

fn config(cli: &Cli) -> Result<ScrubEvalConfig, BenchError> {
    let (work, out) = (cli.work_dir.clone(), cli.out_dir.clone());
    let mut c = if cli.quick {
        ScrubEvalConfig::quick(work, out)
    } else {
        ScrubEvalConfig::full(work, out)
    };
    if !cli.patterns.is_empty() {
        c.patterns = cli
            .patterns
            .iter()
            .map(|p| match p.as_str() {
                "seq" => Ok(DiskPattern::Seq),
                "random" => Ok(DiskPattern::Random),
                "zipf" => Ok(DiskPattern::Zipf),
                _ => Err(BenchError::bad(
                    "pattern",
                    p.as_str(),
                    "expected seq, random or zipf",
                )),
            })
            .collect::<Result<_, _>>()?;
    }
    if !cli.policies.is_empty() {
        // A `memvisor run` setting (QEMU under memvisor) or a host policy beside QEMU.
        c.policies.clear();
        c.managed.clear();
        for p in &cli.policies {
            match ManagedCache::parse(p)? {
                Some(m) => c.managed.push(m),
                None => c.policies.push(HostPolicy::parse(p).map_err(|_| {
                    BenchError::bad(
                        "--policies",
                        p.as_str(),
                        "expected default, drop-all, scrub, memvisor, exclusive, \
                         image-cache=SIZE or exclusive+image-cache=SIZE",
                    )
                })?),
            }
        }
    }
    if let Some(m) = &cli.memvisor {
        c.memvisor = m.clone();
    }
    if let Some(s) = cli.measure_secs {
        c.measure = Duration::from_secs(s.max(1));
    }
    if let Some(m) = cli.guest_mib {
        c.guest_mib = m;
    }
    if let Some(m) = cli.image_mib {
        c.image_mib = m;
    }
    if let Some(m) = cli.host_cache_mib {
        c.host_cache_mib = m;
    }
    Ok(c)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = config(&cli).and_then(|c| scrub_eval(&c));
    match result {
        Ok(r) => {
            println!(
                "one {} MiB guest, {} MiB image, cgroup limit {} MiB, measured {} s; load {} -> {}\n",
                r.guest_mib,
                r.image_mib,
                r.cgroup_limit_mib,
                r.measure_s,
                r.loadavg_before,
                r.loadavg_after
            );
            print!("{}", memvisor_bench::scrub_eval_markdown(&r.runs));
            for f in &r.files {
                println!("wrote {}", f.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("scrub-eval: {e}");
            ExitCode::FAILURE
        }
    }
}
