//! A hook every thread the pager starts runs first, and the way such threads are started.
//!
//! The pager starts threads inside other programs (through the preload library), and a
//! program's threads are not the pager's: their signal masks, credentials and thread-local
//! state belong to the program. The embedder that needs to prepare the pager's threads (the
//! preload library lets them follow the program's credential changes, see its
//! `credential_mirror`) installs one function here; it runs at the start of each fault-handler,
//! writer and readahead thread. Without a hook nothing runs.
//!
//! A thread is started with [`spawn_started`], which returns only once the new thread has its
//! name and has run its start function. Until then the thread carries the name of the program
//! thread that created it (the kernel copies it at `clone`), so an embedder that recognises its
//! threads by name (the credential mirror does) would miss it: a credential change in that
//! window left the new thread with the old credentials, and glibc aborted the process.

use std::io;
use std::sync::mpsc::sync_channel;
use std::sync::OnceLock;
use std::thread::JoinHandle;

static HOOK: OnceLock<fn()> = OnceLock::new();

/// Installs `hook`, run first by every thread the pager starts from now on. Only the first
/// installation counts; returns whether this one did.
pub fn set_thread_start_hook(hook: fn()) -> bool {
    HOOK.set(hook).is_ok()
}

/// Runs the hook, if one is installed.
fn run_thread_start_hook() {
    if let Some(hook) = HOOK.get() {
        hook();
    }
}

/// Starts a thread named `name` that runs `start` and then `body`, and returns once `start`
/// has returned on it (or the thread died in it).
pub fn spawn_started<T, F>(name: String, start: fn(), body: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (started_tx, started_rx) = sync_channel::<()>(1);
    let handle = std::thread::Builder::new().name(name).spawn(move || {
        start();
        let _ = started_tx.send(());
        body()
    })?;
    // An error means the thread ended inside `start`: nothing more to wait for.
    let _ = started_rx.recv();
    Ok(handle)
}

/// Starts one of the pager's own threads: [`spawn_started`] with the installed hook.
pub(crate) fn spawn_pager_thread<T, F>(name: String, body: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_started(name, run_thread_start_hook, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    static STARTED: AtomicBool = AtomicBool::new(false);

    fn slow_start() {
        std::thread::sleep(std::time::Duration::from_millis(50));
        STARTED.store(true, Ordering::SeqCst);
    }

    /// The caller gets the handle only after the start function ran, with the name set.
    #[test]
    fn returns_after_the_start_function_ran() {
        let (go_tx, go_rx) = sync_channel::<()>(0);
        let h = spawn_started("pager-test-start".into(), slow_start, move || {
            let _ = go_rx.recv();
            std::thread::current().name().map(str::to_string)
        })
        .unwrap();
        assert!(STARTED.load(Ordering::SeqCst));
        let tid_names: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .flatten()
            .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
            .collect();
        assert!(
            tid_names.iter().any(|n| n.trim_end() == "pager-test-star"),
            "{tid_names:?}"
        );
        go_tx.send(()).unwrap();
        assert_eq!(h.join().unwrap().as_deref(), Some("pager-test-start"));
    }
}
