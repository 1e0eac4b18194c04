//! Correctness of paging: data survives eviction, under concurrency, for every policy and mode.

mod common;

use std::sync::{Arc, Mutex};

use common::{pattern, read, stress_seed, supported, wait_for_samples, write, write_patterns, Rng};
use std::time::Duration;

use memvisor_pager::{
    page_size, FaultInjector, PageInUnit, PageOut, PagerError, Region, RegionConfig, RegionStats,
    ResolveMode,
};
use memvisor_policy::PolicySpec;

const MODES: [ResolveMode; 2] = [ResolveMode::AliasContinue, ResolveMode::Copy];
const PAGE_OUTS: [PageOut; 3] = [PageOut::Sync, PageOut::Threads(2), PageOut::IoUring(4)];

fn config(size: usize, budget: usize, chunk: usize, dir: &std::path::Path) -> RegionConfig {
    RegionConfig::new(size, budget, dir).chunk_size(chunk)
}

#[test]
fn sequential_pass_survives_eviction() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 16 * ps;
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        // 8.5 chunks: the last chunk is partial.
        let size = 8 * chunk + chunk / 2;
        let region = Region::new(config(size, 2 * chunk, chunk, dir.path()).resolve(mode)).unwrap();
        write_patterns(&region, size / ps);
        let mut buf = vec![0u8; ps];
        let mut got = vec![0u8; ps];
        for _pass in 0..2 {
            for p in 0..size / ps {
                pattern(p as u64, &mut buf);
                read(&region, p * ps, &mut got);
                assert!(got == buf, "{mode:?}: page {p} differs");
            }
        }
        let s = region.stats();
        // The budget is real: the memfd holds no more than two chunks.
        let held = region.memory_bytes().unwrap();
        assert!(
            held <= 2 * chunk as u64,
            "{mode:?}: memfd holds {held} bytes"
        );
        assert_eq!(s.chunks, 9);
        assert!(s.resident_pages <= 2 * 16, "{s:?}");
        assert!(s.page_outs >= 7 && s.page_ins >= 7, "{s:?}");
        assert_eq!(s.write_errors + s.read_errors, 0);
        assert!(region.take_errors().is_empty());
        assert_eq!(
            s.resident_chunks + s.swapped_chunks + s.zero_chunks + s.poisoned_chunks,
            s.chunks
        );
    }
}

#[test]
fn untouched_and_zero_chunks_read_as_zero_and_are_not_stored() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    let dir = tempfile::tempdir().unwrap();
    let region =
        Region::new(config(32 * chunk, chunk, chunk, dir.path()).page_in_unit(PageInUnit::Chunk))
            .unwrap();
    let mut got = vec![1u8; ps];
    for c in 0..32 {
        read(&region, c * chunk + ps, &mut got);
        assert!(got.iter().all(|&b| b == 0));
    }
    let s = region.stats();
    assert_eq!(s.page_outs, 0, "{s:?}");
    assert_eq!(s.zero_page_outs, 31, "{s:?}");
    assert_eq!(s.zero_fills, 32, "{s:?}");
    assert_eq!(s.swapped_chunks, 0);
}

/// Four threads read and write random pages against a shadow copy kept under one mutex per
/// page; a tiny budget keeps evicting.
fn stress(policy: PolicySpec, mode: ResolveMode, chunk_pages: usize, budget_chunks: usize) {
    stress_sampled(policy, mode, chunk_pages, budget_chunks, None);
}

fn stress_sampled(
    policy: PolicySpec,
    mode: ResolveMode,
    chunk_pages: usize,
    budget_chunks: usize,
    sample: Option<Duration>,
) -> RegionStats {
    Stress::new(policy, mode, chunk_pages, budget_chunks)
        .sample(sample)
        .run()
}

