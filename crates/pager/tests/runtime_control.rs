//! Run-time control of a live region: budget and policy changes, discarding ranges (and
//! recovering poisoned chunks that way), and adopting a memfd created by someone else (as a VMM
//! creates its guest RAM). Placing a region at a fixed address is in `fixed_address.rs`.

mod common;

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use common::{kernel_reads, pattern, read, supported, write};
use memvisor_pager::{
    page_size, FaultInjector, PageOut, PagerError, Region, RegionConfig, ResolveMode,
};

const MODES: [ResolveMode; 2] = [ResolveMode::Copy, ResolveMode::AliasContinue];

const PAGE_OUTS: [PageOut; 3] = [PageOut::Sync, PageOut::Threads(2), PageOut::IoUring(4)];

fn region(dir: &std::path::Path, chunks: usize, budget: usize, mode: ResolveMode) -> Region {
    region_with(dir, chunks, budget, mode, PageOut::Sync)
}

fn region_with(
    dir: &std::path::Path,
    chunks: usize,
    budget: usize,
    mode: ResolveMode,
    page_out: PageOut,
) -> Region {
    let chunk = 4 * page_size();
    Region::new(
        RegionConfig::new(chunks * chunk, budget * chunk, dir)
            .chunk_size(chunk)
            .resolve(mode)
            .page_out(page_out)
            .sample_interval(None)
            .log_errors(false),
    )
    .unwrap()
}

/// Writes a distinct pattern into every chunk.
fn fill_all(r: &Region) {
    let chunk = r.chunk_size();
    let mut buf = vec![0u8; chunk];
    for c in 0..r.len() / chunk {
        pattern(1000 + c as u64, &mut buf);
        write(r, c * chunk, &buf);
    }
}

/// Checks every chunk's pattern, except that `zeroed` byte ranges must read as zero.
fn verify(r: &Region, zeroed: &[(usize, usize)]) {
    let chunk = r.chunk_size();
    let mut want = vec![0u8; chunk];
    let mut got = vec![0u8; chunk];
    for c in 0..r.len() / chunk {
        pattern(1000 + c as u64, &mut want);
        for &(off, len) in zeroed {
            let (s, e) = (off.max(c * chunk), (off + len).min((c + 1) * chunk));
            if s < e {
                want[s - c * chunk..e - c * chunk].fill(0);
            }
        }
        read(r, c * chunk, &mut got);
        assert!(got == want, "chunk {c} differs");
    }
}

#[test]
fn budget_changes_take_effect_at_once_and_lose_nothing() {
    if !supported() {
        return;
    }
    for (mode, page_out) in MODES
        .into_iter()
        .zip(PAGE_OUTS)
        .chain([(MODES[0], PAGE_OUTS[2])])
    {
        let dir = tempfile::tempdir().unwrap();
        let r = region_with(dir.path(), 12, 6, mode, page_out);
        fill_all(&r);
        if page_out == PageOut::Sync {
            assert_eq!(r.stats().resident_chunks, 6, "{mode:?}");
        } else {
            // Asynchronous page-out keeps a headroom (a quarter of the budget at most, here
            // one chunk) free once the last victim's write completes, which may or may not
            // have happened yet.
            let s = r.stats();
            assert!(
                (5..=6).contains(&s.resident_chunks),
                "{mode:?} {page_out}: {s:?}"
            );
        }
        r.set_budget(2 * r.chunk_size()).unwrap();
        assert_eq!(r.budget_chunks(), 2);
        assert_eq!(r.budget_bytes(), 2 * r.chunk_size());
        // Shrinking evicted at once, before set_budget returned (the budget counts pages).
        let ppc = (r.chunk_size() / page_size()) as u64;
        let s = r.stats();
        assert!(s.resident_pages <= 2 * ppc, "{mode:?} {page_out}: {s:?}");
        assert!(r.memory_bytes().unwrap() <= 2 * r.chunk_size() as u64);
        verify(&r, &[]);
        assert!(r.stats().resident_pages <= 2 * ppc);
        // Growing: more chunks stay in.
        r.set_budget(10 * r.chunk_size()).unwrap();
        verify(&r, &[]);
        verify(&r, &[]);
        if page_out == PageOut::Sync {
            assert_eq!(r.stats().resident_chunks, 10, "{mode:?}");
        } else {
            // Minus the headroom (a quarter of the budget at most), plus writes in flight.
            let s = r.stats();
            assert!(
                (8..=10).contains(&s.resident_chunks),
                "{mode:?} {page_out}: {s:?}"
            );
        }
        // Beyond the region: clamped to its chunk count.
        r.set_budget(100 * r.chunk_size()).unwrap();
        assert_eq!(r.budget_chunks(), 12);
        let e = r.set_budget(r.chunk_size() - 1).unwrap_err();
        assert!(matches!(e, PagerError::Config(_)), "{e}");
        assert!(e.to_string().contains("smaller than one chunk"), "{e}");
        assert!(r.take_errors().is_empty());
    }
}

