//! [`Sweep`]: every (policy, size) pair over one source, in parallel, with OPT as the bound.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use memvisor_policy::{Future, PolicySpec};
use serde::Serialize;

use crate::cache_size::CacheSize;
use crate::request_source::RequestSource;
use crate::sim_error::SimError;
use crate::simulation::{simulate_stream, SamplePeriod, SimConfig};

/// The name of Belady's OPT in the policy library.
const OPT: &str = "opt";

/// The capacity to build for a resident set of `size` units over a trace of `footprint`
/// distinct units. A set that can hold every unit never evicts, under any policy here, so a
/// larger one behaves exactly like one of the footprint's size: capping it keeps `--size 1G` on
/// a small trace from allocating a billion-unit table, and changes no result.
fn capacity_for(size: u64, footprint: u64) -> usize {
    usize::try_from(size.min(footprint.max(1))).unwrap_or(usize::MAX)
}

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Sweep {
    /// The requests.
    pub source: RequestSource,
    /// Online policies to compare (OPT is added with `with_opt`; listing `opt` here also works).
    pub policies: Vec<PolicySpec>,
    /// Resident-set sizes.
    pub sizes: Vec<CacheSize>,
    /// Information model and sampling.
    pub config: SimConfig,
    /// Also run Belady's OPT at every size and report each policy's gap to it.
    pub with_opt: bool,
    /// Worker threads (at least 1).
    pub threads: usize,
}

/// One simulated (policy, size).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SweepRow {
    /// Policy as specified.
    pub policy: String,
    /// Resident-set size in units.
    pub size: u64,
    /// Requests.
    pub accesses: u64,
    /// Misses.
    pub misses: u64,
    /// misses / accesses.
    pub miss_ratio: f64,
    /// OPT's misses at the same size, if OPT ran.
    pub opt_misses: Option<u64>,
    /// miss_ratio minus OPT's miss ratio at the same size, if OPT ran.
    pub gap_to_opt: Option<f64>,
    /// Wall time of this run.
    pub seconds: f64,
    /// Requests per second of this run.
    pub requests_per_sec: f64,
}

/// The result of a sweep.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    /// The source's name.
    pub source: String,
    /// `exact` or `sampled`.
    pub model: &'static str,
    /// The sample period, as `N accesses` or `T time`.
    pub sample_period: String,
    /// Requests in the source.
    pub requests: u64,
    /// Distinct units in the source.
    pub unique_units: u64,
    /// One row per (policy, size), grouped by policy in the order given, sizes ascending.
    pub rows: Vec<SweepRow>,
}

impl Sweep {
    /// Runs the sweep. `on_start(total_requests)` is called once the work is known, then
    /// `progress(n)` as requests are processed (from worker threads).
    pub fn run(
        &self,
        on_start: &dyn Fn(u64),
        progress: &(dyn Fn(u64) + Sync),
    ) -> Result<SweepReport, SimError> {
        self.config.validate()?;
        let mut policies: Vec<PolicySpec> = Vec::new();
        for p in &self.policies {
            if !policies.contains(p) {
                policies.push(p.clone());
            }
        }
        if self.with_opt {
            let opt: PolicySpec = OPT.parse()?;
            if !policies.contains(&opt) {
                policies.push(opt);
            }
        }
        let needs_future = policies.iter().any(PolicySpec::is_offline);
        let profile = self.source.profile(needs_future)?;
        let mut sizes: Vec<u64> = self
            .sizes
            .iter()
            .map(|s| s.resolve(profile.unique_units))
            .collect();
        sizes.sort_unstable();
        sizes.dedup();
        // Surface bad parameters and sizes before any long run: every build error depends on
        // the policy or on the size being too large, so building at the largest size suffices.
        let footprint = profile.unique_units;
        if let Some(&largest) = sizes.last() {
            for p in &policies {
                p.build(capacity_for(largest, footprint), profile.future.clone())?;
            }
        }
        let jobs: Vec<(usize, u64)> = (0..policies.len())
            .flat_map(|p| sizes.iter().map(move |&s| (p, s)))
            .collect();
        on_start(profile.requests * jobs.len() as u64);

        let next_job = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let results: Mutex<Vec<Option<SweepRow>>> = Mutex::new(vec![None; jobs.len()]);
        let first_error: Mutex<Option<SimError>> = Mutex::new(None);
        let threads = self.threads.clamp(1, jobs.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let i = next_job.fetch_add(1, Ordering::Relaxed);
                    if i >= jobs.len() || failed.load(Ordering::Relaxed) {
                        break;
                    }
                    let (p, size) = jobs[i];
                    match self.run_one(
                        &policies[p],
                        size,
                        capacity_for(size, footprint),
                        profile.future.clone(),
                        progress,
                        &failed,
                    ) {
                        Ok(row) => results.lock().expect("results lock")[i] = Some(row),
                        Err(SimError::Cancelled) => break,
                        Err(e) => {
                            failed.store(true, Ordering::Relaxed);
                            first_error.lock().expect("error lock").get_or_insert(e);
                            break;
                        }
                    }
                });
            }
        });
        if let Some(e) = first_error.into_inner().expect("error lock") {
            return Err(e);
        }
        let mut rows: Vec<SweepRow> = results
            .into_inner()
            .expect("results lock")
            .into_iter()
            .map(|r| r.expect("every job ran"))
            .collect();
        let opt_misses: Vec<(u64, u64)> = rows
            .iter()
            .filter(|r| r.policy == OPT)
            .map(|r| (r.size, r.misses))
            .collect();
        for row in &mut rows {
            if let Some(&(_, m)) = opt_misses.iter().find(|(s, _)| *s == row.size) {
                row.opt_misses = Some(m);
                row.gap_to_opt = Some(row.miss_ratio - m as f64 / row.accesses as f64);
            }
        }
        Ok(SweepReport {
            source: self.source.name(),
            model: self.config.model.name(),
            sample_period: match self.config.sample {
                SamplePeriod::Accesses(n) => format!("{n} accesses"),
                SamplePeriod::Time(t) => format!("{t} time"),
            },
            requests: profile.requests,
            unique_units: profile.unique_units,
            rows,
        })
    }

    fn run_one(
        &self,
        spec: &PolicySpec,
        size: u64,
        capacity: usize,
        future: Option<Future>,
        progress: &(dyn Fn(u64) + Sync),
        failed: &AtomicBool,
    ) -> Result<SweepRow, SimError> {
        let mut policy = spec.build(capacity, future)?;
        let outcome = simulate_stream(
            policy.as_mut(),
            &mut self.source.stream()?,
            &self.config,
            progress,
            &|| failed.load(Ordering::Relaxed),
        )?;
        let seconds = outcome.elapsed.as_secs_f64();
        Ok(SweepRow {
            policy: spec.to_string(),
            size,
            accesses: outcome.accesses,
            misses: outcome.misses,
            miss_ratio: outcome.misses as f64 / outcome.accesses.max(1) as f64,
            opt_misses: None,
            gap_to_opt: None,
            seconds,
            requests_per_sec: outcome.accesses as f64 / seconds.max(1e-9),
        })
    }
}
