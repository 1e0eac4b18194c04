//! `memvisor`: the command-line front end. Each subcommand lives in its own module and calls
//! into the component crates; this file only parses arguments and reports errors.

mod dedup_command;
mod scrub_command;
mod sim_command;
mod source_args;
mod trace_command;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// memvisor: userspace memory management for VM hosts.
#[derive(Debug, Parser)]
#[command(name = "memvisor", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Simulate eviction policies on a trace or a generated workload.
    Sim(sim_command::SimArgs),
    /// Trace utilities: convert between formats.
    Trace(trace_command::TraceArgs),
    /// Duplicate pages within and across processes, and what the kernel's KSM merges.
    Dedup(dedup_command::DedupArgs),
    /// Exclusive host cache: drop host page-cache pages of VM images the guests hold.
    Scrub(scrub_command::ScrubArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim_command::run(args).map_err(|e| e.to_string()),
        Command::Trace(args) => trace_command::run(args).map_err(|e| e.to_string()),
        Command::Dedup(args) => dedup_command::run(args).map_err(|e| e.to_string()),
        Command::Scrub(args) => scrub_command::run(args).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memvisor: error: {e}");
            ExitCode::FAILURE
        }
    }
}
