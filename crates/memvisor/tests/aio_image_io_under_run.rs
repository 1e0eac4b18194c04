//! The preload library's view of Linux AIO (`aio=native`, issue 10) on a host-side VMM-like
//! program (`tests/c/aio_image_workload.c`): it reads an image opened with `O_DIRECT` straight
//! into memfd "guest RAM" with libaio's `io_submit` (completions from the kernel, no library
//! call), overwrites more than the budget, then changes the image under the associated pages
//! with AIO writes. The guest RAM must keep the image's old bytes, and `memvisor stat` must show
//! the reads associated (found complete in the context's ring) and the writes ending the
//! associations they overlap; with `--swap-mapper off` the same program passes with no
//! association.

mod common;

use common::*;

const MIB: usize = 1 << 20;

/// Whether libaio (QEMU's, `libaio1`) is installed.
fn libaio_or_skip() -> bool {
    let found = [
        "/usr/lib/x86_64-linux-gnu/libaio.so.1",
        "/lib/x86_64-linux-gnu/libaio.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists());
    if !found {
        eprintln!("SKIPPED: libaio.so.1 is not installed (scripts/install installs it)");
    }
    found
}

fn run(mapper: &str) -> memvisor_control::RegionStatus {
    // The image on a filesystem that takes O_DIRECT (not tmpfs): the work directory's.
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    run_image_workload("aio_image_workload", mapper, tmp.path())
}

#[test]
fn aio_reads_into_guest_ram_are_associated_and_kept_across_aio_image_writes() {
    if !userfaultfd_usable() || !libaio_or_skip() {
        return;
    }
    let g = run("on");
    // 40 MiB read from the image under a budget of about 24 MiB: most went out without writes.
    assert!(
        g.swap_write_bytes_avoided >= (8 * MIB) as u64,
        "swap writes avoided: {g:?}"
    );
    // Blocks [4 MiB, 8 MiB) and [36, 37) MiB changed under associated pages.
    assert!(g.image_associations_ended_by_image >= 256, "{g:?}");
    // The pages verified after the image changes came back from the image or memory.
    assert!(g.image_read_bytes > 0, "{g:?}");
}

#[test]
fn aio_with_the_swap_mapper_off_associates_nothing() {
    if !userfaultfd_usable() || !libaio_or_skip() {
        return;
    }
    let g = run("off");
    assert_eq!(g.swap_write_bytes_avoided, 0, "{g:?}");
    assert_eq!(g.image_read_bytes, 0, "{g:?}");
    assert!(g.bytes_written > 0, "{g:?}");
}
