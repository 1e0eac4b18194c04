//! `memvisor trace`: trace utilities (format conversion).

use std::fs;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use memvisor_sim::SimError;
use memvisor_trace::{write_oracle_general, write_text, TraceError};

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
    /// Output file; written whole or not at all.
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
    /// Moving the finished output into place failed.
    #[error("{path}: {source}")]
    Rename {
        /// The output file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// Runs `memvisor trace`.
pub fn run(args: TraceArgs) -> Result<(), TraceCommandError> {
    match args.command {
        TraceCommand::Convert(c) => convert(c),
    }
}

/// The output's temporary name while it is being written: beside it, so the rename is atomic.
fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    output.with_file_name(name)
}

fn convert(c: ConvertArgs) -> Result<(), TraceCommandError> {
    let source = request_source(
        c.trace.as_deref(),
        c.format.as_deref(),
        c.workload.as_deref(),
        "",
    )?;
    let partial = partial_path(&c.output);
    // Keep the compression suffix meaningful: write_* compress when the name ends in .zst.
    let temp = if c.output.extension().is_some_and(|e| e == "zst") {
        partial.with_extension("partial.zst")
    } else {
        partial
    };
    let mut first_error: Option<SimError> = None;
    let ids = source.open()?.map_while(|r| match r {
        Ok(req) => Some(req.unit),
        Err(e) => {
            first_error = Some(e);
            None
        }
    });
    let written = match c.to {
        OutputFormat::OracleGeneral => write_oracle_general(&temp, ids),
        OutputFormat::Text => write_text(&temp, ids),
    };
    let outcome =
        match (written, first_error) {
            (Ok(_), Some(e)) => Err(TraceCommandError::Input(e)),
            (Err(e), _) => Err(TraceCommandError::Output(e)),
            (Ok(n), None) => fs::rename(&temp, &c.output).map(|()| n).map_err(|source| {
                TraceCommandError::Rename {
                    path: c.output.clone(),
                    source,
                }
            }),
        };
    match outcome {
        Ok(n) => {
            eprintln!("wrote {n} requests to {}", c.output.display());
            Ok(())
        }
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}
