//! Lets the library's own threads follow the program's credential changes.
//!
//! glibc applies `setuid`, `setresgid`, `setgroups` and the rest to every thread of the process
//! (it signals each thread to make the system call itself) and aborts the process if the
//! threads' results differ. Capabilities and the keep-capabilities flag are per thread, though:
//! a program that sets `PR_SET_KEEPCAPS` (or raises capabilities with `capset`) on its own
//! thread, then changes its user id and then its group id (`setpriv --reuid ... --regid ...`
//! does), keeps the capability needed for the second change while the library's threads (the
//! pager's, the control server's), which lost theirs at the first change, fail it: SIGABRT,
//! without a word.
//!
//! So before each credential change the calling thread's capability sets and keep-capabilities
//! flag are copied to the library's threads ([`mirror_to_library_threads`]): each is sent
//! [`mirror_signal`] and copies them in its handler, on itself, as the kernel requires. They
//! then have exactly the caller's privileges, never more (a library thread keeping root after
//! the program dropped it would undo the drop: it shares the program's memory). The library's
//! threads are those named `pager-*` or `memvisor-*` (the library names every thread it
//! starts); each unblocks the signal as it starts ([`prepare_library_thread`]).

use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use libc::c_int;

/// Name prefixes of the library's threads.
const LIBRARY_THREAD_PREFIXES: [&str; 2] = ["pager-", "memvisor-"];

/// How long a credential change waits for the library's threads to copy the caller's state.
const MIRROR_TIMEOUT: Duration = Duration::from_secs(2);

/// The signal that asks a library thread to copy the state (a real-time signal near the top of
/// the range, installed only while a change is being prepared, and sent only to the library's
/// own threads).
pub fn mirror_signal() -> c_int {
    libc::SIGRTMAX() - 3
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets in two words.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// The state being copied: three capability sets in two words each, and the flag.
static STATE: [AtomicU32; 6] = [const { AtomicU32::new(0) }; 6];
static KEEP_CAPS: AtomicI32 = AtomicI32::new(0);
/// Handlers that copied the state in this round.
static DONE: AtomicU32 = AtomicU32::new(0);
/// Whether a round is going on (the handler ignores stray signals otherwise).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// One change at a time.
static ROUND: Mutex<()> = Mutex::new(());

/// Makes the current thread (one of the library's) able to receive [`mirror_signal`]: a thread
/// started from inside a program thread inherits its signal mask, and QEMU's threads block
/// every signal.
pub fn prepare_library_thread() {
    // SAFETY: a sigset on the stack, filled by sigemptyset/sigaddset; pthread_sigmask only
    // changes this thread's mask.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, mirror_signal());
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
}

/// Copies the calling thread's capability sets and keep-capabilities flag to every library
/// thread, waiting for them (at most [`MIRROR_TIMEOUT`]). Returns how many threads did, or
/// `None` if the state could not be read (then nothing was changed).
pub fn mirror_to_library_threads() -> Option<usize> {
    let _one = ROUND.lock().unwrap_or_else(|e| e.into_inner());
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget with a v3 header writes two CapData; both live on this stack.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return None;
    }
    for (i, d) in data.iter().enumerate() {
        STATE[3 * i].store(d.effective, Ordering::Relaxed);
        STATE[3 * i + 1].store(d.permitted, Ordering::Relaxed);
        STATE[3 * i + 2].store(d.inheritable, Ordering::Relaxed);
    }
    // SAFETY: PR_GET_KEEPCAPS takes no pointer arguments.
    let keep = unsafe { libc::prctl(libc::PR_GET_KEEPCAPS, 0, 0, 0, 0) };
    KEEP_CAPS.store(keep.max(0), Ordering::Relaxed);
    let targets = library_threads();
    if targets.is_empty() {
        return Some(0);
    }
    let sig = mirror_signal();
    // SAFETY: a zeroed sigaction is valid; the handler only makes async-signal-safe system
    // calls and touches atomics. The previous action is saved and put back below.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = copy_state as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(sig, &sa, &mut old);
    }
    DONE.store(0, Ordering::Release);
    ACTIVE.store(true, Ordering::Release);
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let mut sent = 0u32;
    for tid in &targets {
        // SAFETY: tgkill on a thread of this process; a thread that exited meanwhile is ESRCH.
        if unsafe { libc::syscall(libc::SYS_tgkill, pid, *tid, sig) } == 0 {
            sent += 1;
        }
    }
    let deadline = Instant::now() + MIRROR_TIMEOUT;
    while DONE.load(Ordering::Acquire) < sent && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
    ACTIVE.store(false, Ordering::Release);
    let done = DONE.load(Ordering::Acquire) as usize;
    // SAFETY: restores the action saved above.
    unsafe { libc::sigaction(sig, &old, std::ptr::null_mut()) };
    Some(done)
}

/// The signal handler: copies the state to the current thread.
extern "C" fn copy_state(_sig: c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    if !ACTIVE.load(Ordering::Acquire) {
        return;
    }
    let mut data = [CapData::default(); 2];
    for (i, d) in data.iter_mut().enumerate() {
        d.effective = STATE[3 * i].load(Ordering::Relaxed);
        d.permitted = STATE[3 * i + 1].load(Ordering::Relaxed);
        d.inheritable = STATE[3 * i + 2].load(Ordering::Relaxed);
    }
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    // SAFETY: prctl and capset are plain system calls (async-signal-safe); the header and data
    // live on this handler's stack.
    unsafe {
        libc::prctl(
            libc::PR_SET_KEEPCAPS,
            KEEP_CAPS.load(Ordering::Relaxed) as libc::c_ulong,
            0,
            0,
            0,
        );
        libc::syscall(libc::SYS_capset, &mut header, data.as_ptr());
    }
    DONE.fetch_add(1, Ordering::AcqRel);
}

/// Thread ids of the library's threads, other than the caller.
fn library_threads() -> Vec<c_int> {
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() };
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter_map(|t| t.file_name().to_str()?.parse::<c_int>().ok())
        .filter(|&tid| tid != me)
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).is_ok_and(|c| {
                LIBRARY_THREAD_PREFIXES
                    .iter()
                    .any(|p| c.trim_end().starts_with(p))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A library-named thread that blocks every signal gets the caller's keep-capabilities
    /// flag once prepared.
    #[test]
    fn a_library_thread_copies_the_callers_flag() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("memvisor-test".into())
            .spawn(move || {
                // SAFETY: a full sigset blocks everything on this thread only.
                unsafe {
                    let mut all: libc::sigset_t = std::mem::zeroed();
                    libc::sigfillset(&mut all);
                    libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
                }
                prepare_library_thread();
                tx.send(()).unwrap();
                let _ = stop_rx.recv();
                // SAFETY: PR_GET_KEEPCAPS takes no pointers.
                unsafe { libc::prctl(libc::PR_GET_KEEPCAPS, 0, 0, 0, 0) }
            })
            .unwrap();
        rx.recv().unwrap();
        // The flag is per thread; set it on a helper "caller" thread, not the test harness's.
        let caller = std::thread::spawn(|| {
            // SAFETY: PR_SET_KEEPCAPS on this thread only.
            unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) };
            mirror_to_library_threads()
        });
        let copied = caller.join().unwrap().unwrap();
        assert!(copied >= 1, "copied by {copied} threads");
        stop_tx.send(()).unwrap();
        assert_eq!(t.join().unwrap(), 1);
    }
}
