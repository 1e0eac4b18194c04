//! Placing a region at a fixed address over a reservation, and giving the range back on drop.
//!
//! Its own test binary: the check that the range is free after drop maps it again, and another
//! test thread creating a region at the same moment could take the freed range first.

mod common;

use common::{pattern, read, supported, write};
use memvisor_pager::{page_size, Region, RegionConfig};

fn fill_all(r: &Region) {
    let chunk = r.chunk_size();
    let mut buf = vec![0u8; chunk];
    for c in 0..r.len() / chunk {
        pattern(1000 + c as u64, &mut buf);
        write(r, c * chunk, &buf);
    }
}

fn verify_all(r: &Region) {
    let chunk = r.chunk_size();
    let mut want = vec![0u8; chunk];
    let mut got = vec![0u8; chunk];
    for c in 0..r.len() / chunk {
        pattern(1000 + c as u64, &mut want);
        read(r, c * chunk, &mut got);
        assert!(got == want, "chunk {c} differs");
    }
}

#[test]
fn region_at_a_fixed_address_replaces_a_reservation() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let chunk = 4 * page_size();
    let len = 6 * chunk;
    // Reserve address space the way VMMs do (PROT_NONE), then put the region there.
    // SAFETY: a fresh PROT_NONE mapping at a kernel-chosen address.
    let res = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert_ne!(res, libc::MAP_FAILED);
    let addr = res as usize;
    // SAFETY: the reservation above is ours and unused.
    let cfg = unsafe {
        RegionConfig::new(len, 2 * chunk, dir.path())
            .chunk_size(chunk)
            .log_errors(false)
            .address(addr)
    };
    let r = Region::new(cfg).unwrap();
    assert_eq!(r.as_ptr() as usize, addr);
    fill_all(&r);
    verify_all(&r);
    assert!(r.stats().page_outs > 0);
    drop(r);
    // SAFETY: the region's drop unmapped the range; mapping it again at a kernel-chosen
    // address is harmless. MAP_FIXED_NOREPLACE succeeds only if nothing is mapped there.
    let again = unsafe {
        libc::mmap(
            res,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    assert_eq!(again, res, "the region's range was not unmapped on drop");
    // SAFETY: unmapping the probe mapping made just above.
    unsafe { libc::munmap(again, len) };

    let e = Region::new(
        // SAFETY: an unaligned address is refused before anything is mapped.
        unsafe {
            RegionConfig::new(len, chunk, dir.path())
                .chunk_size(chunk)
                .address(addr + 1)
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("not page-aligned"), "{e}");
}
