//! The two ends of a live migration over a real TCP connection on 127.0.0.1, each moving real
//! pager regions in this process: a writer thread keeps changing the source while rounds run,
//! the sender converges, is told to finish once the writer stopped (as a paused guest), and the
//! destination then holds every byte; a region mismatch, a wrong key and a cancel fail cleanly
//! and the receiver takes the next attempt. Post-copy: the destination is read and written
//! while the last pages arrive, and a source lost after the switch-over leaves it as it was.
//!
//! The tests run one at a time ([`one_at_a_time`]): the post-copy ones watch a switch-over
//! that lasts a few milliseconds, and ten migrations at once on two CPUs let it pass unseen
//! (a test thread woke after the migration had completed; failed in CI).

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use memvisor_control::PostCopy;
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

/// Held for the whole of each test, so that the tests of this file run one after another.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
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
type ReceiverThread =
    std::thread::JoinHandle<Result<memvisor_migration::Served, memvisor_migration::MigrationError>>;

/// A receiver serving `listener` into `regions` on a thread; its progress.
fn serve(
    listener: TcpListener,
    key: MigrationKey,
    regions: Vec<Arc<Region>>,
) -> (Arc<MigrationProgress>, ReceiverThread) {
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
    run_sender(src, addr, key, options(), signals, progress).unwrap();
}

/// Runs the source end for `src` to `addr` with `options`; its result.
fn run_sender(
    src: &Arc<Region>,
    addr: SocketAddr,
    key: &MigrationKey,
    options: SenderOptions,
    signals: &SenderSignals,
    progress: &MigrationProgress,
) -> Result<(), memvisor_migration::MigrationError> {
    MemorySender::run(
        std::slice::from_ref(src),
        addr,
        key,
        options,
        signals,
        progress,
        no_thread_start,
    )
}

