//! The two ends of a live migration over a real TCP connection on 127.0.0.1, each moving real
//! pager regions in this process: a writer thread keeps changing the source while rounds run,
//! the sender converges, is told to finish once the writer stopped (as a paused guest), and the
//! destination then holds every byte; a region mismatch, a wrong key and a cancel fail cleanly
//! and the receiver takes the next attempt. Post-copy: the destination is read and written
//! while the last pages arrive, and a source lost after the switch-over leaves it as it was.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memvisor_migration::{
    MemoryReceiver, MemorySender, MigrationKey, MigrationProgress, Role, SenderOptions,
    SenderSignals,
};
use memvisor_pager::{page_size, Region, RegionConfig};

const CHUNK_PAGES: usize = 8;

/// Threads the sender starts need no preparation outside a preloaded program.
fn no_thread_start() {}

fn supported() -> bool {
    match Region::check_supported() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("SKIPPED: userfaultfd unavailable: {e}");
            false
        }
    }
}

fn region(dir: &tempfile::TempDir, chunks: usize, budget_chunks: usize) -> Arc<Region> {
    let chunk = CHUNK_PAGES * page_size();
    Arc::new(
        Region::new(
            RegionConfig::new(chunks * chunk, budget_chunks * chunk, dir.path()).chunk_size(chunk),
        )
        .unwrap(),
    )
}

fn write(r: &Region, offset: usize, data: &[u8]) {
    assert!(offset + data.len() <= r.len());
    // SAFETY: inside the live region; one writer at a time per test.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), r.as_ptr().add(offset), data.len()) }
}

fn contents(r: &Region) -> Vec<u8> {
    let mut out = vec![0u8; r.len()];
    // SAFETY: inside the live region; nothing writes it meanwhile.
    unsafe { std::ptr::copy_nonoverlapping(r.as_ptr(), out.as_mut_ptr(), r.len()) };
    out
}

struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A receiver's thread: its result once it served one migration (or failed for good).
type ReceiverThread = std::thread::JoinHandle<Result<(), memvisor_migration::MigrationError>>;

/// A receiver serving `listener` into `regions` on a thread; its progress.
fn serve(
    listener: TcpListener,
    key: MigrationKey,
    regions: Vec<Arc<Region>>,
) -> (
    Arc<MigrationProgress>,
    std::thread::JoinHandle<Result<(), memvisor_migration::MigrationError>>,
) {
    let progress = Arc::new(MigrationProgress::new(Role::Destination, "listening"));
    let p = progress.clone();
    let t = std::thread::spawn(move || {
        MemoryReceiver::new(&key, &p, no_thread_start).serve(&listener, || regions.clone())
    });
    (progress, t)
}

fn listener() -> (TcpListener, SocketAddr) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    (l, a)
}

/// Writes a page of `seed`-derived bytes to each page `p` of `r` for which `keep(p)` holds.
fn fill(r: &Region, seed: u64, keep: impl Fn(usize) -> bool) {
    let ps = page_size();
    let mut rng = Xorshift(seed);
    for p in (0..r.len() / ps).filter(|&p| keep(p)) {
        write(r, p * ps, &rng.next().to_le_bytes().repeat(ps / 8));
    }
}

/// A key of `key_byte`s and a receiver serving it into `dst` on a fresh address: the key,
/// the address, the receiver's progress and thread.
fn destination(
    key_byte: u8,
    dst: &Arc<Region>,
) -> (
    MigrationKey,
    SocketAddr,
    Arc<MigrationProgress>,
    ReceiverThread,
) {
    let key = MigrationKey::from_bytes(&[key_byte; 32]).unwrap();
    let (l, addr) = listener();
    let (progress, receiver) = serve(l, key.clone(), vec![dst.clone()]);
    (key, addr, progress, receiver)
}

