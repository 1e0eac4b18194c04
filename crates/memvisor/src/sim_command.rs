//! `memvisor sim`: runs a sweep and prints, saves and plots it.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use memvisor_policy::{InformationModel, PolicySpec};
use memvisor_sim::{
    miss_ratio_svg, CacheSize, SamplePeriod, SimConfig, SimError, Sweep, DEFAULT_SAMPLE_ACCESSES,
    SWEEP_FRACTIONS,
};

use memvisor_safe_files::{OutputFile, SafeFileError};

use crate::source_args::{self, request_source, ArgError};

/// The workload `memvisor sim` runs when given no trace and no workload.
pub const BUILT_IN_WORKLOAD: &str =
    "hotset:n=50000:hot=0.1:hot-prob=0.9:scan-every=50000:scan-len=20000:len=2000000";

/// Arguments of `memvisor sim`.
#[derive(Debug, Args)]
#[command(after_help = "\
Policies: fifo, clock, lru, aging, chunk-queues, car, arc, sieve, s3-fifo, mglru, opt; \
parameters as NAME:KEY=VALUE, e.g. chunk-queues:m=6. `all` = every online policy.
Workloads: seq, loop, uniform, zipf, hotset, phases, e.g. zipf:n=100000:alpha=0.99:len=2000000.
Trace formats: lackey[:instructions=false][:page-size=4096], text, csv:column=N, oracle-general \
(plain or zstd); detected from the file name when --format is not given.

Example: memvisor sim --workload zipf:n=100000:alpha=0.9 --policy all --sweep --plot mrc.svg")]
pub struct SimArgs {
    /// Trace file to replay.
    #[arg(long, value_name = "FILE", conflicts_with = "workload")]
    trace: Option<PathBuf>,
    /// Trace format (default: detected from the file name).
    #[arg(long, value_name = "SPEC", requires = "trace")]
    format: Option<String>,
    /// Generated workload [default: a hot set of 10% with scans: hotset:n=50000:hot=0.1:hot-prob=0.9:scan-every=50000:scan-len=20000:len=2000000].
    #[arg(long, value_name = "SPEC")]
    workload: Option<String>,
    /// Policies, comma separated, or `all`.
    #[arg(long, value_name = "P[,P...]", default_value = "all")]
    policy: String,
    /// Resident-set sizes in units (1000, 64K) or % of the distinct units, comma separated.
    #[arg(long, value_name = "N[,N...]", conflicts_with = "sweep")]
    size: Option<String>,
    /// Sweep sizes from 0.5% to 100% of the distinct units (the default without --size).
    #[arg(long)]
    sweep: bool,
    /// Information model: `exact` (every access) or `sampled` (reference bits read at samples).
    #[arg(long, value_name = "MODEL", default_value = "exact")]
    model: String,
    /// Sample every N accesses [default: 10000].
    #[arg(long, value_name = "N", conflicts_with = "sample_time")]
    sample_every: Option<u64>,
    /// Sample every T units of the trace's own time instead.
    #[arg(long, value_name = "T")]
    sample_time: Option<u64>,
    /// Do not run Belady's OPT (no gap-to-OPT column; saves holding the trace's future).
    #[arg(long)]
    no_opt: bool,
    /// Write the results as CSV or JSON (chosen by the extension).
    #[arg(long, value_name = "FILE.csv|FILE.json")]
    out: Option<PathBuf>,
    /// Write miss-ratio curves as SVG.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Worker threads [default: all cores].
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// No progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// Errors of the CLI layer, each naming the argument at fault.
#[derive(Debug, thiserror::Error)]
pub enum SimCommandError {
    /// Any simulator error.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// A bad argument value.
    #[error(transparent)]
    BadArgument(#[from] ArgError),
    /// An output file could not be created or committed (the message names it).
    #[error(transparent)]
    Output(#[from] SafeFileError),
}

fn bad(arg: &'static str, reason: impl ToString) -> SimCommandError {
    source_args::bad(arg, reason).into()
}

/// Parses a `--policy` list.
pub fn parse_policies(list: &str) -> Result<Vec<PolicySpec>, SimCommandError> {
    let mut out = Vec::new();
    for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item.eq_ignore_ascii_case("all") {
            out.extend(PolicySpec::all().into_iter().filter(|p| !p.is_offline()));
        } else {
            out.push(item.parse().map_err(|e| bad("--policy", e))?);
        }
    }
    if out.is_empty() {
        return Err(bad("--policy", "no policy given"));
    }
    Ok(out)
}

fn output_kind(path: &Path) -> Result<&'static str, SimCommandError> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("csv") => Ok("csv"),
        Some(e) if e.eq_ignore_ascii_case("json") => Ok("json"),
        _ => Err(bad(
            "--out",
            format!("{}: name must end in .csv or .json", path.display()),
        )),
    }
}