/// Operations per thread in the randomized tests (`MEMVISOR_PAGER_STRESS_OPS` overrides).
fn ops_per_thread() -> usize {
    std::env::var("MEMVISOR_PAGER_STRESS_OPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1500)
}

/// One randomized run: the region's set-up and what happens besides the four threads.
struct Stress {
    policy: PolicySpec,
    mode: ResolveMode,
    chunk_pages: usize,
    budget_chunks: usize,
    sample: Option<Duration>,
    /// One failed swap write every 2 ms while the threads run.
    injector: Option<Arc<FaultInjector>>,
    /// Discards by the threads, budget and policy changes by a controller thread.
    churn: bool,
    page_out: PageOut,
    overlapped_page_in: bool,
    busy_poll: Option<Duration>,
    async_page_in: bool,
    unit: PageInUnit,
}

impl Stress {
    fn new(
        policy: PolicySpec,
        mode: ResolveMode,
        chunk_pages: usize,
        budget_chunks: usize,
    ) -> Self {
        Self {
            policy,
            mode,
            chunk_pages,
            budget_chunks,
            sample: None,
            injector: None,
            churn: false,
            page_out: PageOut::default(),
            overlapped_page_in: true,
            busy_poll: None,
            async_page_in: false,
            unit: PageInUnit::Adaptive,
        }
    }

    fn unit(mut self, unit: PageInUnit) -> Self {
        self.unit = unit;
        self
    }

    fn async_page_in(mut self, on: bool) -> Self {
        self.async_page_in = on;
        self
    }

    fn overlapped_page_in(mut self, on: bool) -> Self {
        self.overlapped_page_in = on;
        self
    }

    fn busy_poll(mut self, window: Option<Duration>) -> Self {
        self.busy_poll = window;
        self
    }

    fn sample(mut self, sample: Option<Duration>) -> Self {
        self.sample = sample;
        self
    }

    fn failing_writes(mut self) -> Self {
        self.injector = Some(Arc::new(FaultInjector::new()));
        self
    }

    fn churn(mut self) -> Self {
        self.churn = true;
        self
    }

    fn page_out(mut self, page_out: PageOut) -> Self {
        self.page_out = page_out;
        self
    }

    fn run(self) -> RegionStats {
        let Self {
            policy,
            mode,
            chunk_pages,
            budget_chunks,
            sample,
            injector,
            churn,
            page_out,
            overlapped_page_in,
            busy_poll,
            async_page_in,
            unit,
        } = self;
        let ps = page_size();
        let chunk = chunk_pages * ps;
        // Not a multiple of the chunk: 13 chunks and 3 pages (and a few bytes).
        let size = 13 * chunk + 3 * ps + 100;
        let pages = size.div_ceil(ps);
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = config(size, budget_chunks * chunk, chunk, dir.path())
            .policy(policy.clone())
            .resolve(mode)
            .sample_interval(sample)
            .page_out(page_out)
            .overlapped_page_in(overlapped_page_in)
            .busy_poll(busy_poll)
            .async_page_in(async_page_in)
            .page_in_unit(unit)
            .log_errors(false);
        cfg.fault_injector = injector.clone();
        let region = Arc::new(Region::new(cfg).unwrap());
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        // With an injector: one failed swap write every couple of milliseconds while the threads run.
        let failer = injector.map(|inj| {
            let done = done.clone();
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    inj.fail_writes(libc::EIO, 1);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        });
        // With churn: a controller changes the budget and the policy while the threads run.
        let controller = churn.then(|| {
            let done = done.clone();
            let region = region.clone();
            std::thread::spawn(move || {
                let policies: Vec<PolicySpec> = PolicySpec::all()
                    .into_iter()
                    .filter(|p| !p.is_offline())
                    .collect();
                let mut rng = Rng::new(99 + stress_seed());
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    region.set_budget((1 + rng.below(4)) * chunk).unwrap();
                    region
                        .set_policy(policies[rng.below(policies.len())].clone())
                        .unwrap();
                    std::thread::sleep(Duration::from_millis(1));
                }
                region.set_budget(budget_chunks * chunk).unwrap();
            })
        });
        let shadow: Arc<Vec<Mutex<Vec<u8>>>> = Arc::new(
            (0..pages)
                .map(|p| Mutex::new(vec![0u8; ps.min(size - p * ps)]))
                .collect(),
        );
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let region = region.clone();
                let shadow = shadow.clone();
                let policy = policy.to_string();
                std::thread::spawn(move || {
                    let seed = stress_seed();
                    let mut rng = Rng::new(t + 1 + (seed << 8));
                    let mut buf = vec![0u8; ps];
                    for i in 0..ops_per_thread() {
                        // Mostly a hot set of 3 chunks, sometimes anywhere.
                        let p = if rng.below(4) == 0 {
                            rng.below(pages)
                        } else {
                            rng.below(3 * chunk_pages).min(pages - 1)
                        };
                        if churn && rng.below(16) == 0 {
                            // Discard a page, or (rarely) the whole chunk holding it.
                            let (first, n) = if rng.below(4) == 0 {
                                let c = p / chunk_pages;
                                (c * chunk_pages, chunk_pages.min(pages - c * chunk_pages))
                            } else {
                                (p, 1)
                            };
                            // Lock in ascending order; the other threads hold one page at a time.
                            let mut held: Vec<_> = (first..first + n)
                                .map(|q| shadow[q].lock().unwrap())
                                .collect();
                            region.discard(first * ps, n * ps).unwrap();
                            for page in held.iter_mut() {
                                page.fill(0);
                            }
                            continue;
                        }
                        let mut page = shadow[p].lock().unwrap();
                        let plen = page.len();
                        let off = rng.below(plen);
                        let len = (1 + rng.below(512)).min(plen - off);
                        if rng.below(2) == 0 {
                            pattern(rng.next(), &mut buf[..len]);
                            write(&region, p * ps + off, &buf[..len]);
                            page[off..off + len].copy_from_slice(&buf[..len]);
                        } else {
                            read(&region, p * ps + off, &mut buf[..len]);
                            assert!(
                                buf[..len] == page[off..off + len],
                                "thread {t} op {i} (seed {seed}): page {p} offset {off} differs \
                                 ({policy} {mode:?} {page_out}): {:?} vs {:?}",
                                &buf[..len.min(8)],
                                &page[off..off + len.min(8)]
                            );
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(c) = controller {
            c.join().unwrap();
        }
        let injecting = failer.is_some();
        if let Some(f) = failer {
            f.join().unwrap();
        }
        let mut buf = vec![0u8; ps];
        for (p, page) in shadow.iter().enumerate() {
            let page = page.lock().unwrap();
            read(&region, p * ps, &mut buf[..page.len()]);
            assert!(
                buf[..page.len()] == page[..],
                "final check (seed {}): page {p} differs",
                stress_seed()
            );
        }
        let s = region.stats();
        // The budget counts pages (chunks may be partly resident).
        assert!(
            s.resident_pages <= (budget_chunks as u64 + s.overrun_chunks) * chunk_pages as u64,
            "{policy} {mode:?}: {s:?}"
        );
        assert!(
            s.page_ins > 10,
            "{policy} {mode:?}: constant eviction expected: {s:?}"
        );
        assert_eq!(s.read_errors + s.poisoned_chunks, 0, "{s:?}");
        assert_eq!(s.dirty_tracking_misses, 0, "{policy} {mode:?}: {s:?}");
        let errors = region.take_errors();
        if injecting {
            assert_eq!(errors.len() as u64, s.write_errors.min(256), "{s:?}");
            assert!(errors
                .iter()
                .all(|e| matches!(e, PagerError::SwapWrite { .. })));
        } else {
            assert_eq!(s.write_errors, 0, "{s:?}");
            assert!(errors.is_empty());
        }
        s
    }
}

#[test]
fn randomized_multithreaded_every_policy_and_mode() {
    if !supported() {
        return;
    }
    for policy in PolicySpec::all() {
        if policy.is_offline() {
            continue;
        }
        for mode in MODES {
            stress(policy.clone(), mode, 4, 2);
        }
    }
}

/// One fixed page-in unit (the default, adaptive, runs in every other randomized test) under
/// every online policy; the policies take turns at the two resolve mode and page-out pairs
/// (alias with synchronous page-out, copy with asynchronous), starting with a different pair
/// per unit, so that each policy meets both pairs over the two units. Every policy in every
/// mode is the adaptive unit's test (`randomized_multithreaded_every_policy_and_mode`).
fn randomized_fixed_page_in_unit(unit: PageInUnit, first_pair: usize) {
    if !supported() {
        return;
    }
    let pairs = [
        (ResolveMode::AliasContinue, PageOut::Sync),
        (ResolveMode::Copy, PageOut::IoUring(4)),
    ];
    let policies = PolicySpec::all().into_iter().filter(|p| !p.is_offline());
    for (k, policy) in policies.enumerate() {
        let (mode, page_out) = pairs[(k + first_pair) % pairs.len()];
        Stress::new(policy, mode, 4, 2)
            .unit(unit)
            .page_out(page_out)
            .run();
    }
}

/// Whole chunks on every page-in.
#[test]
fn randomized_whole_chunk_page_in() {
    randomized_fixed_page_in_unit(PageInUnit::Chunk, 0);
}

/// Single pages on every page-in (every chunk partly resident).
#[test]
fn randomized_single_page_page_in() {
    randomized_fixed_page_in_unit(PageInUnit::Page, 1);
}

/// With the defaults, a scattered read of a chunk in swap brings in the faulting page alone
/// and a sequential pass whole chunks; the budget counts pages, so more chunks than the budget
/// holds may be partly resident, never more pages; and nothing is lost either way.
#[test]
fn adaptive_page_in_reads_pages_when_scattered_and_chunks_when_streaming() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 16 * ps;
    let chunks = 256;
    let dir = tempfile::tempdir().unwrap();
    let region = Region::new(
        config(chunks * chunk, 4 * chunk, chunk, dir.path())
            .page_out(PageOut::Sync)
            .sample_interval(None),
    )
    .unwrap();
    // Sequential fill: every page holds its index.
    for p in 0..chunks * 16 {
        write(&region, p * ps, &(p as u64).to_le_bytes());
    }
    let s = region.stats();
    assert!(s.resident_pages <= 4 * 16, "{s:?}");
    // Whole chunks zero-filled, once the window has grown to a chunk (over the first one:
    // a page, then 4 pages, 8, the rest).
    assert!(
        s.zero_fills <= chunks as u64 + 3,
        "whole chunks zero-filled: {s:?}"
    );
    // Scattered reads: one page each, far apart.
    let before = region.stats();
    let mut b = [0u8; 8];
    let mut rng = Rng::new(5);
    for _ in 0..200 {
        let p = rng.below(chunks * 16);
        read(&region, p * ps, &mut b);
        assert_eq!(u64::from_le_bytes(b), p as u64, "page {p}");
    }
    let s = region.stats();
    let ins = s.page_ins - before.page_ins;
    let scattered = s.scattered_page_ins - before.scattered_page_ins;
    assert!(ins > 50 && scattered * 10 >= ins * 9, "{s:?}");
    assert!(
        s.bytes_read - before.bytes_read < ins * (2 * ps) as u64,
        "a page per page-in, not a chunk: {s:?}"
    );
    assert!(s.resident_chunks > 4, "partly resident chunks: {s:?}");
    assert!(s.resident_pages <= 4 * 16, "{s:?}");
    // A sequential pass again: whole chunks.
    let before = region.stats();
    for p in 0..chunks * 16 {
        read(&region, p * ps, &mut b);
        assert_eq!(u64::from_le_bytes(b), p as u64, "page {p}");
    }
    let s = region.stats();
    let ins = s.page_ins - before.page_ins;
    assert!(
        ins <= 2 * chunks as u64 && s.scattered_page_ins - before.scattered_page_ins <= 4,
        "{s:?}"
    );
    assert!(s.resident_pages <= 4 * 16, "{s:?}");
    assert_eq!(s.write_errors + s.read_errors, 0);
}

/// Scattered faults from several threads are read side by side (parallel page-in), threads
/// faulting on a page being read wait for that read, and every page reads back right, with
/// the default settings (copy mode, an asynchronous engine, overlapped page-in).
#[test]
fn scattered_faults_of_several_threads_are_read_in_parallel() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 16 * ps;
    let chunks = 128;
    let dir = tempfile::tempdir().unwrap();
    let region = Arc::new(
        Region::new(config(chunks * chunk, 4 * chunk, chunk, dir.path()).sample_interval(None))
            .unwrap(),
    );
    let pages = chunks * 16;
    for p in 0..pages {
        write(&region, p * ps, &(p as u64).to_le_bytes());
    }
    let threads: Vec<_> = (0..4u64)
        .map(|t| {
            let region = region.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(t + 10);
                let mut b = [0u8; 8];
                for i in 0..600 {
                    // Every fourth access goes to a page the other threads use too.
                    let p = if i % 4 == 0 {
                        (i * 7) % pages
                    } else {
                        rng.below(pages)
                    };
                    read(&region, p * ps, &mut b);
                    assert_eq!(u64::from_le_bytes(b), p as u64, "thread {t}: page {p}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = region.stats();
    assert!(s.parallel_page_reads > 100, "{s:?}");
    assert!(s.resident_pages <= 4 * 16, "{s:?}");
    assert_eq!(
        s.write_errors + s.read_errors + s.dirty_tracking_misses,
        0,
        "{s:?}"
    );
}

/// A budget of 8 chunks leaves asynchronous page-out a headroom of 2: victims are written
/// ahead of demand, faults arrive on chunks being written, and rescued chunks go back to the
/// policy; every policy, both asynchronous engines and synchronous page-out.
#[test]
fn randomized_every_policy_with_page_out_headroom() {
    if !supported() {
        return;
    }
    for (i, policy) in PolicySpec::all()
        .into_iter()
        .filter(|p| !p.is_offline())
        .enumerate()
    {
        let page_out = PAGE_OUTS[i % PAGE_OUTS.len()];
        let mode = MODES[i / PAGE_OUTS.len() % MODES.len()];
        let sample = Some(Duration::from_millis(2));
        Stress::new(policy, mode, 4, 8)
            .sample(sample)
            .page_out(page_out)
            .run();
    }
}

/// Page-sized chunks with a headroom: each page-in's read overlaps the eviction of the next
/// victims (overlapped page-in), with and without a busy-polling handler, both engines.
#[test]
fn randomized_overlapped_page_in_and_busy_polling() {
    if !supported() {
        return;
    }
    for mode in MODES {
        for (overlap, poll) in [
            (true, None),
            (true, Some(Duration::from_micros(50))),
            (false, Some(Duration::from_micros(50))),
        ] {
            for page_out in [PageOut::Threads(2), PageOut::IoUring(4)] {
                let s = Stress::new("chunk-queues".parse().unwrap(), mode, 1, 8)
                    .sample(Some(Duration::from_millis(2)))
                    .page_out(page_out)
                    .overlapped_page_in(overlap)
                    .busy_poll(poll)
                    .run();
                assert!(
                    s.page_ins > 0 && s.page_outs > 0,
                    "{mode:?} {page_out} overlap {overlap}: {s:?}"
                );
            }
        }
    }
}

/// Asynchronous page-in: the faulting page is read, verified and mapped before the rest of
/// its chunk; other threads fault elsewhere in the chunk meanwhile. Every page-out engine,
/// with discards and run-time changes (Copy mode: the only one it applies to).
#[test]
fn randomized_asynchronous_page_in() {
    if !supported() {
        return;
    }
    for page_out in PAGE_OUTS {
        for churn in [false, true] {
            let mut st = Stress::new("chunk-queues".parse().unwrap(), ResolveMode::Copy, 8, 3)
                .sample(Some(Duration::from_millis(2)))
                .page_out(page_out)
                .async_page_in(true);
            if churn {
                st = st.churn();
            }
            let s = st.run();
            assert!(
                s.early_wakes > 0 && s.early_wakes <= s.page_ins,
                "{page_out} churn {churn}: {s:?}"
            );
        }
    }
}

#[test]
fn randomized_with_discards_and_runtime_budget_and_policy_changes() {
    if !supported() {
        return;
    }
    for mode in MODES {
        for sample in [None, Some(Duration::from_millis(1))] {
            for page_out in PAGE_OUTS {
                let s = Stress::new("chunk-queues".parse().unwrap(), mode, 4, 2)
                    .sample(sample)
                    .churn()
                    .page_out(page_out)
                    .run();
                assert!(s.discarded_chunks > 0, "{mode:?} {page_out}: {s:?}");
            }
        }
    }
}

#[test]
fn budget_of_one_chunk() {
    if !supported() {
        return;
    }
    for mode in MODES {
        stress(PolicySpec::Clock, mode, 4, 1);
    }
}

#[test]
fn page_sized_chunks() {
    if !supported() {
        return;
    }
    for mode in MODES {
        stress(PolicySpec::Lru, mode, 1, 5);
    }
}

#[test]
fn many_threads_fault_the_same_chunk_at_once() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 64 * ps;
    for mode in MODES {
        let dir = tempfile::tempdir().unwrap();
        let region = Arc::new(
            Region::new(config(4 * chunk, chunk, chunk, dir.path()).resolve(mode)).unwrap(),
        );
        for round in 0..20u8 {
            // Evict chunk 0 by touching the others, then have 8 threads hit chunk 0 together.
            for c in 1..4 {
                write(&region, c * chunk, &[round]);
            }
            let barrier = Arc::new(std::sync::Barrier::new(8));
            let hs: Vec<_> = (0..8)
                .map(|t| {
                    let region = region.clone();
                    let barrier = barrier.clone();
                    std::thread::spawn(move || {
                        barrier.wait();
                        // Same page for even threads, different pages for odd ones.
                        let p = if t % 2 == 0 { 5 } else { t * 7 };
                        let mut b = [0u8; 1];
                        read(&region, p * ps + 8, &mut b);
                        b[0]
                    })
                })
                .collect();
            for h in hs {
                let v = h.join().unwrap();
                assert!(v == 0 || round > 0, "unexpected byte {v}");
            }
        }
        let s = region.stats();
        assert!(s.page_in_nanos > 0);
        assert!(s.page_in_p50_nanos <= s.page_in_p99_nanos, "{s:?}");
        assert!(
            s.page_in_max_nanos > 0 && s.page_in_max_nanos <= s.page_in_nanos,
            "{s:?}"
        );
        assert!(s.page_in_p50_nanos / 2 <= s.page_in_max_nanos, "{s:?}");
        assert!(region.take_errors().is_empty());
    }
}

#[test]
fn randomized_multithreaded_with_access_sampling() {
    if !supported() {
        return;
    }
    for policy in PolicySpec::all() {
        if policy.is_offline() {
            continue;
        }
        for mode in MODES {
            let s = stress_sampled(policy.clone(), mode, 4, 3, Some(Duration::from_millis(1)));
            assert!(s.samples > 0, "{s:?}");
        }
    }
}

/// A hot chunk touched between the steps of a scan: with sampling, CLOCK and chunk queues see
/// its reference bit and keep it; FIFO evicts it every few rounds.
#[test]
fn sampling_lets_clock_and_chunk_queues_keep_a_hot_chunk() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    let run = |policy: PolicySpec, sample: Option<Duration>| {
        let dir = tempfile::tempdir().unwrap();
        let region = Region::new(
            config(8 * chunk, 3 * chunk, chunk, dir.path())
                .policy(policy)
                .sample_interval(sample),
        )
        .unwrap();
        write(&region, 0, &[1]);
        let mut b = [0u8; 1];
        for i in 0..150 {
            std::thread::sleep(Duration::from_millis(2));
            read(&region, 0, &mut b);
            assert_eq!(b[0], 1);
            write(&region, (1 + i % 7) * chunk, &[2]);
        }
        region.stats()
    };
    // Every scan access misses (7 scan chunks cycle through at most 3 slots): 150 misses;
    // the rest are misses of the hot chunk.
    let hot_misses = |s: &RegionStats| (s.page_ins + s.zero_fills).saturating_sub(150);
    let fifo = run(PolicySpec::Fifo, None);
    for policy in ["clock", "chunk-queues"] {
        let sampled = run(policy.parse().unwrap(), Some(Duration::from_millis(1)));
        assert!(sampled.minor_faults > 0, "{sampled:?}");
        eprintln!(
            "hot-chunk misses: {policy} with sampling {}, fifo {}",
            hot_misses(&sampled),
            hot_misses(&fifo)
        );
        assert!(
            hot_misses(&sampled) * 3 < hot_misses(&fifo),
            "hot-chunk misses: {policy} with sampling {}, fifo {}",
            hot_misses(&sampled),
            hot_misses(&fifo)
        );
    }
}

/// The randomized workload while swap writes keep failing: overrun chunks stay resident, are
/// retried, and no byte is ever lost.
#[test]
fn randomized_multithreaded_with_failing_writes() {
    if !supported() {
        return;
    }
    for (policy, page_out) in [
        ("chunk-queues", PageOut::Sync),
        ("lru", PageOut::Threads(2)),
        ("chunk-queues", PageOut::IoUring(4)),
    ] {
        for mode in MODES {
            let s = Stress::new(policy.parse().unwrap(), mode, 4, 2)
                .sample(Some(Duration::from_millis(3)))
                .failing_writes()
                .page_out(page_out)
                .run();
            assert!(s.write_errors > 0, "{policy} {mode:?}: {s:?}");
        }
    }
}

/// With dirty tracking, chunks only read since their page-in are evicted without a write, and
/// a single byte written after a page-in (or after a sampling pass) is never lost.
#[test]
fn dirty_tracking_skips_clean_chunks_and_catches_every_write() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    let chunks = 8;
    for mode in MODES {
        for sample in [None, Some(Duration::from_millis(1))] {
            let dir = tempfile::tempdir().unwrap();
            let region = Region::new(
                config(chunks * chunk, 2 * chunk, chunk, dir.path())
                    .resolve(mode)
                    .sample_interval(sample),
            )
            .unwrap();
            assert!(region.dirty_tracking());
            let mut buf = vec![0u8; chunk];
            for c in 0..chunks {
                pattern(c as u64, &mut buf);
                write(&region, c * chunk, &buf);
            }
            let mut got = vec![0u8; chunk];
            // Read passes: once the written chunks are out, evictions are clean.
            let before = region.stats();
            for _ in 0..2 {
                for c in 0..chunks {
                    pattern(c as u64, &mut buf);
                    read(&region, c * chunk, &mut got);
                    assert!(got == buf, "{mode:?}: chunk {c}");
                }
            }
            let s = region.stats();
            assert_eq!(
                s.bytes_written,
                before.bytes_written + 2 * chunk as u64,
                "{s:?}"
            );
            assert!(s.clean_evictions >= 2 * chunks as u64 - 4, "{s:?}");
            // One byte per chunk, at a different page each time, after the page-in (and, with
            // sampling, possibly after the entries were dropped and rebuilt).
            for round in 0..3u8 {
                for c in 0..chunks {
                    let at = c * chunk + (round as usize % 4) * ps + 17;
                    read(&region, c * chunk, &mut got[..1]);
                    if sample.is_some() {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    write(&region, at, &[0xF0 | round]);
                }
                for c in 0..chunks {
                    for r in 0..=round {
                        let at = c * chunk + (r as usize % 4) * ps + 17;
                        read(&region, at, &mut got[..1]);
                        assert_eq!(got[0], 0xF0 | r, "{mode:?} {sample:?}: chunk {c} round {r}");
                    }
                }
            }
            let s = region.stats();
            assert_eq!(s.dirty_tracking_misses, 0, "{s:?}");
            assert!(region.take_errors().is_empty());
        }
    }
}

#[test]
fn without_dirty_tracking_every_eviction_writes() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    let dir = tempfile::tempdir().unwrap();
    let region = Region::new(
        config(6 * chunk, chunk, chunk, dir.path())
            .page_in_unit(PageInUnit::Chunk)
            .dirty_tracking(false),
    )
    .unwrap();
    assert!(!region.dirty_tracking());
    for _ in 0..2 {
        for c in 0..6 {
            write(&region, c * chunk, &[1]);
        }
    }
    let mut b = [0u8; 1];
    for c in 0..6 {
        read(&region, c * chunk, &mut b);
        assert_eq!(b[0], 1);
    }
    let s = region.stats();
    assert_eq!(s.clean_evictions, 0, "{s:?}");
    assert_eq!(s.page_outs, 17, "{s:?}");
}

/// A resident page found written at a sample (its swap copy stale now) is written again when it
/// is evicted: its stale copy is never read back.
#[test]
fn a_page_written_after_a_sample_is_written_again_at_eviction() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 16 * ps;
    let dir = tempfile::tempdir().unwrap();
    let region = Region::new(
        config(4 * chunk, chunk, chunk, dir.path()).sample_interval(Some(Duration::from_millis(5))),
    )
    .unwrap();
    let mut buf = vec![0u8; chunk];
    for c in 0..4 {
        pattern(c as u64 + 1, &mut buf);
        write(&region, c * chunk, &buf);
    }
    // Chunk 0 back in (read), then written; after a sample its next access harvests the write.
    read(&region, 0, &mut buf);
    write(&region, 5, &[42]);
    // Minor faults after samples harvest the write.
    let minor = region.stats().minor_faults;
    let t = std::time::Instant::now();
    while region.stats().minor_faults < minor + 2 && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
        let mut b = [0u8; 1];
        read(&region, 5, &mut b);
        assert_eq!(b[0], 42);
    }
    let before = region.stats();
    assert!(before.minor_faults >= minor + 2, "{before:?}");
    // Evicting it writes it again; reading it back gives the new byte.
    write(&region, chunk, &[7]);
    let mut b = [0u8; 1];
    read(&region, 5, &mut b);
    assert_eq!(b[0], 42);
    let s = region.stats();
    assert!(s.bytes_written >= before.bytes_written + ps as u64, "{s:?}");
    assert_eq!((s.stale_punches, s.dirty_tracking_misses), (0, 0), "{s:?}");
}

/// After a sample, a minor fault maps only the run of resident pages around the faulting
/// page: a partly resident chunk's other runs keep their written state (in their uffd-wp
/// markers) until their own minor fault or the chunk's eviction, which still writes a page
/// written before the sample and never touched after it.
#[test]
fn a_minor_fault_maps_its_run_and_the_other_runs_keep_their_written_state() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 16 * ps;
    let dir = tempfile::tempdir().unwrap();
    let region = Region::new(
        config(8 * chunk, 2 * chunk, chunk, dir.path())
            .page_in_unit(PageInUnit::Page)
            .page_out(PageOut::Sync)
            .sample_interval(Some(Duration::from_millis(5))),
    )
    .unwrap();
    write_patterns(&region, 8 * chunk / ps);
    let mut buf = vec![0u8; ps];
    let mut got = vec![0u8; ps];
    // Chunk 0 is out; pages 1, 5 and 9 come back one by one: three runs of one page.
    region.barrier().unwrap();
    assert!(!region.covered_pages_resident(0, chunk));
    for p in [1, 5, 9] {
        read(&region, p * ps, &mut got);
    }
    write(&region, 5 * ps, &[0xa5]);
    wait_for_samples(&region, 2);
    // Each run is mapped by its own minor fault.
    let minor = region.stats().minor_faults;
    read(&region, ps, &mut got);
    let after_one = region.stats().minor_faults;
    read(&region, 9 * ps, &mut got);
    let after_two = region.stats().minor_faults;
    assert!(after_one > minor, "no minor fault on page 1");
    assert!(after_two > after_one, "page 9 was mapped with page 1's run");
    // Evicting chunk 0 (page 5 untouched since the sample) writes page 5's new byte.
    let written = region.stats().bytes_written;
    for p in 2 * chunk / ps..8 * chunk / ps {
        read(&region, p * ps, &mut got);
    }
    region.barrier().unwrap();
    assert!(
        !region.covered_pages_resident(5 * ps, ps),
        "chunk 0 still in"
    );
    let s = region.stats();
    assert!(s.bytes_written >= written + ps as u64, "{s:?}");
    read(&region, 5 * ps, &mut got);
    pattern(5, &mut buf);
    buf[0] = 0xa5;
    assert!(got == buf, "page 5 lost its write");
    for p in [1, 9] {
        read(&region, p * ps, &mut got);
        pattern(p as u64, &mut buf);
        assert!(got == buf, "page {p} differs");
    }
    assert_eq!(s.dirty_tracking_misses, 0, "{s:?}");
}