#[test]
fn policy_changes_keep_resident_chunks_and_data() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = region(dir.path(), 10, 4, ResolveMode::Copy);
    assert_eq!(r.policy_name(), "clock");
    fill_all(&r);
    let before = r.stats();
    for p in [
        "chunk-queues",
        "lru",
        "s3-fifo",
        "arc",
        "fifo",
        "sieve",
        "mglru",
    ] {
        r.set_policy(p.parse().unwrap()).unwrap();
        assert!(r.policy_name().starts_with(p), "{} vs {p}", r.policy_name());
        // The resident set moved over without page-outs.
        assert_eq!(r.stats().resident_chunks, 4);
    }
    assert_eq!(r.stats().page_outs, before.page_outs);
    verify(&r, &[]);
    let e = r.set_policy("opt".parse().unwrap()).unwrap_err();
    assert!(matches!(e, PagerError::Policy { .. }), "{e}");
    // The refused change left the running policy alone.
    assert!(r.policy_name().starts_with("mglru"));
    verify(&r, &[]);
}

#[test]
fn discard_zeroes_whole_and_partial_chunks_in_and_out_of_memory() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for (mode, page_out) in MODES.into_iter().flat_map(|m| PAGE_OUTS.map(|p| (m, p))) {
        let dir = tempfile::tempdir().unwrap();
        let r = region_with(dir.path(), 8, 3, mode, page_out);
        let chunk = r.chunk_size();
        fill_all(&r);
        // Chunks 5..8 are resident, 0..5 are in swap.
        let swapped = r.stats().swapped_chunks;
        assert_eq!(swapped, 5, "{mode:?} {page_out}");
        let ranges = [
            (chunk, chunk),              // chunk 1 whole, in swap
            (7 * chunk, chunk),          // chunk 7 whole, resident
            (2 * chunk + ps, 2 * ps),    // part of chunk 2, in swap
            (6 * chunk + 3 * ps, ps),    // part of chunk 6, resident
            (3 * chunk + 3 * ps, chunk), // tail of 3 and head of 4
        ];
        for (off, len) in ranges {
            r.discard(off, len).unwrap();
        }
        let s = r.stats();
        assert_eq!(s.discarded_chunks, 2, "{mode:?} {page_out} {s:?}");
        verify(&r, &ranges);
        // Discarded whole chunks are zero chunks: nothing in swap for them after eviction.
        verify(&r, &ranges);
        assert!(r.take_errors().is_empty());
        assert_eq!(r.stats().dirty_tracking_misses, 0);
    }
}

#[test]
fn discard_rejects_ranges_outside_the_region_or_unaligned() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = region(dir.path(), 4, 2, ResolveMode::Copy);
    for (off, len) in [(1, 10), (0, r.len() + 1), (r.len(), 4096), (usize::MAX, 2)] {
        let e = r.discard(off, len).unwrap_err();
        assert!(e.to_string().contains("not a page-aligned range"), "{e}");
    }
    r.discard(r.len(), 0).unwrap();
}

