//! `memvisor run`: starts an unmodified program with its large memory under the pager (the
//! preload library), after checking everything that can be checked before it starts.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};

use clap::Args;
use memvisor_control::launch_env::{MAX_ARENA_BYTES, MAX_CHUNK_BYTES};
use memvisor_control::{
    format_bytes, launch_env, prometheus, socket_dir, ByteSize, ControlClient, ControlError,
    MetricsServer,
};
use memvisor_pager::Region;

use crate::host_memory::mem_total_bytes;
use crate::program_malloc::ProgramMalloc;
use crate::swap_dir_check::{check_swap_dir, SwapRoom};

/// File name of the preload library.
pub const PRELOAD_FILE: &str = "libmemvisor_preload.so";

/// Arguments of `memvisor run`.
#[derive(Debug, Args)]
#[command(after_help = "\
Manages every private anonymous mapping of at least --min-region bytes (carved from one arena \
region), QEMU's guest RAM (memory-backend-memfd, or anonymous RAM mapped at a fixed address), \
within --budget, paging the rest to a private swap file in --swap-dir. The exit status is the \
program's (128+N if it died of signal N).

Example: memvisor run --budget 2G --policy clock -- redis-server --save ''")]
pub struct RunArgs {
    /// Resident budget of the process: bytes (512M, 2G) or a percentage of host RAM.
    #[arg(long, value_name = "SIZE|PCT", default_value = "50%")]
    budget: String,
    /// Eviction policy (see `memvisor sim --help`); offline policies are refused.
    #[arg(long, value_name = "P", default_value = memvisor_pager::DEFAULT_POLICY)]
    policy: String,
    /// Directory of the private swap files (must exist and be writable). They are created
    /// without a name (O_TMPFILE), so a world-writable directory is safe.
    #[arg(long, value_name = "D", default_value = "/var/tmp")]
    swap_dir: PathBuf,
    /// When the swap directory's filesystem is full: `overrun` keeps the pages that could not
    /// be written in memory, over the budget, and retries (reported once per episode, counted
    /// in `stat`); `fail` stops the program (SIGSTOP) with a message until space is freed and
    /// it is sent SIGCONT.
    #[arg(long, value_name = "ACTION", default_value = "overrun", value_parser = ["overrun", "fail"])]
    on_swap_full: String,
    /// Swap mapper and false-read preventer (VSwapper) for disk images QEMU reads into guest
    /// RAM: a page read from an image is evicted without a swap write and paged in from the
    /// image again; a read that overwrites whole pages does not first read them from swap.
    #[arg(long, value_name = "ON|OFF", default_value = "on", value_parser = ["on", "off"])]
    swap_mapper: String,
    /// Address space a program reserves (`PROT_NONE`) and makes accessible with one
    /// `mprotect` of at least `--min-region`, such as QEMU's TCG translated-code buffer, is
    /// paged under the budget (region kind `code` if executable) with an allotment that
    /// follows its page-in rate; `off` leaves it to the kernel, outside the budget.
    #[arg(long, value_name = "ON|OFF", default_value = "on", value_parser = ["on", "off"])]
    reservations: String,
    /// Host page cache of the disk images QEMU reads into guest RAM: `default` leaves it to
    /// the kernel; `exclusive` drops the blocks from the host cache right after each read
    /// into guest RAM (never a dirty page) and lets them back in when memvisor evicts the
    /// guest page the image holds, so the host caches what the guest does not. With
    /// `--image-cache` too, the guest's blocks stay until the limit needs the room, and those
    /// the guest lets go from its own page cache meanwhile stay as the host's. Not the
    /// default: an image shared with other VMs (a backing file) loses its cached blocks for
    /// all of them, and a guest re-reading what it dropped itself reads the disk.
    #[arg(long, value_name = "MODE", default_value = "default",
          value_parser = clap::builder::PossibleValuesParser::new(memvisor_pager::HostCache::NAMES))]
    host_cache: String,
    /// Limit on the host page cache of each disk image QEMU reads into guest RAM: bytes
    /// (64M) or a percentage of host RAM, at least 1M. A CAR model of the image's reads and
    /// writes decides what stays; its victims leave the host cache at once (never a dirty
    /// page: its writeback is started and the drop retried), and whatever else the kernel
    /// caches of the image is dropped when the cache exceeds the limit by an eighth. The
    /// model's curve (`memvisor stat --json`) tells what a larger limit would save. Default:
    /// no limit. `memvisor set --image-cache` changes it while the program runs.
    #[arg(long, value_name = "SIZE|PCT")]
    image_cache: Option<String>,
    /// Smallest anonymous mapping that is managed [default: 16M; 2M with --malloc jemalloc,
    /// and no less].
    #[arg(long, value_name = "SIZE")]
    min_region: Option<String>,
    /// The program's `malloc`: `program` (what it links with) or `jemalloc`, preloaded after
    /// memvisor's library (Debian's libjemalloc2), which maps the program's heap through the
    /// `mmap` the library sees: the heap is then paged under the budget with the rest (glibc's
    /// heap is not: it maps with calls the library cannot see). Managed memory is not
    /// inherited by `fork`, so with jemalloc the library refuses `fork` (ENOMEM, and one line
    /// on stderr; `vfork` and `posix_spawn` share the parent's memory and go through): a
    /// program that forks (QEMU's `-daemonize`, `-netdev tap` scripts) must keep `program`.
    #[arg(long, value_name = "M", default_value = "program",
          value_parser = crate::program_malloc::NAMES)]
    malloc: String,
    /// Chunk of every region: the unit the eviction policy ranks and pages out, and the most
    /// a page-in reads at once (plus one chunk read ahead). A multiple of 4K, at most 64M.
    /// Residency and the budget are counted in pages: a page-in reads the faulting page alone
    /// when faults are scattered, a window growing from 16K as they start to stream, and the
    /// chunk's missing pages once the window spans a chunk.
    #[arg(long, value_name = "SIZE", default_value = "1M")]
    chunk_size: String,
    /// Adaptive busy polling of the fault handlers: while faults come faster than one per
    /// DURATION (or a page read is in flight), keep checking for the next one for up to
    /// DURATION before sleeping (0 = off). Cuts the latency of each fault on hosts where waking
    /// a thread is slow, at the cost of handler CPU time while the program faults fast; an
    /// idle program costs none, and a handler that finds every CPU busy with other threads
    /// stops polling for a while.
    #[arg(long, value_name = "DURATION", default_value = "200us")]
    busy_poll: String,
    /// While a fault handler busy-polls (the program faults fast), ask the kernel that idle
    /// CPUs poll instead of halting (CPU latency QoS, /dev/cpu_dma_latency; needs root), so a
    /// thread woken after its page-in runs at once instead of after its CPU leaves an idle
    /// state; lifted 20 ms after the polling stops. Costs idle CPU time (power, and a VM's
    /// host CPU) while it lasts; no effect with --busy-poll 0.
    #[arg(long, value_name = "ON|OFF", default_value = "on", value_parser = ["on", "off"])]
    cpu_wake_latency: String,
    /// Virtual size of the arena large mappings are carved from [default: twice host RAM].
    #[arg(long, value_name = "SIZE")]
    arena: Option<String>,
    /// Serve Prometheus metrics of the program at ADDR (PORT, :PORT or HOST:PORT; loopback
    /// only unless --metrics-allow-remote).
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
    /// Allow a non-loopback --metrics address.
    #[arg(long, requires = "metrics")]
    metrics_allow_remote: bool,
    /// Live migration destination: listen on IP:PORT for the guest memory of a source QEMU
    /// (`memvisor migrate` on the source host); start QEMU with `-incoming defer`. What arrives
    /// goes into guest RAM up to the budget and straight to swap after that.
    #[arg(long, value_name = "IP:PORT", requires = "migration_key")]
    migration_listen: Option<String>,
    /// Shared key file a migration source must prove it holds (32 to 4096 bytes, mode 0600,
    /// owned by you or root). Create one with `head -c 32 /dev/urandom > FILE; chmod 600 FILE`.
    #[arg(long, value_name = "FILE", requires = "migration_listen")]
    migration_key: Option<PathBuf>,
    /// Also manage children the program execs (by default they run without memvisor).
    #[arg(long)]
    manage_children: bool,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM ARGS"
    )]
    command: Vec<OsString>,
}