/// A sample drops the entries of a region larger than one slice of a sample (16 MiB) in several
/// calls, serving faults between them: every resident chunk still loses its entries.
#[test]
fn a_sample_drops_every_resident_chunk_of_a_region_of_several_slices() {
    if !supported() {
        return;
    }
    let chunk = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let region = Region::new(
        config(64 * chunk, 8 * chunk, chunk, dir.path())
            .sample_interval(Some(Duration::from_millis(20))),
    )
    .unwrap();
    let chunks = [0, 17, 33, 50, 63];
    // Whole chunks: samples begin once the region holds half its budget.
    for &c in &chunks {
        write(&region, c * chunk, &vec![c as u8 + 1; chunk]);
    }
    wait_for_samples(&region, 2);
    for &c in &chunks {
        let minor = region.stats().minor_faults;
        let mut b = [0u8; 1];
        read(&region, c * chunk, &mut b);
        assert_eq!(b[0], c as u8 + 1);
        assert!(
            region.stats().minor_faults > minor,
            "chunk {c} kept its entries through the sample"
        );
    }
}

/// No sample is taken while it could inform no eviction: in a region that fits its budget,
/// or holds less than half of it; they begin once it holds more.
#[test]
fn samples_wait_for_a_region_near_a_budget_it_can_outgrow() {
    if !supported() {
        return;
    }
    let chunk = 1 << 20;
    let dir = tempfile::tempdir().unwrap();
    let every = Some(Duration::from_millis(5));
    // Fits: written whole, never sampled, never a minor fault.
    let fits = Region::new(config(8 * chunk, 8 * chunk, chunk, dir.path()).sample_interval(every))
        .unwrap();
    write(&fits, 0, &vec![1u8; 8 * chunk]);
    let t = std::time::Instant::now();
    while fits.stats().samples_skipped < 10 {
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", fits.stats());
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut b = vec![0u8; 8 * chunk];
    read(&fits, 0, &mut b);
    assert!(b.iter().all(|&x| x == 1));
    let s = fits.stats();
    assert_eq!((s.samples, s.minor_faults), (0, 0), "{s:?}");

    // Larger than its budget: 3 of 8 chunks held, then 5.
    let grows =
        Region::new(config(64 * chunk, 8 * chunk, chunk, dir.path()).sample_interval(every))
            .unwrap();
    write(&grows, 0, &vec![2u8; 3 * chunk]);
    let skipped = grows.stats().samples_skipped;
    let t = std::time::Instant::now();
    while grows.stats().samples_skipped < skipped + 10 {
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", grows.stats());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(grows.stats().samples, 0);
    write(&grows, 3 * chunk, &vec![2u8; 2 * chunk]);
    wait_for_samples(&grows, 2);
}

/// The randomized workload with chunks of 16 pages, scattered page-ins leaving them partly
/// resident in several runs, and a sample every millisecond (minor faults mapping one run).
#[test]
fn randomized_sampling_with_partly_resident_chunks() {
    if !supported() {
        return;
    }
    for policy in ["clock", "chunk-queues", "s3-fifo"] {
        let policy: PolicySpec = policy.parse().unwrap();
        for mode in MODES {
            let s = stress_sampled(policy.clone(), mode, 16, 3, Some(Duration::from_millis(1)));
            assert!(s.samples > 0 && s.minor_faults > 0, "{s:?}");
        }
    }
}

/// A longer run of the randomized workload (sampling every millisecond, dirty tracking, a few
/// policies, both modes): `MEMVISOR_PAGER_STRESS_OPS=100000 cargo test --release -p
/// memvisor-pager --test paging -- --ignored`.
#[test]
#[ignore = "long; run explicitly"]
fn long_randomized_stress() {
    if !supported() {
        return;
    }
    for policy in ["chunk-queues", "clock", "arc", "s3-fifo"] {
        for mode in MODES {
            let s = stress_sampled(
                policy.parse().unwrap(),
                mode,
                16,
                3,
                Some(Duration::from_millis(1)),
            );
            eprintln!(
                "{policy} {mode:?}: {} page-ins, {} page-outs, {} clean evictions, {} minor faults",
                s.page_ins, s.page_outs, s.clean_evictions, s.minor_faults
            );
        }
    }
}

/// CPU time (user + system, clock ticks) of this process's thread named `name`.
fn thread_cpu_ticks(name: &str) -> u64 {
    for t in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        if std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name) {
            let stat = std::fs::read_to_string(t.path().join("stat")).unwrap();
            // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
            let rest = &stat[stat.rfind(')').unwrap() + 2..];
            let f: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            return f[11] + f[12];
        }
    }
    panic!("no thread named {name}");
}

