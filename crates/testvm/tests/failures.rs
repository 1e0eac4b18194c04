//! Bad workload arguments, a failing QEMU, and a guest that overruns its timeout.

use std::process::Command;
use std::time::{Duration, Instant};

use memvisor_testvm::{GuestConfig, GuestImage, RunningGuest, TestVmError};

fn workload_error(image: &GuestImage, workload: &str) -> String {
    match GuestConfig::new(128, workload)
        .timeout(Duration::from_secs(60))
        .run(image)
    {
        Err(TestVmError::Workload {
            message,
            console_tail,
        }) => {
            assert!(
                console_tail.contains("MEMVISOR-RESULT done ok=0"),
                "{console_tail}"
            );
            message
        }
        other => panic!("{workload}: expected a workload error, got {other:?}"),
    }
}

#[test]
fn unknown_command_is_a_clear_error() {
    let Some(image) = GuestImage::for_test("unknown_command_is_a_clear_error") else {
        return;
    };
    assert_eq!(
        workload_error(&image, "frobnicate 12"),
        "unknown workload command 'frobnicate' (expected mem, disk, churn, idle or noop)"
    );
}

#[test]
fn bad_idle_arguments_are_a_clear_error() {
    let Some(image) = GuestImage::for_test("bad_idle_arguments_are_a_clear_error") else {
        return;
    };
    for bad in ["idle", "idle soon", "idle -1", "idle 3601", "idle 1 2"] {
        assert_eq!(
            workload_error(&image, bad),
            "idle: usage: idle SECONDS (0..3600)",
            "{bad}"
        );
    }
}

#[test]
fn bad_mem_arguments_are_a_clear_error() {
    let Some(image) = GuestImage::for_test("bad_mem_arguments_are_a_clear_error") else {
        return;
    };
    assert_eq!(
        workload_error(&image, "mem 64 --patterns seq,bogus"),
        "mem: unknown pattern 'bogus' in --patterns (expected seq, rev, random, zipf)"
    );
}

#[test]
fn disk_without_a_disk_is_a_clear_error() {
    let Some(image) = GuestImage::for_test("disk_without_a_disk_is_a_clear_error") else {
        return;
    };
    assert_eq!(
        workload_error(&image, "disk /dev/vda seq --reads 10"),
        "disk: cannot open /dev/vda: No such file or directory"
    );
}

#[test]
fn qemu_failure_carries_its_stderr() {
    let Some(image) = GuestImage::for_test("qemu_failure_carries_its_stderr") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let bogus_kernel = dir.path().join("not-a-kernel");
    std::fs::write(&bogus_kernel, b"this is not a kernel").unwrap();
    let broken = GuestImage {
        kernel: bogus_kernel,
        ..image
    };
    match GuestConfig::new(128, "noop")
        .timeout(Duration::from_secs(30))
        .run(&broken)
    {
        Err(TestVmError::QemuFailed {
            status,
            stderr_tail,
            ..
        }) => {
            assert!(status.contains("exit status: 1"), "{status}");
            assert!(stderr_tail.contains("qemu"), "{stderr_tail}");
        }
        other => panic!("expected QemuFailed, got {other:?}"),
    }
}

/// A workload larger than the guest's free memory is OOM-killed: the run ends without a done
/// line, and the error shows the kernel's OOM message.
#[test]
fn oom_killed_workload_reports_no_result() {
    let Some(image) = GuestImage::for_test("oom_killed_workload_reports_no_result") else {
        return;
    };
    match GuestConfig::new(128, "mem 120")
        .timeout(Duration::from_secs(60))
        .run(&image)
    {
        Err(TestVmError::NoResult { console_tail, .. }) => {
            assert!(console_tail.contains("Out of memory"), "{console_tail}");
        }
        other => panic!("expected NoResult, got {other:?}"),
    }
}

/// A guest that cannot finish in time is killed together with the wrapper that started it:
/// no QEMU is left behind.
#[test]
fn timeout_kills_wrapper_and_qemu() {
    let Some(image) = GuestImage::for_test("timeout_kills_wrapper_and_qemu") else {
        return;
    };
    let marker = "--seed 4242424242";
    let config = GuestConfig::new(512, format!("mem 200 --passes 100 {marker}"));
    let qemu = config.command(&image).unwrap();
    // A wrapper that stays QEMU's parent, as `memvisor run -- qemu ...` will.
    let mut wrapped = Command::new("sh");
    wrapped
        .arg("-c")
        .arg("\"$@\"; status=$?; exit $status")
        .arg("wrapper")
        .arg(qemu.get_program())
        .args(qemu.get_args());
    let started = Instant::now();
    let guest = RunningGuest::spawn(wrapped).unwrap();
    match guest.wait(Duration::from_secs(3)) {
        Err(TestVmError::Timeout { seconds, .. }) => assert_eq!(seconds, 3.0),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let survivors: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .map(|e| e.file_name())
        .collect();
    assert!(survivors.is_empty(), "processes left behind: {survivors:?}");
}

/// A wrapper that leaves a process behind holding the console open: the run still ends soon
/// after QEMU, and the leftover is killed with the group.
#[test]
fn leftover_holding_the_console_is_cleaned_up() {
    let Some(image) = GuestImage::for_test("leftover_holding_the_console_is_cleaned_up") else {
        return;
    };
    let qemu = GuestConfig::new(128, "noop").command(&image).unwrap();
    let mut wrapped = Command::new("sh");
    wrapped
        .arg("-c")
        .arg("\"$@\"; status=$?; sleep 31.4159 & exit $status")
        .arg("wrapper")
        .arg(qemu.get_program())
        .args(qemu.get_args());
    let started = Instant::now();
    let run = RunningGuest::spawn(wrapped)
        .unwrap()
        .wait(Duration::from_secs(60))
        .unwrap();
    assert!(run.ok());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    std::thread::sleep(Duration::from_millis(100));
    let leftovers: Vec<_> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| c == b"sleep\x0031.4159\x00")
                .unwrap_or(false)
        })
        .map(|e| e.file_name())
        .collect();
    assert!(leftovers.is_empty(), "processes left behind: {leftovers:?}");
}
