//! `memvisor broker` end to end: two real programs under `memvisor run`, their budgets
//! divided by a real broker process as their working sets change; the broker killed and
//! restarted (nothing lost), a process that stops answering (its budget kept), one killed
//! while the broker runs (its memory given to the other), and every page checked at the end.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;

const MIB: u64 = 1 << 20;

/// A `broker_workload` under `memvisor run`.
struct Workload {
    run: Child,
    stdin: ChildStdin,
    out: BufReader<std::process::ChildStdout>,
    pid: u32,
}

impl Workload {
    fn start(ctl: &Path, prog: &Path, swap: &Path, mib: u32) -> Self {
        let mut run = memvisor(ctl)
            .args(["run", "--budget", "64M", "--arena", "512M", "--swap-dir"])
            .arg(swap)
            .arg("--")
            .arg(prog)
            .arg(mib.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = run.stdin.take().unwrap();
        let mut out = BufReader::new(run.stdout.take().unwrap());
        let (pid, _) = wait_ready(&mut out);
        Self {
            run,
            stdin,
            out,
            pid: pid.parse().unwrap(),
        }
    }

    fn say(&mut self, command: &str) {
        writeln!(self.stdin, "{command}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn budget(&self, ctl: &Path) -> u64 {
        stat_json(ctl, &self.pid.to_string()).budget_bytes
    }
}

/// A `memvisor broker` whose output lines are collected.
struct BrokerProcess {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl BrokerProcess {
    fn start(ctl: &Path, extra: &[&str]) -> Self {
        let mut child = memvisor(ctl)
            .args(extra)
            .args([
                "--total",
                "288M",
                "--interval",
                "500ms",
                "--step",
                "8M",
                "--hysteresis",
                "8M",
                "--max-change",
                "64M",
                "--min",
                "32M",
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in out.lines().map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        Self { child, lines }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits until a line contains all of `parts`.
    fn wait_line(&self, parts: &[&str], what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if self
                .lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| parts.iter().all(|p| l.contains(p)))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "{what}: no line with {parts:?} in 30 s; broker said:\n{}",
            self.log()
        );
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child's.
        unsafe { libc::kill(self.child.id() as i32, sig) };
    }
}

/// Waits until `check` holds, printing the broker's log if it never does.
fn wait_until(broker: &BrokerProcess, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    panic!("{what}: not within 40 s; broker said:\n{}", broker.log());
}

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Two `broker_workload`s of 256 MiB under `memvisor run` (control directory `ctl`, swap in
/// `swap`, both in the returned directory).
fn two_workloads() -> (tempfile::TempDir, Workload, Workload) {
    let t = tempfile::tempdir().unwrap();
    let prog = compile_c("broker_workload", t.path());
    let ctl = t.path().join("ctl");
    let swap = t.path().join("swap");
    std::fs::create_dir(&swap).unwrap();
    let a = Workload::start(&ctl, &prog, &swap, 256);
    let b = Workload::start(&ctl, &prog, &swap, 256);
    (t, a, b)
}

#[test]
fn broker_divides_by_utility_and_survives_restarts_silence_and_exits() {
    if !userfaultfd_usable() {
        return;
    }
    let (t, mut a, mut b) = two_workloads();
    let ctl = t.path().join("ctl");

    // A loops over 160 MiB (more than its 64M); B is idle. 288M to divide.
    a.say("loop 160");
    let broker = BrokerProcess::start(&ctl, &["broker"]);
    wait_until(&broker, "A's budget covers its loop", || {
        a.budget(&ctl) >= 161 * MIB
    });
    assert!(b.budget(&ctl) >= 32 * MIB);
    broker.wait_line(
        &[&format!("pid {}", a.pid), "utility: +"],
        "A grew by utility",
    );

    // The working sets swap: B now loops, A idles: memory moves from A to B.
    a.say("idle");
    b.say("loop 160");
    wait_until(&broker, "B's budget covers its loop", || {
        b.budget(&ctl) >= 161 * MIB
    });
    let (ab, bb) = (a.budget(&ctl), b.budget(&ctl));
    assert!(ab + bb <= 288 * MIB, "{ab} + {bb} over the total");
    broker.wait_line(&[&format!("pid {}", a.pid), "for others"], "A donated");

    // The broker dies: every budget stays as it was.
    broker.signal(libc::SIGKILL);
    let mut old = broker;
    old.child.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!((a.budget(&ctl), b.budget(&ctl)), (ab, bb), "budgets kept");

    // A new broker takes over from those budgets; it serves its split for Prometheus.
    let broker = BrokerProcess::start(&ctl, &["broker", "--metrics", "127.0.0.1:0"]);
    broker.wait_line(&["following pid", &a.pid.to_string()], "restart follows A");
    broker.wait_line(&["following pid", &b.pid.to_string()], "restart follows B");
    assert!(b.budget(&ctl) >= 161 * MIB, "B keeps what it needs");
    broker.wait_line(&["metrics at http://127.0.0.1:"], "metrics address");
    let port: u16 = {
        let log = broker.log();
        let at = log.find("metrics at http://127.0.0.1:").unwrap() + 28;
        log[at..].split('/').next().unwrap().parse().unwrap()
    };
    let mut scraped = String::new();
    wait_until(&broker, "the split is exported", || {
        let mut c = connect_when_listening(port, "broker metrics");
        write!(c, "GET /metrics HTTP/1.0\r\n\r\n").unwrap();
        scraped.clear();
        c.read_to_string(&mut scraped).unwrap();
        scraped.contains(&format!("memvisor_broker_budget_bytes{{pid=\"{}\"", b.pid))
            && scraped.contains("memvisor_broker_total_bytes 301989888")
            && scraped.contains("memvisor_broker_page_in_time_saved_ratio{")
    });

    // B stops answering: its budget is kept aside; then it answers again.
    signal(b.pid, libc::SIGSTOP);
    broker.wait_line(
        &[&format!("pid {}", b.pid), "does not answer", "keeps its"],
        "B silent",
    );
    std::thread::sleep(Duration::from_millis(1200));
    signal(b.pid, libc::SIGCONT);
    broker.wait_line(&[&format!("pid {}", b.pid), "answers again"], "B back");

    // B is killed while the broker runs; A needs more: it gets B's memory.
    signal(b.pid, libc::SIGKILL);
    let _ = b.run.wait();
    broker.wait_line(&[&format!("pid {}", b.pid), "exited"], "B's exit seen");
    a.say("loop 224");
    wait_until(&broker, "A's budget covers its larger loop", || {
        a.budget(&ctl) >= 225 * MIB
    });
    assert!(a.budget(&ctl) <= 288 * MIB);

    // Stopped politely, the broker says every process keeps its budget.
    broker.signal(libc::SIGTERM);
    let mut broker = broker;
    let status = broker.child.wait().unwrap();
    assert!(
        status.success(),
        "broker exit: {status:?}\n{}",
        broker.log()
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        broker.log().contains("every process keeps its budget"),
        "{}",
        broker.log()
    );
    eprintln!("second broker said:\n{}", broker.log());

    // Nothing was lost on the way.
    a.say("idle");
    a.say("verify");
    let mut line = String::new();
    a.out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "verified");
    drop(a.stdin);
    assert!(a.run.wait().unwrap().success());
    let _ = Command::new("true").status();
}

/// A `--limit` by label, when two processes carry the label (any user can name a process):
/// applied to neither (the broker says so), and to the one left once the other exits.
#[test]
fn a_label_limit_two_processes_carry_applies_to_neither() {
    if !userfaultfd_usable() {
        return;
    }
    let (t, a, b) = two_workloads();
    let ctl = t.path().join("ctl");
    let broker = BrokerProcess::start(&ctl, &["broker", "--limit", "broker_workload=200M:"]);
    broker.wait_line(
        &[
            "--limit broker_workload: 2 processes are labelled broker_workload",
            "applied to none of them",
        ],
        "the shared label is told",
    );
    assert!(a.budget(&ctl) < 200 * MIB && b.budget(&ctl) < 200 * MIB);
    // B exits: the label is A's alone, and A gets its minimum.
    let Workload { mut run, stdin, .. } = b;
    drop(stdin);
    assert!(run.wait().unwrap().success());
    broker.wait_line(
        &[&format!(
            "--limit broker_workload: one process labelled broker_workload again (pid {})",
            a.pid
        )],
        "the label is one process's again",
    );
    wait_until(&broker, "A's budget reaches the limit's minimum", || {
        a.budget(&ctl) >= 200 * MIB
    });
    let mut broker = broker;
    broker.signal(libc::SIGTERM);
    let _ = broker.child.wait();
    drop(a.stdin);
    let mut run = a.run;
    assert!(run.wait().unwrap().success());
}
