//! Live migration (issue 11, seed 003 section 3) of real QEMU (TCG) guests between two
//! `memvisor run`s on this host: `memvisor migrate` moves guest memory pager to pager while
//! the guest keeps rewriting it (the `churn` workload verifies every page before rewriting
//! it, then verifies all of it at the end, on whichever host it is by then), and QEMU moves
//! only device state (`x-ignore-shared`). Both ends run with budgets far below the guest's
//! memory, so the source sends swapped pages from its swap file and the destination writes
//! what exceeds its budget straight to swap. Guest RAM is QEMU's `memory-backend-memfd` in
//! one test and a tmpfs file (`memory-backend-file` in `/dev/shm`, what QEMU 8.1+ needs to
//! skip it with `x-ignore-shared`), a different one at each end, in the other.
//!
//! Skipped (with `SKIPPED`) where QEMU or userfaultfd is unavailable, unless `CI=true`.

mod common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::migration_end::{key_file, migrate_command, MigrationEnd as End};
use common::*;
use memvisor_testvm::{GuestConfig, GuestImage, MemoryBackend};

const MIB: u64 = 1 << 20;

fn image_or_skip(test: &str) -> Option<GuestImage> {
    if !userfaultfd_usable() {
        return None;
    }
    GuestImage::for_test(test)
}

/// `memvisor migrate` of the source `src` to `dst` with `key`.
fn migrate(src: &End, dst_port: u16, dst: &End, device_port: u16, key: &Path) -> Output {
    migrate_command(src, dst, key, (dst_port, device_port), &[])
        .output()
        .unwrap()
}

/// After `memvisor migrate` printed `out`: it succeeded, both ends completed with the same page
/// counts, the destination (budget `dst_budget` bytes) kept its budget and wrote the rest to
/// swap, the source stopped; then the source QEMU quits and the guest finishes its work on the
/// destination (within `finish`), finding every page as it wrote it.
fn check_migrated_and_verified(
    mut src: End,
    mut dst: End,
    out: &Output,
    dst_budget: u64,
    finish: Duration,
) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", stderr(out));
    assert!(text.contains("migrated in"), "{text}");
    assert!(text.contains("paused: last memory round"), "{text}");
    eprintln!("{text}{}", stderr(out));

    let s = src.status().migration.expect("source migration status");
    assert_eq!(s.state, "completed", "{s:?}");
    let d = dst.status();
    let m = d.migration.clone().expect("destination migration status");
    assert_eq!(m.state, "completed", "{m:?}");
    assert_eq!(
        m.pages + m.zero_pages,
        s.pages + s.zero_pages,
        "{m:?} {s:?}"
    );
    assert!(
        m.pages_to_swap > 0 && m.pages_to_memory > 0,
        "the destination kept its budget and wrote the rest to swap: {m:?}"
    );
    let g = d.regions.iter().find(|r| r.kind == dst.kind).unwrap();
    assert!(g.resident_bytes <= dst_budget + MIB, "{g:?}");
    assert!(
        src.qmp("query-status").contains("postmigrate"),
        "the source stopped after the switchover"
    );
    // memvisor's capabilities are off again on both ends (a later plain migration of the
    // destination's guest must send its RAM).
    for cap in ["x-ignore-shared", "return-path", "pause-before-switchover"] {
        assert!(!src.capability(cap), "source {cap} left on");
        assert!(!dst.capability(cap), "destination {cap} left on");
    }
    let _ = src.qmp("quit");
    drop(src.guest.take());

    let run = dst
        .guest
        .take()
        .unwrap()
        .wait(finish)
        .unwrap_or_else(|e| panic!("destination guest: {e}"));
    let tail = run.console_tail(10);
    let done = run.done().expect("done line");
    assert!(done.ok && done.errors == 0, "{done:?}\n{tail}");
    assert!(
        tail.contains("phase=churn") && tail.contains("phase=verify"),
        "the guest finished its work on the destination: {tail}"
    );
}