/// Waits (30 s at most) until `progress` is in `state`; a migration over first fails the test.
fn wait_for_state(progress: &MigrationProgress, state: &str) {
    let start = Instant::now();
    while progress.status().state != state {
        assert!(!progress.status().is_over(), "{:?}", progress.status());
        assert!(start.elapsed() < Duration::from_secs(30), "never {state}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn options() -> SenderOptions {
    SenderOptions {
        max_bandwidth: None,
        downtime_limit: Duration::from_millis(300),
        post_copy: PostCopy::Never,
    }
}

#[test]
fn a_changing_region_arrives_whole_in_a_smaller_budget() {
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
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
        let r = run_sender(from, addr, key, options(), signals, &progress);
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
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
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
    let _serial = one_at_a_time();
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
        post_copy: PostCopy::Always,
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
            // The source is paused from here on: its memory is what must arrive, and nothing
            // changes it any more. The pause is signalled at once: a sender round in between
            // could otherwise send every page the loop above changed, and the last round, with
            // nothing left to name, would not be post-copy (seen in CI). Nor is the source read
            // whole before the destination: paging all of it in outlasted the push (seen in
            // CI), so each destination page is compared with the source's as it is read.
            signals.finish();
            wait_for_state(&progress, "post-copy");
            // Switched over: the destination's guest runs, pages still arriving.
            let remote_at_start = dst.remote_pages();
            let mut rng = Xorshift(5);
            let mut writes = Vec::new();
            let mut page = vec![0u8; ps];
            let mut source_page = vec![0u8; ps];
            for i in 0..pages {
                let p = (i * 37) % pages;
                // SAFETY: inside the live regions; the receiver only installs remote pages,
                // which this read waits for, and nothing writes the paused source.
                unsafe {
                    std::ptr::copy_nonoverlapping(dst.as_ptr().add(p * ps), page.as_mut_ptr(), ps);
                    std::ptr::copy_nonoverlapping(
                        src.as_ptr().add(p * ps),
                        source_page.as_mut_ptr(),
                        ps,
                    );
                };
                assert!(
                    page == source_page,
                    "destination page {p} read during post-copy"
                );
                if i % 9 == 0 {
                    let v = rng.next().to_le_bytes();
                    write(&dst, p * ps + 16, &v);
                    writes.push((p * ps + 16, v));
                }
            }
            (contents(&src), writes, remote_at_start)
        });
        run_sender(&src, addr, &key, options, &signals, &progress).unwrap();
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
    let _serial = one_at_a_time();
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
        post_copy: PostCopy::Always,
    };
    let result = std::thread::scope(|s| {
        s.spawn(|| {
            wait_for_state(&progress, "converged");
            // Every page changes while paused-to-be: all of them go after the switch-over.
            for p in 0..pages {
                write(&src, p * ps, &[0xAB; 8]);
            }
            signals.finish();
            wait_for_state(&progress, "post-copy");
            std::thread::sleep(Duration::from_millis(50));
            signals.cancel();
        });
        run_sender(&src, addr, &key, options, &signals, &progress)
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

/// A TCP relay between a source and a destination that a test can cut (every connection
/// through it is shut down) and take down (connections are closed as they come) and up again.
struct Relay {
    addr: SocketAddr,
    down: Arc<AtomicBool>,
    live: Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
    accepted: Arc<std::sync::atomic::AtomicUsize>,
}

impl Relay {
    fn to(target: SocketAddr) -> Relay {
        let (l, addr) = listener();
        let down = Arc::new(AtomicBool::new(false));
        let live = Arc::new(std::sync::Mutex::new(Vec::new()));
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (d, lv, n) = (down.clone(), live.clone(), accepted.clone());
        // Left running: it only relays, and ends with the test process.
        std::thread::spawn(move || {
            for client in l.incoming() {
                let Ok(client) = client else { continue };
                n.fetch_add(1, Ordering::Relaxed);
                if d.load(Ordering::Relaxed) {
                    continue;
                }
                let Ok(server) = std::net::TcpStream::connect(target) else {
                    continue;
                };
                let pump = |mut from: std::net::TcpStream, mut to: std::net::TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(std::net::Shutdown::Write);
                    })
                };
                let mut live = lv.lock().unwrap();
                live.push(client.try_clone().unwrap());
                live.push(server.try_clone().unwrap());
                pump(client.try_clone().unwrap(), server.try_clone().unwrap());
                pump(server, client);
            }
        });
        Relay {
            addr,
            down,
            live,
            accepted,
        }
    }

    /// Breaks every connection through the relay, as a failed network would.
    fn cut(&self) {
        for s in self.live.lock().unwrap().drain(..) {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// Post-copy over a connection cut during the push: both ends wait (`post-copy-paused`), the
/// destination's guest keeps reading (its reads of pages not yet there wait) and refuses any
/// other migration meanwhile, the source reconnects once the network is back and resumes the
/// push by the migration's number, and the destination ends with every byte.
#[test]
fn a_post_copy_cut_after_the_switch_over_resumes_on_a_new_connection() {
    let _serial = one_at_a_time();
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let src = region(&dir, 256, 32);
    let dst = region(&dir, 256, 16);
    let pages = src.len() / ps;
    fill(&src, 0x7e57, |p| p % 7 != 0);
    let (key, addr, dst_progress, receiver) = destination(12, &dst);
    let relay = Relay::to(addr);
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    let options = SenderOptions {
        // 8 MiB at 16 MiB/s: the push is under way when the connection is cut.
        max_bandwidth: Some(16 << 20),
        downtime_limit: Duration::from_secs(10),
        post_copy: PostCopy::Always,
    };
    let mut expected = Vec::new();
    let mut refusals = Vec::new();
    std::thread::scope(|s| {
        let guest = s.spawn(|| {
            let start = Instant::now();
            wait_for_state(&progress, "converged");
            // Every page changes before the pause: all of them follow the switch-over.
            for p in 0..pages {
                write(&src, p * ps + 24, &(p as u64 ^ 0x5a5a).to_le_bytes());
            }
            // Paused first (see the test above); the source is read on another thread, beside
            // the wait: read first, it outlasted the push, and the wait found it over (seen in CI).
            signals.finish();
            let snapshot = s.spawn(|| contents(&src));
            wait_for_state(&progress, "post-copy");
            std::thread::sleep(Duration::from_millis(100));
            // The network fails for a while, and connections through it fail too.
            relay.down.store(true, Ordering::Relaxed);
            relay.cut();
            let left_at_cut = dst.remote_pages();
            let paused = |p: &MigrationProgress| p.status().state == "post-copy-paused";
            while !paused(&progress) || !paused(&dst_progress) {
                assert!(start.elapsed() < Duration::from_secs(60), "never paused");
                std::thread::sleep(Duration::from_millis(5));
            }
            // Another migration, and a resume of another one, are refused meanwhile.
            let other = run_sender(
                &src,
                addr,
                &key,
                options,
                &SenderSignals::default(),
                &MigrationProgress::new(Role::Source, "connecting"),
            );
            let tcp = std::net::TcpStream::connect(addr).unwrap();
            let mut stream =
                memvisor_migration::MemoryStream::handshake(tcp, &key, Role::Source).unwrap();
            stream
                .send(&memvisor_migration::Message::Resume { migration: 1 })
                .unwrap();
            let answer = stream.receive();
            // Let the source's reconnecting fail a few times, then bring the network back.
            let tries = relay.accepted.load(Ordering::Relaxed);
            while relay.accepted.load(Ordering::Relaxed) < tries + 2 {
                std::thread::sleep(Duration::from_millis(20));
            }
            relay.down.store(false, Ordering::Relaxed);
            let final_source = snapshot.join().unwrap();
            // The guest reads every page meanwhile, the missing ones waiting for the resume.
            for p in 0..pages {
                let mut page = vec![0u8; ps];
                // SAFETY: inside the live region; the receiver only installs remote pages,
                // which this read waits for.
                unsafe {
                    std::ptr::copy_nonoverlapping(dst.as_ptr().add(p * ps), page.as_mut_ptr(), ps)
                };
                assert!(
                    page == final_source[p * ps..(p + 1) * ps],
                    "destination page {p} read across the resume"
                );
            }
            (final_source, left_at_cut, other, answer)
        });
        run_sender(&src, relay.addr, &key, options, &signals, &progress).unwrap();
        let (final_source, left_at_cut, other, answer) = guest.join().unwrap();
        expected = final_source;
        assert!(left_at_cut > 0, "pages were still remote at the cut");
        refusals = vec![other.unwrap_err().to_string(), format!("{answer:?}")];
    });
    receiver.join().unwrap().unwrap();
    for refusal in &refusals {
        assert!(
            refusal.contains("it takes only that migration's resume"),
            "{refusal}"
        );
    }
    assert!(
        refusals[0].contains("a Begin is refused"),
        "{}",
        refusals[0]
    );
    assert!(
        refusals[1].contains("a Resume of migration 0x0000000000000001 is refused"),
        "{}",
        refusals[1]
    );
    let (s, d) = (progress.status(), dst_progress.status());
    assert_eq!(
        (s.state.as_str(), d.state.as_str()),
        ("completed", "completed")
    );
    assert_eq!(dst.remote_pages(), 0);
    // Every connection's bytes count: at least the pages' own.
    for status in [&s, &d] {
        assert!(status.wire_bytes >= status.pages * ps as u64, "{status:?}");
    }
    assert!(
        contents(&dst) == expected,
        "the destination holds the source's bytes"
    );
}

/// The default, `PostCopy::Auto`: a last round of one changed page goes while the guest is
/// paused (precopy); one of every page, which would take longer than naming them, is named and
/// pushed after the switch-over. Both destinations end with every byte.
#[test]
fn auto_post_copies_only_a_long_last_round() {
    let _serial = one_at_a_time();
    if !supported() {
        return;
    }
    let ps = page_size();
    for every_page in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // All resident: the last writes are quick, so all of them fall in the last round.
        let src = region(&dir, 256, 256);
        let dst = region(&dir, 256, 16);
        let pages = src.len() / ps;
        fill(&src, 0xa070, |p| p % 3 != 0);
        let (key, addr, _, receiver) = destination(14, &dst);
        let signals = SenderSignals::default();
        let progress = MigrationProgress::new(Role::Source, "connecting");
        let options = SenderOptions {
            post_copy: PostCopy::default(),
            ..options()
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                wait_for_state(&progress, "converged");
                let changed = if every_page { pages } else { 1 };
                for p in 0..changed {
                    write(&src, p * ps + 40, &[0xC3; 8]);
                }
                signals.finish();
            });
            run_sender(&src, addr, &key, options, &signals, &progress).unwrap();
        });
        receiver.join().unwrap().unwrap();
        let s = progress.status();
        if every_page {
            assert_eq!(s.post_copy_pages, pages as u64, "{s:?}");
        } else {
            assert_eq!(s.post_copy_pages, 0, "{s:?}");
            assert_eq!(s.last_round_changed_pages, 1, "{s:?}");
        }
        assert!(contents(&dst) == contents(&src), "every_page {every_page}");
    }
}

