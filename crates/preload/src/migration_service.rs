//! The live-migration ends of a managed process (a QEMU under `memvisor run`): the source
//! end, started, finished and cancelled through the control socket (`memvisor migrate` drives
//! it), and the destination end, a listener started with the library when `memvisor run
//! --migration-listen ADDR --migration-key FILE` asked for one. Both move the process's
//! guest-memory regions ([`managed_process::guest_memory_regions`]) with memvisor-migration,
//! each on a library thread of its own.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use memvisor_control::{MigrateCommand, MigrationStatus};
use memvisor_migration::{
    MemoryReceiver, MemorySender, MigrationKey, MigrationProgress, Role, SenderOptions,
    SenderSignals, Served, LATE_RESUME_GRACE,
};
use memvisor_pager::Region;

use crate::managed_process;
use crate::preload_error::PreloadError;

/// The source end while (and after) it runs.
struct SourceMigration {
    progress: Arc<MigrationProgress>,
    signals: Arc<SenderSignals>,
    /// The regions it reads (to tell whether an unmapped region is one of them).
    regions: Vec<Arc<Region>>,
    thread: Option<JoinHandle<()>>,
}

static SOURCE: Mutex<Option<SourceMigration>> = Mutex::new(None);
static DESTINATION: OnceLock<Arc<MigrationProgress>> = OnceLock::new();

/// Run first on each migration thread: inside the library for good, following the program's
/// credential changes (as the control threads).
fn thread_start() {
    crate::shim_guard::ShimGuard::enter_forever();
    crate::library_init::prepare_library_thread();
}

/// Carries out a control-socket migration command.
pub fn command(command: MigrateCommand) -> Result<(), String> {
    match command {
        MigrateCommand::Start {
            to,
            key_file,
            max_bandwidth,
            downtime_limit_ms,
            post_copy,
        } => start_source(
            to,
            &key_file,
            SenderOptions {
                max_bandwidth,
                downtime_limit: Duration::from_millis(downtime_limit_ms),
                post_copy,
            },
        ),
        MigrateCommand::Finish => with_running_source("finish", |s| s.signals.finish()),
        MigrateCommand::Cancel => with_running_source("cancel", |s| s.signals.cancel()),
    }
}

fn with_running_source(what: &str, f: impl FnOnce(&SourceMigration)) -> Result<(), String> {
    let guard = SOURCE
        .lock()
        .map_err(|_| "migration state poisoned".to_string())?;
    match guard.as_ref() {
        Some(s) if !s.progress.status().is_over() => {
            f(s);
            Ok(())
        }
        Some(s) => Err(format!(
            "cannot {what}: the migration is over ({})",
            s.progress.state()
        )),
        None => Err(format!("cannot {what}: no migration was started")),
    }
}

fn start_source(to: SocketAddr, key_file: &Path, options: SenderOptions) -> Result<(), String> {
    // The process state first, then (never the other way round) the migration's: a status
    // request takes them in this order.
    let regions = managed_process::guest_memory_regions();
    let mut guard = SOURCE
        .lock()
        .map_err(|_| "migration state poisoned".to_string())?;
    if let Some(s) = guard.as_ref() {
        if !s.progress.status().is_over() {
            return Err(format!(
                "a migration to {} is already running ({})",
                s.progress.status().peer,
                s.progress.state()
            ));
        }
    }
    if DESTINATION.get().is_some() {
        return Err("this process is a migration destination (--migration-listen)".into());
    }
    let key = MigrationKey::load(key_file).map_err(|e| e.to_string())?;
    if regions.is_empty() {
        return Err(
            "no guest memory to migrate: start QEMU with -object memory-backend-memfd,...,share=on \
             or -object memory-backend-file,...,mem-path=FILE-OR-DIR-ON-TMPFS,share=on (e.g. \
             under /dev/shm), and -machine memory-backend=..."
                .into(),
        );
    }
    if let Some(r) = regions.iter().find(|r| !r.dirty_tracking()) {
        return Err(format!(
            "region {} has no write tracking (userfaultfd WP_ASYNC): cannot track changes",
            r.name()
        ));
    }
    // Join a finished earlier attempt's thread.
    if let Some(mut old) = guard.take() {
        if let Some(t) = old.thread.take() {
            let _ = t.join();
        }
    }
    let progress = Arc::new(MigrationProgress::new(Role::Source, "connecting"));
    let signals = Arc::new(SenderSignals::default());
    let thread = {
        let (progress, signals, regions) = (progress.clone(), signals.clone(), regions.clone());
        memvisor_pager::spawn_started("memvisor-migrate".into(), thread_start, move || {
            if let Err(e) = MemorySender::run(
                &regions,
                to,
                &key,
                options,
                &signals,
                &progress,
                thread_start,
            ) {
                eprintln!("memvisor-preload: migration to {to}: {e}");
            }
        })
        .map_err(|e| format!("cannot start the migration thread: {e}"))?
    };
    *guard = Some(SourceMigration {
        progress,
        signals,
        regions,
        thread: Some(thread),
    });
    Ok(())
}

/// Starts the destination end: binds `addr` now (so a busy address fails the start) and
/// serves it on a library thread until one migration completed (after a post-copy one, for
/// [`LATE_RESUME_GRACE`] more, in case its source lost the last acknowledgement).
pub fn start_destination(addr: SocketAddr, key_file: &Path) -> Result<(), PreloadError> {
    let key = MigrationKey::load(key_file).map_err(|e| PreloadError::Migration(e.to_string()))?;
    let listener = TcpListener::bind(addr).map_err(|e| {
        PreloadError::Migration(format!("cannot listen for migration on {addr}: {e}"))
    })?;
    let progress = Arc::new(MigrationProgress::new(Role::Destination, "listening"));
    let _ = DESTINATION.set(progress.clone());
    memvisor_pager::spawn_started("memvisor-migrate-in".into(), thread_start, move || {
        let receiver = MemoryReceiver::new(&key, &progress, thread_start);
        match receiver.serve(&listener, managed_process::guest_memory_regions) {
            Ok(Served {
                post_copy: Some(migration),
            }) => receiver.answer_late_resumes(&listener, migration, LATE_RESUME_GRACE),
            Ok(_) => {}
            Err(e) => {
                progress.set_error(e.to_string(), true);
                eprintln!("memvisor-preload: migration listener on {addr}: {e}");
            }
        }
    })
    .map_err(|e| PreloadError::Migration(format!("cannot start the migration listener: {e}")))?;
    Ok(())
}

/// The migration this process takes part in, for its status. Called with the process state
/// locked (`managed_process::status`): the lock order is process state, then [`SOURCE`].
pub fn status() -> Option<MigrationStatus> {
    if let Some(s) = SOURCE
        .lock()
        .ok()
        .and_then(|g| g.as_ref().map(|s| s.progress.status()))
    {
        return Some(s);
    }
    DESTINATION.get().map(|p| p.status())
}

/// `region` is being unmapped by the program: a source migration reading it is cancelled and
/// waited for, so nothing refers to the region once this returns.
pub fn release_region(region: &Arc<Region>) {
    let thread = {
        let Ok(mut guard) = SOURCE.lock() else {
            return;
        };
        match guard.as_mut() {
            Some(s) if s.regions.iter().any(|r| Arc::ptr_eq(r, region)) => {
                s.signals.cancel();
                s.regions.clear();
                s.thread.take()
            }
            _ => None,
        }
    };
    if let Some(t) = thread {
        let _ = t.join();
    }
}