/// Adaptive busy polling is on by default and polls only while faults come fast: once they
/// stop, the handler thread sleeps and an idle region costs no CPU.
#[test]
fn busy_polling_stops_when_faults_stop() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 16 * ps;
    let chunks = 128;
    let dir = tempfile::tempdir().unwrap();
    let c = config(chunks * chunk, 4 * chunk, chunk, dir.path()).sample_interval(None);
    assert_eq!(c.busy_poll, Some(memvisor_pager::DEFAULT_BUSY_POLL));
    let region = Region::new(c).unwrap();
    let seq = region.name().rsplit('#').next().unwrap().to_string();
    let thread = format!("pager-{seq}");
    let pages = chunks * 16;
    for p in 0..pages {
        write(&region, p * ps, &(p as u64).to_le_bytes());
    }
    // Fast scattered faults: the handler polls between them.
    let mut rng = Rng::new(3);
    let mut b = [0u8; 8];
    for _ in 0..2000 {
        let p = rng.below(pages);
        read(&region, p * ps, &mut b);
        assert_eq!(u64::from_le_bytes(b), p as u64, "page {p}");
    }
    let busy = thread_cpu_ticks(&thread);
    std::thread::sleep(Duration::from_millis(50));
    let before = thread_cpu_ticks(&thread);
    std::thread::sleep(Duration::from_millis(800));
    let idle = thread_cpu_ticks(&thread) - before;
    // A handler still polling would use about 80 ticks of 10 ms here.
    assert!(
        idle <= 4,
        "handler used {idle} ticks in 800 ms idle ({busy} while faulting)"
    );
    assert_eq!(region.stats().read_errors, 0);
}

