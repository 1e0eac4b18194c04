//! The limit on an image's host page cache (issue 12, seed 001 chapter 5) on a host-side
//! VMM-like program (`tests/c/image_cache_workload.c`) under `memvisor run --image-cache 8M`:
//! it streams a 64 MiB disk image into memfd "guest RAM" twice, re-reads a hot 4 MiB ten
//! times, keeps 1 MiB of the image dirty, and reads into other memory. The image's host cache
//! (`cachestat(2)`) stays within the limit plus twice the reconciliation slack, the model hits
//! on the hot part, dirty pages are never dropped and guest RAM holds the image's bytes;
//! `memvisor set --image-cache` changes the limit of the running program, refuses bad values
//! in one line, and lifts it.

mod common;

use std::io::Write;
use std::os::fd::AsFd;

use common::*;
use memvisor_pager::cachestat;

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

/// `memvisor set PID ARGS...` with the test's control directory.
fn set(ctl: &std::path::Path, pid: &str, args: &[&str]) -> std::process::Output {
    memvisor(ctl)
        .arg("set")
        .arg(pid)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn the_host_cache_of_an_image_stays_within_its_limit() {
    if !userfaultfd_usable() {
        return;
    }
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let prog = compile_c("image_cache_workload", tmp.path());
    let path = tmp.path().join("disk.img");
    let image = write_uncached_image(&path, 64);
    let ctl = tmp.path().join("ctl");
    let (mut child, mut out) = spawn_run(
        &ctl,
        &["--budget", "128M", "--image-cache", "8M"],
        tmp.path(),
        &[prog.as_os_str(), path.as_os_str()],
    );
    let (pid, _) = wait_ready(&mut out);
    let s = only_image_status(&ctl, &pid);
    let cached = || cachestat(image.as_fd(), 0, 0).unwrap();
    assert_eq!(s.cache_limit_bytes, Some(8 * MIB), "{s:?}");
    assert_eq!(s.cache_model_bytes, 8 * MIB, "{s:?}");
    // Within the limit, twice the reconciliation slack (1 MiB: what a reconciliation leaves,
    // readahead after streams included, and what accesses add until the next) and the dirty
    // MiB.
    let c = cached();
    assert!(c.nr_cache * PAGE <= 11 * MIB, "{c:?} {s:?}");
    assert_eq!(s.cached_bytes, c.nr_cache * PAGE, "{s:?}");
    // Two streams of 64 MiB missed; nine of the ten passes over the hot 4 MiB hit.
    assert!(s.cache_misses >= 2 * 64 * MIB / PAGE, "{s:?}");
    assert!(s.cache_hits >= 9 * 4 * MIB / PAGE, "{s:?}");
    assert!(s.cache_evicted_dropped_bytes >= 100 * MIB, "{s:?}");
    // The reads that missed were timed: what a miss costs the program.
    assert!(s.cache_timed_misses >= 2 * 64 * MIB / PAGE, "{s:?}");
    assert!(s.cache_miss_read_nanos > 0, "{s:?}");
    // The dirty MiB was a victim while dirty: kept, never dropped.
    assert!(s.cache_kept_dirty_bytes >= PAGE, "{s:?}");
    // The curve: the second stream's misses were refaults 56 MiB away (64 MiB less the
    // limit), which 64 MiB more would have saved and 32 MiB would not.
    let r = &s.cache_refaults;
    assert_eq!(r.unit_bytes, PAGE);
    assert!(r.saved_with(64 * MIB) >= 64 * MIB / PAGE - 2048, "{r:?}");
    assert_eq!(r.saved_with(32 * MIB), 0, "{r:?}");

    // Bad values are refused in one line, and nothing changes.
    let o = set(&ctl, &pid, &["--image-cache", "4K"]);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("image cache limit 4K is less than 1M"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "{e}");
    let o = set(
        &ctl,
        &pid,
        &["--image-cache", "16M", "--image", "/no/such.img"],
    );
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && e.contains("no image '/no/such.img'"),
        "{e}"
    );
    assert_eq!(
        only_image_status(&ctl, &pid).cache_limit_bytes,
        Some(8 * MIB)
    );

    // A larger limit for this image, then one more stream.
    let o = set(&ctl, &pid, &["--image-cache", "16M", "--image", &s.path]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(next_program_line(&mut out).trim(), "DONE");
    let s = only_image_status(&ctl, &pid);
    assert_eq!(s.cache_limit_bytes, Some(16 * MIB), "{s:?}");
    assert_eq!(s.cache_model_bytes, 16 * MIB, "{s:?}");
    let c = cached();
    assert!(
        c.nr_cache * PAGE <= 16 * MIB + 2 * 2 * MIB + MIB,
        "{c:?} {s:?}"
    );

    // Lifted: the model goes, the status says so.
    let o = set(&ctl, &pid, &["--image-cache", "none"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s = only_image_status(&ctl, &pid);
    assert_eq!(
        (s.cache_limit_bytes, s.cache_model_bytes),
        (None, 0),
        "{s:?}"
    );

    drop(stdin);
    expect_ok_exit(child, out);
}

#[test]
fn a_bad_limit_is_refused_before_the_program_starts() {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let o = memvisor(&tmp.path().join("ctl"))
        .args([
            "run",
            "--budget",
            "64M",
            "--image-cache",
            "100K",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{e}");
    assert!(
        e.contains("--image-cache") && e.contains("100K") && e.contains("less than 1M"),
        "{e}"
    );
}
