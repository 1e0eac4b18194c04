//! [`migration_eval`]: issue 11's evaluation of live migration with real QEMU (TCG) guests:
//! `memvisor migrate` (pager to pager, QEMU moving device state only) against QEMU's own
//! precopy migration, both on this host, alternated in one run (the variant order rotating
//! by one each repetition).
//!
//! The guest runs `churn` (it writes most of its memory, then rewrites random pages, printing
//! its progress every second, and verifies all of it at the end, on whichever host it is by
//! then). Each migration starts once the churn has run [`MigrationEvalConfig::warmup`] on the
//! source, and is measured: host time from the start of `memvisor migrate` (or of QMP
//! `migrate`) to completion, QEMU's downtime, swap traffic of each end during the migration,
//! the guest's speed before and after it (from its progress lines), and whether it verified.
//!
//! Cases (see [`crate::migration_eval_config`]): *virtualizing* (unconstrained source,
//! destination with a small budget) and *devirtualizing* (source with a small budget,
//! unconstrained destination). The kernel ends are QEMU alone in a cgroup v1 memory group
//! with a swap file of its own ([`MemoryCgroup`](crate::memory_cgroup::MemoryCgroup),
//! [`KernelSwapFile`](crate::kernel_swap::KernelSwapFile)), as in `vswapper-eval`.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use memvisor_control::PostCopy;
use memvisor_qmp::MigrationInfo;
use memvisor_testvm::{GuestConfig, GuestImage, MemoryBackend};
use serde_json::json;

use crate::bench_error::BenchError;
use crate::churn_progress::{progress_lines, rate_in_window};
use crate::migration_end::{io_delta, swap_delta, EndSpec, Listen, MigrationEnd};
use crate::migration_eval_config::{
    plan, MigrationCase, MigrationEvalConfig, MigrationVariant, Mover, Placement,
};
use crate::migration_run::MigrationRun;
use crate::results_file::create_results_dir;

const MIB: u64 = 1 << 20;

/// Runs every case's variants `reps` times, alternating them.
pub fn migration_eval(
    config: &MigrationEvalConfig,
    image: &GuestImage,
    mut progress: impl FnMut(&MigrationRun),
) -> Result<Vec<MigrationRun>, BenchError> {
    create_results_dir(&config.work_dir)?;
    // Swap files, keys, sockets and control directories go in a private (0700) directory of
    // this run inside the work directory (which may be a shared one), removed at the end.
    // (tempfile makes directories with the default mode, 0777 less the umask: ask for 0700.)
    let private = tempfile::Builder::new()
        .prefix("migration-eval-")
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(&config.work_dir)
        .map_err(|e| BenchError::io("create a private directory in", &config.work_dir, e))?;
    let mut out = Vec::new();
    let mut seq = 0u64;
    for (case, variants) in &config.cases {
        for rep in 0..config.reps {
            let n = variants.len();
            for i in 0..n {
                let variant = variants[(i + rep) % n];
                seq += 1;
                let run_dir = private.path().join(format!("run-{seq}"));
                fs::create_dir(&run_dir).map_err(|e| BenchError::io("create", &run_dir, e))?;
                let run = run_one(config, &run_dir, image, *case, variant, rep, seq);
                let _ = fs::remove_dir_all(&run_dir);
                let run = run?;
                progress(&run);
                out.push(run);
            }
        }
    }
    Ok(out)
}

/// A key file of 32 random bytes, mode 0600, created exclusively.
fn key_file(path: &Path) -> Result<(), BenchError> {
    let mut bytes = [0u8; 32];
    fs::File::open("/dev/urandom")
        .and_then(|mut r| std::io::Read::read_exact(&mut r, &mut bytes))
        .map_err(|e| BenchError::io("read", "/dev/urandom", e))?;
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(&bytes))
        .map_err(|e| BenchError::io("create key file", path, e))
}

