//! Benchmark (issue 5, item 5): memvisor's scanner against the kernel's KSM on the same memory,
//! in the same run.
//!
//! ```sh
//! cargo run --release -p memvisor-dedup --example scan_vs_ksm -- [GIB] [PAGES_TO_SCAN] [SLEEP_MS] [KSM_SECONDS]
//! ```
//!
//! Fills GIB GiB (default 1) of anonymous memory, a quarter of its pages copies of others, then:
//! 1. memvisor's scanner over it in this process ([`LocalMemory`]: hashing and indexing only);
//!    Then the same memory write-tracked ([`TrackedMemory`]): a full pass, then a rescan after
//!    1% of the pages were written;
//! 2. the same memory read by pid ([`ProcessMemory`]: pagemap + `process_vm_readv`, the path
//!    used for guests) from a forked child holding it;
//! 3. ksmd over the same buffer made `MADV_MERGEABLE` (in this process: `madvise` works on the
//!    caller's own memory only), with `pages_to_scan` and `sleep_millisecs` as given (default
//!    1000 and 20), for KSM_SECONDS (default 30): pages scanned, full scans and ksmd's CPU time
//!    (`/proc/PID/stat` of the kernel thread).
//!
//! Reports GB/s per core (bytes / CPU seconds) and CPU seconds per GB for each. Needs root.
//! KSM settings are restored at the end.

use std::time::{Duration, Instant};

use memvisor_dedup::{
    ksmd_pid, madvise_mergeable, madvise_unmergeable, process_cpu_time, KsmSettings,
    KsmSettingsGuard, KsmStatus, LocalMemory, PagesChild, ProcessKsmStat, ProcessMemory, Scanner,
    ScannerConfig, TrackedMemory, PAGE_SIZE,
};

fn arg<T: std::str::FromStr>(n: usize, default: T) -> T {
    std::env::args()
        .nth(n)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("argument {n}: {a:?} is not a number"))
        })
        .unwrap_or(default)
}

