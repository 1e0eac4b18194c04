//! Post-copy on a real region (the destination side of seed 003's post-copy variant): pages
//! marked remote are never shown with their stale or zero copy. An access waits until their
//! content is installed, and is named among the wanted pages meanwhile. A page the program
//! discards since is its own again, and a late install leaves it alone. Checked against a
//! shadow model under memory pressure, in both resolve modes.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{pattern, read, stress_seed, supported, write, Rng};
use memvisor_pager::{page_size, Region, RegionConfig, ResolveMode};

const MODES: [ResolveMode; 2] = [ResolveMode::Copy, ResolveMode::AliasContinue];
const PAGES_PER_CHUNK: usize = 4;

/// A region with frequent access samples: each drops the page-table entries of the chunks
/// the policy tracks, and the minor faults that follow map their resident pages again (never
/// a remote one).
fn region(dir: &tempfile::TempDir, mode: ResolveMode, chunks: usize, budget: usize) -> Region {
    let chunk = PAGES_PER_CHUNK * page_size();
    Region::new(
        RegionConfig::new(chunks * chunk, budget * chunk, dir.path())
            .chunk_size(chunk)
            .resolve(mode)
            .sample_interval(Some(Duration::from_millis(2))),
    )
    .unwrap()
}

/// The runs (region page, count) of `pages` (ascending), each inside one chunk.
fn runs_of(pages: &[usize]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = Vec::new();
    for &p in pages {
        match out.last_mut() {
            Some((f, n)) if *f + *n == p && p % PAGES_PER_CHUNK != 0 => *n += 1,
            _ => out.push((p, 1)),
        }
    }
    out
}

fn page_of(buf: &[u8], p: usize) -> &[u8] {
    &buf[p * page_size()..(p + 1) * page_size()]
}

#[test]
fn an_access_to_a_remote_page_waits_for_its_content() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let chunks = 16;
        let pages = chunks * PAGES_PER_CHUNK;
        let r = region(&dir, mode, chunks, 5);
        // Stale data everywhere: most of it in swap, the last chunks written in memory.
        let mut stale = vec![0u8; pages * ps];
        pattern(1, &mut stale);
        write(&r, 0, &stale);
        let mut fresh = vec![0u8; pages * ps];
        pattern(2, &mut fresh);
        // Resident and swapped pages, a whole chunk and single pages.
        let remote: Vec<usize> = (0..pages).filter(|p| p % 5 == 1 || *p / 4 == 9).collect();
        r.mark_remote(runs_of(&remote)).unwrap();
        assert_eq!(r.remote_pages(), remote.len(), "{mode:?}");
        // A page beside a resident remote one, read after a sample: its minor fault maps the
        // chunk's resident pages again, all but the remote one.
        std::thread::sleep(Duration::from_millis(20));
        let mut beside = vec![0u8; ps];
        read(&r, (pages - 4) * ps, &mut beside);
        assert!(beside == page_of(&stale, pages - 4), "{mode:?}");
        // Four readers, each touching one remote page (the last one in memory before).
        let readers = [1, 36, 38, pages - 3];
        let done = AtomicUsize::new(0);
        std::thread::scope(|s| {
            let handles: Vec<_> = readers
                .iter()
                .map(|&p| {
                    let (r, done) = (&r, &done);
                    s.spawn(move || {
                        let mut got = vec![0u8; ps];
                        read(r, p * ps, &mut got);
                        done.fetch_add(1, Ordering::SeqCst);
                        got
                    })
                })
                .collect();
            std::thread::sleep(Duration::from_millis(300));
            // Checked after the installs below (a failed check here would leave the other
            // readers blocked).
            let early = done.load(Ordering::SeqCst);
            let mut wanted = r.take_wanted_pages();
            wanted.sort_unstable();
            wanted.dedup();
            let mut expected = readers.to_vec();
            expected.sort_unstable();
            let faults = r.remote_faults();
            // The content comes, the wanted pages first, in one-page installs and runs.
            for &p in &readers {
                let placed = r
                    .install_remote_runs(vec![(p, page_of(&fresh, p).to_vec())])
                    .unwrap();
                assert_eq!(placed.in_memory + placed.to_swap, 1, "{mode:?}");
            }
            for (i, h) in handles.into_iter().enumerate() {
                let got = h.join().unwrap();
                let p = readers[i];
                assert!(got == page_of(&fresh, p), "{mode:?}: reader of page {p}");
            }
            assert_eq!(
                early, 0,
                "{mode:?}: a read of a remote page returned before its content came"
            );
            assert_eq!(wanted, expected, "{mode:?}: the waiting pages are wanted");
            assert_eq!(faults, 4, "{mode:?}");
        });
        for (f, n) in runs_of(&remote) {
            let data = fresh[f * ps..(f + n) * ps].to_vec();
            r.install_remote_runs(vec![(f, data)]).unwrap();
        }
        assert_eq!(r.remote_pages(), 0, "{mode:?}");
        // A second install of the same pages changes nothing: they are not remote.
        let placed = r
            .install_remote_runs(vec![(1, page_of(&stale, 1).to_vec())])
            .unwrap();
        assert_eq!(placed.in_memory + placed.to_swap, 0, "{mode:?}");
        let mut got = vec![0u8; pages * ps];
        read(&r, 0, &mut got);
        for p in 0..pages {
            let want = if remote.contains(&p) { &fresh } else { &stale };
            assert!(
                page_of(&got, p) == page_of(want, p),
                "{mode:?}: page {p} (remote {})",
                remote.contains(&p)
            );
        }
        let st = r.stats();
        assert!(
            st.resident_pages as usize <= 5 * PAGES_PER_CHUNK,
            "{mode:?}: budget kept: {st:?}"
        );
    }
}

