//! Helpers for the tests that run the memvisor binary: real programs under `memvisor run`,
//! and the `dedup` and `scrub` commands on forked children holding known pages.

#![allow(dead_code)]

pub mod migration_end;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use memvisor_control::ProcessStatus;

/// The memvisor binary under test.
pub fn memvisor_bin() -> &'static str {
    env!("CARGO_BIN_EXE_memvisor")
}

/// The unprivileged user the permission tests run as.
pub const NOBODY: u32 = 65534;

/// Runs the memvisor binary with `args` to completion, as user and group `uid` if given.
pub fn memvisor_as(args: &[String], uid: Option<u32>) -> Output {
    use std::os::unix::process::CommandExt;
    let mut c = Command::new(memvisor_bin());
    c.args(args);
    if let Some(u) = uid {
        c.uid(u).gid(u);
    }
    c.output().expect("run memvisor")
}

/// A page determined by `seed` (`memvisor_dedup::fill_seeded`); seed 0 is the zero page.
pub fn page(seed: u64) -> Vec<u8> {
    let mut p = vec![0; memvisor_dedup::PAGE_SIZE];
    if seed != 0 {
        memvisor_dedup::fill_seeded(&mut p, seed);
    }
    p
}

/// Builds `libmemvisor_preload.so` (same profile as the binary) next to the binary, once per
/// test process, so the tests never run against a stale library. The whole workspace, as
/// `cargo test --workspace` builds it: the same features for every dependency, so after that
/// build this one is a few seconds (`-p memvisor-preload` alone unifies features differently
/// and recompiled its dependencies, 47 s in a fresh checkout).
pub fn ensure_preload_library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let bin = Path::new(memvisor_bin());
            let dir = bin.parent().expect("binary directory");
            let profile = match dir.file_name().and_then(|n| n.to_str()) {
                Some("debug") => "dev".to_string(),
                Some(other) => other.to_string(),
                None => "dev".to_string(),
            };
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let st = Command::new(cargo)
                .args(["build", "--quiet", "--workspace", "--profile", &profile])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("run cargo build --workspace");
            assert!(st.success(), "cargo build --workspace failed");
            let lib = dir.join("libmemvisor_preload.so");
            assert!(lib.exists(), "{} missing after the build", lib.display());
            lib
        })
        .clone()
}

