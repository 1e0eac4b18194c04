//! Map-ahead: a thread streaming forward finds the chunks ahead of it mapped (brought in by the
//! handler between its faults), with the same data a fault would have brought; streams that
//! interleave with faults elsewhere stay streams; and randomized scans, scattered accesses and
//! discards against a shadow copy never read wrong bytes.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{kernel_reads, pattern, read, stress_seed, supported, write, Rng};
use memvisor_pager::{
    page_size, FaultInjector, PageOut, PagerError, Region, RegionConfig, RegionStats, ResolveMode,
};
use memvisor_policy::PolicySpec;

const CHUNK_PAGES: usize = 4;

/// A region of `chunks` chunks under a budget of `budget` chunks, every page written with its
/// pattern (all but the last `budget` chunks are then out of memory).
fn filled(dir: &std::path::Path, chunks: usize, budget: usize, map_ahead: usize) -> Region {
    filled_as(config(dir, chunks, budget).map_ahead(map_ahead), chunks)
}

/// The configuration of [`filled`]'s region, to add to.
fn config(dir: &std::path::Path, chunks: usize, budget: usize) -> RegionConfig {
    let chunk = CHUNK_PAGES * page_size();
    RegionConfig::new(chunks * chunk, budget * chunk, dir)
        .chunk_size(chunk)
        .sample_interval(None)
        .log_errors(false)
}

/// A region of `chunks` chunks made with `cfg`, every page written with its pattern.
fn filled_as(cfg: RegionConfig, chunks: usize) -> Region {
    let ps = page_size();
    let r = Region::new(cfg).unwrap();
    let mut buf = vec![0u8; ps];
    for p in 0..chunks * CHUNK_PAGES {
        pattern(p as u64, &mut buf);
        write(&r, p * ps, &buf);
    }
    r
}

/// Reads page `p` of `r` and checks its pattern (`want` and `got`: a page each, reused).
fn check_page(r: &Region, p: usize, want: &mut [u8], got: &mut [u8]) {
    pattern(p as u64, want);
    read(r, p * page_size(), got);
    assert!(got == want, "page {p}");
}

/// Reads chunks `chunks` of `r` in order, a page at a time, checking each page's pattern, and
/// working `per_chunk` on each (as a program would) before the next.
fn scan(r: &Region, chunks: std::ops::Range<usize>, per_chunk: Duration) {
    let ps = page_size();
    let (mut want, mut got) = (vec![0u8; ps], vec![0u8; ps]);
    for c in chunks {
        for p in c * CHUNK_PAGES..(c + 1) * CHUNK_PAGES {
            check_page(r, p, &mut want, &mut got);
        }
        std::thread::sleep(per_chunk);
    }
}

fn since(a: &RegionStats, b: &RegionStats) -> (u64, u64, u64) {
    (
        b.missing_faults - a.missing_faults,
        b.page_ins - a.page_ins,
        b.chunks_mapped_ahead - a.chunks_mapped_ahead,
    )
}

#[test]
fn a_forward_stream_finds_the_chunks_ahead_mapped() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 24 chunks of budget: map-ahead's 2 chunks are within an eighth of it.
    let r = filled(dir.path(), 96, 24, 2);
    let before = r.stats();
    scan(&r, 0..72, Duration::from_micros(300));
    let (faults, page_ins, ahead) = since(&before, &r.stats());
    assert!(ahead >= 30, "{ahead} of {page_ins} page-ins mapped ahead");
    assert!(
        faults + 20 <= page_ins,
        "{faults} missing faults for {page_ins} page-ins"
    );
    assert!(r.take_errors().is_empty());
    // Off: every chunk is brought in by its own fault.
    let dir = tempfile::tempdir().unwrap();
    let off = filled(dir.path(), 96, 24, 0);
    let before = off.stats();
    scan(&off, 0..72, Duration::from_micros(300));
    let (faults, page_ins, ahead) = since(&before, &off.stats());
    assert_eq!(ahead, 0);
    assert!(faults >= page_ins, "{faults} faults, {page_ins} page-ins");
}

#[test]
fn a_small_budget_maps_nothing_ahead() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 8 chunks: two chunks ahead would be a quarter of it, and could evict the thread's own.
    let r = filled(dir.path(), 48, 8, 2);
    scan(&r, 0..40, Duration::from_micros(300));
    assert_eq!(r.stats().chunks_mapped_ahead, 0, "{:?}", r.stats());
}

