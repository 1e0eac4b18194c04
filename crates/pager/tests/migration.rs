//! Live migration between two real regions (seed 003, section 3), without the network: the
//! source's pages are read where they are (memory, swap) while a thread keeps writing and
//! discarding, the destination installs them within its budget and the rest straight into
//! swap, changed pages go again round after round, and after a last round with the writer
//! stopped the destination holds every byte the source holds.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use common::{pattern, read, supported, write, Rng};
use memvisor_pager::{page_size, InstallOutcome, Region, RegionConfig, ResolveMode};

const MODES: [ResolveMode; 2] = [ResolveMode::Copy, ResolveMode::AliasContinue];
const PAGES_PER_CHUNK: usize = 4;

fn region(dir: &tempfile::TempDir, mode: ResolveMode, chunks: usize, budget: usize) -> Region {
    let chunk = PAGES_PER_CHUNK * page_size();
    Region::new(
        RegionConfig::new(chunks * chunk, budget * chunk, dir.path())
            .chunk_size(chunk)
            .resolve(mode),
    )
    .unwrap()
}

/// Sends region pages `runs` from `src` to `dst` as a migration does: non-zero pages
/// installed, zero pages discarded (`zeros_too`: the destination may hold older data there).
fn send(src: &Region, dst: &Region, runs: &[(usize, usize)], zeros_too: bool) -> InstallOutcome {
    let ps = page_size();
    let mut total = InstallOutcome::default();
    for &(first, n) in runs {
        let pages = src.read_for_migration(first, n).unwrap();
        assert_eq!((pages.first_page, pages.len()), (first, n));
        for (f, k) in pages.nonzero_runs() {
            let o = dst
                .install_pages(first + f, pages.bytes(f, k).to_vec())
                .unwrap();
            total.in_memory += o.in_memory;
            total.to_swap += o.to_swap;
        }
        if zeros_too {
            for (f, k) in pages.zero_runs() {
                dst.discard((first + f) * ps, k * ps).unwrap();
            }
        }
    }
    total
}

/// Every chunk of the source's order, whole.
fn chunk_runs(src: &Region) -> Vec<(usize, usize)> {
    let pages = src.len() / page_size();
    src.migration_order()
        .unwrap()
        .into_iter()
        .map(|c| {
            let first = c * PAGES_PER_CHUNK;
            (first, PAGES_PER_CHUNK.min(pages - first))
        })
        .collect()
}

fn contents(r: &Region) -> Vec<u8> {
    let mut out = vec![0u8; r.len()];
    read(r, 0, &mut out);
    out
}

#[test]
fn a_region_moves_while_a_thread_writes_and_discards() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let chunks = 48;
        let src = region(&dir, mode, chunks, 8);
        let dst = region(&dir, mode, chunks, 5);
        let pages = chunks * PAGES_PER_CHUNK;
        // Every third page stays zero; the rest hold data, most of it in swap by now.
        let mut shadow = vec![0u8; pages * ps];
        for p in (0..pages).filter(|p| p % 3 != 0) {
            pattern(p as u64, &mut shadow[p * ps..(p + 1) * ps]);
            write(&src, p * ps, &shadow[p * ps..(p + 1) * ps]);
        }
        src.start_change_tracking().unwrap();
        let stop = AtomicBool::new(false);
        let done_ops = AtomicUsize::new(0);
        let mut round0 = InstallOutcome::default();
        let mut later_pages = 0;
        let initial = shadow.clone();
        std::thread::scope(|s| {
            let writer = s.spawn(|| {
                let mut rng = Rng::new(7 + mode as u64);
                let mut shadow = initial;
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) || ops < 400 {
                    let p = rng.below(pages);
                    let page = &mut shadow[p * ps..(p + 1) * ps];
                    match rng.below(10) {
                        0 => {
                            src.discard(p * ps, ps).unwrap();
                            page.fill(0);
                        }
                        1 => {
                            page.fill(0);
                            write(&src, p * ps, page);
                        }
                        _ => {
                            // A few bytes at a random place: a partly written page.
                            let at = rng.below(ps - 8);
                            page[at..at + 8].copy_from_slice(&rng.next().to_le_bytes());
                            write(&src, p * ps + at, &page[at..at + 8]);
                        }
                    }
                    ops += 1;
                    done_ops.store(ops as usize, Ordering::Relaxed);
                }
                shadow
            });
            // The rounds below run while the writer writes: wait for its first writes (on a
            // busy machine the whole migration could otherwise pass before its first turn).
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while done_ops.load(Ordering::Relaxed) < 20 && std::time::Instant::now() < deadline {
                std::thread::yield_now();
            }
            round0 = send(&src, &dst, &chunk_runs(&src), false);
            for _ in 0..4 {
                let changed = src.take_changed_pages().unwrap();
                later_pages += changed.iter().map(|r| r.1).sum::<usize>();
                send(&src, &dst, &changed, true);
            }
            stop.store(true, Ordering::Relaxed);
            shadow = writer.join().unwrap();
        });
        // The last round: the writer has stopped (the guest is paused).
        let changed = src.take_changed_pages().unwrap();
        later_pages += changed.iter().map(|r| r.1).sum::<usize>();
        send(&src, &dst, &changed, true);
        assert!(
            src.take_changed_pages().unwrap().is_empty(),
            "{mode:?}: no change since"
        );
        src.stop_change_tracking().unwrap();
        assert!(
            round0.in_memory > 0 && round0.to_swap > 0,
            "{mode:?}: the destination's budget is smaller than the data: {round0:?}"
        );
        assert!(
            later_pages > 0,
            "{mode:?}: the writer's changes were sent again"
        );
        let st = dst.stats();
        assert!(
            st.resident_pages as usize <= 5 * PAGES_PER_CHUNK,
            "{mode:?}: the destination kept its budget: {st:?}"
        );
        let got = contents(&dst);
        for p in 0..pages {
            assert!(
                got[p * ps..(p + 1) * ps] == shadow[p * ps..(p + 1) * ps],
                "{mode:?}: destination page {p} differs from the source's"
            );
        }
        assert!(contents(&src) == shadow, "{mode:?}: the source is intact");
    }
}