/// Rewrites 8 random bytes of a random page of `r` every 50 µs (discarding the page instead
/// when its number is a multiple of `discard_every`) while `writing` holds: a guest at work.
fn churn(r: &Region, seed: u64, discard_every: usize, writing: &AtomicBool) {
    let ps = page_size();
    let pages = r.len() / ps;
    let mut rng = Xorshift(seed);
    while writing.load(Ordering::Relaxed) {
        let p = (rng.next() as usize) % pages;
        let at = (rng.next() as usize) % (ps - 8);
        write(r, p * ps + at, &rng.next().to_le_bytes());
        if p % discard_every == 0 {
            r.discard(p * ps, ps).unwrap();
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

/// Runs the source end for `src` to `addr` with [`options`] until it completes.
fn send(
    src: &Arc<Region>,
    addr: SocketAddr,
    key: &MigrationKey,
    signals: &SenderSignals,
    progress: &MigrationProgress,
) {
    MemorySender::run(
        std::slice::from_ref(src),
        addr,
        key,
        options(),
        signals,
        progress,
        no_thread_start,
    )
    .unwrap();
}

fn options() -> SenderOptions {
    SenderOptions {
        max_bandwidth: None,
        downtime_limit: Duration::from_millis(300),
        post_copy: false,
    }
}

#[test]
fn a_changing_region_arrives_whole_in_a_smaller_budget() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let chunks = 64;
    let src = region(&dir, chunks, 8);
    let dst = region(&dir, chunks, 4);
    fill(&src, 0x9e37_79b9, |p| p % 5 != 0);
    let (key, addr, dst_progress, receiver) = destination(7, &dst);
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    let writing = AtomicBool::new(true);
    std::thread::scope(|s| {
        let writer = s.spawn(|| churn(&src, 42, 7, &writing));
        let control = s.spawn(|| {
            // Let a few rounds run while the writer changes pages, then "pause the guest".
            let start = Instant::now();
            while progress.status().rounds < 3 && start.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(10));
            }
            writing.store(false, Ordering::Relaxed);
            writer.join().unwrap();
            signals.finish();
        });
        send(&src, addr, &key, &signals, &progress);
        control.join().unwrap();
    });
    receiver.join().unwrap().unwrap();
    let s = progress.status();
    let d = dst_progress.status();
    assert_eq!(
        (s.state.as_str(), d.state.as_str()),
        ("completed", "completed")
    );
    assert!(s.rounds >= 3, "{s:?}");
    assert_eq!(s.pages + s.zero_pages, d.pages + d.zero_pages);
    assert!(d.pages_to_memory > 0 && d.pages_to_swap > 0, "{d:?}");
    assert!(dst.stats().resident_pages as usize <= 4 * CHUNK_PAGES);
    assert!(
        contents(&dst) == contents(&src),
        "the destination holds the source's bytes"
    );
}

