//! `memvisor`: the command-line front end. Each subcommand lives in its own module and calls
//! into the component crates; this file only parses arguments and reports errors.

mod broker_command;
mod dedup_command;
mod host_memory;
mod migrate_command;
mod program_malloc;
mod run_command;
mod scrub_command;
mod seconds_arg;
mod set_command;
mod sim_command;
mod source_args;
mod stat_command;
mod swap_dir_check;
mod top_command;
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
    /// Run a program with its large memory under the pager.
    Run(run_command::RunArgs),
    /// Show a managed process's budget, policy and regions.
    Stat(stat_command::StatArgs),
    /// Live view of every managed process on this host.
    Top(top_command::TopArgs),
    /// Change a managed process's budget or policy at run time.
    Set(set_command::SetArgs),
    /// Live-migrate a QEMU under memvisor to a destination QEMU under memvisor, moving guest
    /// memory pager to pager (swapped pages straight from swap, never faulted in).
    Migrate(migrate_command::MigrateArgs),
    /// Divide one memory total among the budgets and image cache limits of every process under
    /// memvisor on this host (static, proportional, or by the waiting time more memory saves
    /// each), one decision per interval.
    Broker(broker_command::BrokerArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(args) => sim_command::run(args).map_err(|e| e.to_string()),
        Command::Trace(args) => trace_command::run(args).map_err(|e| e.to_string()),
        Command::Dedup(args) => dedup_command::run(args).map_err(|e| e.to_string()),
        Command::Scrub(args) => scrub_command::run(args).map_err(|e| e.to_string()),
        Command::Run(args) => match run_command::run(args) {
            Ok(code) => return ExitCode::from(code),
            Err(e) => Err(e.to_string()),
        },
        Command::Stat(args) => stat_command::run(args).map_err(|e| e.to_string()),
        Command::Top(args) => top_command::run(args).map_err(|e| e.to_string()),
        Command::Set(args) => set_command::run(args).map_err(|e| e.to_string()),
        Command::Migrate(args) => migrate_command::run(args).map_err(|e| e.to_string()),
        Command::Broker(args) => broker_command::run(args).map_err(|e| e.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memvisor: error: {e}");
            ExitCode::FAILURE
        }
    }
}
