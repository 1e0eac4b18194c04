//! `memvisor set PID`: changes a managed process's budget and/or policy at run time.

use clap::Args;
use memvisor_control::{format_bytes, socket_dir, ByteSize, ControlClient, ControlError};

use crate::host_memory::mem_total_bytes;

/// Arguments of `memvisor set`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("change").required(true).multiple(true).args(["budget", "policy"]))]
pub struct SetArgs {
    /// Process id of a program started by `memvisor run`.
    pid: u32,
    /// New process budget: bytes (512M, 2G) or a percentage of host RAM.
    #[arg(long, value_name = "SIZE|PCT")]
    budget: Option<String>,
    /// New eviction policy.
    #[arg(long, value_name = "P")]
    policy: Option<String>,
}

/// Applies the change and prints the new budget and policy.
pub fn run(args: SetArgs) -> Result<(), ControlError> {
    let budget = match &args.budget {
        Some(text) => {
            let ram = mem_total_bytes().map_err(|reason| ControlError::Size {
                input: text.clone(),
                reason,
            })?;
            let b = ByteSize::parse(text)?.resolve(ram);
            if b > ram {
                return Err(ControlError::Size {
                    input: text.clone(),
                    reason: format!(
                        "{} is more than this host's RAM ({})",
                        format_bytes(b),
                        format_bytes(ram)
                    ),
                });
            }
            Some(b)
        }
        None => None,
    };
    let dir = socket_dir::default_control_dir();
    let s = ControlClient::connect(&dir, args.pid)?.set(budget, args.policy.clone())?;
    println!(
        "pid {}: budget {}, policy {}",
        s.pid,
        format_bytes(s.budget_bytes),
        s.policy
    );
    Ok(())
}