/// Why `memvisor run` did not start the program.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The program is not on PATH (or not an executable file).
    #[error("program '{0}' not found on PATH or not executable")]
    ProgramNotFound(String),
    /// A size argument is malformed.
    #[error("--{arg}: {source}")]
    Size {
        /// The option.
        arg: &'static str,
        /// The parse error.
        #[source]
        source: ControlError,
    },
    /// The budget is out of range.
    #[error("--budget {given}: {reason}")]
    Budget {
        /// As given.
        given: String,
        /// What is wrong.
        reason: String,
    },
    /// Another value is out of range.
    #[error("--{arg} {given}: {reason}")]
    Value {
        /// The option.
        arg: &'static str,
        /// As given.
        given: String,
        /// What is wrong.
        reason: String,
    },
    /// The swap directory cannot be used.
    #[error("--swap-dir {path}: {reason}")]
    SwapDir {
        /// The directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// userfaultfd cannot be used by this user on this kernel.
    #[error("userfaultfd is not usable here ({0}); memvisor run needs root (or CAP_SYS_PTRACE, or vm.unprivileged_userfaultfd=1) and a kernel with userfaultfd")]
    Userfaultfd(String),
    /// The preload library is missing.
    #[error("preload library {0} not found (build it with `cargo build -p memvisor-preload`, or set MEMVISOR_PRELOAD)")]
    Preload(PathBuf),
    /// Host facts could not be read.
    #[error("{0}")]
    Host(String),
    /// Control directory or metrics endpoint.
    #[error(transparent)]
    Control(#[from] ControlError),
    /// The program could not be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// The program as it will be executed: a path if it names one, else the first match on PATH.
pub fn find_program(name: &OsString) -> Option<PathBuf> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let p = Path::new(name);
    if p.as_os_str().is_empty() {
        return None;
    }
    if p.components().count() > 1 || name.to_string_lossy().contains('/') {
        return is_exec(p).then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(p))
        .find(|c| is_exec(c))
}

/// The preload library: `$MEMVISOR_PRELOAD`, else next to this executable.
pub fn preload_library() -> Result<PathBuf, RunError> {
    let path = match std::env::var_os(launch_env::PRELOAD_LIBRARY).filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(|e| RunError::Host(format!("cannot locate the memvisor executable: {e}")))?
            .with_file_name(PRELOAD_FILE),
    };
    let path = std::fs::canonicalize(&path).map_err(|_| RunError::Preload(path.clone()))?;
    Ok(path)
}

