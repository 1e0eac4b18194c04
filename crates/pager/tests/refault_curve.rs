//! A region's refault curve (`Region::refault_curve`) says how many page-ins more budget
//! would have saved: checked by giving the region that budget and counting the page-ins
//! that remain.

mod common;

use common::{pattern, read, supported, write, write_patterns};
use memvisor_pager::{page_size, PageInUnit, PageOut, Region, RegionConfig, ResolveMode};
use memvisor_policy::PolicySpec;

const CHUNKS: usize = 32;

/// Chunks of 4 pages, `budget_chunks` of them in memory, synchronous page-outs.
fn config(dir: &std::path::Path, budget_chunks: usize, policy: &str) -> RegionConfig {
    let chunk = 4 * page_size();
    RegionConfig::new(CHUNKS * chunk, budget_chunks * chunk, dir)
        .chunk_size(chunk)
        .policy(policy.parse::<PolicySpec>().unwrap())
        .resolve(ResolveMode::Copy)
        .page_out(PageOut::Sync)
        .sample_interval(None)
        .log_errors(false)
}

fn region(dir: &std::path::Path, budget_chunks: usize, policy: &str) -> Region {
    Region::new(config(dir, budget_chunks, policy)).unwrap()
}

/// Reads bytes `[i * unit, (i + 1) * unit)` of the region, checking that they hold
/// `pattern(i)`.
fn read_checked(r: &Region, unit: usize, i: usize) {
    let (mut want, mut got) = (vec![0u8; unit], vec![0u8; unit]);
    pattern(i as u64, &mut want);
    read(r, i * unit, &mut got);
    assert!(
        got == want,
        "bytes {} to {} lost their data",
        i * unit,
        (i + 1) * unit
    );
}

/// Reads the whole of chunks `0..n` once, in order, checking their patterns.
fn pass(r: &Region, n: usize) {
    for c in 0..n {
        read_checked(r, r.chunk_size(), c);
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

/// Refaults so far by bucket, the last entry those beyond the buckets.
fn refaults_by_bucket(r: &Region) -> Vec<u64> {
    let curve = r.refault_curve();
    let mut all = curve.refaults.clone();
    all.push(curve.beyond);
    all
}

/// The buckets that counted refaults between two [`refaults_by_bucket`], once per refault.
fn new_refaults(before: &[u64], after: &[u64]) -> Vec<usize> {
    (0..after.len())
        .flat_map(|k| std::iter::repeat_n(k, (after[k] - before[k]) as usize))
        .collect()
}

/// Reads page `p` of the region alone, checking its pattern.
fn read_page(r: &Region, p: usize) {
    read_checked(r, page_size(), p);
}

#[test]
fn pages_read_back_one_at_a_time_are_refaults_if_their_chunk_held_them() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = Region::new(
        config(dir.path(), 8, "fifo")
            .page_in_unit(PageInUnit::Page)
            .parallel_page_in(false),
    )
    .unwrap();
    let chunk = r.chunk_size();
    // Chunks 0 to 15 written whole: the first ones leave memory with all four pages.
    write_patterns(&r, 16 * 4);
    assert!(!r.covered_pages_resident(0, chunk), "chunk 0 was evicted");

    // Page 0 of chunk 0, then three other chunks (twelve page-ins, evicting as many pages),
    // then page 1: each counts at its own distance from the chunk's eviction.
    let before = refaults_by_bucket(&r);
    read_page(&r, 0);
    let first = new_refaults(&before, &refaults_by_bucket(&r));
    assert_eq!(first.len(), 1, "one refault: {first:?}");
    let evicted = r.refault_curve().evicted_bytes;
    for p in 4..16 {
        read_page(&r, p);
    }
    assert!(
        r.refault_curve().evicted_bytes >= evicted + 3 * chunk as u64,
        "chunks left memory in between"
    );
    let before = refaults_by_bucket(&r);
    read_page(&r, 1);
    let second = new_refaults(&before, &refaults_by_bucket(&r));
    assert_eq!(second.len(), 1, "one refault: {second:?}");
    assert!(second[0] > first[0], "farther: {first:?} then {second:?}");

    // Chunk 0 leaves with pages 0 and 1: of its four page-ins, those two are refaults.
    for p in 16..16 * 4 {
        read_page(&r, p);
        if !r.covered_pages_resident(0, 2 * page_size()) {
            break;
        }
    }
    assert!(
        !r.covered_pages_resident(0, page_size()),
        "chunk 0 was evicted again"
    );
    let (before, page_ins) = (refaults_by_bucket(&r), r.stats().page_ins);
    for p in 0..4 {
        read_page(&r, p);
    }
    assert_eq!(r.stats().page_ins, page_ins + 4);
    let held = new_refaults(&before, &refaults_by_bucket(&r));
    assert_eq!(held.len(), 2, "pages 2 and 3 were not in memory: {held:?}");
    assert!(r.take_errors().is_empty());
}