/// Compiles a test C program from `tests/c/NAME.c` into `dir`.
pub fn compile_c(name: &str, dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let out = dir.join(name);
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(
        o.status.success(),
        "cc {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Whether userfaultfd is usable (root, or vm.unprivileged_userfaultfd=1).
pub fn userfaultfd_usable() -> bool {
    let ok = memvisor_pager::Region::check_supported().is_ok();
    if !ok {
        eprintln!("SKIPPED: userfaultfd is not usable by this user");
    }
    ok
}

/// A `memvisor` command with its own control directory.
pub fn memvisor(control_dir: &Path) -> Command {
    ensure_preload_library();
    let mut c = Command::new(memvisor_bin());
    c.env("MEMVISOR_CONTROL_DIR", control_dir);
    c
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `memvisor stat PID --json` of a process managed under the control directory `dir`.
pub fn stat_json(dir: &Path, pid: &str) -> ProcessStatus {
    let o = memvisor(dir)
        .args(["stat", pid, "--json"])
        .output()
        .unwrap();
    assert!(o.status.success(), "stat: {}", stderr(&o));
    serde_json::from_slice(&o.stdout).unwrap()
}

/// A TCP port of 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Connects to `port` of 127.0.0.1 once the server `what` listens there (20 s at most).
pub fn connect_when_listening(port: u16, what: &str) -> TcpStream {
    let start = Instant::now();
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(_) if start.elapsed() < Duration::from_secs(20) => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => panic!("{what} did not come up on port {port}: {e}"),
        }
    }
}

/// A `memvisor run` child that is stopped if the test ends without waiting for it (a failed
/// assertion), so a server does not outlive its test: `SIGTERM` (forwarded to the program),
/// then `SIGKILL` after 5 s.
pub struct RunGuard(Option<Child>);

impl RunGuard {
    pub fn new(child: Child) -> Self {
        Self(Some(child))
    }

    /// The pid of `memvisor run`.
    pub fn id(&self) -> u32 {
        self.0.as_ref().expect("running").id()
    }

    /// Waits for `memvisor run` to exit (the program was told to stop some other way).
    pub fn wait(mut self) -> ExitStatus {
        self.0.take().expect("running").wait().unwrap()
    }

    /// Sends `SIGTERM` to `memvisor run` and waits for its exit status.
    pub fn terminate(self) -> ExitStatus {
        // SAFETY: kill with the pid of our own child, which has not been waited for.
        unsafe { libc::kill(self.id() as i32, libc::SIGTERM) };
        self.wait()
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        // SAFETY: kill with the pid of our own child, which has not been waited for.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Starts the C test program `prog` (`tests/c/managed_workload.c`) as
/// `work MIB EXIT_CODE hold` under `memvisor run RUN_ARGS --swap-dir SWAP`, stdin, stdout and
/// stderr piped.
pub fn start_managed_workload(
    ctl: &Path,
    prog: &Path,
    run_args: &[&str],
    swap: &Path,
    mib: u32,
    exit_code: i32,
) -> Child {
    use std::process::Stdio;
    memvisor(ctl)
        .arg("run")
        .args(run_args)
        .arg("--swap-dir")
        .arg(swap)
        .arg("--")
        .arg(prog)
        .args(["work", &mib.to_string(), &exit_code.to_string(), "hold"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Reads the managed workload's stdout up to its `READY PID` line and returns the pid and the
/// lines before it; panics on a `FAIL` line or an early end.
pub fn wait_ready(out: &mut impl std::io::BufRead) -> (String, Vec<String>) {
    let mut seen = Vec::new();
    loop {
        let mut l = String::new();
        assert!(out.read_line(&mut l).unwrap() > 0, "ended early: {seen:?}");
        assert!(!l.starts_with("FAIL"), "{l}");
        if let Some(p) = l.strip_prefix("READY ") {
            return (p.trim().to_string(), seen);
        }
        seen.push(l.trim().to_string());
    }
}

/// `memvisor stat PID --json` of the first process managed under `ctl`, if there is one and
/// it answers.
pub fn first_managed_status(ctl: &Path) -> Option<memvisor_control::ProcessStatus> {
    let pid = *memvisor_control::socket_dir::list_managed_pids(ctl)
        .ok()?
        .first()?;
    try_stat_json(ctl, pid)
}

/// `memvisor stat PID --json` of process `pid` managed under `ctl`, if it answers.
pub fn try_stat_json(ctl: &Path, pid: u32) -> Option<memvisor_control::ProcessStatus> {
    let o = memvisor(ctl)
        .args(["stat", &pid.to_string(), "--json"])
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    serde_json::from_slice(&o.stdout).ok()
}

/// Every region of `status` resident within its budget (plus overrun chunks kept after a
/// failed write), without I/O errors or poisoned chunks; `at` says when, in the message.
pub fn assert_within_budget(status: &ProcessStatus, at: impl std::fmt::Debug) {
    for r in &status.regions {
        assert!(
            r.resident_bytes <= r.budget_bytes + r.overrun_chunks * status.chunk_size,
            "region {} resident {} > budget {} at {at:?}",
            r.name,
            r.resident_bytes,
            r.budget_bytes
        );
        assert_eq!(
            r.read_errors + r.write_errors + r.poisoned_chunks,
            0,
            "{r:?}"
        );
    }
}

/// A disk image of `mib` MiB holding byte `(o * 7 + (o >> 12)) & 0xff` at offset `o` (what the
/// VMM-like C programs check), synced and dropped from the host page cache; open read-write.
pub fn write_uncached_image(path: &Path, mib: u64) -> std::fs::File {
    use std::os::fd::AsRawFd;
    let data: Vec<u8> = (0..(mib << 20) as usize)
        .map(|o| ((o * 7 + (o >> 12)) & 0xff) as u8)
        .collect();
    std::fs::write(path, data).unwrap();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    f.sync_all().unwrap();
    // SAFETY: plain system call on an open descriptor.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
    f
}

/// The next line a test program prints, which must not be empty (it exited) or a `FAIL`.
pub fn next_program_line(out: &mut impl std::io::BufRead) -> String {
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    assert!(!l.is_empty() && !l.starts_with("FAIL"), "program: {l:?}");
    l
}

/// The status of the one disk image process `pid` has read (`memvisor stat --json`).
pub fn only_image_status(dir: &Path, pid: &str) -> memvisor_control::ImageStatus {
    let st = stat_json(dir, pid);
    assert_eq!(st.images.len(), 1, "{st:?}");
    st.images[0].clone()
}

/// Starts `memvisor run RUN_ARGS... --swap-dir SWAP_DIR -- PROGRAM...` with control directory
/// `ctl`, the program's stdin, stdout and stderr piped: the child and its stdout, read line by
/// line.
pub fn spawn_run(
    ctl: &Path,
    run_args: &[&str],
    swap_dir: &Path,
    program: &[&std::ffi::OsStr],
) -> (Child, std::io::BufReader<std::process::ChildStdout>) {
    use std::process::Stdio;
    let mut child = memvisor(ctl)
        .arg("run")
        .args(run_args)
        .arg("--swap-dir")
        .arg(swap_dir)
        .arg("--")
        .args(program)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = std::io::BufReader::new(child.stdout.take().unwrap());
    (child, out)
}

/// Waits for a child of [`spawn_run`] (its stdin already closed or taken) and checks that it
/// exited successfully and printed `OK` in what is left of its stdout.
pub fn expect_ok_exit(child: Child, mut out: std::io::BufReader<std::process::ChildStdout>) {
    let o = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        o.status.success() && rest.contains("OK"),
        "status {:?}\nstdout: {rest}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The guest read `passes` disk passes of `bytes` each and verified every block of them.
pub fn check_disk_passes_verified(run: &memvisor_testvm::GuestRun, passes: usize, bytes: u64) {
    let done = run.done().expect("done line");
    assert!(
        done.ok && done.errors == 0,
        "{done:?}\n{}",
        run.console_tail(20)
    );
    let phases: Vec<_> = run.disk_phases().collect();
    assert_eq!(phases.len(), passes, "{}", run.console_tail(20));
    for p in phases {
        assert!(p.verified && p.ok && p.errors == 0, "{p:?}");
        assert_eq!(p.bytes, bytes, "{p:?}");
    }
}

/// A region that never failed a read or a write and poisoned no chunk.
pub fn assert_region_error_free(r: &memvisor_control::RegionStatus) {
    assert_eq!(
        r.read_errors + r.write_errors + r.poisoned_chunks,
        0,
        "{r:?}"
    );
}

/// Polls `memvisor stat` of the first managed process under a control directory on a thread
/// of its own, handing each status to a sampler, until stopped: what the tests that boot a
/// guest under `memvisor run` watch while it runs.
pub struct StatusWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl StatusWatch {
    /// Starts polling `ctl` every `period`, calling `sample` with each status seen.
    pub fn start(
        ctl: &Path,
        period: Duration,
        mut sample: impl FnMut(ProcessStatus) + Send + 'static,
    ) -> Self {
        use std::sync::atomic::Ordering;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, ctl) = (stop.clone(), ctl.to_path_buf());
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Acquire) {
                if let Some(status) = first_managed_status(&ctl) {
                    sample(status);
                }
                std::thread::sleep(period);
            }
        });
        Self { stop, thread }
    }

    /// Stops polling and waits for the thread (a sampler that panicked fails the test).
    pub fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.join().unwrap();
    }
}

/// The path of `libjemalloc.so.2` from the dynamic linker's cache, if it is installed.
pub fn jemalloc_library() -> Option<String> {
    let o = Command::new("ldconfig")
        .arg("-p")
        .output()
        .or_else(|_| Command::new("/sbin/ldconfig").arg("-p").output())
        .ok()?;
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("libjemalloc.so.2 "))
        .filter_map(|l| l.split(" => ").nth(1))
        .map(|p| p.trim().to_string())
        .find(|p| Path::new(p).exists())
}

/// Whether test `test` (of `memvisor run --malloc jemalloc`) can run: jemalloc installed. If
/// not, the test is skipped with a line, and fails under CI, whose machine `scripts/install`
/// set up.
pub fn jemalloc_or_skip(test: &str) -> bool {
    if jemalloc_library().is_some() {
        return true;
    }
    let why = "libjemalloc2 is not installed (scripts/install installs it)";
    assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{test}: {why}");
    eprintln!("SKIPPED {test}: {why}");
    false
}

/// Writes the 48 MiB disk image the VMM-like C programs (`tests/c/*image*_workload.c`) expect
/// at `path`: byte `(o * 7 + (o >> 12)) & 0xff` at offset `o`.
pub fn write_pattern_image(path: &Path) {
    let data: Vec<u8> = (0..48usize << 20)
        .map(|o| ((o * 7 + (o >> 12)) & 0xff) as u8)
        .collect();
    std::fs::write(path, data).unwrap();
}

/// Runs the VMM-like C program `name` (`tests/c/NAME.c`, given a pattern image, 96 MiB of memfd
/// guest RAM and `more` arguments) in `dir` under `memvisor run --budget 24M --swap-mapper
/// MAPPER`, and returns its guest RAM's region status, read while the program waits after its
/// work; the program must then exit OK, and the region have no read, write or poisoning error.
pub fn run_image_workload(
    name: &str,
    more: &[&str],
    mapper: &str,
    dir: &Path,
) -> memvisor_control::RegionStatus {
    use std::io::Write;
    let prog = compile_c(name, dir);
    let image = dir.join("disk.img");
    write_pattern_image(&image);
    let ctl = dir.join("ctl");
    let mut args = vec![
        prog.as_os_str(),
        image.as_os_str(),
        std::ffi::OsStr::new("96"),
    ];
    args.extend(more.iter().map(std::ffi::OsStr::new));
    let (mut child, mut out) = spawn_run(
        &ctl,
        &["--budget", "24M", "--swap-mapper", mapper],
        dir,
        &args,
    );
    let (pid, _) = wait_ready(&mut out);
    let st = stat_json(&ctl, &pid);
    let guest = st
        .regions
        .iter()
        .find(|r| r.kind == "guest-memfd")
        .cloned()
        .unwrap_or_else(|| panic!("no guest-memfd region: {st:?}"));
    child.stdin.take().unwrap().flush().unwrap();
    expect_ok_exit(child, out);
    assert_eq!(
        guest.read_errors + guest.write_errors + guest.poisoned_chunks,
        0,
        "{guest:?}"
    );
    guest
}