/// A 512 MiB guest rewrites 192 MiB of its memory for 40 s under a 128 MiB budget. A first
/// `memvisor migrate` with the wrong key is refused before any memory moves and leaves the
/// source running; the second, with the right key, moves it to a destination with a 96 MiB
/// budget while it keeps writing. The guest then finishes on the destination and finds every
/// page as it wrote it.
#[test]
fn a_churning_guest_moves_to_a_smaller_destination_and_verifies() {
    let Some(image) = image_or_skip("a_churning_guest_moves_to_a_smaller_destination_and_verifies")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key");
    let wrong = key_file(dir.path(), "wrong-key");
    let config = GuestConfig::new(512, "churn 192 40")
        .backend(MemoryBackend::Memfd)
        .timeout(Duration::from_secs(150));
    let (mem_port, dev_port) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{mem_port}");
    let dst = End::start(
        dir.path(),
        "dst",
        &image,
        &config,
        &[
            "--budget",
            "96M",
            "--migration-listen",
            &listen,
            "--migration-key",
            key.to_str().unwrap(),
        ],
        &["-incoming", "defer"],
    );
    let src = End::start(
        dir.path(),
        "src",
        &image,
        &config,
        &["--budget", "128M"],
        &[],
    );
    // Wait until the guest has written its 192 MiB (most of it paged out by now).
    src.wait_written(200 * MIB, Duration::from_secs(60));
    let swapped_before = src.guest_region().swapped_bytes;
    assert!(
        swapped_before > 64 * MIB,
        "most of the guest is in swap: {swapped_before}"
    );

    let refused = migrate(&src, mem_port, &dst, dev_port, &wrong);
    assert!(!refused.status.success());
    let e = stderr(&refused);
    assert!(e.contains("key"), "{e}");
    assert!(
        src.qmp("query-status").contains("\"running\":true"),
        "the source guest keeps running after a refused migration"
    );
    // The destination records the refused attempt just after closing the connection the
    // source saw fail: give it a moment.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let d = loop {
        let d = dst
            .status()
            .migration
            .expect("the destination reports its end");
        if d.error.is_some() || std::time::Instant::now() > deadline {
            break d;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(d.state, "listening", "{d:?}");
    assert!(d.error.as_deref().unwrap_or("").contains("key"), "{d:?}");

    let out = migrate(&src, mem_port, &dst, dev_port, &key);
    check_migrated_and_verified(src, dst, &out, 96 * MIB, Duration::from_secs(150));
}

/// A 256 MiB guest whose RAM is a tmpfs file (`memory-backend-file` in `/dev/shm`) rewrites
/// 64 MiB for 30 s under a 64 MiB budget (TCG's code buffer takes up to a quarter of it) and
/// moves, while writing, to a destination whose RAM is another file in `/dev/shm`, with a
/// 48 MiB budget: both ends' guest RAM is a `guest-file`
/// region, QEMU sends device state only, and the guest finishes on the destination and finds
/// every page as it wrote it. The migration is precopy only (`--post-copy=never`).
#[test]
fn a_guest_with_tmpfs_file_ram_moves_to_another_file_and_verifies() {
    let Some(image) =
        image_or_skip("a_guest_with_tmpfs_file_ram_moves_to_another_file_and_verifies")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let key = key_file(dir.path(), "key");
    let config = |file: &str| {
        GuestConfig::new(256, "churn 64 30")
            .backend(MemoryBackend::File(shm.path().join(file)))
            .timeout(Duration::from_secs(90))
    };
    let (mem_port, dev_port) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{mem_port}");
    let dst = End::start(
        dir.path(),
        "dst",
        &image,
        &config("dst-ram"),
        &[
            "--budget",
            "48M",
            "--migration-listen",
            &listen,
            "--migration-key",
            key.to_str().unwrap(),
        ],
        &["-incoming", "defer"],
    );
    let src = End::start(
        dir.path(),
        "src",
        &image,
        &config("src-ram"),
        &["--budget", "64M"],
        &[],
    );
    assert_eq!((src.kind, dst.kind), ("guest-file", "guest-file"));
    // Both QEMUs made their files, and each end adopted its own.
    for end in [&src, &dst] {
        let g = end.guest_region();
        assert_eq!(g.size_bytes, 256 * MIB, "{g:?}");
    }
    for file in ["src-ram", "dst-ram"] {
        assert!(shm.path().join(file).exists(), "{file} missing in /dev/shm");
    }
    // Wait until the guest has written its 64 MiB (partly paged out by now).
    src.wait_written(72 * MIB, Duration::from_secs(40));
    let swapped_before = src.guest_region().swapped_bytes;
    assert!(
        swapped_before > 0,
        "part of the guest is in swap: {swapped_before}"
    );

    // Precopy only: the last round goes while the guest is paused, whatever its size.
    let out = migrate_command(
        &src,
        &dst,
        &key,
        (mem_port, dev_port),
        &["--post-copy=never"],
    )
    .output()
    .unwrap();
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("post-copy: "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    check_migrated_and_verified(src, dst, &out, 48 * MIB, Duration::from_secs(90));
    // QEMU skipped the file-backed RAM block (x-ignore-shared): it sent device state only,
    // under 1 MiB, memvisor the memory.
    let text = String::from_utf8_lossy(&out.stdout);
    let device = text
        .split("device state ")
        .nth(1)
        .and_then(|t| t.split(';').next())
        .unwrap_or("?");
    assert!(
        device.ends_with('K') || device.chars().all(|c| c.is_ascii_digit()),
        "QEMU sent {device} of device state: {text}"
    );
}

/// Post-copy (`--post-copy`): a 256 MiB guest rewrites 64 MiB for 30 s under a 64 MiB
/// budget (TCG's code buffer takes up to a quarter of it) and moves, while writing, to a
/// destination with a 48 MiB budget. At the pause the
/// pages it changed since they were sent are only named; its guest resumes at once and they
/// follow, while its faults on them wait and ask for them first. The guest finishes on the
/// destination and finds every page as it wrote it.
#[test]
fn a_churning_guest_moves_by_post_copy_and_verifies() {
    let Some(image) = image_or_skip("a_churning_guest_moves_by_post_copy_and_verifies") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let key = key_file(dir.path(), "key");
    let config = GuestConfig::new(256, "churn 64 30")
        .backend(MemoryBackend::Memfd)
        .timeout(Duration::from_secs(90));
    let (mem_port, dev_port) = (free_port(), free_port());
    let listen = format!("127.0.0.1:{mem_port}");
    let dst = End::start(
        dir.path(),
        "dst",
        &image,
        &config,
        &[
            "--budget",
            "48M",
            "--migration-listen",
            &listen,
            "--migration-key",
            key.to_str().unwrap(),
        ],
        &["-incoming", "defer"],
    );
    let src = End::start(
        dir.path(),
        "src",
        &image,
        &config,
        &["--budget", "64M"],
        &[],
    );
    src.wait_written(72 * MIB, Duration::from_secs(40));
    let out = migrate_command(&src, &dst, &key, (mem_port, dev_port), &["--post-copy"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("post-copy: "), "{text}\n{}", stderr(&out));
    // The churning guest changed pages between the last round and the pause: some went after
    // the switch-over.
    let named: u64 = text
        .split("post-copy: ")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(named > 0, "{text}");
    check_migrated_and_verified(src, dst, &out, 48 * MIB, Duration::from_secs(90));
}