#[test]
fn refused_attempts_leave_the_receiver_listening_and_empty() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let src = region(&dir, 16, 4);
    let small = region(&dir, 8, 4);
    let dst = region(&dir, 16, 4);
    for p in 0..src.len() / ps {
        write(&src, p * ps, &[p as u8 | 1; 64]);
        if p < small.len() / ps {
            write(&small, p * ps, &[9; 64]);
        }
    }
    let key = MigrationKey::from_bytes(&[1; 32]).unwrap();
    let (l, addr) = listener();
    let (dst_progress, receiver) = serve(l, key.clone(), vec![dst.clone()]);
    let send = |from: &Arc<Region>, key: &MigrationKey, signals: &SenderSignals| {
        let progress = MigrationProgress::new(Role::Source, "connecting");
        let r = MemorySender::run(
            std::slice::from_ref(from),
            addr,
            key,
            options(),
            signals,
            &progress,
            no_thread_start,
        );
        (r, progress.status())
    };
    let last_error = std::cell::RefCell::new(None::<String>);
    let wait_listening = |n: usize| {
        let start = Instant::now();
        loop {
            let d = dst_progress.status();
            if let Some(e) = d.error.as_ref().filter(|_| d.state == "listening") {
                if Some(e) != last_error.borrow().as_ref() {
                    *last_error.borrow_mut() = Some(e.clone());
                    let g = dst.stats();
                    assert_eq!(g.resident_pages + g.swapped_chunks, 0, "attempt {n}: {g:?}");
                    return e.clone();
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "attempt {n}: {d:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    // A source with another region size.
    let (r, st) = send(&small, &key, &SenderSignals::default());
    let e = r.unwrap_err().to_string();
    assert!(e.contains("does not match") && e.contains("bytes"), "{e}");
    assert_eq!(st.state, "failed");
    assert!(wait_listening(1).contains("does not match"));
    // A wrong key.
    let other = MigrationKey::from_bytes(&[2; 32]).unwrap();
    let (r, _) = send(&src, &other, &SenderSignals::default());
    assert!(r.unwrap_err().to_string().contains("key"));
    assert!(wait_listening(2).contains("key"));
    // Cancelled before it started sending rounds: the destination discards round 0.
    let cancelled = SenderSignals::default();
    cancelled.cancel();
    let (r, st) = send(&src, &key, &cancelled);
    assert!(r.is_err());
    assert_eq!(st.state, "cancelled");
    assert!(wait_listening(3).contains("cancelled"));
    // And then one that completes.
    let finishing = SenderSignals::default();
    finishing.finish();
    let (r, st) = send(&src, &key, &finishing);
    r.unwrap();
    assert_eq!(st.state, "completed");
    receiver.join().unwrap().unwrap();
    assert!(contents(&dst) == contents(&src));
}

/// A region of zero pages (round 0 sends nothing, so no rate can be measured) converges while a
/// writer, from round 1 on, keeps changing one page, and arrives whole.
#[test]
fn a_region_of_zero_pages_converges_and_arrives() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let src = region(&dir, 32, 8);
    let dst = region(&dir, 32, 8);
    let key = MigrationKey::from_bytes(&[3; 32]).unwrap();
    let (l, addr) = listener();
    let (_, receiver) = serve(l, key.clone(), vec![dst.clone()]);
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    let writing = AtomicBool::new(true);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut n = 0u64;
            while progress.status().rounds < 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
            while writing.load(Ordering::Relaxed) {
                n += 1;
                write(&src, 7 * ps, &n.to_le_bytes());
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        s.spawn(|| {
            let start = Instant::now();
            while progress.state() != "converged" {
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "never converged: {:?}",
                    progress.status()
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            writing.store(false, Ordering::Relaxed);
            writer.join().unwrap();
            signals.finish();
        });
        send(&src, addr, &key, &signals, &progress);
    });
    receiver.join().unwrap().unwrap();
    assert!(contents(&dst) == contents(&src));
}

/// The guest pauses in the middle of a long round of scattered changes: that round stops, and
/// the last round must send the pages it had still to send (with those changed since, a page
/// in both once). Once the sender has converged and waits between rounds, one quick pass
/// rewrites every other page of 64 MiB, so the next round is 8,192 one-page runs (tens of
/// milliseconds); the finish comes when that round has sent 2,000 pages. No page changes after
/// the pass, so the pages the cut round had left arrive only if the last round sends them.
#[test]
fn a_round_cut_short_by_the_pause_leaves_nothing_behind() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let chunks = 2048;
    let src = region(&dir, chunks, chunks);
    let dst = region(&dir, chunks, chunks / 2);
    let pages = src.len() / ps;
    for p in 0..pages {
        write(&src, p * ps, &(p as u64 + 1).to_le_bytes().repeat(ps / 8));
    }
    let key = MigrationKey::from_bytes(&[5; 32]).unwrap();
    let (l, addr) = listener();
    let (dst_progress, receiver) = serve(l, key.clone(), vec![dst.clone()]);
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            let deadline = Duration::from_secs(60);
            while progress.state() != "converged" {
                assert!(start.elapsed() < deadline, "{:?}", progress.status());
                std::thread::sleep(Duration::from_millis(1));
            }
            let before = progress.status();
            for p in (1..pages).step_by(2) {
                write(&src, p * ps, &u64::MAX.to_le_bytes());
            }
            // 2,000 pages into the round that took the pass on.
            while progress.status().pages < before.pages + 2000 {
                assert!(start.elapsed() < deadline, "{:?}", progress.status());
                std::thread::sleep(Duration::from_micros(100));
            }
            signals.finish();
        });
        send(&src, addr, &key, &signals, &progress);
    });
    receiver.join().unwrap().unwrap();
    let (s, d) = (progress.status(), dst_progress.status());
    assert_eq!(s.pages + s.zero_pages, d.pages + d.zero_pages);
    assert!(
        contents(&dst) == contents(&src),
        "the destination holds the source's bytes"
    );
}

