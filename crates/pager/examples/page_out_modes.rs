//! Synchronous against asynchronous page-out (writer threads, io_uring), side by side in one
//! run: passes over a region larger than its budget in which every page is written, so every
//! eviction is a real swap write.
//!
//! `cargo run --release -p memvisor-pager --example page_out_modes -- [SIZE_MIB] [BUDGET_MIB]
//! [DIR]` (defaults 512, 128, the temp dir). Environment: `MODES=sync,threads:1,threads:2,
//! io-uring:1,io-uring:4` chooses the page-out modes, `REPS=N` repeats the set (modes
//! alternate, so drift hits all of them), `HEADROOM=N` sets the headroom in chunks (default 2).
//! Each mode runs: one write pass (fills the region), two read-modify-write passes (each
//! page's first byte incremented: every chunk faults in from swap and goes out dirty), and a
//! final read pass that verifies every page. Prints seconds per pass and the handler's counters.

use std::time::Instant;

use memvisor_pager::{page_size, PageOut, Region, RegionConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mib = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d) << 20;
    let size = mib(0, 512);
    let budget = mib(1, 128);
    let dir = args
        .get(2)
        .map(Into::into)
        .unwrap_or_else(std::env::temp_dir);
    if let Err(e) = Region::check_supported() {
        eprintln!("userfaultfd unavailable: {e}");
        std::process::exit(1);
    }
    let modes: Vec<PageOut> = match std::env::var("MODES")
        .unwrap_or_else(|_| "sync,threads:1,threads:2,io-uring:1,io-uring:4".into())
        .split(',')
        .map(|m| m.trim().parse::<PageOut>())
        .collect()
    {
        Ok(m) => m,
        Err(e) => {
            eprintln!("MODES: {e}");
            std::process::exit(2);
        }
    };
    let env_num = |k: &str, d: usize| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let reps = env_num("REPS", 1);
    let headroom = env_num("HEADROOM", memvisor_pager::DEFAULT_HEADROOM);
    let ps = page_size();
    let pages = size / ps;
    println!(
        "region {} MiB, budget {} MiB, 1 MiB chunks, headroom {headroom}, swap in {}",
        size >> 20,
        budget >> 20,
        dir.display()
    );
    println!(
        "{:>12} {:>4} {:>8} {:>8} {:>8} {:>8} {:>9} {:>9} {:>8} {:>8} {:>8}",
        "page-out",
        "rep",
        "write s",
        "rmw1 s",
        "rmw2 s",
        "verify s",
        "page-ins",
        "page-outs",
        "rescued",
        "waits",
        "p99 ms"
    );
    for rep in 0..reps {
        for &mode in &modes {
            let region = match Region::new(
                RegionConfig::new(size, budget, &dir)
                    .sample_interval(None)
                    .page_out(mode)
                    .headroom(headroom)
                    .log_errors(true),
            ) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("cannot create region: {e}");
                    std::process::exit(1);
                }
            };
            let base = region.as_ptr();
            let mut secs = [0f64; 4];
            for (pass, t_out) in secs.iter_mut().enumerate() {
                let t = Instant::now();
                for p in 0..pages {
                    // SAFETY: `p * ps` is inside the live region; only this thread uses it.
                    unsafe {
                        let a = base.add(p * ps);
                        match pass {
                            0 => {
                                a.write_volatile(p as u8);
                                a.add(8).cast::<u64>().write_volatile(p as u64);
                            }
                            1 | 2 => a.write_volatile(a.read_volatile().wrapping_add(1)),
                            _ => {
                                let want = (p as u8).wrapping_add(2);
                                let tag = a.add(8).cast::<u64>().read_volatile();
                                if a.read_volatile() != want || tag != p as u64 {
                                    eprintln!("{mode}: page {p} corrupted");
                                    std::process::exit(1);
                                }
                            }
                        }
                    }
                }
                *t_out = t.elapsed().as_secs_f64();
            }
            let s = region.stats();
            println!(
                "{:>12} {:>4} {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>9} {:>9} {:>8} {:>8} {:>8.2}",
                mode.to_string(),
                rep,
                secs[0],
                secs[1],
                secs[2],
                secs[3],
                s.page_ins,
                s.page_outs,
                s.rescued_chunks,
                s.page_in_write_waits,
                s.page_in_p99_nanos as f64 / 1e6
            );
            if s.write_errors + s.read_errors > 0 {
                eprintln!("{mode}: {} errors", s.write_errors + s.read_errors);
                std::process::exit(1);
            }
        }
    }
}
