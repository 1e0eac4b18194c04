//! Cost of access sampling: repeated read passes over `SIZE_MIB` of a region twice as large, with
//! a budget of 1.5 times `SIZE_MIB` (no paging, even with the page-out headroom of at most a
//! quarter of the budget kept free), without sampling and with several sampling periods. The
//! region is larger than its budget because a region that fits is never sampled (it never
//! needs a victim).
//!
//! `cargo run --release -p memvisor-pager --example sampling_cost -- [SIZE_MIB] [SECS]`
//! (defaults 64 MiB, 2 s per setting).

use std::time::{Duration, Instant};

use memvisor_pager::{page_size, Region, RegionConfig};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size = args.first().and_then(|s| s.parse().ok()).unwrap_or(64usize) << 20;
    let secs: f64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2.0);
    if let Err(e) = Region::check_supported() {
        eprintln!("userfaultfd unavailable: {e}");
        return;
    }
    let ps = page_size();
    println!(
        "{:>10} {:>10} {:>10} {:>9} {:>12} {:>12} {:>12}",
        "period", "passes/s", "slowdown", "samples", "us/sample", "minor/s", "us/minor"
    );
    let mut base_rate = 0.0;
    for period_ms in [0u64, 1000, 100, 10] {
        let dir = std::env::temp_dir();
        let sample = (period_ms > 0).then(|| Duration::from_millis(period_ms));
        let region = match Region::new(
            RegionConfig::new(2 * size, size / 2 * 3, &dir)
                .sample_interval(sample)
                .name("sampling"),
        ) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("cannot create region: {e}");
                return;
            }
        };
        let base = region.as_ptr();
        // First touch: every chunk in.
        for p in 0..size / ps {
            // SAFETY: inside the live region; one thread.
            unsafe { base.add(p * ps).write_volatile(1) };
        }
        let before = region.stats();
        let t = Instant::now();
        let mut passes = 0u64;
        let mut sum = 0u64;
        while t.elapsed().as_secs_f64() < secs {
            for p in 0..size / ps {
                // SAFETY: inside the live region; one thread.
                sum = sum.wrapping_add(unsafe { base.add(p * ps).read_volatile() } as u64);
            }
            passes += 1;
        }
        std::hint::black_box(sum);
        let el = t.elapsed().as_secs_f64();
        let s = region.stats();
        let rate = passes as f64 / el;
        if period_ms == 0 {
            base_rate = rate;
        }
        let samples = s.samples - before.samples;
        let minors = s.minor_faults - before.minor_faults;
        println!(
            "{:>10} {:>10.1} {:>9.2}x {:>9} {:>12.1} {:>12.0} {:>12.1}",
            if period_ms == 0 {
                "off".to_string()
            } else {
                format!("{period_ms}ms")
            },
            rate,
            base_rate / rate,
            samples,
            (s.sample_nanos - before.sample_nanos) as f64 / 1e3 / samples.max(1) as f64,
            minors as f64 / el,
            // Handler time per minor fault is not split out; the pass slowdown is the cost.
            if minors > 0 {
                (el - passes as f64 / base_rate.max(1e-9)) * 1e6 / minors as f64
            } else {
                0.0
            },
        );
    }
}