#[test]
fn a_stream_interleaved_with_faults_elsewhere_stays_a_stream() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    // Map-ahead off, to count the stream's own page-ins: with 4-page chunks a chunk read whole
    // takes one fault, a stream that keeps starting over takes up to three (a page, then a
    // window of 4 pages from the second).
    let r = filled(dir.path(), 160, 24, 0);
    let (mut want, mut got) = (vec![0u8; ps], vec![0u8; ps]);
    let before = r.stats();
    for c in 0..64 {
        // The stream's chunk...
        for p in c * CHUNK_PAGES..(c + 1) * CHUNK_PAGES {
            check_page(&r, p, &mut want, &mut got);
        }
        // ...and, once it has streamed a few chunks, a page far from it, out of memory
        // (another chunk each time).
        if c < 4 {
            continue;
        }
        let far = (100 + c % 60) * CHUNK_PAGES + c % CHUNK_PAGES;
        check_page(&r, far, &mut want, &mut got);
    }
    let (faults, _, _) = since(&before, &r.stats());
    // 60 far pages and 64 stream chunks, a fault each, and a few while the stream starts.
    // Ending the stream at each far page instead took 184 faults: a page, then a window,
    // at each chunk of the stream.
    assert!(faults <= 60 + 64 + 8, "{faults} missing faults");
    assert!(r.take_errors().is_empty());
}

/// A read that fails while the handler maps a chunk ahead (the swap disk returning EIO) is
/// handled as at a fault: that chunk's pages are poisoned (a kernel read of them is EFAULT, a
/// program's access SIGBUS), the error is recorded, and the stream and every other chunk go on
/// with their bytes. Readahead is off so that every read is a page-in's own (a failed prefetch
/// is `readahead.rs`'s test), and the thread reads through the kernel, which sees the poisoned
/// pages as EFAULT where the thread itself would die.
#[test]
fn a_failed_read_while_mapping_ahead_poisons_that_chunk_only() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunks = 96;
    for mode in [ResolveMode::Copy, ResolveMode::AliasContinue] {
        let dir = tempfile::tempdir().unwrap();
        let inj = Arc::new(FaultInjector::new());
        let cfg = config(dir.path(), chunks, 24)
            .map_ahead(2)
            .readahead(false)
            .resolve(mode)
            .fault_injector(inj.clone());
        let r = filled_as(cfg, chunks);
        let mut want = vec![0u8; ps];
        let mut armed = false;
        let mut poisoned = Vec::new();
        for c in 0..72 {
            let faults = r.stats().missing_faults;
            for p in c * CHUNK_PAGES..(c + 1) * CHUNK_PAGES {
                match kernel_reads(&r, p * ps, ps) {
                    Ok(got) => {
                        pattern(p as u64, &mut want);
                        assert!(got == want, "{mode:?}: page {p}");
                    }
                    Err(e) => {
                        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{mode:?}: page {p}");
                        if poisoned.last() != Some(&c) {
                            // Poisoned before the thread came: no fault of its own.
                            assert_eq!(r.stats().missing_faults, faults, "{mode:?}: chunk {c}");
                            poisoned.push(c);
                        }
                    }
                }
            }
            // Once the stream runs, after a chunk the thread faulted on (the handler then maps
            // the next two ahead), let those two page-ins end, and fail the second read after
            // them: the next fault's is the first, the chunk mapped ahead of that fault the
            // second.
            let faulted = r.stats().missing_faults > faults;
            if c >= 12 && faulted && !armed {
                std::thread::sleep(Duration::from_millis(20));
                inj.fail_reads_after(1, libc::EIO, 1);
                armed = true;
            }
            // Armed, the thread leaves the handler time to map ahead before it gets there
            // (else its own fault reads the chunk), even on a loaded machine.
            let work = if armed { 5000 } else { 300 };
            std::thread::sleep(Duration::from_micros(work));
        }
        assert!(armed, "{mode:?}: the stream never faulted after chunk 12");
        assert_eq!(poisoned.len(), 1, "{mode:?}: poisoned chunks {poisoned:?}");
        let s = r.stats();
        assert_eq!(
            (s.read_errors, s.poisoned_chunks),
            (1, 1),
            "{mode:?}: {s:?}"
        );
        let bad = poisoned[0];
        let errors = r.take_errors();
        assert!(
            errors
                .iter()
                .any(|e| matches!(e, PagerError::SwapRead { chunk, .. } if *chunk == bad as u64)),
            "{mode:?}: {errors:?}"
        );
        // Every other chunk, evicted since or not, holds its bytes.
        for p in (0..chunks * CHUNK_PAGES).filter(|p| p / CHUNK_PAGES != bad) {
            pattern(p as u64, &mut want);
            assert_eq!(
                kernel_reads(&r, p * ps, ps).unwrap(),
                want,
                "{mode:?}: page {p}"
            );
        }
        assert!(s.chunks_mapped_ahead >= 20, "{mode:?}: {s:?}");
    }
}