#[test]
fn swapped_pages_are_sent_without_page_ins() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let src = region(&dir, ResolveMode::Copy, 32, 4);
    let mut data = vec![0u8; src.len()];
    pattern(99, &mut data);
    write(&src, 0, &data);
    src.start_change_tracking().unwrap();
    let before = src.stats();
    let mut got = vec![0u8; src.len()];
    for (first, n) in chunk_runs(&src) {
        let pages = src.read_for_migration(first, n).unwrap();
        got[first * ps..(first + n) * ps].copy_from_slice(&pages.data);
    }
    let after = src.stats();
    assert!(got == data, "every page read where it is");
    assert_eq!(after.page_ins, before.page_ins, "no page-in");
    // Page-outs in flight may complete meanwhile; nothing comes in.
    assert!(after.resident_pages <= before.resident_pages);
    assert_eq!(after.migration_pages_read as usize, src.len() / ps);
    assert!(
        src.take_changed_pages().unwrap().is_empty(),
        "reading changes nothing"
    );
}

#[test]
fn pages_only_read_while_changes_are_tracked_are_not_sent_again() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let src = region(&dir, mode, 8, 8);
        src.start_change_tracking().unwrap();
        // Never written: every read fills zero pages.
        let mut got = vec![1u8; src.len()];
        read(&src, 0, &mut got);
        assert!(got.iter().all(|&b| b == 0), "{mode:?}: zeros");
        assert!(
            src.stats().zero_fills > 0,
            "{mode:?}: the reads filled zeros"
        );
        assert_eq!(
            src.take_changed_pages().unwrap(),
            Vec::<(usize, usize)>::new(),
            "{mode:?}: pages only read did not change"
        );
        write(&src, 5 * ps + 17, &[9]);
        assert_eq!(
            src.take_changed_pages().unwrap(),
            vec![(5, 1)],
            "{mode:?}: the written page, alone"
        );
        src.stop_change_tracking().unwrap();
    }
}

#[test]
fn bad_requests_are_refused_with_the_region_and_offset() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = region(&dir, ResolveMode::Copy, 8, 2);
    let e = r.take_changed_pages().unwrap_err().to_string();
    assert!(e.contains("not being tracked"), "{e}");
    let e = r.read_for_migration(2, 4).unwrap_err().to_string();
    assert!(
        e.contains("not inside one chunk") && e.contains("0x2000"),
        "{e}"
    );
    let e = r.install_pages(0, vec![1; 100]).unwrap_err().to_string();
    assert!(e.contains("not whole pages"), "{e}");
    let e = r
        .install_pages(8 * PAGES_PER_CHUNK, vec![1; page_size()])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not inside one chunk"), "{e}");
    // Post-copy's requests: the same rules.
    let e = r
        .install_remote_runs(vec![(0, vec![1; page_size() + 1])])
        .unwrap_err()
        .to_string();
    assert!(e.contains("not whole pages"), "{e}");
    let e = r.mark_remote(vec![(3, 2)]).unwrap_err().to_string();
    assert!(
        e.contains("not inside one chunk") && e.contains("0x3000"),
        "{e}"
    );
    assert_eq!(r.remote_pages(), 0, "nothing marked");
}

#[test]
fn chunks_go_in_the_policys_rank_resident_first() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let chunk = PAGES_PER_CHUNK * ps;
    let r = Region::new(
        RegionConfig::new(16 * chunk, 6 * chunk, dir.path())
            .chunk_size(chunk)
            .policy("fifo".parse().unwrap()),
    )
    .unwrap();
    // Chunks 0..12 written in order under a budget of 6: FIFO keeps the last ones, and ranks
    // the most recently admitted first. Chunks 12..16 are never written.
    for c in 0..12 {
        write(&r, c * chunk, &[c as u8 + 1; 64]);
    }
    let order = r.migration_order().unwrap();
    let resident = r.stats().resident_chunks as usize;
    assert!((1..=6).contains(&resident), "{resident}");
    let expect_resident: Vec<usize> = (12 - resident..12).rev().collect();
    assert_eq!(&order[..resident], &expect_resident[..], "{order:?}");
    let mut rest = order[resident..].to_vec();
    rest.sort_unstable();
    assert_eq!(
        rest,
        (0..12 - resident).collect::<Vec<_>>(),
        "swapped chunks follow: {order:?}"
    );
    // The region still works: every written chunk reads back.
    for c in 0..12 {
        let mut b = [0u8; 64];
        read(&r, c * chunk, &mut b);
        assert_eq!(b, [c as u8 + 1; 64], "chunk {c}");
    }
}

#[test]
fn swap_reads_for_migration_count_as_swap_reads() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let r = region(&dir, ResolveMode::Copy, 16, 2);
    let mut data = vec![0u8; r.len()];
    pattern(5, &mut data);
    write(&r, 0, &data);
    let before = r.stats();
    for (first, n) in chunk_runs(&r) {
        r.read_for_migration(first, n).unwrap();
    }
    let after = r.stats();
    assert!(
        after.bytes_read - before.bytes_read >= (12 * PAGES_PER_CHUNK * page_size()) as u64,
        "{before:?}\n{after:?}"
    );
}