/// The residency hint other threads read (`covered_pages_resident`) follows page-ins and
/// evictions: once the handler is idle it agrees page for page with the memfd (`mincore` of
/// the region's shared mapping reports the file's pages).
#[test]
fn the_residency_hint_follows_page_ins_and_evictions() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 16 * ps;
    let dir = tempfile::tempdir().unwrap();
    let size = 8 * chunk;
    let region =
        Region::new(config(size, 2 * chunk, chunk, dir.path()).page_out(PageOut::Sync)).unwrap();
    let in_memfd = |region: &Region| -> Vec<bool> {
        let mut vec = vec![0u8; size / ps];
        // SAFETY: the region's mapping is `size` bytes, page-aligned; mincore writes one byte
        // per page into `vec`.
        let r = unsafe { libc::mincore(region.as_ptr().cast(), size, vec.as_mut_ptr()) };
        assert_eq!(r, 0);
        vec.iter().map(|v| v & 1 != 0).collect()
    };
    let hinted = |region: &Region| -> Vec<bool> {
        (0..size / ps)
            .map(|p| region.covered_pages_resident(p * ps, ps))
            .collect()
    };
    assert!(
        !region.covered_pages_resident(0, chunk),
        "nothing touched yet"
    );
    write_patterns(&region, size / ps);
    let mut buf = vec![0u8; ps];
    region.barrier().unwrap();
    assert_eq!(hinted(&region), in_memfd(&region), "after the writes");
    assert!(
        region.covered_pages_resident(size - ps, ps),
        "the last page written"
    );
    assert!(
        !region.covered_pages_resident(0, chunk),
        "the first chunk was evicted"
    );
    assert!(
        !region.covered_pages_resident(6 * chunk, 2 * chunk + ps),
        "past the end"
    );
    // A range covering no whole page asks nothing.
    assert!(region.covered_pages_resident(1, ps - 1));
    // Reading the first chunk again brings pages back and evicts others.
    let mut got = vec![0u8; ps];
    for p in 0..chunk / ps {
        read(&region, p * ps, &mut got);
        pattern(p as u64, &mut buf);
        assert!(got == buf, "page {p} differs");
    }
    region.barrier().unwrap();
    assert_eq!(hinted(&region), in_memfd(&region), "after the reads");
    assert!(
        region.covered_pages_resident(chunk - ps, ps),
        "the last page read"
    );
    // Part of a page on either side: only the whole pages count.
    let last = chunk - ps;
    assert!(region.covered_pages_resident(last - ps / 2, ps + ps / 2));
}

