//! `memvisor broker` dividing one total among budgets and an image's host cache limit (issue
//! 12), end to end: a VMM-like program (`tests/c/image_broker_workload.c`) under `memvisor run
//! --image-cache 4M` loops over a hot 24 MiB of its 64 MiB disk image, an idle program beside
//! it needs no more memory, and a real broker process in utility mode grows the image's cache
//! limit to the hot set from the image's curve (its CAR model's refaults, weighed by what a
//! miss costs the reads), never past the total; the model then hits where it missed.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use memvisor_control::ProcessStatus;

const MIB: u64 = 1 << 20;
/// What the broker divides.
const TOTAL: u64 = 96 * MIB;
/// The part of the image the program reads over and over.
const HOT: u64 = 24 * MIB;

/// A program under `memvisor run`, started and READY.
struct Managed {
    run: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
    pid: String,
}

impl Managed {
    fn start(ctl: &Path, run_args: &[&str], command: &[&Path], args: &[&str]) -> Self {
        let mut run = memvisor(ctl)
            .arg("run")
            .args(run_args)
            .arg("--")
            .args(command)
            .args(args)
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
            pid,
        }
    }

    /// Closes its stdin and waits for its last line and a clean exit.
    fn finish(self) -> String {
        let Self {
            mut run,
            stdin,
            mut out,
            ..
        } = self;
        drop(stdin);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
        let status = run.wait().unwrap();
        assert!(status.success(), "exit {status:?}, said {rest}");
        rest
    }
}