fn parse_size(arg: &'static str, text: &str) -> Result<ByteSize, RunError> {
    ByteSize::parse(text).map_err(|source| RunError::Size { arg, source })
}

/// `--busy-poll`: whole microseconds from 0 (`0` or `off`) to 1 s, spelled as
/// [`memvisor_control::parse_duration`] reads durations (`100us`, `0.5ms`).
fn parse_micros(text: &str) -> Option<u64> {
    if text.trim() == "0" {
        return Some(0);
    }
    match memvisor_control::parse_duration(text).ok()? {
        None => Some(0),
        Some(d) if d <= std::time::Duration::from_secs(1) => Some((d.as_micros() as u64).max(1)),
        Some(_) => None,
    }
}

/// Everything validated, ready to start.
struct Plan {
    program: PathBuf,
    budget: u64,
    chunk_size: u64,
    busy_poll_us: u64,
    min_region: u64,
    arena: u64,
    library: PathBuf,
    /// `--malloc`'s library, preloaded after memvisor's.
    malloc_library: Option<PathBuf>,
    control_dir: PathBuf,
    /// Live migration destination: address and key file (absolute).
    migration_in: Option<(std::net::SocketAddr, PathBuf)>,
    /// `--host-cache`, checked by the parser the library uses.
    host_cache: memvisor_pager::HostCache,
    /// `--image-cache`, in bytes.
    image_cache: Option<u64>,
    /// Warnings to print once every check has passed (a refused run prints only its error).
    warnings: Vec<String>,
}

