//! A started guest: console capture, timeout, and clean-up.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use crate::error::{Result, TestVmError};
use crate::guest_image::tail_of;
use crate::guest_run::GuestRun;
use crate::process_group::{isolate, kill_group};
use crate::result_line::{parse_result_line, WorkloadResult};

/// Console lines kept in error messages.
const TAIL_LINES: usize = 20;

/// How often `wait` checks whether the program exited while the console is quiet.
const POLL: Duration = Duration::from_millis(200);

/// How long the console may stay open after the program exited.
const CONSOLE_GRACE: Duration = Duration::from_secs(2);

/// What the console reader thread reports.
enum ConsoleEvent {
    Line(String),
    Closed,
}

/// A running guest (QEMU, or a wrapper that starts QEMU).
///
/// The command runs in its own process group with stdin closed and stdout (the serial console)
/// and stderr captured. Dropping a `RunningGuest` that was not waited for kills the group.
pub struct RunningGuest {
    child: Child,
    program: String,
    started: Instant,
    console_rx: Receiver<ConsoleEvent>,
    stderr_rx: Receiver<String>,
    reaped: bool,
}

impl RunningGuest {
    /// Starts `command` (typically from [`crate::GuestConfig::command`], possibly with a wrapper
    /// program prepended).
    pub fn spawn(mut command: Command) -> Result<Self> {
        let program = command.get_program().to_string_lossy().into_owned();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        isolate(&mut command);
        let started = Instant::now();
        let mut child = command.spawn().map_err(|source| TestVmError::Spawn {
            program: program.clone(),
            source,
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");

        let (console_tx, console_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.trim_end_matches(['\n', '\r']).replace('\r', "");
                        if console_tx.send(ConsoleEvent::Line(line)).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = console_tx.send(ConsoleEvent::Closed);
        });
        let (stderr_tx, stderr_rx) = mpsc::channel();
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = stderr.take(1 << 20).read_to_end(&mut bytes);
            let _ = stderr_tx.send(String::from_utf8_lossy(&bytes).into_owned());
        });
        Ok(RunningGuest {
            child,
            program,
            started,
            console_rx,
            stderr_rx,
            reaped: false,
        })
    }

    /// The pid of the started program (QEMU, or the wrapper), which also leads its process
    /// group.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Collects the console until the guest powers off or `timeout` (counted from the spawn)
    /// passes, then checks the outcome.
    ///
    /// Errors, in this order: [`TestVmError::Timeout`] (the process group was killed),
    /// [`TestVmError::ResultLine`] for a malformed result line, [`TestVmError::Workload`] if the
    /// guest reported an error, [`TestVmError::QemuFailed`] for a failing exit status,
    /// [`TestVmError::NoResult`] if the workload never printed its `done` line. Corruption is
    /// not an error here: see [`GuestRun::verified`].
    pub fn wait(mut self, timeout: Duration) -> Result<GuestRun> {
        let deadline = self.started + timeout;
        let mut console = Vec::new();
        let mut results = Vec::new();
        let mut parse_error = None;
        let mut boot = None;
        let mut timed_out = false;
        let mut exited_at = None;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.console_rx.recv_timeout(left.min(POLL)) {
                Ok(ConsoleEvent::Line(line)) => {
                    if let Some(parsed) = parse_result_line(&line, console.len() + 1) {
                        match parsed {
                            Ok(result) => {
                                if boot.is_none() && matches!(result, WorkloadResult::Start { .. })
                                {
                                    boot = Some(self.started.elapsed());
                                }
                                results.push(result);
                            }
                            Err(e) => {
                                parse_error.get_or_insert(e);
                            }
                        }
                    }
                    console.push(line);
                }
                Ok(ConsoleEvent::Closed) | Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => {
                    if Instant::now() >= deadline {
                        timed_out = true;
                        break;
                    }
                    // The program exited but something it started still holds the console
                    // open: stop reading after a grace period (the group is killed below).
                    if exited_at.is_none() && matches!(self.child.try_wait(), Ok(Some(_))) {
                        exited_at = Some(Instant::now());
                    }
                    if exited_at.is_some_and(|t: Instant| t.elapsed() >= CONSOLE_GRACE) {
                        break;
                    }
                }
            }
        }
        // The console closed: the guest is (nearly) gone. Wait for the exit, within the deadline.
        let status = loop {
            if timed_out {
                kill_group(self.child.id());
            }
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => timed_out = true,
                Ok(None) => thread::sleep(Duration::from_millis(10)),
                Err(source) => {
                    return Err(TestVmError::Io {
                        context: format!("waiting for {} (pid {})", self.program, self.child.id()),
                        source,
                    })
                }
            }
        };
        self.reaped = true;
        // Anything else left in the group (a wrapper's children) goes too.
        kill_group(self.child.id());
        let elapsed = self.started.elapsed();
        let stderr = self
            .stderr_rx
            .recv_timeout(Duration::from_secs(2))
            .unwrap_or_default();
        let console_tail = tail_of(&console.join("\n"), TAIL_LINES);

        if timed_out {
            return Err(TestVmError::Timeout {
                seconds: timeout.as_secs_f64(),
                console_tail,
            });
        }
        if let Some(e) = parse_error {
            return Err(e);
        }
        if let Some(message) = results.iter().find_map(|r| match r {
            WorkloadResult::Error { message } => Some(message.clone()),
            _ => None,
        }) {
            return Err(TestVmError::Workload {
                message,
                console_tail,
            });
        }
        if !status.success() {
            return Err(TestVmError::QemuFailed {
                status: status.to_string(),
                stderr_tail: tail_of(&stderr, 5),
                console_tail,
            });
        }
        if !results.iter().any(|r| matches!(r, WorkloadResult::Done(_))) {
            return Err(TestVmError::NoResult {
                status: status.to_string(),
                console_tail,
            });
        }
        Ok(GuestRun {
            results,
            console,
            stderr,
            status,
            boot,
            elapsed,
        })
    }
}

impl Drop for RunningGuest {
    fn drop(&mut self) {
        if !self.reaped {
            kill_group(self.child.id());
            let _ = self.child.wait();
        }
    }
}
