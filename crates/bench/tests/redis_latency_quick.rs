//! `redis-latency --quick` for real: redis-server (Debian) under `memvisor run` with each of
//! fifo, clock and chunk-queues and 64 KiB chunks (`--chunk-size`), a data set twice the
//! budget filled, paced GETs at two rates, every value read back and compared, the pager's
//! counters collected, the stress program run under each policy, the SVG written. Asserts
//! structure only, never timing. SKIPPED when redis-server or userfaultfd is missing — except
//! under `CI=true`, where a missing redis-server fails (scripts/install installs it).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const EXE: &str = env!("CARGO_BIN_EXE_redis-latency");

mod common;
use common::in_ci;

/// Builds the memvisor CLI and the preload library next to this test's binaries (same
/// profile), so the run never uses stale ones: the whole workspace, with the features
/// `cargo test --workspace` unified (a no-op after it; `-p memvisor -p memvisor-preload`
/// recompiled dependencies for 21 s).
fn build_memvisor(bin_dir: &Path) {
    let profile = match bin_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => "dev".to_string(),
        Some(other) => other.to_string(),
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "--quiet", "--workspace", "--profile", &profile])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo build");
    assert!(st.success(), "cargo build --workspace failed");
}

#[test]
fn quick_run_covers_every_policy_and_verifies_the_data() {
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            !in_ci(),
            "CI: redis-server missing (scripts/install installs it)"
        );
        eprintln!("SKIPPED: redis-server is not installed (scripts/install installs it)");
        return;
    }
    if memvisor_pager::Region::check_supported().is_err() {
        assert!(!in_ci(), "CI: userfaultfd not usable");
        eprintln!("SKIPPED: userfaultfd is not usable by this user");
        return;
    }
    let bin_dir = Path::new(EXE).parent().unwrap();
    build_memvisor(bin_dir);
    let t = tempfile::tempdir().unwrap();
    let out = t.path().join("out");
    let o = Command::new(EXE)
        .arg("--quick")
        .arg("--memvisor")
        .arg(bin_dir.join("memvisor"))
        .arg("--swap-dir")
        .arg(t.path())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        o.status.success(),
        "redis-latency --quick failed:\n{stderr}"
    );
    let report: Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    let series = report["series"].as_array().unwrap();
    let policies: Vec<&str> = series
        .iter()
        .map(|s| s["policy"].as_str().unwrap())
        .collect();
    assert_eq!(policies, ["fifo", "clock", "chunk-queues"]);
    for s in series {
        assert_eq!(
            s["chunk_size"], 65536,
            "--chunk-size reached the pager: {s}"
        );
        assert_eq!(s["budget"], 16 << 20);
        assert_eq!(s["verified_keys"], 2048, "every value compared: {s}");
        assert!(
            s["used_memory"].as_u64().unwrap() > 2 * (16 << 20),
            "data larger than the budget: {s}"
        );
        assert!(s["final_page_ins"].as_u64().unwrap() > 0, "{s}");
        let points = s["points"].as_array().unwrap();
        assert_eq!(points.len(), 2);
        for p in points {
            assert!(p["requests"].as_u64().unwrap() > 0, "{p}");
            assert!(p["p99_us"].as_f64().unwrap() >= p["p50_us"].as_f64().unwrap());
        }
    }
    let stress = report["stress"].as_array().unwrap();
    assert_eq!(stress.len(), 3);
    for s in stress {
        assert!(s["page_ins"].as_u64().unwrap() > 0, "stress paged: {s}");
        assert!(s["missing_faults"].as_u64().unwrap() > 0, "{s}");
    }
    let svg = std::fs::read_to_string(out.join("redis-latency.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    for label in ["fifo / 64K", "clock / 64K", "chunk-queues / 64K"] {
        assert!(svg.contains(label), "legend {label}");
    }
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(md.contains("| stress: policy |"), "{md}");
}
