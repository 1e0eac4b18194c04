//! Helpers for the tests that start real programs under `memvisor run`.

#![allow(dead_code)]

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use memvisor_control::ProcessStatus;

/// The memvisor binary under test.
pub fn memvisor_bin() -> &'static str {
    env!("CARGO_BIN_EXE_memvisor")
}

/// Builds `libmemvisor_preload.so` (same profile as the binary) next to the binary, once per
/// test process, so the tests never run against a stale library.
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
                .args([
                    "build",
                    "--quiet",
                    "-p",
                    "memvisor-preload",
                    "--profile",
                    &profile,
                ])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .expect("run cargo build -p memvisor-preload");
            assert!(st.success(), "cargo build -p memvisor-preload failed");
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
