//! [`LiveGuest`]: a QEMU guest (or a wrapper that becomes or starts QEMU: `memvisor run`, a
//! shell joining a cgroup) whose serial console is read while it runs, each line stamped with
//! the host time it arrived, so a benchmark can act on what the guest prints (start a
//! migration once the workload has written its memory) and time what it printed against host
//! events (the end of a migration). `memvisor_testvm::RunningGuest` hands the console over only
//! at the end.
//!
//! The command runs in its own process group, stdin closed; the group is killed when the
//! `LiveGuest` is dropped (and, through `PR_SET_PDEATHSIG`, when the benchmark dies).

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use memvisor_testvm::{parse_result_line, Done, WorkloadResult};

use crate::bench_error::BenchError;

/// One console line and when it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsoleLine {
    /// Host time the line was read.
    pub at: Instant,
    /// The line, `\r` removed.
    pub text: String,
}

/// What the reader threads collect.
#[derive(Debug, Default)]
struct Collected {
    lines: Vec<ConsoleLine>,
    closed: bool,
    stderr: String,
}

/// A running guest whose console is collected as it arrives.
pub struct LiveGuest {
    label: String,
    child: Child,
    collected: Arc<Mutex<Collected>>,
    exit: Option<ExitStatus>,
}

/// Console lines kept in error messages.
const TAIL: usize = 15;

