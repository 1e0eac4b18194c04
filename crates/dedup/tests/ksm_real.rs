//! The kernel's KSM for real (/sys/kernel/mm/ksm; root): memvisor's report of what KSM merged,
//! and the settings guard. Tests that change global KSM settings hold `KsmSettingsGuard`, which
//! serializes them (a file lock) and restores every setting it may change.

use std::time::{Duration, Instant};

use memvisor_dedup::{
    madvise_mergeable, madvise_unmergeable, KsmSettings, KsmSettingsGuard, KsmStatus,
    ProcessKsmStat, ProcessMemory, Scanner, ScannerConfig, PAGE_SIZE,
};

#[test]
fn the_guard_restores_the_settings() {
    // Everything under the lock: other tests change the settings between their own guards.
    let guard = KsmSettingsGuard::acquire().unwrap();
    let before = guard.saved();
    assert_eq!(KsmSettings::read().unwrap(), before);
    KsmSettings {
        run: before.run,
        pages_to_scan: before.pages_to_scan + 17,
        sleep_millisecs: before.sleep_millisecs + 3,
    }
    .apply()
    .unwrap();
    assert_eq!(
        KsmStatus::read().unwrap().pages_to_scan,
        before.pages_to_scan + 17
    );
    guard.restore().unwrap();
    assert_eq!(KsmSettings::read().unwrap(), before);
}

#[test]
fn pages_ksm_merged_are_reported_as_sharing_a_frame() {
    const PAIRS: usize = 128;
    let len = 2 * PAIRS * PAGE_SIZE;
    // SAFETY: a fresh private anonymous mapping, unmapped at the end.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: the mapping is ours and `len` bytes long.
    let mem = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    // Page i and page i + PAIRS hold the same content, unique to this test.
    let tag = std::process::id() as u64;
    for i in 0..PAIRS {
        for half in [0, PAIRS] {
            let page = &mut mem[(i + half) * PAGE_SIZE..(i + half + 1) * PAGE_SIZE];
            for (w, chunk) in page.chunks_mut(8).enumerate() {
                chunk.copy_from_slice(&(tag << 32 | (i as u64) << 12 | w as u64).to_le_bytes());
            }
        }
    }
    let scan = || {
        let mut s = Scanner::new(ScannerConfig::default());
        s.add_source(Box::new(
            ProcessMemory::open(std::process::id() as i32)
                .unwrap()
                .only(std::iter::once(p as u64..p as u64 + len as u64).collect()),
        ));
        s.pass()
    };
    let before = scan();
    assert_eq!(before.new_duplicates, PAIRS as u64);
    assert_eq!(before.already_shared, 0);

    let guard = KsmSettingsGuard::acquire().unwrap();
    // SAFETY: our private anonymous mapping.
    unsafe { madvise_mergeable(p.cast(), len) }.unwrap();
    KsmSettings {
        run: 1,
        pages_to_scan: 5000,
        sleep_millisecs: 10,
    }
    .apply()
    .unwrap();
    let pid = std::process::id() as i32;
    let t = Instant::now();
    while ProcessKsmStat::read(pid).unwrap().merging_pages < 2 * PAIRS as u64
        && t.elapsed() < Duration::from_secs(60)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let stat = ProcessKsmStat::read(pid).unwrap();
    assert!(stat.mergeable);
    assert!(stat.merging_pages >= 2 * PAIRS as u64, "{stat:?}");
    let after = scan();
    // Unmerge before ksmd stops: pages merged by an exited process stay accounted until ksmd
    // runs again.
    // SAFETY: our private anonymous mapping.
    unsafe { madvise_unmergeable(p.cast(), len) }.unwrap();
    // ksmd drops its records of the unmerged pages on its next pass over them.
    let t = Instant::now();
    while ProcessKsmStat::read(pid).unwrap().merging_pages > 0
        && t.elapsed() < Duration::from_secs(10)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(ProcessKsmStat::read(pid).unwrap().merging_pages, 0);
    drop(guard);
    assert_eq!(after.new_duplicates, PAIRS as u64);
    assert_eq!(
        after.already_shared, PAIRS as u64,
        "each pair shares one KSM page"
    );
    // SAFETY: our mapping, no longer used.
    unsafe { libc::munmap(p, len) };
}

#[test]
fn shared_memfd_memory_is_not_merged_by_ksm() {
    // QEMU's memory-backend-memfd (share=on) and memvisor's pager regions are shared memfd
    // mappings: KSM merges anonymous private pages only. memvisor's report still finds their
    // duplicates.
    const PAGES: usize = 64;
    let len = PAGES * PAGE_SIZE;
    // SAFETY: memfd_create with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"ksm-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: our descriptor; a shared mapping of `len` bytes, unmapped at the end.
    let p = unsafe {
        assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    // SAFETY: the mapping is ours and `len` bytes long.
    let mem = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    for (i, b) in mem.iter_mut().enumerate() {
        *b = (i % PAGE_SIZE) as u8 ^ 0x5a;
    }
    let guard = KsmSettingsGuard::acquire().unwrap();
    // SAFETY: our mapping (madvise accepts it and KSM ignores shared mappings).
    let advised = unsafe { madvise_mergeable(p.cast(), len) };
    KsmSettings {
        run: 1,
        pages_to_scan: 5000,
        sleep_millisecs: 10,
    }
    .apply()
    .unwrap();
    // The same settings merged 2 x 128 private pages in well under a second (test above).
    std::thread::sleep(Duration::from_millis(500));
    let stat = ProcessKsmStat::read(std::process::id() as i32).unwrap();
    drop(guard);
    assert!(
        advised.is_ok(),
        "madvise accepts the shared mapping: {advised:?}"
    );
    assert!(!stat.mergeable, "but KSM does not take it: {stat:?}");
    assert_eq!((stat.rmap_items, stat.merging_pages), (0, 0), "{stat:?}");
    let mut s = Scanner::new(ScannerConfig::default());
    s.add_source(Box::new(
        ProcessMemory::open(std::process::id() as i32)
            .unwrap()
            .only(std::iter::once(p as u64..p as u64 + len as u64).collect()),
    ));
    let pass = s.pass();
    assert_eq!(pass.new_duplicates, PAGES as u64 - 1);
    assert_eq!(pass.already_shared, 0);
    // SAFETY: our mapping and descriptor.
    unsafe {
        libc::munmap(p, len);
        libc::close(fd);
    }
}
