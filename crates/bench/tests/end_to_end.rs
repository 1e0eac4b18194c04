//! The benchmark end to end, for real: `pager-vs-kernel run --quick` with small sizes (swap file,
//! cgroups, both variants, data verified), and teardown on SIGTERM. Needs root, cgroup v1 memory
//! and a `swapon` that works: prints SKIPPED otherwise — except under `CI=true` on a machine
//! that is root with cgroup v1 (the platform this project documents), where a refused
//! `swapon` fails the test. Never asserts on timing.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_pager-vs-kernel");

/// Drivers must not run at once: each refuses to start while another's swap file is active.
static SERIAL: Mutex<()> = Mutex::new(());

mod common;
use common::in_ci;

/// Whether the kernel baseline can run; SKIPPED (or a CI failure) otherwise.
fn available(swap_dir: &Path) -> bool {
    let out = Command::new(EXE)
        .args(["check", "--swap-dir"])
        .arg(swap_dir)
        .output()
        .expect("run pager-vs-kernel check");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    match out.status.code() {
        Some(0) => true,
        Some(2) => {
            // SAFETY: geteuid has no preconditions.
            let root = unsafe { libc::geteuid() } == 0;
            let platform =
                root && Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
            let busy = text.contains("other swap already active");
            if in_ci() && platform && !busy {
                panic!("CI: root with cgroup v1, but {}", text.trim());
            }
            eprintln!("SKIPPED: {}", text.trim());
            false
        }
        _ => panic!(
            "check failed: {}{}",
            text,
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Nothing of driver `pid` is left: no swap area, no swap file, no cgroup.
fn assert_torn_down(pid: u32, swap_dir: &Path) {
    let name = format!("memvisor-kbench-{pid}");
    let swaps = std::fs::read_to_string("/proc/swaps").unwrap();
    assert!(!swaps.contains(&name), "swap still active: {swaps}");
    assert!(!swap_dir.join(format!("{name}.swap")).exists());
    for e in std::fs::read_dir("/sys/fs/cgroup/memory")
        .unwrap()
        .flatten()
    {
        let n = e.file_name().to_string_lossy().into_owned();
        assert!(!n.starts_with(&format!("{name}-")), "cgroup left: {n}");
    }
}

fn output(cmd: &mut Command) -> Output {
    cmd.output().expect("start pager-vs-kernel")
}

#[test]
fn quick_run_completes_both_variants_with_verified_data() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let swap_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    if !available(swap_dir.path()) {
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    let child = Command::new(EXE)
        .args([
            "run",
            "--quick",
            "--size",
            "32M",
            "--budget",
            "8M",
            "--swap-dir",
        ])
        .arg(swap_dir.path())
        .arg("--out")
        .arg(out_dir.path())
        .args([
            "--workload",
            "seq:passes=2",
            "--workload",
            "zipf:alpha=0.99:accesses=300",
        ])
        .args(["--workload", "membench:passes=1"])
        .args(["--workload", "phased:passes=1:accesses=200"])
        .args([
            "--variant",
            "kernel",
            "--variant",
            "memvisor:chunk=64K:sample=100ms",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_torn_down(pid, swap_dir.path());

    let records: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(out_dir.path().join("results.json")).unwrap(),
    )
    .unwrap();
    // The phased workload gives a record for the whole run and one per phase.
    assert_eq!(
        records.len(),
        14,
        "(3 workloads + 1 + 3 phases) x 2 variants"
    );
    for variant in ["kernel", "memvisor:chunk=64K:sample=100ms"] {
        let accesses = |w: &str| {
            records
                .iter()
                .find(|r| r["workload"] == w && r["variant"] == variant)
                .unwrap_or_else(|| panic!("no record {w} / {variant}"))["report"]["run"]["accesses"]
                .as_u64()
                .unwrap()
        };
        let phased = "phased:passes=1:accesses=200";
        assert_eq!(accesses(&format!("{phased}#seq")), 32 * 256);
        assert_eq!(accesses(&format!("{phased}#uniform")), 200);
        assert_eq!(accesses(&format!("{phased}#zipf")), 200);
        assert_eq!(accesses(phased), 32 * 256 + 400);
    }
    for r in &records {
        let rep = &r["report"];
        let what = format!("{} / {}", r["workload"], r["variant"]);
        assert_eq!(rep["verified"], true, "{what}");
        assert_eq!(rep["pages"], 32 * 256, "{what}");
        assert!(rep["run"]["accesses"].as_u64().unwrap() > 0, "{what}");
        if r["kernel"] == true {
            // The limit bit: the kernel swapped the data set out (pswpout is system-wide, so
            // this is a lower bound on our own).
            let limit = r["cgroup"]["limit_bytes"].as_u64().unwrap();
            assert_eq!(limit, (8 + 4) << 20, "{what}");
            assert!(
                r["cgroup"]["peak_bytes"].as_u64().unwrap() <= limit,
                "{what}"
            );
            assert!(
                rep["fill"]["counters"]["pswpout"].as_u64().unwrap() > 0,
                "{what}"
            );
        } else {
            let region = &rep["run"]["region"];
            assert!(region["page_ins"].as_u64().unwrap() > 0, "{what}");
            // The variant's chunk size reached the region: no page-in reads more than a
            // 64 KiB chunk, and on sequential passes nearly all read whole chunks (the first
            // fault of a pass reads its page alone, until the stream is recognized).
            let bytes = region["bytes_read"].as_u64().unwrap();
            let ins = region["page_ins"].as_u64().unwrap();
            assert!(
                bytes <= ins * (64 << 10),
                "{what}: {bytes} bytes, {ins} page-ins"
            );
            if r["workload"] == "seq:passes=2" {
                assert!(
                    bytes > ins * (48 << 10),
                    "{what}: {bytes} bytes, {ins} page-ins"
                );
            }
            assert_eq!(region["dirty_tracking_misses"], 0, "{what}");
            assert_eq!(rep["region_errors"].as_array().unwrap().len(), 0, "{what}");
        }
    }
    let summary = std::fs::read_to_string(out_dir.path().join("summary.md")).unwrap();
    assert!(
        summary.contains("| membench:passes=1 | memvisor:chunk=64K:sample=100ms |"),
        "{summary}"
    );
    let csv = std::fs::read_to_string(out_dir.path().join("results.csv")).unwrap();
    assert!(
        summary.contains("| phased:passes=1:accesses=200#zipf | kernel |"),
        "{summary}"
    );
    assert_eq!(csv.lines().count(), 15);
}

#[test]
fn sigterm_tears_everything_down() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let swap_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    if !available(swap_dir.path()) {
        return;
    }
    let out_dir = tempfile::tempdir().unwrap();
    // Long enough that it is still running when the signal comes.
    let mut child = Command::new(EXE)
        .args([
            "run",
            "--size",
            "64M",
            "--budget",
            "8M",
            "--reps",
            "50",
            "--swap-dir",
        ])
        .arg(swap_dir.path())
        .arg("--out")
        .arg(out_dir.path())
        .args(["--workload", "seq:passes=20", "--variant", "kernel"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let name = format!("memvisor-kbench-{pid}-");
    // Wait until a workload process sits in its cgroup.
    let start = Instant::now();
    loop {
        let running = std::fs::read_dir("/sys/fs/cgroup/memory")
            .unwrap()
            .flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with(&name));
        if running {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "driver never started a workload"
        );
        assert!(child.try_wait().unwrap().is_none(), "driver exited early");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: plain kill(2) of our own child.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("interrupted"), "{stderr}");
    assert_torn_down(pid, swap_dir.path());
}

#[test]
fn bad_arguments_are_one_line_errors() {
    for (args, needle) in [
        (vec!["run", "--workload", "walk"], "unknown kind"),
        (
            vec!["run", "--variant", "memvisor:chunk=x"],
            "variant chunk",
        ),
        (vec!["run", "--size", "lots"], "bad size"),
    ] {
        let out = output(Command::new(EXE).args(&args));
        let e = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {e}");
        assert!(e.contains(needle), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
    }
}
