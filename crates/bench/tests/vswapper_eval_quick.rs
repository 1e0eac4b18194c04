//! `vswapper-eval --quick --cases balloon` for real: a QEMU guest under `memvisor run` with and
//! without the swap mapper reads its disk twice while the host inflates its balloon over QMP
//! once the first pass is read. Asserts structural facts only, never timing: every guest
//! verified its data, the balloon was set and the guest gave memory up, the mapper avoided
//! swap writes and read blocks back from the image, the variant without it did neither, the
//! reports were written. Prints SKIPPED without QEMU or root, except under `CI=true`, where
//! that fails.

use std::process::Command;

mod common;

const EXE: &str = env!("CARGO_BIN_EXE_vswapper-eval");

#[test]
fn quick_balloon_case_inflates_and_the_mapper_avoids_writes() {
    if common::skip(
        "vswapper-eval --quick",
        common::qemu_as_root_missing("memvisor run of QEMU"),
    ) {
        return;
    }
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let out = Command::new(EXE)
        .args([
            "--quick",
            "--cases",
            "balloon",
            "--variants",
            "mapper,no-mapper",
        ])
        .args(["--reps", "1"])
        .arg("--out-dir")
        .arg(dir.path())
        .arg("--work-dir")
        .arg(dir.path())
        .output()
        .expect("run vswapper-eval");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "vswapper-eval failed:\n{stdout}\n{stderr}"
    );
    assert!(dir.path().join("results.md").exists());
    let csv = std::fs::read_to_string(dir.path().join("results.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).expect(name);
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 2, "{csv}");
    let num = |r: &[&str], name: &str| -> u64 { r[col(name)].parse().expect(name) };
    for r in &rows {
        assert_eq!(r[col("case")], "balloon", "{csv}");
        assert_eq!(r[col("verified")], "true", "{csv}");
        assert!(
            !r[col("balloon_secs")].is_empty(),
            "balloon never set: {csv}"
        );
        // The quick guest has 512 MiB; the balloon asks it down to 192 MiB.
        assert!(
            num(r, "balloon_reached_bytes") < 512 << 20,
            "the guest gave nothing up: {csv}"
        );
    }
    let row = |variant: &str| {
        rows.iter()
            .find(|r| r[col("variant")] == variant)
            .unwrap_or_else(|| panic!("no {variant} row: {csv}"))
    };
    let mapper = row("memvisor (mapper)");
    let off = row("memvisor --swap-mapper off");
    assert!(num(mapper, "writes_avoided") > 0, "{csv}");
    assert!(num(mapper, "image_read") > 0, "{csv}");
    assert_eq!(num(off, "writes_avoided"), 0, "{csv}");
    assert_eq!(num(off, "image_read"), 0, "{csv}");
}
