//! `memvisor`: the command-line front end. Each subcommand lives in its own module and calls
//! into the component crates; this file only parses arguments and reports errors.

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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim_command::run(args).map_err(|e| e.to_string()),
        Command::Trace(args) => trace_command::run(args).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memvisor: error: {e}");
            ExitCode::FAILURE
        }
    }
}
