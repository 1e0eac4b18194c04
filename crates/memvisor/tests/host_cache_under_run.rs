//! The exact exclusive host cache (issue 12) on a host-side VMM-like program
//! (`tests/c/host_cache_workload.c`) under `memvisor run --host-cache exclusive`: it reads a
//! disk image into memfd "guest RAM" with `pread`, part of it kept dirty by an unsynced
//! `pwrite`. Right after the reads the blocks the guest holds are out of the host page cache
//! (`cachestat(2)` on the image), the dirty ones still in it, partial pages at the ends of a
//! read and a read into other memory untouched; once memvisor evicts the guest's copies they
//! come back (demotion). With `--host-cache default` nothing is dropped.

mod common;

use std::io::{BufReader, Write};
use std::os::fd::AsFd;
use std::process::Stdio;

use common::*;
use memvisor_control::ImageStatus;
use memvisor_pager::{cachestat, CacheStat};

const MIB: u64 = 1 << 20;
const PAGE: u64 = 4096;

/// The image the C program expects, not in the host page cache.
fn write_image(path: &std::path::Path, mib: u64) -> std::fs::File {
    let f = write_uncached_image(path, mib);
    assert_eq!(cachestat(f.as_fd(), 0, 0).unwrap().nr_cache, 0);
    f
}

fn cached(f: &std::fs::File, from: u64, to: u64) -> CacheStat {
    cachestat(f.as_fd(), from, to - from).unwrap()
}

/// Runs the program with `--host-cache mode`; `check_read` runs after the reads, `check_evicted`
/// after the guest RAM was overwritten past the budget.
fn run(
    mode: &str,
    check_read: impl FnOnce(&std::fs::File, ImageStatus),
    check_evicted: impl FnOnce(&std::fs::File, ImageStatus),
) {
    let tmp = tempfile::tempdir_in("/var/tmp").unwrap();
    let prog = compile_c("host_cache_workload", tmp.path());
    let path = tmp.path().join("disk.img");
    let image = write_image(&path, 48);
    let ctl = tmp.path().join("ctl");
    let mut child = memvisor(&ctl)
        .args(["run", "--budget", "24M", "--host-cache", mode, "--swap-dir"])
        .arg(tmp.path())
        .arg("--")
        .arg(&prog)
        .arg(&path)
        .arg("112")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let (pid, _) = wait_ready(&mut out);
    let s = only_image_status(&ctl, &pid);
    assert_eq!(s.host_cache, mode, "{s:?}");
    assert_eq!(s.guest_read_bytes, 16 * MIB + MIB - 200, "{s:?}");
    check_read(&image, s);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"go\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(next_program_line(&mut out).trim(), "EVICTED");
    check_evicted(&image, only_image_status(&ctl, &pid));
    drop(stdin);
    let o = child.wait_with_output().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    assert!(
        o.status.success() && rest.contains("OK"),
        "status {:?}\nstdout: {rest}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn exclusive_drops_what_the_guest_holds_keeps_dirty_pages_and_demotes_on_eviction() {
    if !userfaultfd_usable() {
        return;
    }
    run(
        "exclusive",
        |f, s| {
            // The guest's blocks left the host cache, the large folios of readahead included
            // (sequential reads merge into whole folios).
            let clean = [cached(f, 0, 8 * MIB), cached(f, 9 * MIB, 16 * MIB)];
            assert_eq!(clean.map(|c| c.nr_cache), [0, 0], "{clean:?} {s:?}");
            // The range kept dirty is never dropped.
            let dirty = cached(f, 8 * MIB, 9 * MIB);
            assert_eq!(dirty.nr_cache, MIB / PAGE, "{dirty:?} {s:?}");
            assert!(s.host_cache_kept_dirty_bytes >= MIB, "{s:?}");
            // Partial pages at the ends of a read stay; its whole pages go.
            assert_eq!(cached(f, 40 * MIB, 40 * MIB + PAGE).nr_cache, 1, "{s:?}");
            assert_eq!(cached(f, 41 * MIB - PAGE, 41 * MIB).nr_cache, 1, "{s:?}");
            assert_eq!(cached(f, 40 * MIB + PAGE, 41 * MIB - PAGE).nr_cache, 0);
            // A read into memory that is not guest RAM leaves the cache alone.
            assert_eq!(cached(f, 44 * MIB, 45 * MIB).nr_cache, MIB / PAGE);
            assert!(
                s.host_cache_dropped_bytes >= 15 * MIB + MIB - 2 * PAGE,
                "{s:?}"
            );
            assert_eq!(s.host_cache_errors, 0, "{s:?}");
        },
        |f, s| {
            // memvisor evicted the guest's image pages: their blocks are back in the host
            // cache (read by the eviction's check).
            assert!(s.host_cache_demoted_bytes >= 4 * MIB, "{s:?}");
            let back = cached(f, 0, 8 * MIB).nr_cache + cached(f, 9 * MIB, 16 * MIB).nr_cache;
            assert!(back * PAGE >= 4 * MIB, "{back} pages back {s:?}");
            assert_eq!(s.host_cache_errors, 0, "{s:?}");
        },
    );
}

#[test]
fn the_default_host_cache_is_left_to_the_kernel() {
    if !userfaultfd_usable() {
        return;
    }
    run(
        "default",
        |f, s| {
            assert_eq!(cached(f, 0, 8 * MIB).nr_cache, 8 * MIB / PAGE, "{s:?}");
            assert_eq!(
                (
                    s.host_cache_dropped_bytes,
                    s.host_cache_kept_dirty_bytes,
                    s.host_cache_demoted_bytes
                ),
                (0, 0, 0),
                "{s:?}"
            );
            assert!(s.cached_bytes >= 17 * MIB, "{s:?}");
        },
        |_, s| assert_eq!(s.host_cache_demoted_bytes, 0, "{s:?}"),
    );
}
