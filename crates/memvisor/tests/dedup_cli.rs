//! `memvisor dedup` end to end: the real binary on real processes (forked children holding
//! known pages), including processes it may not read and processes that are gone.

mod common;

use std::process::{Command, Output};

use common::{memvisor_as as memvisor, page, NOBODY};
use memvisor_dedup::{ChildBacking, PagesChild};

/// The tests that run `--ksm-tune` read the KSM settings before memvisor takes its lock: they
/// run one at a time (other test binaries run after this one).
static KSM_TESTS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn pages(seeds: &[u64]) -> Vec<u8> {
    seeds.iter().flat_map(|&s| page(s)).collect()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    })
}

fn process(v: &serde_json::Value, pid: i32) -> &serde_json::Value {
    v["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["pid"] == pid)
        .unwrap()
}

#[test]
fn reports_duplicates_of_two_processes() {
    // Seeds above 10^6 appear nowhere else: 3 duplicates within A, 2 across.
    let a = PagesChild::spawn(&pages(&[
        1_000_001, 1_000_001, 1_000_001, 1_000_001, 1_000_002, 1_000_003,
    ]))
    .unwrap();
    let b = PagesChild::spawn(&pages(&[1_000_002, 1_000_003, 0, 0])).unwrap();
    let o = memvisor(
        &[
            "dedup".into(),
            "--json".into(),
            a.pid().to_string(),
            b.pid().to_string(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&o);
    let pa = process(&v, a.pid());
    let pb = process(&v, b.pid());
    assert!(pa["pages_read"].as_u64().unwrap() >= 6);
    assert!(pb["zero_pages"].as_u64().unwrap() >= 2);
    assert!(pa["duplicates_within"].as_u64().unwrap() >= 3);
    assert!(v["duplicates_across"].as_u64().unwrap() >= 2);
    assert!(
        v["lookahead_hits"].as_u64().unwrap() >= 1,
        "B's 1_000_003 follows 1_000_002 in A too"
    );
    assert!(pa["error"].is_null());
    assert!(v["ksm"]["pages_to_scan"].as_u64().unwrap() > 0);

    // The text report names both processes.
    let o = memvisor(
        &["dedup".into(), a.pid().to_string(), b.pid().to_string()],
        None,
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(&a.pid().to_string()) && out.contains("duplicates:"),
        "{out}"
    );
    assert!(out.contains("kernel KSM:"), "{out}");
}

#[test]
fn a_missing_pid_is_reported_and_the_others_are_scanned() {
    let a = PagesChild::spawn(&pages(&[5, 5])).unwrap();
    let mut gone = PagesChild::spawn(&pages(&[6])).unwrap();
    let gone_pid = gone.pid();
    gone.kill();
    let o = memvisor(
        &[
            "dedup".into(),
            "--json".into(),
            gone_pid.to_string(),
            a.pid().to_string(),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("pid {gone_pid}: process not running")),
        "{err}"
    );
    assert!(
        err.contains("1 of 2 processes could not be scanned"),
        "{err}"
    );
    let v = json(&o);
    assert!(process(&v, a.pid())["duplicates_within"].as_u64().unwrap() >= 1);
}

#[test]
fn permission_denied_is_reported_and_readable_processes_are_scanned() {
    // memvisor runs as nobody: it may read nobody's child, not root's.
    let mine =
        PagesChild::spawn_as(&pages(&[9, 9, 9]), ChildBacking::Anonymous, Some(NOBODY)).unwrap();
    let roots = PagesChild::spawn(&pages(&[8])).unwrap();
    let o = memvisor(
        &[
            "dedup".into(),
            "--json".into(),
            roots.pid().to_string(),
            mine.pid().to_string(),
        ],
        Some(NOBODY),
    );
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(&format!("pid {}: permission denied", roots.pid())),
        "{err}"
    );
    let v = json(&o);
    let p = process(&v, mine.pid());
    assert!(p["error"].is_null(), "{p}");
    assert!(p["duplicates_within"].as_u64().unwrap() >= 2, "{p}");
}

#[test]
fn bad_arguments_are_refused() {
    let o = memvisor(&["dedup".into()], None);
    assert!(!o.status.success());
    let o = memvisor(
        &["dedup".into(), "--interval".into(), "0".into(), "1".into()],
        None,
    );
    // Refused when the arguments are parsed (a usage error, as clap reports them).
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--interval") && err.contains("'0' must be a positive number of seconds"),
        "{err}"
    );
    let o = memvisor(
        &[
            "dedup".into(),
            "--interval".into(),
            "1e300".into(),
            "1".into(),
        ],
        None,
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("longer than a year"));
    let o = memvisor(&["dedup".into(), "notapid".into()], None);
    assert!(!o.status.success());
}

#[test]
fn ksm_tune_steers_ksmd_and_restores_its_settings() {
    let _serial = KSM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let before = memvisor_dedup::KsmSettings::read().unwrap();
    let a = PagesChild::spawn(&pages(&[1_000_011, 1_000_011])).unwrap();
    let o = memvisor(
        &[
            "dedup".into(),
            "--ksm-tune".into(),
            "--passes".into(),
            "3".into(),
            "--interval".into(),
            "0.2".into(),
            a.pid().to_string(),
        ],
        None,
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let err = String::from_utf8_lossy(&o.stderr);
    for pass in 1..=3 {
        assert!(err.contains(&format!("ksm-tune pass {pass}:")), "{err}");
    }
    assert!(err.contains("pages every"), "{err}");
    // Settings are restored whatever the loop set.
    assert_eq!(memvisor_dedup::KsmSettings::read().unwrap(), before);
}

#[test]
fn an_interrupted_ksm_tune_restores_the_settings() {
    let _serial = KSM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let before = memvisor_dedup::KsmSettings::read().unwrap();
    let a = PagesChild::spawn(&pages(&[1_000_021, 1_000_021])).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_memvisor"))
        .args([
            "dedup",
            "--ksm-tune",
            "--passes",
            "1000",
            "--interval",
            "0.1",
        ])
        .arg(a.pid().to_string())
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait for the first tuning step, then interrupt.
    let mut err = c.stderr.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("ksm-tune pass 1:") {
        let n = std::io::Read::read(&mut err, &mut buf).unwrap();
        assert!(
            n > 0,
            "memvisor ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    // SAFETY: signals our own child process.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    std::io::Read::read_to_end(&mut err, &mut seen).unwrap();
    let status = c.wait().unwrap();
    let text = String::from_utf8_lossy(&seen);
    assert!(status.success(), "{text}");
    assert!(
        text.contains("interrupted; KSM settings restored"),
        "{text}"
    );
    assert_eq!(memvisor_dedup::KsmSettings::read().unwrap(), before);
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Kills a process group this test started, and reaps its leader.
struct GroupGuard(std::process::Child);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        // SAFETY: signals the process group of our own child, which leads it
        // (`process_group(0)`) and has not been reaped.
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

#[test]
fn a_ksm_lock_in_tmp_held_by_nobody_does_not_block_ksm_tune() {
    if !is_root() {
        eprintln!("SKIPPED: --ksm-tune needs root");
        return;
    }
    let _serial = KSM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    use std::os::unix::process::CommandExt;
    // Where the lock used to be: any user could create or hold it.
    let old = "/tmp/memvisor-ksm-settings.lock";
    let planted_here = std::fs::symlink_metadata(old).is_err();
    let holder = Command::new("flock")
        .args(["-x", old, "sleep", "120"])
        .uid(NOBODY)
        .gid(NOBODY)
        .process_group(0)
        .spawn()
        .unwrap();
    let _holder = GroupGuard(holder);
    let start = std::time::Instant::now();
    while Command::new("flock")
        .args(["-n", "-x", old, "true"])
        .status()
        .unwrap()
        .success()
    {
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "nobody's flock never took {old}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let a = PagesChild::spawn(&pages(&[1_000_031, 1_000_031])).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_memvisor"))
        .args(["dedup", "--ksm-tune", "--passes", "1", "--interval", "0.1"])
        .arg(a.pid().to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(st) = c.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > std::time::Duration::from_secs(30) {
            let _ = c.kill();
            let _ = c.wait();
            panic!("memvisor dedup --ksm-tune waits on a lock held by nobody");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut c.stderr.take().unwrap(), &mut err).unwrap();
    assert!(status.success(), "{err}");
    // The lock lives in root's private control directory, as root's regular 0600 file.
    use std::os::unix::fs::MetadataExt;
    let dir = std::fs::symlink_metadata("/run/memvisor").unwrap();
    assert!(dir.is_dir() && dir.uid() == 0 && dir.mode() & 0o077 == 0);
    let lock = std::fs::symlink_metadata("/run/memvisor/ksm-settings.lock").unwrap();
    assert!(lock.is_file() && lock.uid() == 0 && lock.mode() & 0o077 == 0);
    // nobody can neither open it nor create anything beside it.
    let o = Command::new("flock")
        .args(["-n", "-x", "/run/memvisor/ksm-settings.lock", "true"])
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    assert!(!o.status.success(), "nobody could take the KSM lock");
    if planted_here {
        let _ = std::fs::remove_file(old);
    }
}

#[test]
fn a_busy_ksm_lock_fails_after_the_wait_naming_the_holder() {
    if !is_root() {
        eprintln!("SKIPPED: --ksm-tune needs root");
        return;
    }
    let _serial = KSM_TESTS.lock().unwrap_or_else(|e| e.into_inner());
    let held = memvisor_dedup::KsmSettingsGuard::acquire().unwrap();
    let a = PagesChild::spawn(&pages(&[1_000_041])).unwrap();
    let start = std::time::Instant::now();
    let o = memvisor(
        &[
            "dedup".into(),
            "--ksm-tune".into(),
            "--ksm-lock-wait".into(),
            "0.5".into(),
            a.pid().to_string(),
        ],
        None,
    );
    let took = start.elapsed();
    drop(held);
    assert_eq!(o.status.code(), Some(1));
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    let want = format!(
        "/run/memvisor/ksm-settings.lock: KSM settings are locked by pid {}",
        std::process::id()
    );
    assert!(e.contains(&want), "{e}");
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
}