/// A post-copy source whose last `Done` was lost reconnects and resumes: the destination,
/// completed, answers it for a grace period (no page left, `Finish` answered by `Done` of
/// nothing), and refuses a resume of any other migration.
#[test]
fn a_completed_post_copy_answers_a_late_resume() {
    let _serial = one_at_a_time();
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let src = region(&dir, 64, 64);
    let dst = region(&dir, 64, 64);
    let pages = src.len() / ps;
    fill(&src, 0x1a7e, |_| true);
    let key = MigrationKey::from_bytes(&[15; 32]).unwrap();
    let (l, addr) = listener();
    let dst_progress = Arc::new(MigrationProgress::new(Role::Destination, "listening"));
    let receiver = {
        let (key, progress, regions) = (key.clone(), dst_progress.clone(), vec![dst.clone()]);
        std::thread::spawn(move || {
            let r = MemoryReceiver::new(&key, &progress, no_thread_start);
            let served = r.serve(&l, || regions.clone())?;
            if let Some(migration) = served.post_copy {
                r.answer_late_resumes(&l, migration, Duration::from_secs(2));
            }
            Ok::<_, memvisor_migration::MigrationError>(served)
        })
    };
    let signals = SenderSignals::default();
    let progress = MigrationProgress::new(Role::Source, "connecting");
    let options = SenderOptions {
        post_copy: PostCopy::Always,
        ..options()
    };
    std::thread::scope(|s| {
        s.spawn(|| {
            wait_for_state(&progress, "converged");
            for p in 0..pages {
                write(&src, p * ps, &[0x5E; 8]);
            }
            signals.finish();
        });
        run_sender(&src, addr, &key, options, &signals, &progress).unwrap();
    });
    let migration = progress.status().migration;
    assert_eq!(progress.status().post_copy_pages, pages as u64);
    assert_eq!(dst_progress.status().migration, migration);
    let resume = |number: u64| {
        let tcp = std::net::TcpStream::connect(addr).unwrap();
        let mut stream =
            memvisor_migration::MemoryStream::handshake(tcp, &key, Role::Source).unwrap();
        stream
            .send(&memvisor_migration::Message::Resume { migration: number })
            .unwrap();
        let answer = stream.receive().unwrap();
        if answer == memvisor_migration::Message::Ready {
            stream.send(&memvisor_migration::Message::Finish).unwrap();
            return vec![answer, stream.receive().unwrap()];
        }
        vec![answer]
    };
    assert_eq!(
        resume(migration),
        [
            memvisor_migration::Message::Ready,
            memvisor_migration::Message::Done { pages: 0, bytes: 0 }
        ]
    );
    let other = format!("{:?}", resume(migration ^ 1));
    assert!(
        other.contains("it takes only that migration's resume"),
        "{other}"
    );
    let served = receiver.join().unwrap().unwrap();
    assert_eq!(served.post_copy, Some(migration));
    assert_eq!(dst_progress.status().state, "completed");
    assert!(contents(&dst) == contents(&src));
}