/// A chunk just paged in is not evicted to restore the headroom: its thread was woken but may
/// not have run yet, and would only fault again. With 4 KiB pages, 8 of 64 chunks in memory
/// and scattered reads, every policy pages in about once per missing fault. Before, ARC and
/// CAR (which may name the newest chunk) paged in 188 and 239 times more than they faulted
/// over 4,000 reads here, against 10 to 36 for every policy now.
#[test]
fn a_chunk_just_paged_in_stays_for_its_thread() {
    if !supported() {
        return;
    }
    for policy in PolicySpec::all() {
        let ps = page_size();
        let chunk = 4 * ps;
        let dir = tempfile::tempdir().unwrap();
        let Ok(region) =
            Region::new(config(64 * chunk, 8 * chunk, chunk, dir.path()).policy(policy.clone()))
        else {
            continue; // an offline policy (OPT)
        };
        for c in 0..64 {
            write(&region, c * chunk, &vec![c as u8 + 1; chunk]);
        }
        let before = region.stats();
        let mut rng = Rng::new(3);
        let reads = 4000;
        let mut b = [0u8; 8];
        for _ in 0..reads {
            let (c, p) = (rng.below(64), rng.below(4));
            read(&region, c * chunk + p * ps, &mut b);
            assert_eq!(b, [c as u8 + 1; 8], "{policy}: chunk {c} page {p}");
        }
        let s = region.stats();
        let page_ins = s.page_ins - before.page_ins;
        let missing = s.missing_faults - before.missing_faults;
        assert!(
            page_ins <= missing + reads / 50,
            "{policy}: {page_ins} page-ins for {missing} missing faults"
        );
    }
}

