//! The preload library's view of asynchronous disk I/O (QEMU's `aio=native` and
//! `aio=io_uring`, issue 10) on a host-side VMM-like program
//! (`tests/c/async_image_workload.c`): it reads an image opened with `O_DIRECT` straight into
//! memfd "guest RAM" with libaio's `io_submit` or liburing's `io_uring_submit` (completions from
//! the kernel, no library call), overwrites more than the budget, then changes the image under
//! the associated pages with asynchronous writes. The guest RAM must keep the image's old
//! bytes, and `memvisor stat` must show the reads associated (found complete in the rings) and
//! the writes ending the associations they overlap; with `--swap-mapper off` the same program
//! passes with no association.

mod common;

use common::*;

const MIB: usize = 1 << 20;

/// Whether QEMU's libaio (`libaio1`) and liburing (`liburing2`) are installed.
fn libraries_or_skip() -> bool {
    let found = ["libaio.so.1", "liburing.so.2"].iter().all(|l| {
        ["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu"]
            .iter()
            .any(|d| std::path::Path::new(d).join(l).exists())
    });
    if !found {
        eprintln!(
            "SKIPPED: libaio.so.1 or liburing.so.2 is not installed (scripts/install installs \
             QEMU, which needs both)"
        );
    }
    found
}

fn run(interface: &str, mapper: &str) -> memvisor_control::RegionStatus {
    // The image on a filesystem that takes O_DIRECT (not tmpfs): the work directory's.
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    run_image_workload("async_image_workload", &[interface], mapper, tmp.path())
}

fn reads_associated_and_kept_across_writes(interface: &str) {
    if !userfaultfd_usable() || !libraries_or_skip() {
        return;
    }
    let g = run(interface, "on");
    // 40 MiB read from the image under a budget of about 24 MiB: most went out without writes.
    assert!(
        g.swap_write_bytes_avoided >= (8 * MIB) as u64,
        "{interface}: swap writes avoided: {g:?}"
    );
    // Blocks [4 MiB, 8 MiB) and [36, 37) MiB changed under associated pages.
    assert!(
        g.image_associations_ended_by_image >= 256,
        "{interface}: {g:?}"
    );
    // The pages verified after the image changes came back from the image or memory.
    assert!(g.image_read_bytes > 0, "{interface}: {g:?}");
}

fn nothing_associated_with_the_mapper_off(interface: &str) {
    if !userfaultfd_usable() || !libraries_or_skip() {
        return;
    }
    let g = run(interface, "off");
    assert_eq!(g.swap_write_bytes_avoided, 0, "{interface}: {g:?}");
    assert_eq!(g.image_read_bytes, 0, "{interface}: {g:?}");
    assert!(g.bytes_written > 0, "{interface}: {g:?}");
}

#[test]
fn aio_reads_into_guest_ram_are_associated_and_kept_across_aio_image_writes() {
    reads_associated_and_kept_across_writes("aio");
}

#[test]
fn io_uring_reads_into_guest_ram_are_associated_and_kept_across_io_uring_image_writes() {
    reads_associated_and_kept_across_writes("uring");
}

#[test]
fn aio_with_the_swap_mapper_off_associates_nothing() {
    nothing_associated_with_the_mapper_off("aio");
}

#[test]
fn io_uring_with_the_swap_mapper_off_associates_nothing() {
    nothing_associated_with_the_mapper_off("uring");
}
