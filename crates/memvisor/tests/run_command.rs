//! `memvisor run`, `stat`, `set` and `top` end to end: a real C program under the preload
//! library and the real pager, queried over its real control socket.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;

use common::*;

const MIB: u64 = 1 << 20;

/// 64 MiB of patterned data under a 16 MiB budget: written, verified, partly discarded with
/// MADV_DONTNEED, partly unmapped and remapped, mremapped, across fork and fork+exec; then
/// observed and retuned through stat/set/top/metrics while the program holds; verified again;
/// the exit status comes back.
#[test]
fn workload_pages_beyond_budget_and_is_controllable() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let prog = compile_c("managed_workload", t.path());
    let ctl = t.path().join("ctl");
    let swap = t.path().join("swap");
    std::fs::create_dir(&swap).unwrap();
    let mut child = start_managed_workload(
        &ctl,
        &prog,
        &[
            "--budget",
            "16M",
            "--min-region",
            "1M",
            "--arena",
            "1G",
            "--metrics",
            "127.0.0.1:0",
            // Busy-polling fault handlers (off by default) serve the same workload.
            "--busy-poll",
            "50us",
        ],
        &swap,
        64,
        7,
    );
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let (pid, lines) = wait_ready(&mut out);
    // The mapping is a memvisor memfd; a forked child touching it dies of SIGSEGV (the memory
    // is MADV_DONTFORK); the child's own large mappings and an exec'd child are unmanaged.
    assert_eq!(
        lines,
        [
            "managed=1",
            "fork-touch=1011",
            "fork-child=0",
            "exec-child=0"
        ]
    );

    let s = stat_json(&ctl, &pid);
    assert_eq!(s.pid.to_string(), pid);
    assert_eq!(s.budget_bytes, 16 * MIB);
    assert_eq!(s.regions.len(), 1);
    let arena = &s.regions[0];
    assert_eq!(arena.kind, "arena");
    assert_eq!(
        arena.mapped_bytes,
        60 * MIB,
        "64 MiB minus the 4 MiB unmapped"
    );
    assert!(arena.page_outs > 0 && arena.swapped_bytes > 0, "{arena:?}");
    assert!(arena.resident_bytes <= 16 * MIB + s.chunk_size, "{arena:?}");
    assert!(
        arena.discards >= 3,
        "munmap, MADV_DONTNEED and mremap discard: {arena:?}"
    );
    assert_eq!(
        arena.read_errors + arena.write_errors + arena.poisoned_chunks,
        0
    );
    assert_eq!(s.unmanaged_mappings, 0);

    let table = memvisor(&ctl).args(["stat", &pid]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    assert!(
        table.starts_with(&format!("pid {pid} (managed_workload)")),
        "{table}"
    );
    assert!(table.lines().any(|l| l.starts_with("arena#")), "{table}");

    let set = memvisor(&ctl)
        .args(["set", &pid, "--budget", "8M", "--policy", "clock"])
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", stderr(&set));
    let s = stat_json(&ctl, &pid);
    assert_eq!((s.budget_bytes, s.policy.as_str()), (8 * MIB, "clock"));
    assert_eq!(s.regions[0].budget_bytes, 8 * MIB);
    assert_eq!(s.regions[0].policy, "clock");
    assert!(
        s.regions[0].resident_bytes <= 8 * MIB,
        "shrinking pages out: {:?}",
        s.regions[0]
    );
    let bad = memvisor(&ctl)
        .args(["set", &pid, "--policy", "opt"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("offline"), "{}", stderr(&bad));

    let top = memvisor(&ctl)
        .args(["top", "--once", "--interval", "0.2"])
        .output()
        .unwrap();
    assert!(top.status.success(), "{}", stderr(&top));
    let top = String::from_utf8_lossy(&top.stdout).into_owned();
    let row = top
        .lines()
        .find(|l| l.starts_with(&pid))
        .unwrap_or_else(|| panic!("{top}"));
    assert!(
        row.contains("managed_workload") && row.contains("clock") && row.contains("8M"),
        "{row}"
    );

    let mut banner = String::new();
    err.read_line(&mut banner).unwrap();
    let addr = banner
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no metrics address in {banner:?}"))
        .to_string();
    let mut http = TcpStream::connect(&addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.0 200 OK"), "{body}");
    assert!(
        body.contains(&format!("memvisor_budget_bytes{{pid=\"{pid}\",program=\"managed_workload\",region=\"arena#0\",kind=\"arena\"}} 8388608")),
        "{body}"
    );
    assert!(body.contains("memvisor_page_outs_total{"), "{body}");

    drop(child.stdin.take());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        rest.trim(),
        "OK",
        "data verified again after the budget change"
    );
    assert_eq!(status.code(), Some(7), "exit status passed through");
    assert!(
        !ctl.join(format!("{pid}.sock")).exists(),
        "socket removed at exit"
    );
    let gone = memvisor(&ctl).args(["stat", &pid]).output().unwrap();
    assert!(!gone.status.success());
    assert_eq!(stderr(&gone).lines().count(), 1, "{}", stderr(&gone));
}

/// A stopped program (SIGSTOP) cannot answer: `set` refuses at once and changes nothing,
/// `stat` says it is stopped, `top --once` shows it as stopped without waiting for it; once
/// continued, it is controllable again.
#[test]
fn stopped_programs_are_reported_at_once() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let prog = compile_c("managed_workload", t.path());
    let ctl = t.path().join("ctl");
    let swap = t.path().join("swap");
    std::fs::create_dir(&swap).unwrap();
    let mut child = start_managed_workload(
        &ctl,
        &prog,
        &["--budget", "16M", "--min-region", "1M", "--arena", "1G"],
        &swap,
        32,
        0,
    );
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (pid, _) = wait_ready(&mut out);
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    std::thread::sleep(std::time::Duration::from_millis(200));

    let timed = |args: &[&str]| {
        let start = std::time::Instant::now();
        let o = memvisor(&ctl).args(args).output().unwrap();
        (o, start.elapsed())
    };
    let (set, took) = timed(&["set", &pid, "--budget", "8M"]);
    assert!(!set.status.success());
    assert_eq!(
        stderr(&set).trim(),
        format!("memvisor: error: process {pid} is stopped (SIGSTOP); not changed")
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "set took {took:?}"
    );
    let (stat, took) = timed(&["stat", &pid]);
    assert!(
        stderr(&stat).contains(&format!("process {pid} is stopped")),
        "{}",
        stderr(&stat)
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "stat took {took:?}"
    );
    let (top, took) = timed(&["top", "--once", "--interval", "0.1"]);
    assert!(top.status.success(), "{}", stderr(&top));
    let top = String::from_utf8_lossy(&top.stdout).into_owned();
    assert!(
        top.lines()
            .any(|l| l.starts_with(&pid) && l.contains("(stopped)")),
        "{top}"
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "top took {took:?}"
    );

    signal("-CONT");
    // Nothing was queued while it was stopped: the budget is the one it started with.
    assert_eq!(stat_json(&ctl, &pid).budget_bytes, 16 * MIB);
    let set = memvisor(&ctl)
        .args(["set", &pid, "--budget", "8M"])
        .output()
        .unwrap();
    assert!(set.status.success(), "{}", stderr(&set));
    assert_eq!(stat_json(&ctl, &pid).budget_bytes, 8 * MIB);
    let huge = memvisor(&ctl)
        .args(["set", &pid, "--budget", "100T"])
        .output()
        .unwrap();
    assert!(
        stderr(&huge).contains("more than this host's RAM"),
        "{}",
        stderr(&huge)
    );

    drop(child.stdin.take());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert_eq!(rest.trim(), "OK");
    assert_eq!(child.wait().unwrap().code(), Some(0));
}

