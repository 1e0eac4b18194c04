//! The scanner on real processes: forked children holding known pages, scanned by pid.

// Address ranges of one mapping are meant as one-element lists of ranges here.
#![allow(clippy::single_range_in_vec_init)]

use std::time::{Duration, Instant};

use memvisor_dedup::{
    is_exited, DedupError, PageSource, PageState, PagesChild, ProcessMemory, Scanner,
    ScannerConfig, PAGE_SIZE,
};

/// A page whose content is determined by `seed` (0 = all zeros).
fn page(seed: u64) -> Vec<u8> {
    if seed == 0 {
        return vec![0; PAGE_SIZE];
    }
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (0..PAGE_SIZE / 8)
        .flat_map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()
        })
        .collect()
}

fn pages(seeds: &[u64]) -> Vec<u8> {
    seeds.iter().flat_map(|&s| page(s)).collect()
}

fn source(child: &PagesChild) -> Box<ProcessMemory> {
    Box::new(
        ProcessMemory::open(child.pid())
            .unwrap()
            .only(vec![child.address()..child.address() + child.len() as u64]),
    )
}

fn scan_two(lookahead: bool) -> (memvisor_dedup::PassStats, Scanner, [PagesChild; 2]) {
    let a = PagesChild::spawn(&pages(&[1, 2, 1, 0, 3, 4, 5])).unwrap();
    let b = PagesChild::spawn(&pages(&[2, 3, 4, 5, 6, 0])).unwrap();
    let mut scanner = Scanner::new(ScannerConfig {
        lookahead,
        ..Default::default()
    });
    scanner.add_source(source(&a));
    scanner.add_source(source(&b));
    let stats = scanner.pass();
    (stats, scanner, [a, b])
}

#[test]
fn counts_duplicates_within_and_across_processes_exactly() {
    let (stats, scanner, _children) = scan_two(true);
    assert_eq!(stats.pages_read, 13);
    assert_eq!(stats.zero_pages, 2);
    assert_eq!(stats.new_duplicates, 5);
    // B1 (3) misses the lookahead (A2 holds 1) and is hashed; B2 (4) and B3 (5) follow A5, A6.
    assert_eq!(stats.lookahead_hits, 2);
    assert_eq!(stats.lookahead_misses, 1);
    assert_eq!(stats.pages_hashed, 9);
    assert_eq!(stats.already_shared, 0);
    let s = scanner.summary();
    assert_eq!(s.pages, 11);
    assert_eq!(s.distinct, 6);
    assert_eq!(s.duplicate_pages, 5);
    assert_eq!(s.within_sources, 1);
    assert_eq!(s.across_sources, 4);
    let r = scanner.reports();
    assert_eq!(r[0].index.pages, 6);
    assert_eq!(r[0].index.duplicates_within, 1);
    assert_eq!(r[0].index.shared_with_others, 4);
    assert_eq!(r[0].index.unique, 0);
    assert_eq!(r[1].index.unique, 1);
    assert_eq!(r[1].index.shared_with_others, 4);
    assert!(r.iter().all(|r| r.error.is_none()));
}

#[test]
fn lookahead_changes_cost_not_results() {
    let (with, s1, _c1) = scan_two(true);
    let (without, s2, _c2) = scan_two(false);
    assert_eq!(without.lookahead_hits, 0);
    assert_eq!(without.pages_hashed, 11);
    assert_eq!(with.new_duplicates, without.new_duplicates);
    assert_eq!(s1.summary(), s2.summary());
}

#[test]
fn a_second_pass_reindexes_and_finds_the_same() {
    let (_, mut scanner, _children) = scan_two(true);
    let before = scanner.summary();
    let again = scanner.pass();
    assert_eq!(again.pages_read, 13);
    assert_eq!(scanner.summary(), before);
}