/// A free TCP port on the loopback address.
fn free_port() -> Result<u16, BenchError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| BenchError::io("bind a free port on", "127.0.0.1", e))
}

/// What the mover reported.
#[derive(Default)]
struct Moved {
    qemu: MigrationInfo,
    rounds: Option<u32>,
    wire_bytes: Option<u64>,
    memory_ms: Option<u64>,
    summary: Option<String>,
}

/// One migration of `case` with `variant`; `dir` is this run's private directory.
fn run_one(
    config: &MigrationEvalConfig,
    dir: &Path,
    image: &GuestImage,
    case: MigrationCase,
    variant: MigrationVariant,
    rep: usize,
    seq: u64,
) -> Result<MigrationRun, BenchError> {
    let label = format!("{} / {} / rep {rep}", case.name(), variant.name());
    let guest_bytes = config.guest_mib * MIB;
    let p = plan(case, variant, guest_bytes, config.budget, config.headroom).ok_or_else(|| {
        BenchError::bad(
            "variant",
            variant.name(),
            format!("not a variant of case {}", case.name()),
        )
    })?;
    let guest = GuestConfig::new(config.guest_mib, config.workload())
        .backend(MemoryBackend::Memfd)
        .timeout(Duration::from_secs(config.churn_secs + 1800));
    let (mem_port, dev_port) = (free_port()?, free_port()?);
    let key = dir.join("migration.key");
    let listen = if matches!(p.mover, Mover::Memvisor(_)) {
        key_file(&key)?;
        Some(Listen {
            address: format!("127.0.0.1:{mem_port}"),
            key: key.clone(),
        })
    } else {
        None
    };
    let spec = |role, placement, listen, incoming| EndSpec {
        role,
        run: &label,
        placement,
        guest: &guest,
        image,
        memvisor: &config.memvisor,
        dir,
        listen,
        incoming,
        seq,
        allow_other_swap: config.allow_other_swap,
    };
    let mut dst = MigrationEnd::start(&spec("destination", p.destination, listen, true))?;
    let mut src = MigrationEnd::start(&spec("source", p.source, None, false))?;

    // The churn has written its memory and rewritten it for the warm-up.
    let warm_ms = config.warmup.as_secs_f64() * 1000.0;
    src.guest.wait_for(
        "churn progress past the warm-up",
        Duration::from_secs(config.churn_secs.max(900)),
        |lines| {
            progress_lines(lines)
                .last()
                .filter(|p| p.ms >= warm_ms)
                .copied()
        },
    )?;
    if matches!(p.destination, Placement::Memvisor { .. }) {
        dst.wait_for_guest_region(Duration::from_secs(60))?;
    }
    if matches!(p.source, Placement::Memvisor { .. }) {
        src.wait_for_guest_region(Duration::from_secs(60))?;
    }
    let (src_before, dst_before) = (src.swap_counters()?, dst.swap_counters()?);
    let (src_io_before, dst_io_before) = (src.process_io()?, dst.process_io()?);
    eprintln!("{label}: guest warm, migrating");

    let started = Instant::now();
    let moved = match p.mover {
        Mover::Memvisor(post_copy) => memvisor_migrate(
            config,
            &mut src,
            &dst,
            (mem_port, dev_port),
            &key,
            post_copy,
        ),
        Mover::Qemu => qemu_migrate(config, &mut src, &mut dst, dev_port),
    };
    let completed_at = Instant::now();
    let total_secs = completed_at.duration_since(started).as_secs_f64();
    match &moved {
        Ok(_) => eprintln!("{label}: migrated in {total_secs:.2} s"),
        Err(e) => eprintln!("{label}: migration failed after {total_secs:.2} s: {e}"),
    }
    let mut failure = None;
    let moved = moved.unwrap_or_else(|e| {
        failure = Some(e.to_string());
        Moved::default()
    });
    let completed = failure.is_none();
    // After a failed migration an end may be gone: its counters are then unknown (0).
    let mut after = |end: &MigrationEnd, before| match end.swap_counters() {
        Ok(t) => t,
        Err(e) => {
            failure.get_or_insert_with(|| format!("swap counters after the migration: {e}"));
            before
        }
    };
    let (src_after, dst_after) = (after(&src, src_before), after(&dst, dst_before));
    let (src_io, dst_io) = (
        src.process_io().unwrap_or(src_io_before),
        dst.process_io().unwrap_or(dst_io_before),
    );
    let dst_migration = dst.status().ok().flatten().and_then(|s| s.migration);
    // The source is done (or the migration failed): stop it.
    if let Ok(mut q) = src.qmp() {
        let _ = q.quit();
    }
    let _ = src.guest.wait_exit(Duration::from_secs(30));

    // The guest finishes its churn on the destination and verifies everything.
    let (verified, guest_errors) = if completed {
        // It reports every second until it verifies and powers off: a minute of silence
        // means it is stuck (seen after QEMU's own precopy: no line at all on the destination).
        let wait = Duration::from_secs(config.churn_secs + 900);
        match dst
            .guest
            .wait_exit_while_talking(wait, Some(Duration::from_secs(60)))
        {
            Ok(_) => {}
            Err(e) => failure = Some(format!("destination guest: {e}")),
        }
        match dst.guest.done() {
            Some(d) => (d.ok && d.errors == 0, Some(d.errors)),
            None => {
                failure.get_or_insert_with(|| {
                    dst.guest
                        .failure("the guest printed no done line")
                        .to_string()
                });
                (false, None)
            }
        }
    } else {
        (false, None)
    };
    let after = rate_in_window(
        &progress_lines(&dst.guest.lines()),
        completed_at,
        config.after,
    );
    let before = rate_in_window(
        &progress_lines(&src.guest.lines()),
        started.checked_sub(config.before).unwrap_or(started),
        config.before,
    );
    Ok(MigrationRun {
        case,
        variant,
        rep,
        completed,
        failure,
        total_secs: completed.then_some(total_secs),
        qemu_total_ms: moved.qemu.total_time_ms,
        downtime_ms: moved.qemu.downtime_ms,
        memory_bytes_moved: moved.wire_bytes.or(moved.qemu.ram_transferred),
        rounds: moved.rounds,
        pages_to_memory: dst_migration.as_ref().map(|m| m.pages_to_memory),
        pages_to_swap: dst_migration.as_ref().map(|m| m.pages_to_swap),
        source_swap: swap_delta(src_before, src_after),
        destination_swap: swap_delta(dst_before, dst_after),
        source_io: io_delta(src_io_before, src_io),
        destination_io: io_delta(dst_io_before, dst_io),
        memory_ms: moved.memory_ms,
        mover_summary: moved.summary,
        rewrites_per_sec_before: before.map(|r| r.per_sec),
        rewrites_per_sec_after: after.map(|r| r.per_sec),
        after_covered_secs: after.map_or(0.0, |r| r.covered_secs),
        verified,
        guest_errors,
    })
}

