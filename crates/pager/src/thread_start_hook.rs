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
use std::sync::mpsc::{sync_channel, Receiver};
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
    let (run, started) = signalling_start(start, body);
    let handle = std::thread::Builder::new().name(name).spawn(run)?;
    // An error means the thread ended inside `start`: nothing more to wait for.
    let _ = started.recv();
    Ok(handle)
}

/// [`spawn_started`] for a scoped thread (one that may borrow from the caller's stack),
/// started in `scope`.
pub fn spawn_scoped_started<'scope, T, F>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    name: String,
    start: fn(),
    body: F,
) -> io::Result<std::thread::ScopedJoinHandle<'scope, T>>
where
    F: FnOnce() -> T + Send + 'scope,
    T: Send + 'scope,
{
    let (run, started) = signalling_start(start, body);
    let handle = std::thread::Builder::new()
        .name(name)
        .spawn_scoped(scope, run)?;
    let _ = started.recv();
    Ok(handle)
}

/// The thread body that runs `start`, says so on the returned receiver, then runs `body`.
fn signalling_start<T, F: FnOnce() -> T>(
    start: fn(),
    body: F,
) -> (impl FnOnce() -> T, Receiver<()>) {
    let (started_tx, started_rx) = sync_channel::<()>(1);
    let run = move || {
        start();
        let _ = started_tx.send(());
        body()
    };
    (run, started_rx)
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

    fn count_start() {
        SCOPED_STARTS.fetch_add(1, Ordering::SeqCst);
    }

    static SCOPED_STARTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// A scoped thread borrows from the caller and is also started first.
    #[test]
    fn a_scoped_thread_runs_its_start_first_and_may_borrow() {
        let words = ["a".to_string(), "b".to_string()];
        let joined = std::thread::scope(|scope| {
            let h = spawn_scoped_started(scope, "pager-test-scoped".into(), count_start, || {
                (
                    words.join("+"),
                    std::thread::current().name().map(str::to_string),
                )
            })
            .unwrap();
            assert_eq!(SCOPED_STARTS.load(Ordering::SeqCst), 1);
            h.join().unwrap()
        });
        assert_eq!(joined, ("a+b".into(), Some("pager-test-scoped".into())));
    }
}