/// A `memvisor broker` whose output lines are collected.
struct BrokerProcess {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl BrokerProcess {
    fn start(ctl: &Path, args: &[&str]) -> Self {
        let mut child = memvisor(ctl)
            .arg("broker")
            .args(args)
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

    fn stop(mut self) -> String {
        // SAFETY: kill has no memory-safety preconditions; the pid is our own child's.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let status = self.child.wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(status.success(), "broker exit {status:?}:\n{}", self.log());
        self.log()
    }
}

/// The budgets of both programs and the image's cache limit, checked against the total.
fn split(ctl: &Path, a: &Managed, b: &Managed, log: &str) -> (ProcessStatus, u64) {
    let sa = stat_json(ctl, &a.pid);
    let sb = stat_json(ctl, &b.pid);
    assert_eq!(sa.images.len(), 1, "{sa:?}");
    let limit = sa.images[0]
        .cache_limit_bytes
        .expect("the image keeps a limit");
    let sum = sa.budget_bytes + sb.budget_bytes + limit;
    assert!(
        sum <= TOTAL,
        "{} + {} + {limit} over the total; broker said:\n{log}",
        sa.budget_bytes,
        sb.budget_bytes
    );
    (sa, limit)
}

/// What one `static` decision of `memvisor broker --once --dry-run` over `total` says (4M
/// steps and hysteresis, budgets at least 16M, image caches at least 4M).
fn static_dry_run(ctl: &Path, total: &str) -> String {
    let once = memvisor(ctl)
        .args([
            "broker", "--total", total, "--mode", "static", "--step", "4M",
        ])
        .args(["--hysteresis", "4M", "--min", "16M", "--image-min", "4M"])
        .args(["--once", "--dry-run"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&once.stdout).into_owned();
    assert!(once.status.success(), "{said}{}", stderr(&once));
    said
}

#[test]
fn broker_grows_an_image_cache_to_its_hot_set_within_the_total() {
    if !userfaultfd_usable() {
        return;
    }
    let started = Instant::now();
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let reader = compile_c("image_broker_workload", tmp.path());
    let idle = compile_c("broker_workload", tmp.path());
    let image = tmp.path().join("disk.img");
    write_uncached_image(&image, 64);
    let ctl = tmp.path().join("ctl");
    let swap = tmp.path().to_str().unwrap();
    let a = Managed::start(
        &ctl,
        &["--budget", "32M", "--image-cache", "4M", "--swap-dir", swap],
        &[&reader, &image],
        &[&(HOT / MIB).to_string()],
    );
    let mut b = Managed::start(
        &ctl,
        &["--budget", "32M", "--swap-dir", swap],
        &[&idle],
        &["16"],
    );
    let path = image.to_str().unwrap();
    let (before, limit) = split(&ctl, &a, &b, "");
    assert_eq!(limit, 4 * MIB);
    assert_eq!(before.images[0].path, path);

    // One static decision, not made: the image is a claimant of its own (A's budget is held
    // to its 16M guest RAM, the rest shared by B and the image), and nothing changes.
    let said = static_dry_run(&ctl, "96M");
    assert!(
        said.contains(&format!(
            "image {path}: cache 4M -> 40M (static share) [dry run]"
        )) && said.contains(&format!(
            "pid {} (broker_workload): budget 32M -> 40M",
            b.pid
        )),
        "{said}"
    );
    assert_eq!(
        split(&ctl, &a, &b, &said).1,
        4 * MIB,
        "a dry run sets nothing"
    );
    // With more to divide than the image can use, its limit stops at the image's 64 MiB,
    // and B, whose most is the total, takes what an equal share would have given past it.
    let said = static_dry_run(&ctl, "256M");
    assert!(
        said.contains(&format!("image {path}: cache 4M -> 64M"))
            && said.contains(&format!(
                "pid {} (broker_workload): budget 32M -> 176M",
                b.pid
            )),
        "{said}"
    );

    let broker = BrokerProcess::start(
        &ctl,
        &[
            "--total",
            "96M",
            "--mode",
            "utility",
            "--interval",
            "1s",
            "--step",
            "4M",
            "--hysteresis",
            "4M",
            "--max-change",
            "64M",
            "--min",
            "16M",
            "--image-min",
            "4M",
        ],
    );
    // The broker follows the image, measures its curve over one interval, and grows the limit
    // to the hot set: 20 MiB more saves every miss (the refaults are 19 to 20 MiB away).
    let deadline = Instant::now() + Duration::from_secs(15);
    let grown = loop {
        let (s, limit) = split(&ctl, &a, &b, &broker.log());
        if limit >= HOT {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the limit stayed at {limit} for 15 s; broker said:\n{}",
            broker.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let limit = grown.images[0].cache_limit_bytes.unwrap_or(0);
    assert!(
        limit <= HOT + 8 * MIB,
        "{limit}: past the hot set; broker said:\n{}",
        broker.log()
    );
    let log = broker.log();
    assert!(
        log.contains(&format!("following pid {} (", a.pid))
            && log.contains(&format!("image {path}, cache limit 4M")),
        "{log}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains(&format!("image {path}: cache 4M -> "))
                && l.contains("utility: +")
                && l.contains("ms/s of image reads")),
        "{log}"
    );

    // At the hot set the model hits where it missed; the split holds for two more decisions.
    std::thread::sleep(Duration::from_millis(500));
    let (s1, _) = split(&ctl, &a, &b, &broker.log());
    let t1 = Instant::now();
    std::thread::sleep(Duration::from_millis(2000));
    let (s2, final_limit) = split(&ctl, &a, &b, &broker.log());
    let secs = t1.elapsed().as_secs_f64();
    let (i1, i2) = (&s1.images[0], &s2.images[0]);
    let misses = (i2.cache_misses - i1.cache_misses) as f64 / secs;
    let hits = (i2.cache_hits - i1.cache_hits) as f64 / secs;
    eprintln!("at {final_limit}: {hits:.0} hits/s, {misses:.0} misses/s");
    assert!(
        hits > 100.0 * misses.max(1.0),
        "{hits} hits/s, {misses} misses/s at {final_limit}"
    );
    assert_eq!(
        final_limit,
        limit,
        "the limit stays; broker said:\n{}",
        broker.log()
    );
    assert!(stat_json(&ctl, &b.pid).budget_bytes >= 16 * MIB);

    let log = broker.stop();
    eprintln!("broker said:\n{log}");
    let said = a.finish();
    assert!(said.starts_with("OK "), "{said}");
    writeln!(b.stdin, "verify").unwrap();
    b.stdin.flush().unwrap();
    let mut line = String::new();
    b.out.read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "verified");
    b.finish();
    eprintln!("took {:.1} s", started.elapsed().as_secs_f64());
}