/// A guest with two memory regions: pages of the second change between rounds (the region's
/// later rounds read through their own read-ahead), and both arrive whole.
#[test]
fn changes_in_a_second_region_arrive() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let sources = [region(&dir, 16, 16), region(&dir, 16, 16)];
    let destinations = [region(&dir, 16, 8), region(&dir, 16, 8)];
    for (n, r) in sources.iter().enumerate() {
        for p in 0..r.len() / ps {
            write(
                r,
                p * ps,
                &((n * 1000 + p) as u64 + 1).to_le_bytes().repeat(ps / 8),
            );
        }
    }
    let key = MigrationKey::from_bytes(&[6; 32]).unwrap();
    let (l, addr) = listener();
    let (_, receiver) = serve(l, key.clone(), destinations.to_vec());
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            while progress.status().rounds < 1 {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "{:?}",
                    progress.status()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            // Changes after round 0 in the second region only, then the pause.
            for p in (0..sources[1].len() / ps).step_by(3) {
                write(&sources[1], p * ps + 16, &u64::MAX.to_le_bytes());
            }
            let rounds = progress.status().rounds;
            while progress.status().rounds < rounds + 2 {
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "{:?}",
                    progress.status()
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            signals.finish();
        });
        let result = MemorySender::run(
            &sources,
            addr,
            &key,
            options(),
            &signals,
            &progress,
            no_thread_start,
        );
        if let Err(e) = result {
            signals.finish();
            panic!("the migration failed: {e}");
        }
    });
    receiver.join().unwrap().unwrap();
    for (n, (src, dst)) in sources.iter().zip(&destinations).enumerate() {
        assert!(contents(dst) == contents(src), "region {n} arrived whole");
    }
}