/// `memvisor migrate` from `src` to `dst`; QEMU's figures from the source afterwards.
fn memvisor_migrate(
    config: &MigrationEvalConfig,
    src: &mut MigrationEnd,
    dst: &MigrationEnd,
    (mem_port, dev_port): (u16, u16),
    key: &Path,
    post_copy: Option<PostCopy>,
) -> Result<Moved, BenchError> {
    let pid = src.status()?.map(|s| s.pid).ok_or_else(|| {
        BenchError::bad(
            "source",
            "plain QEMU",
            "memvisor migrate needs memvisor run",
        )
    })?;
    let ctl = src_control_dir(src)?;
    let mut c = Command::new(&config.memvisor);
    c.env("MEMVISOR_CONTROL_DIR", ctl)
        .args(["migrate", &pid.to_string()])
        .args(["--to", &format!("127.0.0.1:{mem_port}")])
        .arg("--key")
        .arg(key)
        .arg("--qmp")
        .arg(&src.qmp)
        .arg("--dest-qmp")
        .arg(&dst.qmp)
        .args(["--device-uri", &format!("tcp:127.0.0.1:{dev_port}")])
        .args([
            "--downtime-limit",
            &format!("{}ms", config.downtime_limit.as_millis()),
        ])
        .args([
            "--converge-timeout",
            &format!("{}s", config.migration_timeout.as_secs()),
        ]);
    if let Some(b) = config.memvisor_max_bandwidth {
        c.args(["--max-bandwidth", &b.to_string()]);
    }
    if let Some(when) = post_copy {
        c.arg(format!("--post-copy={when}"));
    }
    let line = format!("{c:?}");
    let out = c.output().map_err(|e| BenchError::Command {
        command: line.clone(),
        detail: e.to_string(),
    })?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
        return Err(BenchError::Command {
            command: "memvisor migrate".into(),
            detail: format!(
                "{}: {}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" / ")
            ),
        });
    }
    let memory = src.status()?.and_then(|s| s.migration);
    let qemu = src
        .qmp()?
        .query_migrate()
        .map_err(|e| qmp_error("query-migrate", e))?;
    Ok(Moved {
        qemu,
        rounds: memory.as_ref().map(|m| m.rounds),
        wire_bytes: memory.as_ref().map(|m| m.wire_bytes),
        memory_ms: memory.as_ref().map(|m| m.elapsed_ms),
        summary: Some(
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .replace('\n', "; "),
        ),
    })
}