fn plan(args: &RunArgs) -> Result<Plan, RunError> {
    let name = &args.command[0];
    let program = find_program(name)
        .ok_or_else(|| RunError::ProgramNotFound(name.to_string_lossy().into()))?;
    let ram = mem_total_bytes().map_err(RunError::Host)?;
    let chunk = parse_size("chunk-size", &args.chunk_size)?.resolve(ram);
    if chunk == 0 || chunk % 4096 != 0 || chunk > MAX_CHUNK_BYTES {
        return Err(RunError::Value {
            arg: "chunk-size",
            given: args.chunk_size.clone(),
            reason: format!(
                "must be a multiple of 4K and at most {}",
                format_bytes(MAX_CHUNK_BYTES)
            ),
        });
    }
    let busy_poll_us = parse_micros(&args.busy_poll).ok_or_else(|| RunError::Value {
        arg: "busy-poll",
        given: args.busy_poll.clone(),
        reason: "expected a duration from 0 to 1s, such as 100us, 0.5ms or 0".into(),
    })?;
    let host_cache = args
        .host_cache
        .parse::<memvisor_pager::HostCache>()
        .map_err(|reason| RunError::Value {
            arg: "host-cache",
            given: args.host_cache.clone(),
            reason,
        })?;
    let budget = parse_size("budget", &args.budget)?.resolve(ram);
    // The same rules `memvisor set` and the control server apply.
    let rules = memvisor_control::SetRules {
        host_ram_bytes: ram,
        chunk_bytes: chunk,
    };
    rules.check_budget(budget).map_err(|e| RunError::Budget {
        given: args.budget.clone(),
        reason: match e {
            ControlError::Budget { reason, .. } => reason,
            other => other.to_string(),
        },
    })?;
    rules
        .check_policy(&args.policy)
        .map_err(|e| RunError::Value {
            arg: "policy",
            given: args.policy.clone(),
            reason: match e {
                ControlError::Policy { reason, .. } => reason,
                other => other.to_string(),
            },
        })?;
    let image_cache = match &args.image_cache {
        None => None,
        Some(text) => {
            let bytes = parse_size("image-cache", text)?.resolve(ram);
            rules
                .check_image_cache(bytes)
                .map_err(|e| RunError::Value {
                    arg: "image-cache",
                    given: text.clone(),
                    reason: match e {
                        ControlError::ImageCache { reason, .. } => reason,
                        other => other.to_string(),
                    },
                })?;
            Some(bytes)
        }
    };
    let malloc = ProgramMalloc::from_name(&args.malloc);
    let min_region_text = args
        .min_region
        .clone()
        .unwrap_or_else(|| malloc.default_min_region().to_string());
    let min_region = parse_size("min-region", &min_region_text)?.resolve(ram);
    malloc.check_min_region(&min_region_text, min_region)?;
    if min_region < 4096 {
        return Err(RunError::Value {
            arg: "min-region",
            given: min_region_text,
            reason: "must be at least one page (4K)".into(),
        });
    }
    let arena = match &args.arena {
        Some(a) => parse_size("arena", a)?.resolve(ram),
        None => ram.saturating_mul(2),
    };
    if arena > MAX_ARENA_BYTES {
        return Err(RunError::Value {
            arg: "arena",
            given: args.arena.clone().unwrap_or_default(),
            reason: format!(
                "more than {} of address space (the arena is reserved at start)",
                format_bytes(MAX_ARENA_BYTES)
            ),
        });
    }
    if arena < chunk {
        return Err(RunError::Value {
            arg: "arena",
            given: args.arena.clone().unwrap_or_default(),
            reason: format!("must be at least one chunk ({})", format_bytes(chunk)),
        });
    }
    let room = check_swap_dir(&args.swap_dir, chunk, arena, budget, args.arena.is_some()).map_err(
        |reason| RunError::SwapDir {
            path: args.swap_dir.clone(),
            reason,
        },
    )?;
    let mut warnings = Vec::new();
    if let SwapRoom::Sparse { free, need } = room {
        warnings.push(format!(
            "--swap-dir {} has {} free; the arena can page out up to {} beyond the budget (it \
             is sparse: only memory the program uses is stored). If the disk fills, \
             --on-swap-full {} applies.",
            args.swap_dir.display(),
            format_bytes(free),
            format_bytes(need),
            args.on_swap_full
        ));
    }
    let migration_in = match (&args.migration_listen, &args.migration_key) {
        (Some(addr), Some(key)) => Some(migration_destination(addr, key)?),
        _ => None,
    };
    Region::check_supported().map_err(|e| RunError::Userfaultfd(e.to_string()))?;
    let library = preload_library()?;
    let malloc_library = malloc.library()?;
    let control_dir = socket_dir::default_control_dir();
    socket_dir::prepare_control_dir(&control_dir)?;
    Ok(Plan {
        program,
        budget,
        chunk_size: chunk,
        busy_poll_us,
        min_region,
        arena,
        library,
        malloc_library,
        control_dir,
        migration_in,
        host_cache,
        image_cache,
        warnings,
    })
}

