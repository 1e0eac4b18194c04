//! The test guest's `disk` commands share the guest's page cache: a second pass over the disk
//! is served from it, not read from the device again. Linux drops a block device's page cache
//! at its last close, so the workload keeps the device open between commands; before it did,
//! every command started cold, and the benchmarks that read a disk twice measured device reads
//! where they meant to measure cached ones.
//!
//! Measured from the host: the bytes QEMU reads (`rchar` of `/proc/PID/io`, its `pread`s of
//! the image) while the guest makes its second pass.

use std::fs;
use std::process::Command;
use std::time::Duration;

use memvisor_bench::live_guest::{ConsoleLine, LiveGuest};
use memvisor_testvm::{
    parse_result_line, qemu_binary, Accel, AccelChoice, DiskConfig, GuestConfig, GuestImage,
    WorkloadResult,
};

const DISK_MIB: u64 = 48;

fn rchar(pid: u32) -> u64 {
    let io = fs::read_to_string(format!("/proc/{pid}/io")).expect("read /proc/PID/io");
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("rchar in /proc/PID/io")
}

/// The disk phases among the console lines.
fn disk_phases(lines: &[ConsoleLine]) -> usize {
    lines
        .iter()
        .filter(|l| {
            matches!(
                parse_result_line(&l.text, 0),
                Some(Ok(WorkloadResult::Disk(_)))
            )
        })
        .count()
}

#[test]
fn a_second_pass_over_the_disk_is_served_from_the_guest_page_cache() {
    let Some(image) =
        GuestImage::for_test("a_second_pass_over_the_disk_is_served_from_the_guest_page_cache")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    image.make_disk_image(&disk, DISK_MIB).unwrap();
    let pass = format!("disk /dev/vda seq --reads {} --verify", DISK_MIB * 256);
    // Idle after each pass, so that QEMU is sampled while the guest is quiet.
    let workload = format!("{pass}; idle 2; {pass}; idle 2");
    let args = GuestConfig::new(256, workload)
        .accel(AccelChoice::Fixed(Accel::Tcg))
        .disk(DiskConfig::new(&disk))
        .qemu_args(&image)
        .unwrap();
    let mut command = Command::new(qemu_binary().unwrap());
    command.args(&args);
    let mut guest = LiveGuest::spawn(command, "page cache guest").unwrap();
    let limit = Duration::from_secs(120);
    let mut after_pass = |n: usize| {
        guest
            .wait_for(&format!("disk pass {n}"), limit, |lines| {
                (disk_phases(lines) >= n).then_some(())
            })
            .unwrap();
        rchar(guest.pid())
    };
    let first = after_pass(1);
    let second = after_pass(2);
    let status = guest.wait_exit(limit).unwrap();
    assert!(status.success(), "{}", guest.tail());
    let done = guest.done().expect("a done line");
    assert!(done.ok && done.errors == 0, "{}", guest.tail());
    let disk_bytes = DISK_MIB << 20;
    // The first pass read the whole disk through QEMU; the second at most a little of it.
    assert!(
        first >= disk_bytes,
        "first pass: QEMU read only {first} bytes"
    );
    assert!(
        second - first < disk_bytes / 8,
        "the second pass made QEMU read {} of the disk's {disk_bytes} bytes again: the guest's \
         page cache did not keep it",
        second - first
    );
}
