//! The workload program run on the host: its self test (Zipf sampler, scatter bijection, page
//! pattern, command line extraction), `cmdline` from a file, and `make-disk-image` errors.

use std::process::Command;

use memvisor_testvm::{parse_console, GuestImage, TestVmError, WorkloadResult};

#[test]
fn selftest_passes() {
    let Some(image) = GuestImage::for_test("selftest_passes") else {
        return;
    };
    let out = Command::new(&image.workload)
        .arg("selftest")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let results = parse_console(&stdout).unwrap();
    assert!(
        matches!(&results[0], WorkloadResult::Other { kind, fields }
            if kind == "selftest" && fields == &[("checks_failed".to_string(), "0".to_string())]),
        "{stdout}"
    );
}

#[test]
fn cmdline_runs_every_command_from_a_file() {
    let Some(image) = GuestImage::for_test("cmdline_runs_every_command_from_a_file") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("d.img");
    image.make_disk_image(&disk, 1).unwrap();
    let cmdline = dir.path().join("cmdline");
    std::fs::write(
        &cmdline,
        format!(
            "console=ttyS0 memvisor.run=\"mem 4 --patterns rev; disk {} random --reads 100 --verify\" quiet\n",
            disk.display()
        ),
    )
    .unwrap();
    let out = Command::new(&image.workload)
        .arg("cmdline")
        .arg(&cmdline)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    let results = parse_console(&stdout).unwrap();
    let kinds: Vec<String> = results
        .iter()
        .map(|r| match r {
            WorkloadResult::Start { command, .. } => {
                format!("start {}", command.as_deref().unwrap())
            }
            WorkloadResult::Mem(p) => format!("mem {}", p.kind),
            WorkloadResult::Disk(d) => format!("disk {} {} {}", d.pattern, d.reads, d.verified),
            WorkloadResult::Done(d) => format!("done {}", d.ok),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        vec![
            format!(
                "start mem 4 --patterns rev; disk {} random --reads 100 --verify",
                disk.display()
            ),
            "mem write".to_string(),
            "mem rev".to_string(),
            "mem verify".to_string(),
            "disk random 100 true".to_string(),
            "done true".to_string(),
        ]
    );
}

#[test]
fn make_disk_image_errors_name_the_file() {
    let Some(image) = GuestImage::for_test("make_disk_image_errors_name_the_file") else {
        return;
    };
    let path = std::path::Path::new("/nonexistent-dir/x.img");
    match image.make_disk_image(path, 1) {
        Err(TestVmError::DiskImage {
            path: p, output, ..
        }) => {
            assert_eq!(p, path);
            assert!(
                output.contains("cannot create /nonexistent-dir/x.img: No such file or directory"),
                "{output}"
            );
        }
        other => panic!("expected DiskImage, got {other:?}"),
    }
}

/// A disk image path that is a planted symlink or hard link is refused, and its target is
/// left intact (the image tool runs as root from the benches, possibly in a shared directory).
#[test]
fn make_disk_image_never_writes_through_planted_links() {
    let Some(image) = GuestImage::for_test("make_disk_image_never_writes_through_planted_links")
    else {
        return;
    };
    let t = tempfile::tempdir().unwrap();
    let victim = t.path().join("victim");
    std::fs::write(&victim, b"DATA").unwrap();
    let sym = t.path().join("sym.img");
    std::os::unix::fs::symlink(&victim, &sym).unwrap();
    let hard = t.path().join("hard.img");
    std::fs::hard_link(&victim, &hard).unwrap();
    for planted in [&sym, &hard] {
        match image.make_disk_image(planted, 1) {
            Err(TestVmError::DiskImage { output, .. }) => {
                assert!(output.contains("make-disk-image"), "{output}")
            }
            other => panic!("{planted:?}: expected DiskImage, got {other:?}"),
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"DATA");
    }
    // A fresh path, and the same path again (rewritten in place), still work.
    let fresh = t.path().join("fresh.img");
    image.make_disk_image(&fresh, 1).unwrap();
    image.make_disk_image(&fresh, 1).unwrap();
    assert_eq!(std::fs::metadata(&fresh).unwrap().len(), 1 << 20);
}