fn fill(mem: &mut [u8]) {
    let pages = mem.len() / PAGE_SIZE;
    let distinct = (pages * 3 / 4).max(1);
    for (i, page) in mem.chunks_mut(PAGE_SIZE).enumerate() {
        // Pages past 3/4 repeat earlier ones (a quarter of the pages are duplicates).
        let mut x = ((i % distinct) as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        for w in page.chunks_mut(8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            w.copy_from_slice(&x.to_le_bytes());
        }
    }
}

fn report(what: &str, bytes: u64, wall: Duration, cpu: Duration) {
    let gb = bytes as f64 / 1e9;
    println!(
        "{what:<44} {gb:>7.3} GB  wall {:>7.3} s  CPU {:>7.3} s  {:>6.2} GB/s per core  {:>7.3} CPU s/GB",
        wall.as_secs_f64(),
        cpu.as_secs_f64(),
        gb / cpu.as_secs_f64().max(1e-9),
        cpu.as_secs_f64() / gb
    );
}

fn main() {
    let gib: f64 = arg(1, 1.0);
    let pages_to_scan: u64 = arg(2, 1000);
    let sleep_ms: u64 = arg(3, 20);
    let ksm_seconds: f64 = arg(4, 30.0);
    let len = ((gib * (1u64 << 30) as f64) as usize) / PAGE_SIZE * PAGE_SIZE;
    let pages = len / PAGE_SIZE;
    println!("memory: {len} bytes ({pages} pages, 1/4 duplicates)");

    // SAFETY: a fresh private anonymous mapping, used until the end of main.
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
    assert_ne!(p, libc::MAP_FAILED, "mmap {len} bytes");
    // SAFETY: the mapping is ours and `len` bytes long.
    let mem = unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) };
    fill(mem);

    // 1. In-process: hashing and indexing cost.
    let mut s = Scanner::new(ScannerConfig::default());
    // SAFETY: the mapping outlives the scanner.
    s.add_source(Box::new(unsafe {
        LocalMemory::new("buffer", p.cast(), len)
    }));
    let pass = s.pass();
    report(
        "memvisor scanner, own memory",
        pass.pages_read * PAGE_SIZE as u64,
        pass.wall,
        pass.cpu,
    );
    println!(
        "  duplicates {} (expected {}), lookahead hits {}, hashed {}",
        pass.new_duplicates,
        pages - (pages * 3 / 4).max(1),
        pass.lookahead_hits,
        pass.pages_hashed
    );
    let mut s = Scanner::new(ScannerConfig {
        lookahead: false,
        ..Default::default()
    });
    // SAFETY: as above.
    s.add_source(Box::new(unsafe {
        LocalMemory::new("buffer", p.cast(), len)
    }));
    let pass = s.pass();
    report(
        "memvisor scanner, own memory, no lookahead",
        pass.pages_read * PAGE_SIZE as u64,
        pass.wall,
        pass.cpu,
    );
    drop(s);

    // 1b. Write-tracked memory: a full first pass, then a rescan after 1% of the pages were
    // written (the seed's "scan only dirtied pages").
    {
        // SAFETY: the mapping outlives the tracker, which is dropped (unregistering the range)
        // before the mapping is used by KSM below.
        let tracked = unsafe { TrackedMemory::new("tracked", p.cast(), len) }.unwrap();
        let mut s = Scanner::new(ScannerConfig::default());
        s.add_source(Box::new(tracked));
        let full = s.pass();
        report(
            "memvisor, tracked memory, first (full) pass",
            full.pages_read * PAGE_SIZE as u64,
            full.wall,
            full.cpu,
        );
        let step = 100;
        for i in (0..pages).step_by(step) {
            // Copy page i+1 over page i: a new duplicate (unless it was one already).
            let (a, b) = mem.split_at_mut((i + 1) * PAGE_SIZE);
            if let Some(src) = b.get(..PAGE_SIZE) {
                a[i * PAGE_SIZE..].copy_from_slice(src);
            }
        }
        let re = s.pass();
        report(
            "memvisor, tracked memory, rescan after 1% written",
            re.pages_read * PAGE_SIZE as u64,
            re.wall,
            re.cpu,
        );
        println!(
            "  rescan read {} pages ({} written), found {} new duplicates, {:.1}% of the full pass's CPU",
            re.pages_read,
            pages.div_ceil(step),
            re.new_duplicates,
            100.0 * re.cpu.as_secs_f64() / full.cpu.as_secs_f64()
        );
    }

    // 2. By pid, from a child holding a copy (the guest path).
    let child = PagesChild::spawn(mem).expect("fork a child holding the memory");
    let mut s = Scanner::new(ScannerConfig::default());
    s.add_source(Box::new(ProcessMemory::open(child.pid()).unwrap().only(
        std::iter::once(child.address()..child.address() + len as u64).collect(),
    )));
    let pass = s.pass();
    report(
        "memvisor scanner, another process by pid",
        pass.pages_read * PAGE_SIZE as u64,
        pass.wall,
        pass.cpu,
    );
    drop(s);
    drop(child);

    // 3. ksmd over the same memory.
    let Some(ksmd) = ksmd_pid() else {
        println!("ksmd: not found (kernel without KSM?)");
        return;
    };
    let guard = KsmSettingsGuard::acquire().expect("KSM settings (root?)");
    // SAFETY: our private anonymous mapping.
    unsafe { madvise_mergeable(p.cast(), len) }.unwrap();
    let k0 = KsmStatus::read().unwrap();
    let c0 = process_cpu_time(ksmd).unwrap();
    let t0 = Instant::now();
    KsmSettings {
        run: 1,
        pages_to_scan,
        sleep_millisecs: sleep_ms,
    }
    .apply()
    .unwrap();
    std::thread::sleep(Duration::from_secs_f64(ksm_seconds));
    let k1 = KsmStatus::read().unwrap();
    let c1 = process_cpu_time(ksmd).unwrap();
    let wall = t0.elapsed();
    let merged = ProcessKsmStat::read(std::process::id() as i32).unwrap();
    // Unmerge this buffer (at once, while ksmd still runs), stop ksmd, restore.
    // SAFETY: our private anonymous mapping.
    unsafe { madvise_unmergeable(p.cast(), len) }.unwrap();
    let t = Instant::now();
    while ProcessKsmStat::read(std::process::id() as i32)
        .map(|s| s.merging_pages > 0)
        .unwrap_or(false)
        && t.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    KsmSettings {
        run: 0,
        ..guard.saved()
    }
    .apply()
    .unwrap();
    drop(guard);
    let scanned = k1.pages_scanned - k0.pages_scanned;
    report(
        &format!("ksmd, pages_to_scan={pages_to_scan} sleep={sleep_ms}ms"),
        scanned * PAGE_SIZE as u64,
        wall,
        c1.saturating_sub(c0),
    );
    println!(
        "  ksmd: {} pages scanned in {:.1} s ({:.3} GB/s wall), {} full scans, this process: {} pages merged",
        scanned,
        wall.as_secs_f64(),
        (scanned * PAGE_SIZE as u64) as f64 / 1e9 / wall.as_secs_f64(),
        k1.full_scans - k0.full_scans,
        merged.merging_pages
    );
    // SAFETY: our mapping, no longer used.
    unsafe { libc::munmap(p, len) };
}
