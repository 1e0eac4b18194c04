//! Fault cost per resolution mode: sequential passes over a region larger than its budget.
//!
//! `cargo run --release -p memvisor-pager --example fault_cost -- [SIZE_MIB] [BUDGET_MIB] [DIR]`
//! (defaults 256, 64, the temp dir). For each chunk size (4 KiB = page at a time, 64 KiB,
//! 1 MiB) and mode (UFFDIO_COPY, alias + UFFDIO_CONTINUE) it runs one write pass (every page
//! written, so every eviction is a real swap write) and two read passes, and prints time per pass,
//! throughput, faults and the cost per fault and per page. Environment: `CHUNKS_KIB=4,64,1024`
//! chooses chunk sizes, `REPS=N` repeats each (chunk, mode) pair, alternating modes.

use std::time::Instant;

use memvisor_pager::{page_size, Region, RegionConfig, RegionStats, ResolveMode};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d) << 20;
    let size = mib(0, 256);
    let budget = mib(1, 64);
    let dir = args
        .get(2)
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    if let Err(e) = Region::check_supported() {
        eprintln!("userfaultfd unavailable: {e}");
        return;
    }
    let ps = page_size();
    println!(
        "region {} MiB, budget {} MiB, swap in {}",
        size >> 20,
        budget >> 20,
        dir.display()
    );
    println!(
        "{:>6} {:>15} {:>6} {:>8} {:>9} {:>8} {:>8} {:>8} {:>10} {:>9} {:>9} {:>9} {:>9}",
        "chunk",
        "mode",
        "pass",
        "secs",
        "MiB/s",
        "faults",
        "pg-ins",
        "pg-outs",
        "us/fault",
        "us/page",
        "wr-us/ch",
        "rd-us/ch",
        "map-us/f"
    );
    // CHUNKS_KIB="4,64,1024" and REPS=1 select what runs.
    let chunks: Vec<usize> = std::env::var("CHUNKS_KIB")
        .unwrap_or_else(|_| "4,64,1024".into())
        .split(',')
        .filter_map(|s| s.trim().parse::<usize>().ok())
        .map(|k| k << 10)
        .collect();
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    for chunk in chunks {
        for mode in (0..reps).flat_map(|_| [ResolveMode::Copy, ResolveMode::AliasContinue]) {
            let region = match Region::new(
                RegionConfig::new(size, budget, &dir)
                    .chunk_size(chunk)
                    .resolve(mode)
                    .sample_interval(None),
            ) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("cannot create region: {e}");
                    return;
                }
            };
            let base = region.as_ptr();
            for pass in 0..3 {
                let before = region.stats();
                let t = Instant::now();
                let mut sum = 0u64;
                for p in 0..size / ps {
                    // SAFETY: `p * ps` is inside the live region; one thread uses it.
                    unsafe {
                        let a = base.add(p * ps);
                        if pass == 0 {
                            a.write_volatile(p as u8 | 1);
                            a.add(ps - 1).write_volatile(7);
                        } else {
                            sum = sum.wrapping_add(a.read_volatile() as u64);
                        }
                    }
                }
                let secs = t.elapsed().as_secs_f64();
                std::hint::black_box(sum);
                let d = delta(&region.stats(), &before);
                let faults = d.missing_faults + d.minor_faults;
                println!(
                    "{:>6} {:>15} {:>6} {:>8.3} {:>9.0} {:>8} {:>8} {:>8} {:>10.1} {:>9.2} {:>9.1} {:>9.1} {:>9.1}",
                    format!("{}K", chunk >> 10),
                    mode.name(),
                    if pass == 0 { "write" } else { "read" },
                    secs,
                    (size >> 20) as f64 / secs,
                    faults,
                    d.page_ins,
                    d.page_outs,
                    secs * 1e6 / faults.max(1) as f64,
                    secs * 1e6 / (size / ps) as f64,
                    d.swap_write_nanos as f64 / 1e3 / d.page_outs.max(1) as f64,
                    d.swap_read_nanos as f64 / 1e3 / d.page_ins.max(1) as f64,
                    d.map_nanos() as f64 / 1e3 / d.missing_faults.max(1) as f64,
                );
            }
            let s = region.stats();
            println!(
                "{:>6} {:>15} page-in service time: p50 <= {:.0} us, p99 <= {:.0} us, max {:.0} us",
                "",
                "",
                s.page_in_p50_nanos as f64 / 1e3,
                s.page_in_p99_nanos as f64 / 1e3,
                s.page_in_max_nanos as f64 / 1e3
            );
            let errors = region.take_errors();
            if !errors.is_empty() {
                eprintln!("{} errors, first: {}", errors.len(), errors[0]);
            }
        }
    }
}

fn delta(a: &RegionStats, b: &RegionStats) -> RegionStats {
    RegionStats {
        missing_faults: a.missing_faults - b.missing_faults,
        minor_faults: a.minor_faults - b.minor_faults,
        page_ins: a.page_ins - b.page_ins,
        page_outs: a.page_outs - b.page_outs,
        page_in_nanos: a.page_in_nanos - b.page_in_nanos,
        evict_nanos: a.evict_nanos - b.evict_nanos,
        swap_write_nanos: a.swap_write_nanos - b.swap_write_nanos,
        swap_read_nanos: a.swap_read_nanos - b.swap_read_nanos,
        ..*a
    }
}
