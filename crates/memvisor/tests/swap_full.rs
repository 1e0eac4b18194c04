//! A full swap filesystem under `memvisor run` (a real tmpfs, a real C program, the real
//! pager): refused at start when it has no room, reported once per episode at run time with
//! `stat` showing it, `--on-swap-full fail` stopping the program until space is freed; and the
//! program not outliving a killed `memvisor run`.

mod common;

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use memvisor_control::ProcessState;

/// A tmpfs mounted for the test, unmounted (lazily) when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` (mount's spelling, e.g. `48M`) at a new directory in `parent`;
    /// `None` (test skipped) where mounting is not allowed.
    fn mount(parent: &Path, size: &str) -> Option<Self> {
        let dir = parent.join(format!("tmpfs-{size}"));
        std::fs::create_dir(&dir).unwrap();
        let st = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=1777"),
                "tmpfs",
            ])
            .arg(&dir)
            .status();
        if !st.is_ok_and(|s| s.success()) {
            eprintln!("SKIPPED: cannot mount a tmpfs (needs root)");
            return None;
        }
        Some(Self(dir))
    }

    fn resize(&self, size: &str) {
        let st = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .unwrap();
        assert!(st.success(), "remount {size}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The pid of `memvisor run`'s child (the program).
fn program_pid(run: &Child) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", run.id()))
            .unwrap_or_default();
        if let Some(p) = children.split_whitespace().next() {
            return p.parse().unwrap();
        }
        assert!(Instant::now() < deadline, "memvisor run started no program");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills `pid` if it still runs after `after` (so a test that fails while the program is
/// stopped ends instead of waiting for its output forever).
fn watchdog(pid: u32, after: Duration) {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let state = ProcessState::of(pid);
        if state != ProcessState::Gone {
            eprintln!("watchdog: killing program {pid}, state {state:?}");
            // SAFETY: plain kill of a pid this test started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
    });
}

fn wait_for_state(pid: u32, want: ProcessState, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if ProcessState::of(pid) == want {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Starts `managed_workload work MIB 7 hold` under a 16M budget with its swap in `swap` (the
/// default arena: sparse, so a small swap filesystem is only warned about).
fn start_workload(ctl: &Path, prog: &Path, swap: &Path, mib: u32, extra: &[&str]) -> Child {
    let mut args = vec!["--budget", "16M", "--min-region", "1M"];
    args.extend_from_slice(extra);
    start_managed_workload(ctl, prog, &args, swap, mib, 7)
}

/// Closes the program's stdin (it verifies its memory again and exits with 7) and returns its
/// stdout rest and stderr.
fn finish(mut child: Child, mut out: impl Read) -> (String, String) {
    drop(child.stdin.take());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(7), "stdout {rest} stderr {err}");
    (rest, err)
}

#[test]
fn a_swap_dir_without_room_is_refused_at_start() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(t.path(), "1M") else {
        return;
    };
    // Fill it: nothing is left for swap.
    let _ = std::fs::write(fs.0.join("filler"), vec![1u8; 2 << 20]);
    let o = memvisor(&t.path().join("ctl"))
        .args(["run", "--budget", "16M", "--swap-dir"])
        .arg(&fs.0)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("--swap-dir") && err.contains("less than one chunk"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");

    // Room for some swap, but not for the arena the user sized: refused with the figures.
    std::fs::remove_file(fs.0.join("filler")).unwrap();
    let o = memvisor(&t.path().join("ctl"))
        .args(["run", "--budget", "16M", "--arena", "1G", "--swap-dir"])
        .arg(&fs.0)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("beyond the budget"), "{err}");
}

/// 128 MiB through a 16 MiB budget with 40 MiB of swap: page-outs fail for lack of space. The
/// program keeps running over its budget with its data intact, the episode is printed once
/// (not once per failed write) and `stat` shows it.
#[test]
fn a_full_swap_dir_overruns_the_budget_and_says_so_once() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(t.path(), "40M") else {
        return;
    };
    let prog = compile_c("managed_workload", t.path());
    let ctl = t.path().join("ctl");
    let mut child = start_workload(&ctl, &prog, &fs.0, 128, &[]);
    watchdog(program_pid(&child), Duration::from_secs(180));
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (pid, _) = wait_ready(&mut out);
    let s = stat_json(&ctl, &pid);
    let r = &s.regions[0];
    assert!(r.swap_full_episodes >= 1, "{r:?}");
    assert!(r.swap_full_failures > 0, "{r:?}");
    assert!(r.overrun_chunks > 0, "{r:?}");
    assert!(r.resident_bytes > r.budget_bytes, "{r:?}");
    let table = memvisor(&ctl).args(["stat", &pid]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(
        table.contains("page-outs failed for lack of space"),
        "{table}"
    );
    assert!(table.contains("resident over the budget"), "{table}");
    let (rest, err) = finish(child, out);
    assert!(rest.contains("OK"), "{rest}");
    let full_lines = err.lines().filter(|l| l.contains("is full")).count();
    assert!(full_lines >= 1, "{err}");
    // The old behaviour printed one line per failed write: thousands.
    assert!(
        err.lines().count() <= 40,
        "{} lines of stderr:\n{err}",
        err.lines().count()
    );
    assert!(
        err.lines().count() as u64 <= 2 * r.swap_full_episodes + 12,
        "{err}"
    );
}

/// `--on-swap-full fail`: the program is stopped with a message when swap fills up, and goes
/// on, its data intact, once there is room and it is continued.
#[test]
fn on_swap_full_fail_stops_the_program_until_space_is_freed() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let Some(fs) = Tmpfs::mount(t.path(), "24M") else {
        return;
    };
    let prog = compile_c("managed_workload", t.path());
    let ctl = t.path().join("ctl");
    let mut child = start_workload(&ctl, &prog, &fs.0, 96, &["--on-swap-full", "fail"]);
    let pid = program_pid(&child);
    watchdog(pid, Duration::from_secs(180));
    assert!(
        wait_for_state(pid, ProcessState::Stopped, Duration::from_secs(60)),
        "program {pid} was not stopped: state {:?}",
        ProcessState::of(pid)
    );
    // Make room, then continue it: it finishes its passes with every page verified.
    fs.resize("256M");
    // SAFETY: plain kill of our grandchild.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    let mut out = BufReader::new(child.stdout.take().unwrap());
    wait_ready(&mut out);
    let (rest, err) = finish(child, out);
    assert!(rest.contains("OK"), "{rest}");
    assert!(err.contains("stopping process"), "{err}");
    assert!(err.contains("SIGCONT"), "{err}");
}

/// `memvisor run` killed with SIGKILL takes its program with it (PR_SET_PDEATHSIG).
#[test]
fn the_program_dies_with_a_killed_memvisor_run() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let mut run = memvisor(&t.path().join("ctl"))
        .args(["run", "--budget", "16M", "--swap-dir"])
        .arg(t.path())
        .args(["--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = program_pid(&run);
    assert!(wait_for_state(
        pid,
        ProcessState::Alive,
        Duration::from_secs(10)
    ));
    run.kill().unwrap();
    run.wait().unwrap();
    // Gone, or a zombie waiting for whoever inherited it.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !matches!(
        ProcessState::of(pid),
        ProcessState::Gone | ProcessState::Zombie
    ) {
        assert!(
            Instant::now() < deadline,
            "program {pid} outlived memvisor run: state {:?}",
            ProcessState::of(pid)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