/// Post-copy over a slow link: the pages changed last are named at the pause, the
/// destination's "guest" runs at once and reads every page (waiting on the remote ones, which
/// it asks for) and writes some, and in the end it holds the source's bytes plus its own
/// writes.
#[test]
fn post_copy_serves_the_destination_while_the_pages_arrive() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    // 8 MiB at 16 MiB/s: the push outlasts the limiter's burst (one largest frame, 4 MiB).
    let chunks = 256;
    let src = region(&dir, chunks, 32);
    let dst = region(&dir, chunks, 16);
    let pages = src.len() / ps;
    fill(&src, 0x51ed_270b, |p| p % 5 != 0);
    let (key, addr, dst_progress, receiver) = destination(9, &dst);
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    let writing = AtomicBool::new(true);
    let options = SenderOptions {
        // Slow enough that the destination finds pages still remote.
        max_bandwidth: Some(16 << 20),
        downtime_limit: Duration::from_millis(300),
        post_copy: true,
    };
    let mut expected = Vec::new();
    let mut guest_writes = Vec::new();
    std::thread::scope(|s| {
        let writer = s.spawn(|| churn(&src, 77, 11, &writing));
        let guest = s.spawn(|| {
            let start = Instant::now();
            while progress.status().rounds < 3 && start.elapsed() < Duration::from_secs(30) {
                std::thread::sleep(Duration::from_millis(10));
            }
            writing.store(false, Ordering::Relaxed);
            writer.join().unwrap();
            // The guest's last moments change every page: all of them go after the pause.
            for p in 0..pages {
                write(&src, p * ps + 8, &(p as u64 + 1).to_le_bytes());
            }
            // The source is paused from here on: its memory is what must arrive.
            let final_source = contents(&src);
            signals.finish();
            while progress.status().state != "post-copy" {
                assert!(!progress.status().is_over(), "{:?}", progress.status());
                std::thread::sleep(Duration::from_millis(1));
            }
            // Switched over: the destination's guest runs, pages still arriving.
            let remote_at_start = dst.remote_pages();
            let mut rng = Xorshift(5);
            let mut writes = Vec::new();
            let mut page = vec![0u8; ps];
            for i in 0..pages {
                let p = (i * 37) % pages;
                // SAFETY: inside the live region; the receiver only installs remote pages,
                // which this read waits for.
                unsafe {
                    std::ptr::copy_nonoverlapping(dst.as_ptr().add(p * ps), page.as_mut_ptr(), ps)
                };
                assert!(
                    page == final_source[p * ps..(p + 1) * ps],
                    "destination page {p} read during post-copy"
                );
                if i % 9 == 0 {
                    let v = rng.next().to_le_bytes();
                    write(&dst, p * ps + 16, &v);
                    writes.push((p * ps + 16, v));
                }
            }
            (final_source, writes, remote_at_start)
        });
        MemorySender::run(
            std::slice::from_ref(&src),
            addr,
            &key,
            options,
            &signals,
            &progress,
            no_thread_start,
        )
        .unwrap();
        let (final_source, writes, remote_at_start) = guest.join().unwrap();
        expected = final_source;
        guest_writes = writes;
        assert!(remote_at_start > 0, "pages were remote at the switch-over");
    });
    receiver.join().unwrap().unwrap();
    let s = progress.status();
    let d = dst_progress.status();
    assert_eq!(
        (s.state.as_str(), d.state.as_str()),
        ("completed", "completed")
    );
    assert_eq!(s.pages + s.zero_pages, d.pages + d.zero_pages);
    assert!(s.wanted_pages > 0 && d.wanted_pages > 0, "{s:?} {d:?}");
    assert_eq!(dst.remote_pages(), 0);
    assert!(dst.remote_faults() > 0);
    for (at, v) in guest_writes {
        expected[at..at + 8].copy_from_slice(&v);
    }
    assert!(
        contents(&dst) == expected,
        "the destination holds the source's bytes and its own writes"
    );
}

/// A post-copy source cancelled after the switch-over: the destination reports the failure
/// and keeps what it has (its guest may run on it); the pages that did not arrive stay
/// remote, and the receiver does not listen for a retry.
#[test]
fn a_post_copy_broken_after_the_switch_over_keeps_the_destination() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let src = region(&dir, 256, 32);
    let dst = region(&dir, 256, 16);
    let pages = src.len() / ps;
    fill(&src, 3, |_| true);
    let (key, addr, dst_progress, receiver) = destination(4, &dst);
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    let options = SenderOptions {
        max_bandwidth: Some(16 << 20),
        downtime_limit: Duration::from_secs(10),
        post_copy: true,
    };
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            let start = Instant::now();
            while progress.status().state != "converged"
                && start.elapsed() < Duration::from_secs(30)
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            // Every page changes while paused-to-be: all of them go after the switch-over.
            for p in 0..pages {
                write(&src, p * ps, &[0xAB; 8]);
            }
            signals.finish();
            while progress.status().state != "post-copy" && !progress.status().is_over() {
                std::thread::sleep(Duration::from_millis(1));
            }
            std::thread::sleep(Duration::from_millis(50));
            signals.cancel();
        });
        MemorySender::run(
            std::slice::from_ref(&src),
            addr,
            &key,
            options,
            &signals,
            &progress,
            no_thread_start,
        )
    });
    assert!(result.is_err(), "the source was cancelled");
    let error = receiver.join().unwrap().unwrap_err().to_string();
    assert!(error.contains("after the switch-over"), "{error}");
    let d = dst_progress.status();
    assert_eq!(d.state, "failed", "{d:?}");
    let left = dst.remote_pages();
    assert!(left > 0 && left < pages, "{left} of {pages} pages remote");
    // What arrived stayed: not cleared for a retry.
    assert!(dst.stats().resident_pages > 0);
}
