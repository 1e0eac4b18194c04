//! `memvisor set PID`: changes a managed process's budget and/or policy at run time.

use clap::Args;
use memvisor_control::{format_bytes, socket_dir, ByteSize, ControlClient, ControlError, SetRules};

use crate::host_memory::mem_total_bytes;

/// Arguments of `memvisor set`.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("change").required(true).multiple(true).args(["budget", "policy", "image_cache"]))]
pub struct SetArgs {
    /// Process id of a program started by `memvisor run`.
    pid: u32,
    /// New process budget: bytes (512M, 2G) or a percentage of host RAM.
    #[arg(long, value_name = "SIZE|PCT")]
    budget: Option<String>,
    /// New eviction policy.
    #[arg(long, value_name = "P")]
    policy: Option<String>,
    /// New limit on the host page cache of the process's disk images (`memvisor run
    /// --image-cache`): bytes (64M), a percentage of host RAM, or `none` to lift it. Applies
    /// to every image and those found later, or to `--image` only.
    #[arg(long, value_name = "SIZE|PCT|none")]
    image_cache: Option<String>,
    /// The image `--image-cache` applies to, by its path as `memvisor stat --json` shows it.
    #[arg(long, value_name = "PATH", requires = "image_cache")]
    image: Option<String>,
}

/// Checks the change with the process's [`SetRules`] (the server checks again), applies it
/// and prints the new budget and policy.
pub fn run(args: SetArgs) -> Result<(), ControlError> {
    let ram = mem_total_bytes().map_err(ControlError::Host)?;
    let budget = match &args.budget {
        Some(text) => Some(ByteSize::parse(text)?.resolve(ram)),
        None => None,
    };
    // `Some(None)`: lift the limit.
    let image_cache = match args.image_cache.as_deref().map(str::trim) {
        None => None,
        Some("none") => Some(None),
        Some(text) => Some(Some(ByteSize::parse(text)?.resolve(ram))),
    };

    let dir = socket_dir::find_socket_dir(args.pid);
    let connected = ControlClient::connect(&dir, args.pid).and_then(|mut client| {
        let status = client.status()?;
        Ok((client, status))
    });
    let (mut client, chunk_bytes) = match connected {
        Ok((client, status)) => (client, status.chunk_size),
        // Say what the stop means for this command: nothing was changed.
        Err(ControlError::Stopped { pid, .. }) => {
            return Err(ControlError::Stopped {
                pid,
                action: "; not changed",
            })
        }
        Err(e) => return Err(e),
    };
    let rules = SetRules {
        host_ram_bytes: ram,
        chunk_bytes,
    };
    rules.check(budget, args.policy.as_deref())?;
    if let Some(Some(bytes)) = image_cache {
        rules.check_image_cache(bytes)?;
    }
    if budget.is_some() || args.policy.is_some() {
        let s = client.set(budget, args.policy.clone())?;
        println!(
            "pid {}: budget {}, policy {}",
            s.pid,
            format_bytes(s.budget_bytes),
            s.policy
        );
    }
    if let Some(limit) = image_cache {
        let s = client.set_image_cache(limit, args.image.clone())?;
        let limit = limit.map_or("none".to_string(), format_bytes);
        match &args.image {
            Some(path) => println!("pid {}: image cache of {path}: limit {limit}", s.pid),
            None => println!(
                "pid {}: image cache limit {limit} for every image ({} now)",
                s.pid,
                s.images.len()
            ),
        }
    }
    Ok(())
}