/// A busy-polling handler stops polling while every CPU is busy: a polling handler is then one
/// more runnable thread, and each fault waits for its turn behind the others' time slices
/// (`fault_handler/busy_poll.rs`). With a CPU-bound thread on every CPU, a scattered reader's
/// handler backs off, and every page still reads back right.
#[test]
fn busy_polling_backs_off_while_every_cpu_is_busy() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let dir = tempfile::tempdir().unwrap();
    let size = 4096 * ps;
    let region = Region::new(
        config(size, 256 * ps, 16 * ps, dir.path()).busy_poll(Some(Duration::from_micros(200))),
    )
    .unwrap();
    write_patterns(&region, size / ps);
    // The fill may already have backed off (its own page-out threads want the CPUs too):
    // count what the busy threads add.
    let before = region.stats().busy_poll_backoffs;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<_> = (0..cpus)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    let mut rng = Rng::new(7);
    let (mut got, mut want) = (vec![0u8; ps], vec![0u8; ps]);
    let t = std::time::Instant::now();
    let mut reads = 0;
    while region.stats().busy_poll_backoffs == before && t.elapsed() < Duration::from_secs(20) {
        let p = rng.below(size / ps);
        read(&region, p * ps, &mut got);
        pattern(p as u64, &mut want);
        assert!(got == want, "page {p} read back wrong");
        reads += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    let s = region.stats();
    assert!(
        s.busy_poll_backoffs > before,
        "no back-off in {reads} scattered reads beside {cpus} busy threads: {s:?}"
    );
}