/// The control directory of a memvisor end.
fn src_control_dir(src: &MigrationEnd) -> Result<PathBuf, BenchError> {
    src.control_dir().map(Path::to_path_buf).ok_or_else(|| {
        BenchError::bad(
            "source",
            "plain QEMU",
            "memvisor migrate needs the source under memvisor run",
        )
    })
}

/// QEMU's own precopy migration from `src` to `dst` (`max-bandwidth` and `downtime-limit`
/// set on the source), waiting for completion and for the destination to run.
fn qemu_migrate(
    config: &MigrationEvalConfig,
    src: &mut MigrationEnd,
    dst: &mut MigrationEnd,
    dev_port: u16,
) -> Result<Moved, BenchError> {
    let uri = format!("tcp:127.0.0.1:{dev_port}");
    let mut d = dst.qmp()?;
    d.migrate_incoming(&uri)
        .map_err(|e| qmp_error("migrate-incoming", e))?;
    let mut s = src.qmp()?;
    s.set_migration_parameters(json!({
        "max-bandwidth": config.qemu_max_bandwidth,
        "downtime-limit": config.downtime_limit.as_millis() as u64,
    }))
    .map_err(|e| qmp_error("migrate-set-parameters", e))?;
    s.migrate(&uri).map_err(|e| qmp_error("migrate", e))?;
    let info = match s.wait_migration_status(&["completed"], config.migration_timeout) {
        Ok(info) => info,
        Err(e) => {
            let _ = s.migrate_cancel();
            return Err(qmp_error("query-migrate (waiting for completed)", e));
        }
    };
    // The destination runs once it has loaded everything.
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let st = d.query_status().map_err(|e| qmp_error("query-status", e))?;
        if st.running {
            break;
        }
        if Instant::now() >= until {
            return Err(BenchError::bad(
                "destination",
                st.status,
                "not running 30 s after the migration completed",
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Moved {
        qemu: info,
        ..Moved::default()
    })
}

/// A QMP failure as a [`BenchError`] (the QMP error names the socket and the command).
fn qmp_error(command: &str, e: memvisor_qmp::QmpError) -> BenchError {
    BenchError::Command {
        command: format!("QMP {command}"),
        detail: e.to_string(),
    }
}