#[test]
fn discard_recovers_a_poisoned_chunk() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let chunk = 4 * ps;
        let inj = Arc::new(FaultInjector::new());
        let r = Region::new(
            RegionConfig::new(4 * chunk, chunk, dir.path())
                .chunk_size(chunk)
                .resolve(mode)
                .sample_interval(None)
                .fault_injector(inj.clone())
                .log_errors(false),
        )
        .unwrap();
        fill_all(&r);
        // Chunk 0 is in swap; its page-in fails: poisoned, and a kernel read gets EFAULT.
        inj.fail_reads(libc::EIO, 1);
        let e = kernel_reads(&r, ps, 16).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{mode:?}");
        assert_eq!(r.stats().poisoned_chunks, 1);
        // Only the page the failed read was for (a scattered fault reads its page alone)
        // is lost: the next page of the chunk still reads from swap.
        assert!(kernel_reads(&r, 2 * ps, 16).is_ok(), "{mode:?}");
        // Discarding another part of the chunk: page 1 stays poisoned.
        r.discard(0, ps).unwrap();
        assert_eq!(r.stats().poisoned_chunks, 1);
        assert!(kernel_reads(&r, ps, 16).is_err());
        // All of it: a fresh zero chunk, usable again.
        r.discard(0, chunk).unwrap();
        assert_eq!(r.stats().poisoned_chunks, 0, "{mode:?}");
        assert_eq!(kernel_reads(&r, ps, 16).unwrap(), vec![0u8; 16], "{mode:?}");
        write(&r, 0, &[9; 64]);
        let mut b = [0u8; 64];
        read(&r, 0, &mut b);
        assert_eq!(b, [9; 64]);
        verify_others(&r, chunk);
        let errors = r.take_errors();
        assert!(
            errors
                .iter()
                .any(|e| matches!(e, PagerError::SwapRead { .. })),
            "{errors:?}"
        );
    }
}

/// Chunks 1.. still hold their patterns.
fn verify_others(r: &Region, chunk: usize) {
    let mut want = vec![0u8; chunk];
    let mut got = vec![0u8; chunk];
    for c in 1..r.len() / chunk {
        pattern(1000 + c as u64, &mut want);
        read(r, c * chunk, &mut got);
        assert!(got == want, "chunk {c}");
    }
}

fn memfd(name: &str) -> OwnedFd {
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: a valid NUL-terminated name.
    let fd = unsafe { libc::memfd_create(n.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: memfd_create returned a fresh descriptor.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[test]
fn adopts_an_empty_memfd_and_refuses_others() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let chunk = 4 * page_size();
    let len = 6 * chunk;
    let fd = memfd("memory-backend-memfd");
    // SAFETY: ftruncate on a live descriptor.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), len as i64) }, 0);
    let keep = fd.try_clone().unwrap();
    let r = Region::new(
        RegionConfig::new(len, 2 * chunk, dir.path())
            .chunk_size(chunk)
            .memfd(fd)
            .log_errors(false),
    )
    .unwrap();
    fill_all(&r);
    verify(&r, &[]);
    // The VMM's descriptor sees the region's resident memory (at most the budget).
    let held = std::fs::File::from(keep.try_clone().unwrap())
        .metadata()
        .map(|m| std::os::unix::fs::MetadataExt::blocks(&m) * 512)
        .unwrap();
    assert!(held > 0 && held <= 2 * chunk as u64, "{held}");
    drop(r);

    // A memfd that already holds data.
    let full = memfd("full");
    // SAFETY: writes from a live buffer to a live descriptor.
    let n = unsafe { libc::write(full.as_raw_fd(), [1u8; 100].as_ptr().cast(), 100) };
    assert_eq!(n, 100);
    let e = Region::new(
        RegionConfig::new(len, chunk, dir.path())
            .chunk_size(chunk)
            .memfd(full),
    )
    .unwrap_err();
    assert!(e.to_string().contains("already holds"), "{e}");
    // A regular file.
    let file = std::fs::File::create(dir.path().join("plain")).unwrap();
    let e = Region::new(
        RegionConfig::new(len, chunk, dir.path())
            .chunk_size(chunk)
            .memfd(file.into()),
    )
    .unwrap_err();
    assert!(e.to_string().contains("not a memfd"), "{e}");
}

/// A budget that covers the region whole leaves no headroom to keep free: asynchronous page-out
/// never evicts (a pager that did would only fault the pages back, as QEMU's guest RAM under a
/// budget of its size did with every read into it).
#[test]
fn a_region_within_its_budget_never_pages_out() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for page_out in PAGE_OUTS {
        let r = region_with(dir.path(), 16, 16, ResolveMode::Copy, page_out);
        fill_all(&r);
        for _ in 0..3 {
            verify(&r, &[]);
        }
        let s = r.stats();
        assert_eq!(
            (s.page_outs, s.page_ins, s.resident_chunks),
            (0, 0, 16),
            "{page_out:?}: {s:?}"
        );
    }
}
