//! Decision cost of every online policy at 1K, 64K and 4M resident units.
//!
//! For each policy and size: fill the resident set, then repeat rounds of a realistic mix (10%
//! of the resident units referenced between samples) and time
//! - `admit` of a new unit on a full set (victim selection + eviction + insertion),
//! - `evict` alone (victim selection + eviction; the set is refilled untimed),
//! - `on_hit` of a resident unit (the exact model's update),
//! - `on_sample` after 10% of the units were marked referenced, divided by resident units.
//!
//! Operations are timed in batches of 64 and divided, so the clock's overhead stays small;
//! the table gives the median and 99th percentile over batches (over samples for `on_sample`,
//! where with few rounds the p99 is the maximum).
//!
//! A second table isolates victim *selection*: chunk queues' `next_victim` (find-first-set over
//! the queue bitmap and a list head) against the linear scan of 8-bit aging counters that
//! S-memV performs per page-out decision (seed 003, Fig. 9(a)).
//!
//! Run: `cargo bench -p memvisor-policy --bench decision_cost [-- NAME...]`, where NAMEs filter
//! policies by substring.

use std::hint::black_box;
use std::time::Instant;

use memvisor_policy::DeterministicRng as Rng;
use memvisor_policy::{ChunkQueues, EvictionPolicy, PolicySpec, UnitId};

const BATCH: usize = 64;
const SIZES: [usize; 3] = [1 << 10, 1 << 16, 1 << 22];
/// Timed rounds per policy and size; each round has one sample.
const ROUNDS: usize = 12;
/// Batches per operation per round.
const BATCHES_PER_ROUND: usize = 150;
/// Fraction of resident units referenced between two samples, in percent.
const REFERENCED_PERCENT: usize = 10;

/// Median and 99th percentile of `values` (nanoseconds).
#[derive(Debug, Clone, Copy)]
struct Quantiles {
    median: f64,
    p99: f64,
}

impl Quantiles {
    fn of(mut values: Vec<f64>) -> Self {
        values.sort_by(f64::total_cmp);
        let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
        Self {
            median: at(0.5),
            p99: at(0.99),
        }
    }
}

struct Row {
    policy: String,
    units: usize,
    admit: Quantiles,
    evict: Quantiles,
    hit: Quantiles,
    sample_per_unit: Quantiles,
    sample_ms: f64,
}

/// The policy under test, the next fresh unit id, and a generator.
struct Bench {
    policy: Box<dyn EvictionPolicy>,
    next_id: UnitId,
    rng: Rng,
}

impl Bench {
    fn fresh(&mut self) -> UnitId {
        self.next_id += 1;
        self.next_id
    }

    /// Up to `count` resident units, drawn at random from the most recent ids (most residents
    /// are recent; older ones that left are skipped).
    fn resident_sample(&mut self, count: usize, out: &mut Vec<UnitId>) {
        out.clear();
        let window = (self.policy.capacity() as u64 * 2).min(self.next_id);
        let mut tries = count * 8;
        while out.len() < count && tries > 0 {
            tries -= 1;
            let u = self.next_id - self.rng.below(window);
            if self.policy.contains(u) {
                out.push(u);
            }
        }
    }

    fn mark_referenced(&mut self, scratch: &mut Vec<UnitId>) {
        let count = self.policy.len() * REFERENCED_PERCENT / 100;
        self.resident_sample(count, scratch);
        for &u in scratch.iter() {
            self.policy.mark_referenced(u);
        }
    }

    fn fill(&mut self) {
        while self.policy.len() < self.policy.capacity() {
            let u = self.fresh();
            self.policy.admit(u);
        }
    }

    fn time_admits(&mut self, out: &mut Vec<f64>) {
        for _ in 0..BATCHES_PER_ROUND {
            let first = self.next_id + 1;
            self.next_id += BATCH as u64;
            let start = Instant::now();
            for u in first..first + BATCH as u64 {
                black_box(self.policy.admit(u));
            }
            out.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
        }
    }

    fn time_evicts(&mut self, out: &mut Vec<f64>) {
        for _ in 0..BATCHES_PER_ROUND {
            let start = Instant::now();
            for _ in 0..BATCH {
                black_box(self.policy.evict());
            }
            out.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
            self.fill();
        }
    }

    fn time_hits(&mut self, scratch: &mut Vec<UnitId>, out: &mut Vec<f64>) {
        for _ in 0..BATCHES_PER_ROUND {
            self.resident_sample(BATCH, scratch);
            if scratch.is_empty() {
                continue;
            }
            let start = Instant::now();
            for &u in scratch.iter() {
                self.policy.on_hit(u);
            }
            out.push(start.elapsed().as_nanos() as f64 / scratch.len() as f64);
        }
    }
}

