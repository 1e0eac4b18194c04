//! `memvisor scrub`: the exclusive host cache. Finds VMs (QEMU processes, or the pids given),
//! and drops the host page-cache pages of their disk images whose content the guest holds;
//! once (`--once`), or in the foreground under the seed's frequency control (Algorithm 2).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use memvisor_scrub::{
    discover, MemInfo, ScrubControlConfig, ScrubController, ScrubError, ScrubOptions, Scrubber, Vm,
    VmScrub,
};

/// Arguments of `memvisor scrub`.
#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  memvisor scrub --once                 # every QEMU on the host, one scrub\n  memvisor scrub 4242 --th-frac-cached 0.3\n  memvisor scrub --once --image /srv/vm.img 4242   # a VMM memvisor does not recognize"
)]
pub struct ScrubArgs {
    /// VMM processes (default: every qemu-system-* process).
    #[arg(value_name = "PID")]
    pids: Vec<i32>,
    /// Scrub each VM once, print what was done, and exit.
    #[arg(long)]
    once: bool,
    /// Find what would be dropped; drop nothing.
    #[arg(long)]
    dry_run: bool,
    /// Disable lookahead in the lookups.
    #[arg(long)]
    no_lookahead: bool,
    /// Add a disk image to every VM given by pid (repeatable).
    #[arg(long, value_name = "FILE")]
    image: Vec<PathBuf>,
    /// Print the results of --once as JSON.
    #[arg(long, requires = "once")]
    json: bool,
    /// Scrub when cached memory exceeds this fraction of the total.
    #[arg(long, default_value_t = 0.5)]
    th_frac_cached: f64,
    /// Scrub when free memory falls below this fraction of the total.
    #[arg(long, default_value_t = 0.1)]
    th_frac_free: f64,
    /// Seconds between memory checks.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    tick: f64,
    /// Starting scrub period, seconds.
    #[arg(long, default_value_t = 30.0, value_name = "SECONDS")]
    initial_period: f64,
    /// Shortest scrub period, seconds.
    #[arg(long, default_value_t = 5.0, value_name = "SECONDS")]
    min_period: f64,
    /// Longest scrub period, seconds.
    #[arg(long, default_value_t = 300.0, value_name = "SECONDS")]
    max_period: f64,
}

/// Errors of `memvisor scrub`.
#[derive(Debug, thiserror::Error)]
pub enum ScrubCommandError {
    /// A library error.
    #[error(transparent)]
    Scrub(#[from] ScrubError),
    /// Some VMs or images failed (each was reported).
    #[error("{0} VM(s) or image(s) could not be scrubbed (see above)")]
    SomeFailed(usize),
    /// A bad argument.
    #[error("{0}")]
    Argument(String),
}

fn seconds(name: &str, v: f64) -> Result<Duration, ScrubCommandError> {
    Duration::try_from_secs_f64(v)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            ScrubCommandError::Argument(format!(
                "--{name} {v} must be a positive number of seconds"
            ))
        })
}

/// The VMs to scrub now, with `--image` added; errors reported and counted.
fn vms(args: &ScrubArgs, errors: &mut usize) -> Vec<Vm> {
    let mut out = Vec::new();
    for vm in discover(&args.pids) {
        match vm {
            Ok(mut vm) => {
                vm.images.extend(args.image.iter().cloned());
                vm.images.sort();
                vm.images.dedup();
                out.push(vm);
            }
            Err(e) => {
                eprintln!("memvisor: {e}");
                *errors += 1;
            }
        }
    }
    out
}

fn print_vm(r: &VmScrub, errors: &mut usize) {
    if let Some(e) = &r.error {
        eprintln!("memvisor: {e}");
        *errors += 1;
        return;
    }
    println!(
        "VM {} ({}): guest {} pages read ({} zero), {} replaced and {} modified since the last scrub; {:.3} s wall, {:.3} s CPU",
        r.pid,
        r.name,
        r.guest_pages,
        r.guest_zero_pages,
        r.guest_replaced,
        r.guest_modified,
        r.wall.as_secs_f64(),
        r.cpu.as_secs_f64()
    );
    for i in &r.images {
        if let Some(e) = &i.error {
            eprintln!("memvisor: VM {}: {e}", r.pid);
            *errors += 1;
        }
        println!(
            "  {}: cached {} -> {} pages; hashed {}, in guest {}, dropped {}, kept: dirty {}, busy {}, evicted by guest {}, not in guest {}; lookahead {}{}",
            i.path.display(),
            i.cached_before,
            i.cached_after,
            i.hashed,
            i.in_guest,
            i.dropped,
            i.kept_dirty,
            i.kept_busy,
            i.kept_evicted_by_guest,
            i.kept_not_in_guest,
            i.lookahead_hits,
            i.truncated_to
                .map_or(String::new(), |t| format!("; truncated to {t} bytes while scrubbing"))
        );
    }
}