/// Threads scanning forward through random stretches (reading and writing), touching single
/// pages anywhere, and discarding ranges, against a shadow copy; the budget is large enough
/// for map-ahead to run.
fn stress(policy: PolicySpec, mode: ResolveMode, page_out: PageOut) -> RegionStats {
    let ps = page_size();
    let chunk = CHUNK_PAGES * ps;
    let chunks = 80;
    let pages = chunks * CHUNK_PAGES;
    let dir = tempfile::tempdir().unwrap();
    let cfg = RegionConfig::new(chunks * chunk, 20 * chunk, dir.path())
        .chunk_size(chunk)
        .policy(policy.clone())
        .resolve(mode)
        .page_out(page_out)
        .sample_interval(Some(Duration::from_millis(20)))
        .log_errors(false);
    let region = Arc::new(Region::new(cfg).unwrap());
    let shadow: Arc<Vec<Mutex<Vec<u8>>>> =
        Arc::new((0..pages).map(|_| Mutex::new(vec![0u8; ps])).collect());
    let threads: Vec<_> = (0..3u64)
        .map(|t| {
            let (region, shadow, policy) = (region.clone(), shadow.clone(), policy.to_string());
            std::thread::spawn(move || {
                let seed = stress_seed();
                let mut rng = Rng::new(t + 31 + (seed << 8));
                let mut buf = vec![0u8; ps];
                let check = |p: usize, buf: &mut [u8], page: &[u8], what: &str| {
                    read(&region, p * ps, buf);
                    assert!(
                        *buf == *page,
                        "thread {t} (seed {seed}, {policy} {mode:?} {page_out:?}): page {p} \
                         differs after {what}"
                    );
                };
                for _ in 0..60 {
                    match rng.below(8) {
                        0 if t == 0 => {
                            // Discard a few pages somewhere.
                            let first = rng.below(pages);
                            let n = (1 + rng.below(2 * CHUNK_PAGES)).min(pages - first);
                            let mut held: Vec<_> = (first..first + n)
                                .map(|q| shadow[q].lock().unwrap())
                                .collect();
                            region.discard(first * ps, n * ps).unwrap();
                            for page in held.iter_mut() {
                                page.fill(0);
                            }
                        }
                        0..=1 => {
                            // A scattered page: write it or check it.
                            let p = rng.below(pages);
                            let mut page = shadow[p].lock().unwrap();
                            if rng.below(2) == 0 {
                                pattern(rng.next(), &mut buf);
                                write(&region, p * ps, &buf);
                                page.copy_from_slice(&buf);
                            } else {
                                check(p, &mut buf, &page, "a scattered access");
                            }
                        }
                        _ => {
                            // A forward scan, mostly reading, now and then writing a page.
                            let first = rng.below(pages);
                            let n = (8 + rng.below(30 * CHUNK_PAGES)).min(pages - first);
                            for p in first..first + n {
                                let mut page = shadow[p].lock().unwrap();
                                if rng.below(16) == 0 {
                                    pattern(rng.next(), &mut buf);
                                    write(&region, p * ps, &buf);
                                    page.copy_from_slice(&buf);
                                } else {
                                    check(p, &mut buf, &page, "a scan");
                                }
                                if p % CHUNK_PAGES == CHUNK_PAGES - 1 {
                                    std::thread::sleep(Duration::from_micros(50));
                                }
                            }
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut buf = vec![0u8; ps];
    for (p, page) in shadow.iter().enumerate() {
        let page = page.lock().unwrap();
        read(&region, p * ps, &mut buf);
        assert!(
            buf == *page,
            "final check (seed {}): page {p}",
            stress_seed()
        );
    }
    let s = region.stats();
    assert_eq!(
        s.read_errors + s.poisoned_chunks + s.write_errors,
        0,
        "{s:?}"
    );
    assert_eq!(s.dirty_tracking_misses, 0, "{s:?}");
    assert!(region.take_errors().is_empty());
    s
}

#[test]
fn randomized_scans_with_map_ahead() {
    if !supported() {
        return;
    }
    let mut ahead = 0;
    for policy in [PolicySpec::Clock, PolicySpec::Fifo] {
        for (mode, page_out) in [
            (ResolveMode::Copy, PageOut::default()),
            (ResolveMode::AliasContinue, PageOut::Sync),
            (ResolveMode::Copy, PageOut::Threads(2)),
        ] {
            ahead += stress(policy.clone(), mode, page_out).chunks_mapped_ahead;
        }
    }
    // Scans of up to 30 chunks under a 20-chunk budget: some chunks were mapped ahead.
    assert!(ahead > 0, "nothing mapped ahead");
}