/// Random operations of a program and a post-copy migration against a shadow model. Marking
/// happens in bursts (a pause); the program reads and writes only pages that are not remote
/// on this thread (a remote one would block it), and reads remote ones from a thread of its
/// own that must see the installed content; discards may hit remote pages.
#[test]
fn random_post_copy_against_a_shadow_model() {
    if !supported() {
        return;
    }
    let ps = page_size();
    for mode in MODES {
        for seed in 1..=3u64 {
            let seed = seed + (stress_seed() << 8);
            let dir = tempfile::tempdir().unwrap();
            let chunks = 24;
            let pages = chunks * PAGES_PER_CHUNK;
            let r = region(&dir, mode, chunks, 6);
            let mut rng = Rng::new(seed * 31 + mode as u64);
            let mut shadow = vec![0u8; pages * ps];
            pattern(seed, &mut shadow);
            write(&r, 0, &shadow);
            // The source's content of each remote page.
            let mut source: Vec<Option<Vec<u8>>> = vec![None; pages];
            let mut version = 1000 * seed;
            for step in 0..600 {
                let p = rng.below(pages);
                let what = format!("{mode:?} seed {seed} step {step} page {p}");
                match rng.below(12) {
                    0 => {
                        // A pause: a burst of pages becomes remote.
                        let mut burst: Vec<usize> =
                            (0..1 + rng.below(12)).map(|_| rng.below(pages)).collect();
                        burst.sort_unstable();
                        burst.dedup();
                        for &q in &burst {
                            let mut data = vec![0u8; ps];
                            version += 1;
                            pattern(version, &mut data);
                            source[q] = Some(data);
                        }
                        r.mark_remote(runs_of(&burst)).unwrap();
                    }
                    1 | 2 => {
                        // Some of the source's pages arrive (whole runs, as sent).
                        let first = p - p % PAGES_PER_CHUNK;
                        let n = 1 + rng.below(PAGES_PER_CHUNK);
                        let mut data = vec![0u8; n * ps];
                        for q in first..first + n {
                            let d = match &source[q] {
                                Some(d) => d.clone(),
                                // Not remote: whatever is sent must be ignored.
                                None => vec![0xEE; ps],
                            };
                            data[(q - first) * ps..(q - first + 1) * ps].copy_from_slice(&d);
                        }
                        r.install_remote_runs(vec![(first, data)]).unwrap();
                        for q in first..first + n {
                            if let Some(d) = source[q].take() {
                                shadow[q * ps..(q + 1) * ps].copy_from_slice(&d);
                            }
                        }
                    }
                    3 => {
                        // The program discards the page (balloon): zero, remote or not.
                        r.discard(p * ps, ps).unwrap();
                        shadow[p * ps..(p + 1) * ps].fill(0);
                        source[p] = None;
                    }
                    4 if source[p].is_some() => {
                        // A thread touches a remote page: it waits until the page comes.
                        let data = source[p].take().unwrap();
                        std::thread::scope(|s| {
                            let h = s.spawn(|| {
                                let mut got = vec![0u8; ps];
                                read(&r, p * ps, &mut got);
                                got
                            });
                            let deadline = std::time::Instant::now() + Duration::from_secs(5);
                            while !r.take_wanted_pages().contains(&p) {
                                assert!(std::time::Instant::now() < deadline, "{what}: wanted");
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            r.install_remote_runs(vec![(p, data.clone())]).unwrap();
                            assert!(h.join().unwrap() == data, "{what}: waited read");
                        });
                        shadow[p * ps..(p + 1) * ps].copy_from_slice(&data);
                    }
                    _ if source[p].is_none() => {
                        if rng.below(8) == 0 {
                            // Let a sample drop the page-table entries.
                            std::thread::sleep(Duration::from_millis(3));
                        }
                        if rng.below(2) == 0 {
                            let at = rng.below(ps - 8);
                            let v = rng.next().to_le_bytes();
                            shadow[p * ps + at..p * ps + at + 8].copy_from_slice(&v);
                            write(&r, p * ps + at, &v);
                        } else {
                            let mut got = vec![0u8; ps];
                            read(&r, p * ps, &mut got);
                            assert!(got == page_of(&shadow, p), "{what}: read");
                        }
                    }
                    _ => {}
                }
                let left: Vec<usize> = (0..pages).filter(|&q| source[q].is_some()).collect();
                assert_eq!(r.remote_pages(), left.len(), "{what}: remote pages");
                assert_eq!(
                    r.remote_page_runs().unwrap(),
                    runs_of(&left),
                    "{what}: remote runs"
                );
            }
            for (q, s) in source.iter_mut().enumerate() {
                if let Some(d) = s.take() {
                    r.install_remote_runs(vec![(q, d.clone())]).unwrap();
                    shadow[q * ps..(q + 1) * ps].copy_from_slice(&d);
                }
            }
            assert_eq!(r.remote_pages(), 0);
            let mut got = vec![0u8; pages * ps];
            read(&r, 0, &mut got);
            for q in 0..pages {
                assert!(
                    page_of(&got, q) == page_of(&shadow, q),
                    "{mode:?} seed {seed}: page {q} at the end"
                );
            }
            let st = r.stats();
            assert_eq!(st.poisoned_chunks, 0, "{mode:?} seed {seed}: {st:?}");
        }
    }
}
