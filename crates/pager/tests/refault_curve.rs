//! A region's refault curve (`Region::refault_curve`) says how many page-ins more budget
//! would have saved: checked by giving the region that budget and counting the page-ins
//! that remain.

mod common;

use common::{pattern, read, supported, write};
use memvisor_pager::{page_size, PageOut, Region, RegionConfig, ResolveMode};
use memvisor_policy::PolicySpec;

const CHUNKS: usize = 32;

fn region(dir: &std::path::Path, budget_chunks: usize, policy: &str) -> Region {
    let chunk = 4 * page_size();
    Region::new(
        RegionConfig::new(CHUNKS * chunk, budget_chunks * chunk, dir)
            .chunk_size(chunk)
            .policy(policy.parse::<PolicySpec>().unwrap())
            .resolve(ResolveMode::Copy)
            .page_out(PageOut::Sync)
            .sample_interval(None)
            .log_errors(false),
    )
    .unwrap()
}

/// Reads the whole of chunks `0..n` once, in order, checking their patterns.
fn pass(r: &Region, n: usize) {
    let chunk = r.chunk_size();
    let mut want = vec![0u8; chunk];
    let mut got = vec![0u8; chunk];
    for c in 0..n {
        pattern(c as u64, &mut want);
        read(r, c * chunk, &mut got);
        assert!(got == want, "chunk {c} lost its data");
    }
}

#[test]
fn a_loop_over_more_than_the_budget_refaults_at_its_excess_and_no_more() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for policy in ["fifo", "lru", "clock"] {
        // 12 chunks in a loop through 8: every pass reads each chunk back 5 chunks (its own
        // included) of evictions after it left (not 4: the handler keeps one chunk of the
        // budget free ahead of demand).
        let r = region(dir.path(), 8, policy);
        let chunk = r.chunk_size() as u64;
        let mut buf = vec![0u8; r.chunk_size()];
        for c in 0..12 {
            pattern(c as u64, &mut buf);
            write(&r, c * r.chunk_size(), &buf);
        }
        let before = r.refault_curve();
        assert_eq!(
            before.unit_bytes, chunk,
            "the first buckets are one chunk wide"
        );
        assert_eq!(before.refaults.len(), 32, "32 chunks: linear buckets only");
        for _ in 0..5 {
            pass(&r, 12);
        }
        let curve = r.refault_curve();
        let page_ins = r.stats().page_ins;
        let refaults: u64 = curve.refaults.iter().sum::<u64>() + curve.beyond;
        assert!(page_ins >= 5 * 12, "{policy}: {page_ins} page-ins");
        assert_eq!(
            refaults, page_ins,
            "{policy}: every page-in read an evicted chunk back"
        );
        assert!(curve.evicted_bytes >= 5 * 4 * chunk, "{policy}: {curve:?}");
        if policy != "clock" {
            // Exact on a loop for FIFO and LRU; CLOCK's second chances spread the distances.
            assert_eq!(curve.saved_with(4 * chunk), 0, "{policy}: {curve:?}");
            assert_eq!(curve.saved_with(5 * chunk), page_ins, "{policy}: {curve:?}");
        }
        // Believe the curve: the extra budget that saves every page-in, and the loop pages
        // nothing in any more.
        let farthest = curve.refaults.iter().rposition(|&n| n > 0).unwrap();
        let farthest = curve.scale().upper(farthest);
        assert_eq!(curve.saved_with(farthest), page_ins, "{policy}: {curve:?}");
        let extra = (farthest.div_ceil(chunk) * chunk) as usize;
        r.set_budget(r.budget_bytes() + extra).unwrap();
        pass(&r, 12); // brings the evicted ones back once
        let settled = r.stats().page_ins;
        for _ in 0..5 {
            pass(&r, 12);
        }
        assert_eq!(
            r.stats().page_ins,
            settled,
            "{policy}: the curve promised no page-ins"
        );
        assert!(r.take_errors().is_empty());
    }
}

#[test]
fn discarded_chunks_are_not_refaults() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = region(dir.path(), 2, "fifo");
    let mut buf = vec![0u8; r.chunk_size()];
    for c in 0..4 {
        pattern(c as u64, &mut buf);
        write(&r, c * r.chunk_size(), &buf);
    }
    // Chunks 0 and 1 are in swap; discard them: reading them again fills zeros.
    r.discard(0, 2 * r.chunk_size()).unwrap();
    read(&r, 0, &mut buf);
    read(&r, r.chunk_size(), &mut buf);
    assert!(buf.iter().all(|&b| b == 0));
    let curve = r.refault_curve();
    assert_eq!(
        curve.refaults.iter().sum::<u64>() + curve.beyond,
        0,
        "{curve:?}"
    );
    assert_eq!(r.stats().page_ins, 0);
}
