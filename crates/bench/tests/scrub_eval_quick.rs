//! `scrub-eval --quick` for real: one QEMU guest per host policy in a cgroup v1 memory group,
//! reading its disk image. Asserts structural facts only, never timing: every guest verified
//! its data, the scrubber dropped pages and never a page that was dirty when a scrub began, the
//! drop-all policy dropped and the default did not, the reports were written, the cgroups are
//! gone. Prints SKIPPED without QEMU, root or cgroup v1 memory, except under `CI=true`, where
//! that fails.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

mod common;

const EXE: &str = env!("CARGO_BIN_EXE_scrub-eval");

/// Why the evaluation cannot run here, if it cannot.
fn missing() -> Option<String> {
    common::qemu_as_root_missing("cgroups, cachestat of the image").or_else(|| {
        (!Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists())
            .then(|| "no cgroup v1 memory controller".into())
    })
}

#[test]
fn quick_evaluation_scrubs_keeps_dirty_pages_and_writes_its_reports() {
    if common::skip("scrub-eval --quick", missing()) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(EXE)
        .arg("--quick")
        .arg("--out-dir")
        .arg(dir.path())
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .expect("run scrub-eval");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "scrub-eval failed:\n{stdout}\n{stderr}"
    );

    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("scrub-eval.json")).unwrap())
            .unwrap();
    let runs = json["runs"].as_array().unwrap();
    let policies: Vec<&str> = runs.iter().map(|r| r["policy"].as_str().unwrap()).collect();
    assert_eq!(policies, ["default", "drop-all", "scrub", "exclusive"]);
    let by = |p: &str| runs.iter().find(|r| r["policy"] == p).unwrap();
    for r in runs {
        assert_eq!(r["guest_verified"], true, "{r}");
        assert!(r["guest_reads"].as_u64().unwrap() > 0);
        assert!(!r["samples"].as_array().unwrap().is_empty());
    }
    let dropped = |p: &str| by(p)["counters"]["dropped_pages"].as_u64().unwrap();
    assert_eq!(dropped("default"), 0);
    assert!(dropped("drop-all") > 0);
    let scrub = &by("scrub")["counters"];
    assert!(
        dropped("scrub") > 0,
        "the scrubber dropped nothing: {scrub}"
    );
    assert!(scrub["in_guest"].as_u64().unwrap() > 0, "{scrub}");
    // memvisor run --host-cache exclusive drops what the guest read, as it reads it.
    assert!(dropped("exclusive") > 0, "{}", by("exclusive"));
    assert!(scrub["errors"].as_array().unwrap().is_empty(), "{scrub}");
    // The probe pages were dirty when a scrub began (so the check below checked something),
    // and none of them left the page cache.
    assert!(scrub["dirty_checked"].as_u64().unwrap() > 0, "{scrub}");
    assert_eq!(scrub["dirty_dropped"].as_u64().unwrap(), 0, "{scrub}");

    let csv = std::fs::read_to_string(dir.path().join("scrub-eval.csv")).unwrap();
    assert!(csv.starts_with("policy,pattern,t_s,"));
    for p in ["default", "drop-all", "scrub", "exclusive"] {
        assert!(
            csv.lines().any(|l| l.starts_with(&format!("{p},seq,"))),
            "{p}"
        );
    }
    let svg = std::fs::read_to_string(dir.path().join("scrub-eval.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 4);
    let md = std::fs::read_to_string(dir.path().join("scrub-eval.md")).unwrap();
    assert_eq!(md.lines().count(), 2 + 4);
    assert!(stdout.contains("| seq | scrub |"), "{stdout}");
    // The disk image and the cgroups are gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".img"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    let pid = format!("memvisor-kbench-{}-", out_pid(&json));
    let groups: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/memory")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&pid))
        .collect();
    assert!(groups.is_empty(), "{groups:?}");
}

/// The driver's pid, from the image name it reported in its files list (none: 0).
fn out_pid(json: &Value) -> u64 {
    json["pid"].as_u64().unwrap_or(0)
}

/// Runs scrub-eval with `args`: it must fail, its error naming `expected`.
fn refused(args: &[&str], expected: &str) {
    let out = Command::new(EXE)
        .args(args)
        .output()
        .expect("run scrub-eval");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(expected), "{stderr}");
}

#[test]
fn bad_arguments_are_refused_with_a_message() {
    refused(
        &["--quick", "--patterns", "seq,bogus"],
        "bad pattern \"bogus\": expected seq, random or zipf",
    );
    refused(
        &["--policies", "none"],
        "bad --policies \"none\": expected default, drop-all, scrub, memvisor",
    );
    refused(
        &["--policies", "default,image-cache=512K"],
        "\"image-cache=512K\": the limit must be at least 1M",
    );
}
