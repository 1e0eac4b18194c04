//! `memvisor trace`: trace utilities (format conversion).

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use memvisor_sim::SimError;
use memvisor_trace::{try_write_oracle_general, try_write_text, TraceError};

use crate::source_args::{request_source, ArgError};

/// Arguments of `memvisor trace`.
#[derive(Debug, Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(Debug, Subcommand)]
enum TraceCommand {
    /// Convert a trace or a generated workload to libCacheSim's oracleGeneral or to text.
    Convert(ConvertArgs),
}

/// Output formats of `memvisor trace convert`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum OutputFormat {
    /// libCacheSim's oracleGeneral binary (with next-access times; `.zst` compresses).
    OracleGeneral,
    /// One decimal id per line.
    Text,
}

#[derive(Debug, Args)]
#[command(
    after_help = "Example: memvisor trace convert --trace ls.lackey --format lackey:instructions=false --to oracle-general --output ls.oracleGeneral"
)]
struct ConvertArgs {
    /// Trace file to read.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with = "workload",
        required_unless_present = "workload"
    )]
    trace: Option<PathBuf>,
    /// Input format (default: detected from the file name).
    #[arg(long, value_name = "SPEC", requires = "trace")]
    format: Option<String>,
    /// Generated workload to write out instead of a trace.
    #[arg(long, value_name = "SPEC")]
    workload: Option<String>,
    /// Output format.
    #[arg(long, value_enum)]
    to: OutputFormat,
    /// Output file, written whole or not at all (`-` is standard output; a symbolic link is
    /// refused; a device such as /dev/null is written in place).
    #[arg(long, value_name = "FILE")]
    output: PathBuf,
}

/// Errors of `memvisor trace`.
#[derive(Debug, thiserror::Error)]
pub enum TraceCommandError {
    /// Reading the input failed.
    #[error(transparent)]
    Input(#[from] SimError),
    /// Writing the output failed.
    #[error(transparent)]
    Output(#[from] TraceError),
    /// A bad argument.
    #[error(transparent)]
    BadArgument(#[from] ArgError),
}

/// Runs `memvisor trace`.
pub fn run(args: TraceArgs) -> Result<(), TraceCommandError> {
    match args.command {
        TraceCommand::Convert(c) => convert(c),
    }
}

/// Converts the source into `--output`, which the writers create as an
/// [`OutputFile`](memvisor_safe_files::OutputFile): whole or not at all, never through a
/// symbolic link, a device written in place.
fn convert(c: ConvertArgs) -> Result<(), TraceCommandError> {
    let source = request_source(
        c.trace.as_deref(),
        c.format.as_deref(),
        c.workload.as_deref(),
        "",
    )?;
    let ids = source.open()?.map(|r| r.map(|req| req.unit));
    let written = match c.to {
        OutputFormat::OracleGeneral => try_write_oracle_general(&c.output, ids),
        OutputFormat::Text => try_write_text(&c.output, ids),
    };
    let n = written??;
    eprintln!("wrote {n} requests to {}", c.output.display());
    Ok(())
}