/// A source indexed once and then never re-read (as if it were write-tracked and unwritten),
/// so its index entries go stale when its memory changes behind the scanner's back.
struct ReadOnce(ProcessMemory, bool);

impl PageSource for ReadOnce {
    fn name(&self) -> String {
        self.0.name()
    }
    fn pass_ranges(&mut self) -> Result<Vec<std::ops::Range<u64>>, DedupError> {
        let first = std::mem::replace(&mut self.1, false);
        if first {
            self.0.pass_ranges()
        } else {
            Ok(Vec::new())
        }
    }
    fn is_incremental(&self) -> bool {
        true
    }
    fn read(&mut self, a: u64, buf: &mut [u8], st: &mut [PageState]) -> Result<(), DedupError> {
        self.0.read(a, buf, st)
    }
}

#[test]
fn hash_equality_alone_is_not_a_match() {
    // A's page (content 7) is indexed; then A's page changes to 8 without a rescan, so the index
    // holds hash(7) at A's page. B holds 7: its hash finds A's class, the bytes differ, no match.
    let a = PagesChild::spawn(&pages(&[7])).unwrap();
    let mut scanner = Scanner::new(ScannerConfig::default());
    let range = vec![a.address()..a.address() + PAGE_SIZE as u64];
    scanner.add_source(Box::new(ReadOnce(
        ProcessMemory::open(a.pid()).unwrap().only(range),
        true,
    )));
    scanner.pass();
    let new = page(8);
    let local = libc::iovec {
        iov_base: new.as_ptr() as *mut _,
        iov_len: PAGE_SIZE,
    };
    let remote = libc::iovec {
        iov_base: a.address() as usize as *mut _,
        iov_len: PAGE_SIZE,
    };
    // SAFETY: writes one page into the child's own mapping (we are root); our buffers are live.
    let n = unsafe { libc::process_vm_writev(a.pid(), &local, 1, &remote, 1, 0) };
    assert_eq!(n, PAGE_SIZE as isize);
    let b = PagesChild::spawn(&pages(&[7])).unwrap();
    scanner.add_source(source(&b));
    let stats = scanner.pass();
    assert_eq!(stats.pages_hashed, 1);
    assert_eq!(stats.hash_mismatches, 1);
    assert_eq!(stats.new_duplicates, 0);
    assert_eq!(scanner.summary().duplicate_pages, 0);
    assert_eq!(scanner.summary().distinct, 2);
}

