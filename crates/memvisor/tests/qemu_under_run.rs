//! QEMU under `memvisor run`: its `memory-backend-memfd` guest RAM is adopted by a region of
//! its own, with most of the budget, TCG's translated-code buffer is a code region with its
//! allotment, and signals sent to `memvisor run` reach QEMU. The guest
//! is not booted (`-S`; booting one is issue 4 item 2). Skipped where QEMU is not installed.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use memvisor_control::ProcessStatus;

const MIB: u64 = 1 << 20;

/// Whether QEMU is installed (a test without it says so and passes).
fn qemu_installed() -> bool {
    let ok = Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_ok();
    if !ok {
        eprintln!("SKIPPED: qemu-system-x86_64 is not installed");
    }
    ok
}

/// A paused TCG QEMU under `memvisor run`, and its status when it was ready.
struct PausedQemu {
    /// Its control sockets and swap.
    dir: tempfile::TempDir,
    run: std::process::Child,
    status: ProcessStatus,
}

/// A paused TCG QEMU with `vcpus` vCPUs and 256 MiB of memfd guest RAM under `memvisor run
/// --budget 64M`, once `ready` says so of its status (within 30 s); `None` where userfaultfd
/// or QEMU is missing (the test is skipped).
fn paused_qemu(vcpus: &str, ready: impl Fn(&ProcessStatus) -> bool) -> Option<PausedQemu> {
    if !userfaultfd_usable() || !qemu_installed() {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let ctl = dir.path().join("ctl");
    let mut cmd = memvisor(&ctl);
    cmd.args(["run", "--budget", "64M", "--swap-dir"])
        .arg(dir.path())
        .args([
            "--",
            "qemu-system-x86_64",
            "-nodefaults",
            "-display",
            "none",
            "-accel",
            "tcg",
            "-smp",
            vcpus,
            "-S",
        ])
        .args(["-machine", "pc,memory-backend=ram", "-m", "256M"])
        .args(["-object", "memory-backend-memfd,id=ram,size=256M"])
        .stdout(Stdio::null());
    let mut q = PausedQemu {
        run: cmd.spawn().unwrap(),
        dir,
        status: ProcessStatus::default(),
    };
    let start = Instant::now();
    loop {
        let pids = memvisor_control::socket_dir::list_managed_pids(&ctl).unwrap();
        if let Some(pid) = pids.first() {
            let o = memvisor(&ctl)
                .args(["stat", &pid.to_string(), "--json"])
                .output()
                .unwrap();
            if o.status.success() {
                let s: ProcessStatus = serde_json::from_slice(&o.stdout).unwrap();
                if ready(&s) {
                    q.status = s;
                    return Some(q);
                }
            }
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = q.run.kill();
            let _ = q.run.wait();
            panic!("QEMU's regions not there in time");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The budgets of `status`' regions add up to its budget (64M), give or take a chunk each.
fn assert_budgets_fit(status: &ProcessStatus) {
    let total: u64 = status.regions.iter().map(|r| r.budget_bytes).sum();
    assert!(
        total <= 64 * MIB + status.regions.len() as u64 * status.chunk_size,
        "{status:?}"
    );
}

/// SIGTERM to `memvisor run` reaches QEMU, which exits on it (status 0) once it handles it:
/// its guest RAM is mapped before its signal handlers are set up, so wait for those.
fn stop_qemu(q: PausedQemu) {
    let PausedQemu {
        dir,
        mut run,
        status,
    } = q;
    let ctl = dir.path().join("ctl");
    let catches_sigterm = || {
        let st =
            std::fs::read_to_string(format!("/proc/{}/status", status.pid)).unwrap_or_default();
        st.lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .is_some_and(|m| m & (1 << (libc::SIGTERM - 1)) != 0)
    };
    let t = Instant::now();
    while !catches_sigterm() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "QEMU never caught SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: kill with a valid pid of our own child.
    unsafe { libc::kill(run.id() as i32, libc::SIGTERM) };
    let st = run.wait().unwrap();
    assert_eq!(st.code(), Some(0), "QEMU's own exit status after SIGTERM");
    assert!(memvisor_control::socket_dir::list_managed_pids(&ctl)
        .unwrap()
        .is_empty());
}

#[test]
fn qemu_memfd_guest_ram_becomes_a_region() {
    let Some(q) = paused_qemu("1", |s| {
        let has = |kind: &str| s.regions.iter().any(|r| r.kind == kind);
        has("guest-memfd") && has("code")
    }) else {
        return;
    };
    let status = &q.status;
    assert_eq!(status.program, "qemu-system-x86_64");
    let guest = status
        .regions
        .iter()
        .find(|r| r.kind == "guest-memfd")
        .unwrap();
    assert_eq!(guest.size_bytes, 256 * MIB);
    // TCG's code buffer (1 GiB in QEMU 7.2 but its guard page) starts with an eighth of the
    // budget, and gives back a chunk a second while it has no page-in (a paused guest runs no
    // code); guest RAM is most of what else is managed, so it gets most of the rest.
    let code = status.regions.iter().find(|r| r.kind == "code").unwrap();
    assert!(code.size_bytes >= 256 * MIB, "{code:?}");
    assert!(
        (status.chunk_size..=8 * MIB).contains(&code.budget_bytes),
        "{code:?}"
    );
    assert!(guest.budget_bytes >= 48 * MIB, "{status:?}");
    assert_budgets_fit(status);
    assert!(status
        .regions
        .iter()
        .all(|r| r.kind != "guest-memfd" || r.resident_bytes <= r.budget_bytes));
    stop_qemu(q);
}

/// With two vCPUs TCG makes its code buffer accessible in slices (16 of 64 MiB but a guard
/// page each, in QEMU 7.2): every slice is a code region, and the code regions together keep
/// to their quarter of the budget.
#[test]
fn qemu_with_two_vcpus_gets_a_code_region_per_slice() {
    let codes = |s: &ProcessStatus| s.regions.iter().filter(|r| r.kind == "code").count();
    let Some(q) = paused_qemu("2", |s| {
        codes(s) == 16 && s.regions.iter().any(|r| r.kind == "guest-memfd")
    }) else {
        return;
    };
    let status = &q.status;
    let slices: Vec<_> = status.regions.iter().filter(|r| r.kind == "code").collect();
    assert!(
        slices.iter().all(|r| r.size_bytes == 64 * MIB - 4096),
        "{slices:?}"
    );
    let code_budget: u64 = slices.iter().map(|r| r.budget_bytes).sum();
    assert!(
        code_budget <= 16 * MIB + 16 * status.chunk_size,
        "{status:?}"
    );
    assert_budgets_fit(status);
    stop_qemu(q);
}