fn measure(spec: &PolicySpec, units: usize) -> Row {
    let policy = spec.build(units, None).expect("online policy builds");
    let mut b = Bench {
        policy,
        next_id: 0,
        rng: Rng::new(0x5eed ^ units as u64),
    };
    let mut scratch = Vec::with_capacity(units / 5 + BATCH);
    let (mut admit, mut evict, mut hit, mut sample) = (vec![], vec![], vec![], vec![]);
    b.fill();
    // Warm-up rounds, discarded: the set reaches a steady mix of old and new units.
    let mut discard = Vec::new();
    for _ in 0..2 {
        b.mark_referenced(&mut scratch);
        b.policy.on_sample();
        b.time_admits(&mut discard);
    }
    for _ in 0..ROUNDS {
        b.mark_referenced(&mut scratch);
        let resident = b.policy.len();
        let start = Instant::now();
        b.policy.on_sample();
        sample.push(start.elapsed().as_nanos() as f64 / resident as f64);
        b.time_admits(&mut admit);
        b.time_evicts(&mut evict);
        b.time_hits(&mut scratch, &mut hit);
    }
    let sample_ms = Quantiles::of(sample.clone()).median * units as f64 / 1e6;
    Row {
        policy: spec.to_string(),
        units,
        admit: Quantiles::of(admit),
        evict: Quantiles::of(evict),
        hit: Quantiles::of(hit),
        sample_per_unit: Quantiles::of(sample),
        sample_ms,
    }
}

/// Victim selection alone: chunk queues' lookup, and a linear scan for the smallest of `units`
/// 8-bit counters (S-memV's decision).
struct SelectionRow {
    units: usize,
    chunk_queues: Quantiles,
    counter_scan: Quantiles,
}

fn measure_selection(units: usize) -> SelectionRow {
    let mut rng = Rng::new(0xdec1 ^ units as u64);
    let mut cq = ChunkQueues::new(units, ChunkQueues::DEFAULT_M, 1);
    for u in 0..units as u64 {
        cq.admit(u);
    }
    // Spread the units over the queues: several periods with 10% referenced.
    for _ in 0..6 {
        for _ in 0..units * REFERENCED_PERCENT / 100 {
            cq.mark_referenced(rng.below(units as u64));
        }
        cq.on_sample();
    }
    let mut lookups = Vec::new();
    let mut next = units as u64;
    for _ in 0..2000 {
        let start = Instant::now();
        for _ in 0..BATCH {
            black_box(black_box(&cq).next_victim());
        }
        lookups.push(start.elapsed().as_nanos() as f64 / BATCH as f64);
        // Move on to another victim, untimed.
        next += 1;
        cq.admit(next);
    }
    let counters: Vec<u8> = (0..units).map(|_| rng.next_u64() as u8).collect();
    let scans = (1 << 26) / units.max(1);
    let mut scan = Vec::new();
    for _ in 0..scans.clamp(16, 2000) {
        let start = Instant::now();
        let victim = black_box(&counters)
            .iter()
            .enumerate()
            .min_by_key(|&(_, &c)| c)
            .map(|(i, _)| i);
        black_box(victim);
        scan.push(start.elapsed().as_nanos() as f64);
    }
    SelectionRow {
        units,
        chunk_queues: Quantiles::of(lookups),
        counter_scan: Quantiles::of(scan),
    }
}

fn size_label(units: usize) -> String {
    match units {
        u if u >= 1 << 20 => format!("{}M", u >> 20),
        u if u >= 1 << 10 => format!("{}K", u >> 10),
        u => u.to_string(),
    }
}

fn main() {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let specs: Vec<PolicySpec> = PolicySpec::all()
        .into_iter()
        .filter(|s| !s.is_offline())
        .filter(|s| filters.is_empty() || filters.iter().any(|f| s.name().contains(f.as_str())))
        .collect();
    let started = Instant::now();
    let mut rows = Vec::new();
    for spec in &specs {
        for units in SIZES {
            let row = measure(spec, units);
            eprintln!(
                "{} {}: admit {:.0} ns, evict {:.0} ns ({:.1} s elapsed)",
                row.policy,
                size_label(units),
                row.admit.median,
                row.evict.median,
                started.elapsed().as_secs_f64()
            );
            rows.push(row);
        }
    }
    println!(
        "Decision cost, ns per operation, median / p99 (batches of {BATCH}; {REFERENCED_PERCENT}% \
         of units referenced per sample period)\n"
    );
    println!(
        "| policy | units | admit on full set (select+evict+insert) | evict alone | on_hit \
         (exact update) | on_sample per resident unit | on_sample total (median) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.1} / {:.1} | {:.2} ms |",
            r.policy,
            size_label(r.units),
            r.admit.median,
            r.admit.p99,
            r.evict.median,
            r.evict.p99,
            r.hit.median,
            r.hit.p99,
            r.sample_per_unit.median,
            r.sample_per_unit.p99,
            r.sample_ms,
        );
    }
    println!(
        "\nVictim selection alone, ns per decision, median / p99\n\n\
         | units | chunk-queues `next_victim` (m=8) | linear scan of 8-bit counters (S-memV) |\n\
         |---:|---:|---:|"
    );
    for units in SIZES {
        let r = measure_selection(units);
        println!(
            "| {} | {:.1} / {:.1} | {:.0} / {:.0} |",
            size_label(r.units),
            r.chunk_queues.median,
            r.chunk_queues.p99,
            r.counter_scan.median,
            r.counter_scan.p99
        );
    }
    println!(
        "\n{} policies x {} sizes in {:.1} s",
        specs.len(),
        SIZES.len(),
        started.elapsed().as_secs_f64()
    );
}