#[test]
fn exit_codes_and_signals_pass_through() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let prog = compile_c("managed_workload", t.path());
    let ctl = t.path().join("ctl");
    let run = |args: &[&str]| {
        memvisor(&ctl)
            .args(["run", "--budget", "8M", "--arena", "64M", "--swap-dir"])
            .arg(t.path())
            .arg("--")
            .args(args)
            .output()
            .unwrap()
    };
    assert_eq!(run(&["sh", "-c", "exit 3"]).status.code(), Some(3));
    assert_eq!(run(&["true"]).status.code(), Some(0));
    let p = prog.to_str().unwrap();
    assert_eq!(run(&[p, "kill-self", "9"]).status.code(), Some(137));
    assert_eq!(run(&[p, "kill-self", "15"]).status.code(), Some(143));
    // The program's own arguments, hyphens included, reach it untouched.
    let o = run(&["sh", "-c", "echo \"$0 $1\"", "--budget", "-x"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "--budget -x");
}

/// Every bad input is one line on stderr and a non-zero exit, and the program never starts.
#[test]
fn bad_input_is_refused_before_the_program_starts() {
    if !userfaultfd_usable() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    let marker = t.path().join("started");
    let file = t.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let swap = t.path().to_str().unwrap().to_string();
    // A swap directory with less room than the default arena can page out (tmpfs holds at
    // most the host's RAM): `memvisor run` warns about it, but only once every check has
    // passed, so a refused run still prints one line.
    let small = tempfile::tempdir_in("/dev/shm").unwrap();
    let small_swap = small.path().to_str().unwrap().to_string();
    let o = memvisor(&ctl)
        .args(["run", "--swap-dir", &small_swap, "--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("memvisor: warning: --swap-dir"),
        "no room warning for a tmpfs swap dir: {}",
        stderr(&o)
    );
    let touch = format!("touch {}", marker.display());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "--swap-dir",
                &small_swap,
                "--metrics",
                "0.0.0.0:0",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "not a loopback address",
        ),
        (
            vec!["--swap-dir", &swap, "--", "no-such-program-memvisor"],
            "not found on PATH",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--malloc",
                "jemalloc",
                "--min-region",
                "1M",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "--min-region 1M: at least 2M with --malloc jemalloc",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--budget",
                "100T",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "more than this host's RAM",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--budget",
                "64K",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "less than one chunk",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--chunk-size",
                "5000",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "--chunk-size 5000: must be a multiple of 4K",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--busy-poll",
                "fast",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "--busy-poll fast: expected a duration",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--budget",
                "64K",
                "--chunk-size",
                "128K",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "less than one chunk (128K)",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--budget",
                "lots",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "--budget",
        ),
        (
            vec![
                "--swap-dir",
                "/nonexistent-memvisor",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "does not exist",
        ),
        (
            vec![
                "--swap-dir",
                file.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "not a directory",
        ),
        (
            vec!["--swap-dir", "/proc", "--", "sh", "-c", &touch],
            "not writable",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--policy",
                "nonsense",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "--policy",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--policy",
                "opt",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "offline",
        ),
        (
            vec![
                "--swap-dir",
                &swap,
                "--metrics",
                "0.0.0.0:0",
                "--",
                "sh",
                "-c",
                &touch,
            ],
            "not a loopback address",
        ),
    ];
    for (args, expect) in cases {
        let o = memvisor(&ctl).arg("run").args(&args).output().unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(
            e.starts_with("memvisor: error: ") && e.contains(expect),
            "{args:?}: {e}"
        );
        assert!(!marker.exists(), "{args:?} started the program");
    }
    // A missing preload library.
    let o = memvisor(&ctl)
        .env("MEMVISOR_PRELOAD", t.path().join("nope.so"))
        .args(["run", "--swap-dir", &swap, "--", "sh", "-c", &touch])
        .output()
        .unwrap();
    assert!(
        !o.status.success() && stderr(&o).contains("preload library"),
        "{}",
        stderr(&o)
    );
    assert!(!marker.exists());
}

/// With `--malloc jemalloc` the program's heap is managed memory, which a forked child would
/// not have: the library refuses `fork` (ENOMEM) and says why, once (dash then stops with
/// "Cannot fork"). With the program's own `malloc` the same shell forks.
#[test]
fn a_fork_is_refused_while_the_heap_is_managed() {
    if !userfaultfd_usable() {
        return;
    }
    if !jemalloc_or_skip("a_fork_is_refused_while_the_heap_is_managed") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    let swap = t.path().to_str().unwrap().to_string();
    // A subshell is a forked child (dash runs a plain command through vfork, which shares the
    // parent's memory and is let through).
    let script = "(echo forked); /bin/true; echo done";
    let run = |malloc: &str| {
        memvisor(&ctl)
            .args([
                "run",
                "--budget",
                "64M",
                "--swap-dir",
                &swap,
                "--malloc",
                malloc,
            ])
            .args(["--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let o = run("jemalloc");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        !out.contains("forked") && !o.status.success(),
        "{out}\n{err}"
    );
    assert_eq!(
        err.matches("memvisor-preload: fork refused (ENOMEM)")
            .count(),
        1,
        "{err}"
    );
    let o = run("program");
    let (out, err) = (String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("forked") && out.contains("done"),
        "{out}\n{err}"
    );
    assert!(!err.contains("fork refused"), "{err}");
}

/// A user without userfaultfd permission (uid 65534, vm.unprivileged_userfaultfd=0) gets one
/// line, before the program starts.
#[test]
fn user_without_userfaultfd_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0
        || std::fs::read_to_string("/proc/sys/vm/unprivileged_userfaultfd")
            .is_ok_and(|v| v.trim() != "0")
    {
        eprintln!("SKIPPED: needs root and vm.unprivileged_userfaultfd=0");
        return;
    }
    ensure_preload_library();
    let t = tempfile::tempdir().unwrap();
    let shared = t.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(t.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let marker = shared.join("started");
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(memvisor_bin())
        .env("MEMVISOR_CONTROL_DIR", shared.join("ctl"))
        .args(["run", "--swap-dir"])
        .arg(&shared)
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.contains("userfaultfd"), "{e}");
    assert!(!marker.exists());
}

#[test]
fn control_commands_report_bad_targets_in_one_line() {
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    for args in [
        vec!["stat", "999999999"],
        vec!["set", "999999999", "--budget", "8M"],
        vec!["set", "1", "--budget", "100T"],
        vec!["set", "1", "--budget", "x"],
    ] {
        let o = memvisor(&ctl).args(&args).output().unwrap();
        let e = stderr(&o);
        assert!(!o.status.success(), "{args:?}");
        assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
        assert!(e.starts_with("memvisor: error: "), "{args:?}: {e}");
    }
    // `set` needs something to set (a usage error from the argument parser).
    assert!(!memvisor(&ctl)
        .args(["set", "1"])
        .output()
        .unwrap()
        .status
        .success());
    // `top` with nothing managed prints an empty table.
    let o = memvisor(&ctl)
        .args(["top", "--once", "--interval", "0.05"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("0 managed process(es)"));
}
