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

#[test]
fn qemu_memfd_guest_ram_becomes_a_region() {
    if !userfaultfd_usable() {
        return;
    }
    if Command::new("qemu-system-x86_64")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: qemu-system-x86_64 is not installed");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    let mut run = memvisor(&ctl)
        .args(["run", "--budget", "64M", "--swap-dir"])
        .arg(t.path())
        .args([
            "--",
            "qemu-system-x86_64",
            "-nodefaults",
            "-display",
            "none",
            "-accel",
            "tcg",
            "-S",
        ])
        .args(["-machine", "pc,memory-backend=ram", "-m", "256M"])
        .args(["-object", "memory-backend-memfd,id=ram,size=256M"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status: ProcessStatus = loop {
        let pids = memvisor_control::socket_dir::list_managed_pids(&ctl).unwrap();
        if let Some(pid) = pids.first() {
            let o = memvisor(&ctl)
                .args(["stat", &pid.to_string(), "--json"])
                .output()
                .unwrap();
            if o.status.success() {
                let s: ProcessStatus = serde_json::from_slice(&o.stdout).unwrap();
                let has = |kind: &str| s.regions.iter().any(|r| r.kind == kind);
                if has("guest-memfd") && has("code") {
                    break s;
                }
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no guest-memfd and code regions in time"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
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
    let total: u64 = status.regions.iter().map(|r| r.budget_bytes).sum();
    assert!(
        total <= 64 * MIB + status.regions.len() as u64 * status.chunk_size,
        "{status:?}"
    );
    assert!(status
        .regions
        .iter()
        .all(|r| r.kind != "guest-memfd" || r.resident_bytes <= r.budget_bytes));

    // SIGTERM to memvisor run is forwarded; QEMU exits on it (status 0) once it handles it:
    // its guest RAM is mapped before its signal handlers are set up, so wait for those.
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