impl LiveGuest {
    /// Starts `command`; `label` names it in errors (e.g. `virtualizing / naive / source`).
    pub fn spawn(mut command: Command, label: impl Into<String>) -> Result<Self, BenchError> {
        let label = label.into();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own process group, killed if this thread dies.
        memvisor_testvm::isolate(&mut command);
        let line = format!("{command:?}");
        let mut child = command.spawn().map_err(|e| BenchError::Command {
            command: format!("{label}: {line}"),
            detail: e.to_string(),
        })?;
        let collected = Arc::new(Mutex::new(Collected::default()));
        if let Some(stdout) = child.stdout.take() {
            let c = collected.clone();
            thread::spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let text = String::from_utf8_lossy(&buf)
                                .trim_end_matches(['\n', '\r'])
                                .replace('\r', "");
                            lock(&c).lines.push(ConsoleLine {
                                at: Instant::now(),
                                text,
                            });
                        }
                    }
                }
                lock(&c).closed = true;
            });
        }
        if let Some(stderr) = child.stderr.take() {
            let c = collected.clone();
            thread::spawn(move || {
                let mut bytes = Vec::new();
                let _ = stderr.take(1 << 20).read_to_end(&mut bytes);
                lock(&c).stderr = String::from_utf8_lossy(&bytes).into_owned();
            });
        }
        Ok(Self {
            label,
            child,
            collected,
            exit: None,
        })
    }

    /// The pid of the started program (also its process group).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The console so far.
    pub fn lines(&self) -> Vec<ConsoleLine> {
        lock(&self.collected).lines.clone()
    }

    /// The last `n` console lines and the tail of stderr, for error messages.
    pub fn tail(&self) -> String {
        let c = lock(&self.collected);
        let from = c.lines.len().saturating_sub(TAIL);
        let mut s: String = c.lines[from..]
            .iter()
            .map(|l| format!("\n  console: {}", l.text))
            .collect();
        for l in c
            .stderr
            .lines()
            .rev()
            .take(5)
            .collect::<Vec<_>>()
            .iter()
            .rev()
        {
            s.push_str("\n  stderr: ");
            s.push_str(l);
        }
        s
    }

    /// Whether the program has exited (reaping it if so).
    pub fn exited(&mut self) -> bool {
        if self.exit.is_none() {
            if let Ok(Some(st)) = self.child.try_wait() {
                self.exit = Some(st);
            }
        }
        self.exit.is_some()
    }

    /// Waits until `found` returns something for the console so far, polling every 100 ms.
    /// An exit of the program or `timeout` first is an error naming `what` was awaited.
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut found: impl FnMut(&[ConsoleLine]) -> Option<T>,
    ) -> Result<T, BenchError> {
        let start = Instant::now();
        loop {
            if let Some(t) = found(&lock(&self.collected).lines) {
                return Ok(t);
            }
            if self.exited() {
                // Lines printed just before the exit may still be on their way.
                thread::sleep(Duration::from_millis(300));
                if let Some(t) = found(&lock(&self.collected).lines) {
                    return Ok(t);
                }
                return Err(self.failure(&format!("exited ({:?}) before {what}", self.exit)));
            }
            if start.elapsed() >= timeout {
                return Err(self.failure(&format!("no {what} after {timeout:?}")));
            }
            thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits up to `timeout` for the program to exit and its console to close; kills the group
    /// after that (an error).
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<ExitStatus, BenchError> {
        self.wait_exit_while_talking(timeout, None)
    }

    /// [`Self::wait_exit`], and with `quiet` also an error (the group killed) once the console
    /// has been silent that long (counted from the call at the earliest): a guest that reports
    /// progress every second and falls silent is stuck.
    pub fn wait_exit_while_talking(
        &mut self,
        timeout: Duration,
        quiet: Option<Duration>,
    ) -> Result<ExitStatus, BenchError> {
        let start = Instant::now();
        while !self.exited() {
            if start.elapsed() >= timeout {
                self.kill();
                return Err(self.failure(&format!("still running after {timeout:?}; killed")));
            }
            if let Some(quiet) = quiet {
                let last = lock(&self.collected).lines.last().map(|l| l.at);
                let since = last.map_or(start, |l| l.max(start));
                if since.elapsed() >= quiet {
                    self.kill();
                    return Err(self.failure(&format!(
                        "no console output for {quiet:?} (after {:.0} s of waiting); killed",
                        start.elapsed().as_secs_f64()
                    )));
                }
            }
            thread::sleep(Duration::from_millis(100));
        }
        // Whatever the program started may hold the console open a moment longer.
        let grace = Instant::now();
        while !lock(&self.collected).closed && grace.elapsed() < Duration::from_secs(2) {
            thread::sleep(Duration::from_millis(20));
        }
        memvisor_testvm::kill_group(self.child.id());
        Ok(self.exit.unwrap_or_default())
    }

    /// The workload's final `done` line, if it printed one.
    pub fn done(&self) -> Option<Done> {
        lock(&self.collected)
            .lines
            .iter()
            .rev()
            .find_map(|l| match parse_result_line(&l.text, 0) {
                Some(Ok(WorkloadResult::Done(d))) => Some(d),
                _ => None,
            })
    }

    /// An error about this guest: `detail`, then the console and stderr tail.
    pub fn failure(&self, detail: &str) -> BenchError {
        BenchError::Command {
            command: format!("{} (pid {})", self.label, self.child.id()),
            detail: format!("{detail}{}", self.tail()),
        }
    }

    /// Kills the whole process group and reaps the program.
    pub fn kill(&mut self) {
        memvisor_testvm::kill_group(self.child.id());
        if self.exit.is_none() {
            self.exit = self.child.wait().ok();
        }
    }
}

impl Drop for LiveGuest {
    fn drop(&mut self) {
        self.kill();
    }
}

fn lock(c: &Mutex<Collected>) -> std::sync::MutexGuard<'_, Collected> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_arrive_while_running_and_the_group_dies_on_drop() {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("echo 'MEMVISOR-RESULT phase=write mib=1'; sleep 0.2; echo second; sleep 30");
        let mut g = LiveGuest::spawn(c, "test shell").unwrap();
        let n = g
            .wait_for("the second line", Duration::from_secs(10), |l| {
                (l.len() >= 2).then_some(l.len())
            })
            .unwrap();
        assert_eq!(n, 2);
        let lines = g.lines();
        assert!(lines[0].text.starts_with("MEMVISOR-RESULT"));
        assert!(lines[1].at >= lines[0].at);
        assert!(g.done().is_none());
        let pid = g.pid();
        drop(g);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }

    #[test]
    fn an_exit_before_the_awaited_line_is_an_error_with_the_console_tail() {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg("echo 'MEMVISOR-RESULT done ok=1 errors=0'; echo oops >&2");
        let mut g = LiveGuest::spawn(c, "short shell").unwrap();
        let e = g
            .wait_for("a line that never comes", Duration::from_secs(10), |_| {
                None::<()>
            })
            .unwrap_err()
            .to_string();
        assert!(e.contains("short shell") && e.contains("exited"), "{e}");
        assert!(e.contains("console: MEMVISOR-RESULT done"), "{e}");
        assert!(g.wait_exit(Duration::from_secs(5)).unwrap().success());
        assert_eq!(g.done().map(|d| (d.ok, d.errors)), Some((true, 0)));
    }

    #[test]
    fn a_silent_guest_is_killed() {
        let mut c = Command::new("sh");
        c.arg("-c").arg("echo talking; sleep 30");
        let mut g = LiveGuest::spawn(c, "silent shell").unwrap();
        let start = Instant::now();
        let e = g
            .wait_exit_while_talking(Duration::from_secs(20), Some(Duration::from_millis(500)))
            .unwrap_err()
            .to_string();
        assert!(start.elapsed() < Duration::from_secs(10));
        assert!(e.contains("no console output"), "{e}");
        assert!(g.exited());
    }
}