#[test]
fn a_process_that_exits_mid_scan_is_reported_and_the_others_continue() {
    // A: 32 MiB of distinct pages, killed after its first batch; B: small, with duplicates.
    let a_seeds: Vec<u64> = (100..100 + 8192).collect();
    let mut a = PagesChild::spawn(&pages(&a_seeds)).unwrap();
    let b = PagesChild::spawn(&pages(&[1, 1, 2, 2, 2])).unwrap();
    let a_pid = a.pid();
    let mut scanner = Scanner::new(ScannerConfig::default());
    scanner.add_source(source(&a));
    scanner.add_source(source(&b));
    scanner.on_progress(move |src, done| {
        if src == 0 && done == 256 {
            // SAFETY: signals our own child.
            unsafe { libc::kill(a_pid, libc::SIGKILL) };
            let t = Instant::now();
            while !is_exited(a_pid) && t.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    });
    let stats = scanner.pass();
    let r = scanner.reports();
    let err = r[0].error.as_deref().expect("A's error is recorded");
    assert!(
        err.starts_with(&format!("pid {a_pid}: process not running")),
        "{err}"
    );
    assert_eq!(r[0].index.pages, 0, "A's pages leave the index");
    assert!(r[1].error.is_none());
    assert_eq!(r[1].index.pages, 5);
    assert_eq!(r[1].index.duplicates_within, 3);
    assert_eq!(scanner.summary().duplicate_pages, 3);
    assert!(stats.pages_read >= 256 + 5);
    // The next pass skips A quietly.
    let again = scanner.pass();
    assert_eq!(again.pages_read, 5);
    a.kill();
}

#[test]
fn a_process_that_exits_while_another_is_compared_with_it_is_reported_as_gone() {
    // A and B hold the same 1024 distinct pages. A is indexed whole, then killed while B is
    // being scanned, so B's later pages find their hash in A's classes but cannot read A's
    // pages to compare: that is A having exited, not hash matches with different bytes.
    let seeds: Vec<u64> = (20_000..20_000 + 1024).collect();
    for lookahead in [true, false] {
        let mut a = PagesChild::spawn(&pages(&seeds)).unwrap();
        let b = PagesChild::spawn(&pages(&seeds)).unwrap();
        let a_pid = a.pid();
        let mut scanner = Scanner::new(ScannerConfig {
            lookahead,
            ..Default::default()
        });
        scanner.add_source(source(&a));
        scanner.add_source(source(&b));
        scanner.on_progress(move |src, done| {
            if src == 1 && done == 256 {
                // SAFETY: signals our own child.
                unsafe { libc::kill(a_pid, libc::SIGKILL) };
                let t = Instant::now();
                while !is_exited(a_pid) && t.elapsed() < Duration::from_secs(10) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        let stats = scanner.pass();
        assert_eq!(stats.hash_mismatches, 0, "lookahead {lookahead}: {stats:?}");
        assert!(stats.vanished_matches > 0, "{stats:?}");
        // B's first batch matched A (with the lookahead, also what its window had read ahead).
        let matched_before_the_kill = if lookahead { 256..256 + 32 } else { 256..257 };
        assert!(
            matched_before_the_kill.contains(&stats.new_duplicates),
            "{stats:?}"
        );
        let r = scanner.reports();
        let err = r[0].error.as_deref().expect("A's exit is recorded");
        assert!(
            err.starts_with(&format!("pid {a_pid}: process not running")),
            "{err}"
        );
        assert_eq!(r[0].index.pages, 0, "A's pages leave the index");
        assert!(r[1].error.is_none());
        assert_eq!(r[1].index.pages, 1024);
        a.kill();
    }
}

#[test]
fn opening_a_missing_process_is_a_clear_error() {
    let mut child = PagesChild::spawn(&pages(&[1])).unwrap();
    let pid = child.pid();
    child.kill();
    let e = ProcessMemory::open(pid).unwrap_err();
    assert!(matches!(e, DedupError::ProcessGone { .. }), "{e}");
    assert!(e.to_string().starts_with(&format!("pid {pid}:")), "{e}");
}

#[test]
fn absent_pages_are_not_read_or_faulted_in() {
    // 16 pages mapped in this process, 4 touched: scanning our own pid finds 12 absent pages,
    // and they are still not resident afterwards.
    let len = 16 * PAGE_SIZE;
    let map = memvisor_pager::Mapping::anonymous(len).unwrap();
    let p: *mut libc::c_void = map.as_ptr().cast();
    let base = p as u64;
    for i in [0usize, 3, 4, 9] {
        // SAFETY: inside the mapping.
        unsafe { *(p as *mut u8).add(i * PAGE_SIZE) = i as u8 + 1 };
    }
    let mut scanner = Scanner::new(ScannerConfig::default());
    scanner.add_source(Box::new(
        ProcessMemory::open(std::process::id() as i32)
            .unwrap()
            .only(vec![base..base + len as u64]),
    ));
    let stats = scanner.pass();
    assert_eq!(stats.pages_read, 4);
    assert_eq!(stats.absent_pages, 12);
    let mut vec = vec![0u8; 16];
    // SAFETY: `vec` has one byte per page of the mapping.
    assert_eq!(unsafe { libc::mincore(p, len, vec.as_mut_ptr()) }, 0);
    assert_eq!(vec.iter().filter(|&&v| v & 1 != 0).count(), 4);
    drop(map);
}