/// `--migration-listen` and `--migration-key`: a numeric `IP:PORT` that can be bound now, and
/// a key file the library will accept (the checks the library makes again at start).
fn migration_destination(
    addr: &str,
    key: &Path,
) -> Result<(std::net::SocketAddr, PathBuf), RunError> {
    let value =
        |arg: &'static str, given: String, reason: String| RunError::Value { arg, given, reason };
    let parsed: std::net::SocketAddr = addr.parse().map_err(|_| {
        value(
            "migration-listen",
            addr.into(),
            "expected IP:PORT, for example 0.0.0.0:7070".into(),
        )
    })?;
    std::net::TcpListener::bind(parsed).map_err(|e| {
        value(
            "migration-listen",
            addr.into(),
            format!("cannot listen there: {e}"),
        )
    })?;
    let key_path = std::path::absolute(key)
        .map_err(|e| value("migration-key", key.display().to_string(), e.to_string()))?;
    memvisor_migration::MigrationKey::load(&key_path)
        .map_err(|e| value("migration-key", key.display().to_string(), e.to_string()))?;
    Ok((parsed, key_path))
}

/// The child's pid, for the signal forwarder.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Signals a terminal sends (si_code SI_KERNEL) reach the child directly, as it is in the
    // same process group; only signals sent to memvisor itself (kill, si_code <= 0) are passed on.
    // SAFETY: the kernel hands a valid siginfo to an SA_SIGINFO handler.
    let code = unsafe { (*info).si_code };
    let child = CHILD.load(Ordering::Acquire);
    if code <= 0 && child > 0 {
        // SAFETY: kill is async-signal-safe; the pid is our child's.
        unsafe { libc::kill(child, sig) };
    }
}