fn json_vm(r: &VmScrub) -> serde_json::Value {
    serde_json::json!({
        "pid": r.pid, "name": r.name, "error": r.error,
        "guest_pages": r.guest_pages, "guest_zero_pages": r.guest_zero_pages,
        "guest_replaced": r.guest_replaced, "guest_modified": r.guest_modified,
        "wall_s": r.wall.as_secs_f64(), "cpu_s": r.cpu.as_secs_f64(),
        "images": r.images.iter().map(|i| serde_json::json!({
            "path": i.path, "size": i.size, "cached_before": i.cached_before,
            "cached_after": i.cached_after, "hashed": i.hashed, "in_guest": i.in_guest,
            "dropped": i.dropped, "kept_dirty": i.kept_dirty, "kept_busy": i.kept_busy,
            "kept_evicted_by_guest": i.kept_evicted_by_guest,
            "kept_not_in_guest": i.kept_not_in_guest, "lookahead_hits": i.lookahead_hits,
            "truncated_to": i.truncated_to, "error": i.error,
        })).collect::<Vec<_>>(),
    })
}

/// Runs `memvisor scrub`.
pub fn run(args: ScrubArgs) -> Result<(), ScrubCommandError> {
    let control = ScrubControlConfig {
        th_frac_cached: args.th_frac_cached,
        th_frac_free: args.th_frac_free,
        tick: seconds("tick", args.tick)?,
        initial_period: seconds("initial-period", args.initial_period)?,
        min_period: seconds("min-period", args.min_period)?,
        max_period: seconds("max-period", args.max_period)?,
    };
    control.validate().map_err(ScrubCommandError::Argument)?;
    if !args.image.is_empty() && args.pids.is_empty() {
        return Err(ScrubCommandError::Argument(
            "--image needs the VM's pid".into(),
        ));
    }
    let mut scrubber = Scrubber::new(ScrubOptions {
        dry_run: args.dry_run,
        lookahead: !args.no_lookahead,
    });
    let mut errors = 0;
    if args.once {
        let vms = vms(&args, &mut errors);
        if vms.is_empty() && errors == 0 {
            return Err(ScrubError::NoVm(
                "no QEMU process found (give VMM pids to scrub others)".into(),
            )
            .into());
        }
        let results: Vec<VmScrub> = vms.iter().map(|vm| scrubber.scrub_vm(vm)).collect();
        if args.json {
            for r in &results {
                errors += r.error.is_some() as usize
                    + r.images.iter().filter(|i| i.error.is_some()).count();
                if let Some(e) = &r.error {
                    eprintln!("memvisor: {e}");
                }
            }
            let v: Vec<_> = results.iter().map(json_vm).collect();
            println!("{:#}", serde_json::Value::Array(v));
        } else {
            for r in &results {
                print_vm(r, &mut errors);
            }
        }
        return if errors > 0 {
            Err(ScrubCommandError::SomeFailed(errors))
        } else {
            Ok(())
        };
    }
    // Foreground: the frequency control decides when to scrub.
    let mut controller = ScrubController::new(control);
    let tty = std::io::stdout().is_terminal();
    let mut total_dropped = 0u64;
    let mut scrubs = 0u64;
    loop {
        let mem = MemInfo::read()?;
        if let Some(reason) = controller.tick(&mem) {
            let mut errs = 0;
            let vms = vms(&args, &mut errs);
            let live: Vec<i32> = vms.iter().map(|v| v.pid).collect();
            scrubber.retain(&live);
            let mut dropped = 0;
            for vm in &vms {
                let r = scrubber.scrub_vm(vm);
                dropped += r.dropped();
                if let Some(e) = &r.error {
                    eprintln!("\nmemvisor: {e}");
                }
                for i in r.images.iter().filter_map(|i| i.error.as_ref()) {
                    eprintln!("\nmemvisor: VM {}: {i}", r.pid);
                }
            }
            let cached_pages = mem.cached / memvisor_dedup::PAGE_SIZE as u64;
            controller.scrubbed(reason, cached_pages, dropped);
            total_dropped += dropped;
            scrubs += 1;
            let line = format!(
                "scrub #{scrubs} ({reason:?}): {} VMs, dropped {dropped} pages ({total_dropped} total); cached {:.0} MiB, free {:.0} MiB of {:.0} MiB; next in {:.1} s",
                vms.len(),
                mem.cached as f64 / 1048576.0,
                mem.free as f64 / 1048576.0,
                mem.total as f64 / 1048576.0,
                controller.period().as_secs_f64()
            );
            if tty {
                print!("\r\x1b[2K{line}");
                let _ = std::io::stdout().flush();
            } else {
                println!("{line}");
            }
        }
        std::thread::sleep(control.tick);
    }
}