/// Writes `contents` to an output created before the simulation, and commits it.
fn write(mut out: OutputFile, contents: &str) -> Result<(), SimCommandError> {
    let path = out.path().to_path_buf();
    out.write_all(contents.as_bytes()).map_err(|source| {
        SimCommandError::Sim(SimError::Output {
            path: path.clone(),
            source,
        })
    })?;
    out.commit()?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

/// Builds the sweep described by `args`.
pub fn sweep_from_args(args: &SimArgs) -> Result<Sweep, SimCommandError> {
    let model = match args.model.to_ascii_lowercase().as_str() {
        "exact" => InformationModel::Exact,
        "sampled" => InformationModel::Sampled,
        other => {
            return Err(bad(
                "--model",
                format!("{other:?}: expected exact or sampled"),
            ))
        }
    };
    let sample = match (args.sample_every, args.sample_time) {
        (_, Some(0)) => return Err(bad("--sample-time", "must be at least 1")),
        (Some(0), _) => return Err(bad("--sample-every", "must be at least 1")),
        (_, Some(t)) => SamplePeriod::Time(t),
        (Some(n), None) => SamplePeriod::Accesses(n),
        (None, None) => SamplePeriod::Accesses(DEFAULT_SAMPLE_ACCESSES),
    };
    let sizes = match &args.size {
        Some(list) => CacheSize::parse_list(list)?,
        None => SWEEP_FRACTIONS
            .iter()
            .map(|&f| CacheSize::Fraction(f))
            .collect(),
    };
    if sizes.is_empty() {
        return Err(bad("--size", "no size given"));
    }
    let threads = match args.threads {
        Some(0) => return Err(bad("--threads", "must be at least 1")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    Ok(Sweep {
        source: request_source(
            args.trace.as_deref(),
            args.format.as_deref(),
            args.workload.as_deref(),
            BUILT_IN_WORKLOAD,
        )?,
        policies: parse_policies(&args.policy)?,
        sizes,
        config: SimConfig { model, sample },
        with_opt: !args.no_opt,
        threads,
    })
}

/// Runs `memvisor sim`.
pub fn run(args: SimArgs) -> Result<(), SimCommandError> {
    let out_kind = args.out.as_deref().map(output_kind).transpose()?;
    let sweep = sweep_from_args(&args)?;
    // Created now, so an output that cannot be written fails before the simulation runs.
    let out = args.out.as_deref().map(OutputFile::create).transpose()?;
    let plot = args.plot.as_deref().map(OutputFile::create).transpose()?;
    let bar = if args.quiet || !std::io::stderr().is_terminal() {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} requests ({per_sec}, eta {eta})",
        )
        .expect("valid template"),
    );
    let report = sweep.run(&|total| bar.set_length(total), &|n| bar.inc(n))?;
    bar.finish_and_clear();
    print!("{}", report.to_table());
    if let (Some(out), Some(kind)) = (out, out_kind) {
        let text = if kind == "csv" {
            report.to_csv()
        } else {
            report.to_json()
        };
        write(out, &text)?;
    }
    if let Some(plot) = plot {
        write(plot, &miss_ratio_svg(&report))?;
    }
    Ok(())
}
