//! Library start and exit: read the configuration, clean the environment, create the arena,
//! start the control socket, register the fork handler; at exit remove the socket.
//!
//! A configuration or setup failure is fatal: the program is not started unmanaged behind the
//! user's back. The library prints one line and exits with status 125 (`memvisor run` checks
//! the same conditions first, so this only happens when they changed in between).

use std::ffi::CString;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use memvisor_control::{launch_env, ControlHandler, ControlServer, MigrateCommand, ProcessStatus};

use crate::credential_mirror;
use crate::managed_process;
use crate::migration_service;
use crate::preload_config::PreloadConfig;
use crate::shim_allocator;
use crate::shim_guard::ShimGuard;

/// Exit status when the library cannot start.
pub const SETUP_FAILURE_STATUS: i32 = 125;

static SERVER: OnceLock<ControlServer> = OnceLock::new();
/// The process that owns the socket (a forked child must not remove it).
static OWNER_PID: AtomicU32 = AtomicU32::new(0);

/// The control socket's view of this process.
struct ProcessControl;

impl ControlHandler for ProcessControl {
    fn status(&self) -> ProcessStatus {
        managed_process::status()
    }
    fn set(&self, budget: Option<u64>, policy: Option<&str>) -> Result<(), String> {
        managed_process::set(budget, policy)
    }
    fn set_image_cache(&self, image: Option<&str>, limit: Option<u64>) -> Result<(), String> {
        crate::image_io::set_cache_limit(image, limit)
    }
    fn migrate(&self, command: MigrateCommand) -> Result<(), String> {
        migration_service::command(command)
    }
}

fn fail(message: &str) -> ! {
    eprintln!("memvisor-preload: error: {message}");
    // SAFETY: _exit ends the process at once; nothing here needs unwinding or flushing
    // beyond stderr, which is unbuffered.
    unsafe { libc::_exit(SETUP_FAILURE_STATUS) }
}

extern "C" {
    static mut environ: *mut *mut libc::c_char;
}

/// The environment as `(index, "NAME=value")` pairs, read straight from `environ`: programs
/// may define their own `getenv`/`setenv`/`unsetenv` (bash does, and its versions do not work
/// before its `main`), so the library never calls them.
fn environment() -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // SAFETY: `environ` is a NULL-terminated array of NUL-terminated strings; the library
    // starts before the program's own code, so nothing changes it concurrently.
    unsafe {
        let env = environ;
        if env.is_null() {
            return out;
        }
        let mut i = 0;
        while !(*env.add(i)).is_null() {
            let s = std::ffi::CStr::from_ptr(*env.add(i));
            out.push((i, s.to_string_lossy().into_owned()));
            i += 1;
        }
    }
    out
}

/// The value of `name` in `environ`.
fn env_get(name: &str) -> Option<String> {
    environment().into_iter().find_map(|(_, kv)| {
        kv.strip_prefix(name)
            .and_then(|r| r.strip_prefix('='))
            .map(str::to_string)
    })
}

/// Removes this library from `LD_PRELOAD` and the `MEMVISOR_*` variables from `environ` (in
/// place), so children that exec are not managed.
fn clean_environment() {
    let entries = environment();
    let mut keep: Vec<*mut libc::c_char> = Vec::with_capacity(entries.len() + 1);
    for (i, kv) in &entries {
        let name = kv.split('=').next().unwrap_or("");
        // SAFETY: `i` indexes an entry of the array read just above.
        let ptr = unsafe { *environ.add(*i) };
        if launch_env::ALL.contains(&name) {
            continue;
        }
        if name == "LD_PRELOAD" {
            // `LD_PRELOAD` without `=` (execve allows any string) has no list.
            let rest: Vec<&str> = kv
                .strip_prefix("LD_PRELOAD=")
                .unwrap_or("")
                .split([':', ' '])
                .filter(|e| !e.is_empty() && !e.ends_with("libmemvisor_preload.so"))
                .collect();
            if rest.is_empty() {
                continue;
            }
            if let Ok(c) = CString::new(format!("LD_PRELOAD={}", rest.join(":"))) {
                // Leaked on purpose: environ entries must live as long as the process.
                keep.push(c.into_raw());
            }
            continue;
        }
        keep.push(ptr);
    }
    // SAFETY: the kept entries are no more than the array holds, so they are written back
    // in place followed by the terminating NULL; single-threaded at library start.
    unsafe {
        for (i, p) in keep.iter().enumerate() {
            *environ.add(i) = *p;
        }
        *environ.add(keep.len()) = std::ptr::null_mut();
    }
}

