//! The preload library's disk-image I/O (issue 10) on a host-side VMM-like program
//! (`tests/c/image_io_workload.c`): it reads an image straight into memfd "guest RAM" with
//! `pread` and `preadv`, overwrites more than the budget, then changes the image under the
//! associated pages with `pwrite`, `pwritev` and `ftruncate`, and punches a hole in guest RAM
//! as virtio-balloon does. The guest RAM must keep the image's old bytes, the hole must read as
//! zeros, and `memvisor stat` must show the swap mapper at work; with `--swap-mapper off` the
//! same program passes with no association.

mod common;

use std::ffi::OsStr;
use std::io::Write;

use common::*;

const MIB: usize = 1 << 20;

/// The image the C program expects: byte `(o * 7 + (o >> 12)) & 0xff` at offset `o`.
fn write_image(path: &std::path::Path, mib: usize) {
    let data: Vec<u8> = (0..mib * MIB)
        .map(|o| ((o * 7 + (o >> 12)) & 0xff) as u8)
        .collect();
    std::fs::write(path, data).unwrap();
}

fn run(mapper: &str) -> memvisor_control::RegionStatus {
    let tmp = tempfile::tempdir().unwrap();
    let prog = compile_c("image_io_workload", tmp.path());
    let image = tmp.path().join("disk.img");
    write_image(&image, 48);
    let ctl = tmp.path().join("ctl");
    let (mut child, mut out) = spawn_run(
        &ctl,
        &["--budget", "24M", "--swap-mapper", mapper],
        tmp.path(),
        &[prog.as_os_str(), image.as_os_str(), OsStr::new("96")],
    );
    let (pid, _) = wait_ready(&mut out);
    let st = stat_json(&ctl, &pid);
    let guest = st
        .regions
        .iter()
        .find(|r| r.kind == "guest-memfd")
        .cloned()
        .unwrap_or_else(|| panic!("no guest-memfd region: {st:?}"));
    child.stdin.take().unwrap().flush().unwrap();
    expect_ok_exit(child, out);
    assert_eq!(
        guest.read_errors + guest.write_errors + guest.poisoned_chunks,
        0,
        "{guest:?}"
    );
    guest
}

#[test]
fn image_reads_into_guest_ram_are_evicted_without_writes_and_kept_across_image_writes() {
    if !userfaultfd_usable() {
        return;
    }
    let g = run("on");
    // 40 MiB read from the image under a budget of about 24 MiB: most went out without writes.
    assert!(
        g.swap_write_bytes_avoided >= (8 * MIB) as u64,
        "swap writes avoided: {g:?}"
    );
    // Blocks [4 MiB, 8 MiB), [36, 37) and [39, 40) MiB changed under associated pages.
    assert!(g.image_associations_ended_by_image >= 1024, "{g:?}");
    // The pages verified after the image changes came back from the image or memory; the
    // ones whose blocks changed, from swap or memory.
    assert!(g.image_read_bytes > 0, "{g:?}");
    // The punched megabyte was discarded through the pager.
    assert!(g.discards >= 1, "{g:?}");
}

#[test]
fn with_the_swap_mapper_off_nothing_is_associated() {
    if !userfaultfd_usable() {
        return;
    }
    let g = run("off");
    assert_eq!(
        (
            g.image_bytes,
            g.swap_write_bytes_avoided,
            g.image_read_bytes
        ),
        (0, 0, 0),
        "{g:?}"
    );
    assert!(g.bytes_written >= (16 * MIB) as u64, "{g:?}");
}
