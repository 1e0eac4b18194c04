//! Sequential readahead: page-ins in address order read the next chunk ahead; the prefetched
//! bytes are used only while the chunk's swap copy is unchanged, and pass the same checks (and
//! injected failures) as a read on the fault path.

mod common;

use std::sync::Arc;

use common::{kernel_reads, pattern, read, supported, write};
use memvisor_pager::{page_size, FaultInjector, PageOut, PagerError, Region, RegionConfig};

const CHUNK_PAGES: usize = 4;

/// A region of `chunks` chunks with a 2-chunk budget, every chunk written with its pattern, so
/// that all but the last two are in swap. Synchronous page-out: which chunks are in swap at each
/// step does not depend on when writer threads finish.
fn filled(dir: &std::path::Path, chunks: usize, inj: Option<Arc<FaultInjector>>) -> Region {
    let chunk = CHUNK_PAGES * page_size();
    let mut cfg = RegionConfig::new(chunks * chunk, 2 * chunk, dir)
        .chunk_size(chunk)
        .page_out(PageOut::Sync)
        .sample_interval(None)
        .log_errors(false);
    cfg.fault_injector = inj;
    let r = Region::new(cfg).unwrap();
    let mut buf = vec![0u8; chunk];
    for c in 0..chunks {
        pattern(500 + c as u64, &mut buf);
        write(&r, c * chunk, &buf);
    }
    r
}

fn chunk_ok(r: &Region, c: usize) -> bool {
    let chunk = r.chunk_size();
    let mut want = vec![0u8; chunk];
    let mut got = vec![0u8; chunk];
    pattern(500 + c as u64, &mut want);
    read(r, c * chunk, &mut got);
    got == want
}

#[test]
fn sequential_passes_are_served_from_readahead() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = filled(dir.path(), 16, None);
    for _pass in 0..2 {
        for c in 0..16 {
            assert!(chunk_ok(&r, c), "chunk {c}");
        }
    }
    let s = r.stats();
    assert!(s.readahead_reads > 10, "{s:?}");
    assert!(s.readahead_hits > 10, "{s:?}");
    assert!(s.readahead_hits <= s.readahead_reads && s.readahead_hits <= s.page_ins);
    // Off: no readahead at all.
    let chunk = CHUNK_PAGES * page_size();
    let off = Region::new(
        RegionConfig::new(16 * chunk, 2 * chunk, dir.path())
            .chunk_size(chunk)
            .readahead(false),
    )
    .unwrap();
    let mut buf = vec![1u8; chunk];
    for c in 0..16 {
        write(&off, c * chunk, &buf);
    }
    for c in 0..16 {
        read(&off, c * chunk, &mut buf);
    }
    assert_eq!(off.stats().readahead_reads, 0);
}

/// The next chunk is being read ahead when it is discarded (whole or in part): its fault must
/// see the discard, not the prefetched bytes.
#[test]
fn a_chunk_discarded_after_its_readahead_reads_as_discarded() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = CHUNK_PAGES * ps;
    let dir = tempfile::tempdir().unwrap();
    let r = filled(dir.path(), 10, None);
    // Page-ins of 0 then 1: chunk 2 is read ahead. Discard it whole, then read it.
    assert!(chunk_ok(&r, 0) && chunk_ok(&r, 1));
    assert!(r.stats().readahead_reads >= 1, "{:?}", r.stats());
    r.discard(2 * chunk, chunk).unwrap();
    let mut got = vec![1u8; chunk];
    read(&r, 2 * chunk, &mut got);
    assert!(
        got.iter().all(|&b| b == 0),
        "discarded chunk 2 reads old data"
    );
    // New content in chunk 2, sent to swap, and read back: the stale read-ahead of its old
    // content (still pending: no page-in in address order since) must not be taken for it.
    let mut fresh = vec![0u8; chunk];
    pattern(9999, &mut fresh);
    write(&r, 2 * chunk, &fresh);
    r.set_budget(chunk).unwrap();
    for c in [9, 7] {
        assert!(chunk_ok(&r, c), "chunk {c}");
    }
    r.set_budget(2 * chunk).unwrap();
    assert_eq!(
        kernel_reads(&r, 2 * chunk, 16).unwrap(),
        fresh[..16].to_vec()
    );
    read(&r, 2 * chunk, &mut got);
    assert!(got == fresh, "chunk 2 after rewrite");
    // Read 4 and 5 so that 6 is read ahead, discard a page of 6, then read 6.
    assert!(chunk_ok(&r, 4) && chunk_ok(&r, 5));
    r.discard(6 * chunk + ps, ps).unwrap();
    let mut want = vec![0u8; chunk];
    pattern(506, &mut want);
    want[ps..2 * ps].fill(0);
    read(&r, 6 * chunk, &mut got);
    assert!(got == want, "partly discarded chunk 6");
    assert!(chunk_ok(&r, 7) && chunk_ok(&r, 8) && chunk_ok(&r, 9));
    assert!(r.take_errors().is_empty());
    assert_eq!(r.stats().poisoned_chunks, 0);
}

/// Injected read failures and corruption apply to a prefetched chunk as to any page-in: the
/// chunk is poisoned (a kernel read sees EFAULT), never mapped with bad bytes.
#[test]
fn a_corrupt_prefetched_chunk_is_poisoned_not_mapped() {
    if !supported() {
        return;
    }
    let chunk = CHUNK_PAGES * page_size();
    for corrupt in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let inj = Arc::new(FaultInjector::new());
        let r = filled(dir.path(), 8, Some(inj.clone()));
        assert!(chunk_ok(&r, 0) && chunk_ok(&r, 1));
        let before = r.stats();
        assert!(before.readahead_reads >= 1, "{before:?}");
        if corrupt {
            inj.corrupt_reads(1);
        } else {
            inj.fail_reads(libc::EIO, 1);
        }
        let e = kernel_reads(&r, 2 * chunk, 64).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        let s = r.stats();
        assert_eq!(s.poisoned_chunks, 1, "{s:?}");
        let errors = r.take_errors();
        assert!(
            errors.iter().any(|e| matches!(
                e,
                PagerError::Checksum { chunk: 2, .. } | PagerError::SwapRead { chunk: 2, .. }
            )),
            "{errors:?}"
        );
        // The others are intact.
        for c in [3, 4, 5, 6, 7, 0, 1] {
            assert!(chunk_ok(&r, c), "chunk {c}");
        }
    }
}
