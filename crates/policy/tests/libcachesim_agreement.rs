//! Miss counts of ARC, SIEVE and S3-FIFO against numbers recorded from libCacheSim.
//!
//! The expected counts come from `libcachesim` 0.3.5 (Python binding): the same traces written
//! as oracleGeneral files (every object of size 1, ids shifted by one) and replayed with
//! `libcachesim.ARC / Sieve / S3FIFO(cache_size=N).process_trace(...)`, default parameters.
//! Our policies run in the exact model: `contains` then `on_hit`, else `admit`.

use memvisor_policy::{EvictionPolicy, PolicySpec};

/// SplitMix64, as the recording script ran it.
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// 70% of the requests to 500 hot objects, the rest spread over 20,000.
fn skewed(n: usize, seed: u64) -> Vec<u64> {
    let mut g = SplitMix(seed);
    (0..n)
        .map(|_| {
            let x = g.next();
            if x % 10 < 7 {
                (x >> 20) % 500
            } else {
                (x >> 20) % 20_000
            }
        })
        .collect()
}

fn looping(n: usize, length: u64) -> Vec<u64> {
    (0..n as u64).map(|i| i % length).collect()
}

/// `skewed`, with a scan of 300 never-seen objects after every 5,000 requests.
fn scan_mix(n: usize, seed: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut fresh = 1_000_000;
    for (i, u) in skewed(n, seed).into_iter().enumerate() {
        out.push(u);
        if i % 5000 == 4999 {
            out.extend(fresh..fresh + 300);
            fresh += 300;
        }
    }
    out
}

fn misses(spec: &str, capacity: usize, trace: &[u64]) -> usize {
    let spec: PolicySpec = spec.parse().unwrap();
    let mut p: Box<dyn EvictionPolicy> = spec.build(capacity, None).unwrap();
    let mut misses = 0;
    for &u in trace {
        let u = u + 1;
        if p.contains(u) {
            p.on_hit(u);
        } else {
            p.admit(u);
            misses += 1;
        }
    }
    misses
}

#[test]
fn miss_counts_equal_libcachesim() {
    // (trace, capacity, requests, [ARC, SIEVE, S3-FIFO] misses in libCacheSim)
    let recorded: [(&str, usize, usize, [usize; 3]); 12] = [
        ("skewed", 20, 100_000, [97397, 97261, 97204]),
        ("skewed", 100, 100_000, [86385, 86147, 86425]),
        ("skewed", 1000, 100_000, [29041, 29023, 29059]),
        ("loop150", 20, 60_000, [60000, 60000, 52818]),
        ("loop150", 100, 60_000, [60000, 60000, 38342]),
        ("loop150", 1000, 60_000, [150, 150, 150]),
        ("loop1200", 20, 60_000, [60000, 60000, 59118]),
        ("loop1200", 100, 60_000, [60000, 60000, 55590]),
        ("loop1200", 1000, 60_000, [60000, 60000, 27068]),
        ("scan_mix", 20, 106_000, [103454, 103294, 103363]),
        ("scan_mix", 100, 106_000, [92392, 92122, 92433]),
        ("scan_mix", 1000, 106_000, [34797, 34800, 34769]),
    ];
    for (name, capacity, requests, expected) in recorded {
        let trace = match name {
            "skewed" => skewed(100_000, 1),
            "loop150" => looping(60_000, 150),
            "loop1200" => looping(60_000, 1200),
            _ => scan_mix(100_000, 2),
        };
        assert_eq!(trace.len(), requests, "{name}");
        for (spec, want) in ["arc", "sieve", "s3-fifo"].into_iter().zip(expected) {
            assert_eq!(
                misses(spec, capacity, &trace),
                want,
                "{spec} on {name} with capacity {capacity}"
            );
        }
    }
}
