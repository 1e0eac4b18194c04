//! `broker-eval --guests` for real, shortened: the four TCG guests (stream, zipf, disk, idle)
//! unconstrained and in an equal split under `memvisor run`. Asserts structural facts only,
//! never timing: both runs finished with every guest verified (the benchmark fails otherwise),
//! the three busy guests were measured in each, the equal split's budgets are a quarter of the
//! total less the image cache, the reports were written. Prints SKIPPED without QEMU or root,
//! except under `CI=true`, where that fails.

use std::process::Command;

mod common;

const EXE: &str = env!("CARGO_BIN_EXE_broker-eval");

#[test]
fn four_guests_run_unconstrained_and_in_an_equal_split() {
    if common::skip(
        "broker-eval --guests",
        common::qemu_as_root_missing("memvisor run of QEMU, cgroups"),
    ) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(EXE)
        .args([
            "--guests",
            "--reps",
            "1",
            "--variants",
            "unconstrained,equal",
        ])
        .args(["--total", "384M", "--guest-mib", "192", "--mem-mib", "96"])
        .args(["--disk-mib", "64", "--seconds", "24", "--warmup", "8"])
        .arg("--out-dir")
        .arg(dir.path())
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .expect("run broker-eval");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "broker-eval failed:\n{stdout}\n{stderr}"
    );
    assert!(dir.path().join("results.md").exists());
    let json = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    let runs: serde_json::Value = serde_json::from_str(&json).unwrap();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{json}");
    for run in runs {
        let guests = run["fleet"]["per_guest"].as_array().unwrap();
        assert_eq!(guests.len(), 4, "{json}");
        // stream, zipf, disk measured; idle not.
        for g in &guests[..3] {
            assert!(g["reads_per_s"].as_f64().unwrap() > 0.0, "{json}");
            assert!(g["phases_in_window"].as_u64().unwrap() > 0, "{json}");
            assert_eq!(g["errors"].as_u64(), Some(0), "{json}");
        }
        assert_eq!(guests[3]["reads_per_s"].as_f64(), Some(0.0), "{json}");
        let budgets: Vec<Option<f64>> = guests.iter().map(|g| g["budget_mib"].as_f64()).collect();
        match run["variant"].as_str().unwrap() {
            // 384M / 4 = 96M each: 80M of budget and a 16M image cache.
            "equal" => assert_eq!(budgets, vec![Some(80.0); 4], "{json}"),
            "unconstrained" => assert_eq!(budgets, vec![None; 4], "{json}"),
            v => panic!("unexpected variant {v}"),
        }
    }
    assert!(stdout.contains("| equal split |"), "{stdout}");
}
