//! [`ManagedProcess`]: a program started under `memvisor run` (budget, policy, chunk size) with
//! its own control directory, and the pager's counters read from its control socket (what
//! `memvisor stat PID --json` prints).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_control::{socket_dir, ControlClient, ProcessStatus};

use crate::bench_error::BenchError;

/// How to start a program under `memvisor run`.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// The `memvisor` binary.
    pub memvisor: PathBuf,
    /// `--budget`.
    pub budget: String,
    /// `--policy`.
    pub policy: String,
    /// `--chunk-size`.
    pub chunk_size: String,
    /// `--min-region`.
    pub min_region: String,
    /// `--arena`.
    pub arena: String,
    /// `--swap-dir`.
    pub swap_dir: PathBuf,
    /// `MEMVISOR_CONTROL_DIR` (one per run, so that only this program's socket is in it).
    pub control_dir: PathBuf,
}

impl RunSettings {
    /// The `memvisor run ... -- PROGRAM ARGS` command line.
    pub fn command(&self, program: &[OsString]) -> Command {
        let mut c = Command::new(&self.memvisor);
        c.env("MEMVISOR_CONTROL_DIR", &self.control_dir)
            .arg("run")
            .args(["--budget", &self.budget, "--policy", &self.policy])
            .args(["--chunk-size", &self.chunk_size])
            .args(["--min-region", &self.min_region, "--arena", &self.arena])
            .arg("--swap-dir")
            .arg(&self.swap_dir)
            .arg("--")
            .args(program);
        c
    }
}

/// A running `memvisor run` and the managed program's pid.
pub struct ManagedProcess {
    /// The `memvisor run` process (its child is the program).
    pub child: Child,
    /// The managed program's pid (the one with a control socket).
    pub pid: u32,
    control_dir: PathBuf,
}

impl ManagedProcess {
    /// Starts `program` under `memvisor run` and waits (up to `timeout`) until its control
    /// socket appears. stdin/stdout of the program are piped when `pipe` is set.
    pub fn start(
        settings: &RunSettings,
        program: &[OsString],
        pipe: bool,
        timeout: Duration,
    ) -> Result<Self, BenchError> {
        // Private (0700), as `memvisor run` requires of a control directory.
        memvisor_control::socket_dir::prepare_control_dir(&settings.control_dir).map_err(|e| {
            BenchError::io(
                "create control directory",
                &settings.control_dir,
                std::io::Error::other(e.to_string()),
            )
        })?;
        let mut cmd = settings.command(program);
        let line = format!("{cmd:?}");
        if pipe {
            cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
        } else {
            cmd.stdin(Stdio::null()).stdout(Stdio::null());
        }
        let mut child = cmd.spawn().map_err(|e| BenchError::Command {
            command: line.clone(),
            detail: e.to_string(),
        })?;
        let start = Instant::now();
        let pid = loop {
            let pids = socket_dir::list_managed_pids(&settings.control_dir).unwrap_or_default();
            if let Some(&p) = pids.first() {
                break p;
            }
            if let Ok(Some(st)) = child.try_wait() {
                return Err(BenchError::Command {
                    command: line,
                    detail: format!("exited ({st}) before its control socket appeared"),
                });
            }
            if start.elapsed() > timeout {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Command {
                    command: line,
                    detail: format!("no control socket after {timeout:?}"),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Ok(Self {
            child,
            pid,
            control_dir: settings.control_dir.clone(),
        })
    }

    /// The pager's view of the program now.
    pub fn status(&self) -> Result<ProcessStatus, BenchError> {
        status_of(&self.control_dir, self.pid)
    }

    /// Waits for `memvisor run` to end (after the program was told to stop), up to `timeout`;
    /// kills it after that. Returns its exit code.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<i32>, BenchError> {
        let start = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(st)) => return Ok(st.code()),
                Ok(None) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    self.kill();
                    return Ok(None);
                }
            }
        }
    }

    /// Kills the program and `memvisor run`.
    fn kill(&mut self) {
        // SAFETY: kill(2) touches no memory of ours. The pid is the program this benchmark
        // started; it is only called while `memvisor run` (its parent, which reaps it) is
        // still alive or just before it is killed, so reuse of the pid is not a practical risk.
        unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGKILL) };
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ManagedProcess {
    /// A run that ends early (an error) leaves no program behind.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill();
        }
    }
}

/// Reads the status of managed process `pid` from the control sockets in `dir`.
pub fn status_of(dir: &Path, pid: u32) -> Result<ProcessStatus, BenchError> {
    ControlClient::connect(dir, pid)
        .and_then(|mut c| c.status())
        .map_err(|source| BenchError::Control { pid, source })
}

/// The default `memvisor` binary: next to this benchmark's executable.
pub fn memvisor_next_to(exe: &Path) -> PathBuf {
    exe.with_file_name("memvisor")
}