fn install_forwarders() {
    for sig in [
        libc::SIGINT,
        libc::SIGTERM,
        libc::SIGHUP,
        libc::SIGQUIT,
        libc::SIGUSR1,
        libc::SIGUSR2,
    ] {
        // SAFETY: a zeroed sigaction is valid; we set a plain SA_SIGINFO handler that only
        // calls async-signal-safe functions.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = forward_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// Runs the program; returns the exit status to pass on.
pub fn run(args: RunArgs) -> Result<u8, RunError> {
    let plan = plan(&args)?;
    let metrics = match &args.metrics {
        Some(addr) => Some(MetricsServer::bind(addr, args.metrics_allow_remote)?),
        None => None,
    };
    for warning in &plan.warnings {
        eprintln!("memvisor: warning: {warning}");
    }
    let mut preload = plan.library.as_os_str().to_owned();
    if let Some(malloc) = &plan.malloc_library {
        preload.push(":");
        preload.push(malloc);
    }
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(":");
        preload.push(old);
    }
    let mut cmd = Command::new(&plan.program);
    cmd.arg0(&args.command[0])
        .args(&args.command[1..])
        .env("LD_PRELOAD", preload)
        .env(launch_env::BUDGET, plan.budget.to_string())
        .env(launch_env::POLICY, &args.policy)
        .env(launch_env::SWAP_DIR, &args.swap_dir)
        .env(launch_env::CHUNK_SIZE, plan.chunk_size.to_string())
        .env(launch_env::BUSY_POLL_US, plan.busy_poll_us.to_string())
        .env(launch_env::CPU_WAKE_LATENCY, &args.cpu_wake_latency)
        .env(launch_env::ON_SWAP_FULL, &args.on_swap_full)
        .env(launch_env::SWAP_MAPPER, &args.swap_mapper)
        .env(launch_env::RESERVATIONS, &args.reservations)
        .env(launch_env::HOST_CACHE, plan.host_cache.name())
        .env(launch_env::MIN_REGION, plan.min_region.to_string())
        .env(launch_env::MALLOC, &args.malloc)
        .env(launch_env::ARENA_SIZE, plan.arena.to_string())
        .env(launch_env::CONTROL_DIR, &plan.control_dir)
        .env(launch_env::PRELOAD_LIBRARY, &plan.library);
    if args.manage_children {
        cmd.env(launch_env::MANAGE_CHILDREN, "1");
    }
    match plan.image_cache {
        Some(bytes) => cmd.env(launch_env::IMAGE_CACHE, bytes.to_string()),
        None => cmd.env_remove(launch_env::IMAGE_CACHE),
    };
    if let Some((addr, key)) = &plan.migration_in {
        cmd.env(launch_env::MIGRATION_LISTEN, addr.to_string())
            .env(launch_env::MIGRATION_KEY, key);
    }
    let supervisor = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            // The program must not outlive `memvisor run` (killed, it could no longer forward
            // signals or remove the program's control socket): the kernel sends SIGKILL when
            // this thread's parent dies. Not kept across exec of a set-user-ID program.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before the prctl took effect.
            if libc::getppid() != supervisor {
                libc::_exit(128 + libc::SIGKILL);
            }
            Ok(())
        });
    }
    install_forwarders();
    let mut child = cmd.spawn().map_err(|source| RunError::Spawn {
        program: plan.program.display().to_string(),
        source,
    })?;
    let pid = child.id();
    CHILD.store(pid as i32, Ordering::Release);
    if let Some(server) = metrics {
        let dir = plan.control_dir.clone();
        if let Some(addr) = server.local_addr() {
            eprintln!("memvisor: metrics of pid {pid} at http://{addr}/metrics");
        }
        let rendered = move || match ControlClient::connect(&dir, pid).and_then(|mut c| c.status())
        {
            Ok(s) => prometheus::render(&[s]),
            Err(e) => format!("# memvisor: {e}\n"),
        };
        server.serve(rendered).map_err(|source| RunError::Spawn {
            program: "metrics thread".into(),
            source,
        })?;
    }
    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(source) => {
                return Err(RunError::Spawn {
                    program: plan.program.display().to_string(),
                    source,
                })
            }
        }
    };
    // A program killed by a signal leaves its socket behind.
    let _ = std::fs::remove_file(socket_dir::socket_path(&plan.control_dir, pid));
    Ok(match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => (128 + s) as u8,
        _ => 1,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_micros;

    #[test]
    fn busy_poll_durations() {
        for (text, us) in [
            ("0", 0),
            ("off", 0),
            ("100us", 100),
            ("0.5ms", 500),
            ("1s", 1_000_000),
        ] {
            assert_eq!(parse_micros(text), Some(us), "{text}");
        }
        for bad in ["fast", "100", "-1us", "2s", "nanus"] {
            assert_eq!(parse_micros(bad), None, "{bad}");
        }
    }

    /// `memvisor run`'s default is the pager's (the library's default without the variable).
    #[test]
    fn busy_poll_default_is_the_pagers() {
        let cmd = <super::RunArgs as clap::Args>::augment_args(clap::Command::new("run"));
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == "busy_poll")
            .unwrap();
        let default = arg.get_default_values()[0].to_str().unwrap();
        assert_eq!(
            parse_micros(default),
            Some(memvisor_pager::DEFAULT_BUSY_POLL.as_micros() as u64)
        );
    }
}