/// The program's name: the last component of `argv[0]` (`/proc/self/comm` truncates to 15
/// bytes, too short for `qemu-system-x86_64`).
fn program_name() -> String {
    let argv0 = std::fs::read("/proc/self/cmdline")
        .ok()
        .and_then(|c| c.split(|&b| b == 0).next().map(<[u8]>::to_vec))
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .unwrap_or_default();
    match argv0.rsplit('/').next() {
        Some(n) if !n.is_empty() => n.to_string(),
        _ => std::fs::read_to_string("/proc/self/comm")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
    }
}

extern "C" fn after_fork_in_child() {
    shim_allocator::unlock_heap_after_fork();
    managed_process::forget_after_fork();
}

extern "C" fn library_start() {
    let Some(_guard) = ShimGuard::enter() else {
        return;
    };
    let config = match PreloadConfig::from_lookup(env_get) {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(e) => fail(&e.to_string()),
    };
    if !config.manage_children {
        clean_environment();
    }
    let control_dir = config.control_dir.clone();
    let migration_in = config.migration_listen.zip(config.migration_key.clone());
    memvisor_pager::set_thread_start_hook(prepare_library_thread);
    if let Err(e) = managed_process::start(config, program_name()) {
        fail(&e.to_string());
    }
    match ControlServer::start(&control_dir, Arc::new(ProcessControl), control_thread_start) {
        Ok(s) => {
            OWNER_PID.store(std::process::id(), Ordering::Release);
            let _ = SERVER.set(s);
        }
        Err(e) => fail(&e.to_string()),
    }
    if let Some((addr, key)) = migration_in {
        if let Err(e) = migration_service::start_destination(addr, &key) {
            fail(&e.to_string());
        }
    }
    // SAFETY: registers plain functions without arguments as fork handlers: the library's
    // heap locked across the fork (so that the child's copy is consistent and unlocked), and
    // the child's forgetting of the parent's regions.
    unsafe {
        libc::pthread_atfork(
            Some(shim_allocator::lock_heap_before_fork),
            Some(shim_allocator::unlock_heap_after_fork),
            Some(after_fork_in_child),
        )
    };
}

/// Run first by each control-server thread: inside the library for good, and following the
/// program's credential changes.
fn control_thread_start() {
    ShimGuard::enter_forever();
    prepare_library_thread();
}

/// Run first by every thread the library starts (the pager's through its start hook): no
/// mapping it makes is managed, it allocates from the library's own jemalloc arena where the
/// program's `malloc` is jemalloc (`library_malloc_arena`), and it follows the program's
/// credential changes.
pub(crate) fn prepare_library_thread() {
    crate::shim_guard::mark_library_thread();
    crate::library_malloc_arena::use_library_arena();
    credential_mirror::prepare_library_thread();
}

extern "C" fn library_exit() {
    if OWNER_PID.load(Ordering::Acquire) == std::process::id() {
        if let Some(s) = SERVER.get() {
            s.remove_socket();
        }
    }
}

#[used]
#[link_section = ".init_array"]
static LIBRARY_START: extern "C" fn() = library_start;

#[used]
#[link_section = ".fini_array"]
static LIBRARY_EXIT: extern "C" fn() = library_exit;
