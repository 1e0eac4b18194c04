//! The preload library's disk-image I/O (issue 10) on a host-side VMM-like program
//! (`tests/c/image_io_workload.c`): it reads an image straight into memfd "guest RAM" with
//! `pread` and `preadv`, overwrites more than the budget, then changes the image under the
//! associated pages with `pwrite`, `pwritev` and `ftruncate`, and punches a hole in guest RAM
//! as virtio-balloon does. The guest RAM must keep the image's old bytes, the hole must read as
//! zeros, and `memvisor stat` must show the swap mapper at work; with `--swap-mapper off` the
//! same program passes with no association.

mod common;

use common::*;

const MIB: usize = 1 << 20;

fn run(mapper: &str) -> memvisor_control::RegionStatus {
    let tmp = tempfile::tempdir().unwrap();
    run_image_workload("image_io_workload", &[], mapper, tmp.path())
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
