//! [`simulate`]: drives one policy over one request stream.

use std::time::{Duration, Instant};

use memvisor_policy::{Access, EvictionPolicy, InformationModel};
use memvisor_trace::Request;

use crate::request_source::{RequestStream, BATCH};
use crate::sim_error::SimError;

/// When the driver calls [`EvictionPolicy::on_sample`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplePeriod {
    /// Every N accesses.
    Accesses(u64),
    /// Every T units of the trace's own time (its timestamps; the request index if it has none).
    /// A gap spanning several periods samples once per period, at most [`MAX_SAMPLES_PER_GAP`]
    /// times: further samples cannot change the state of any policy here (their aging saturates).
    Time(u64),
}

/// Bound on back-to-back samples when trace time jumps over many periods.
pub const MAX_SAMPLES_PER_GAP: u32 = 64;

/// How a simulation reports accesses to the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimConfig {
    /// Exact or sampled information.
    pub model: InformationModel,
    /// Sampling period (used in both models).
    pub sample: SamplePeriod,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            model: InformationModel::Exact,
            sample: SamplePeriod::Accesses(DEFAULT_SAMPLE_ACCESSES),
        }
    }
}

/// Default sampling period, in accesses.
pub const DEFAULT_SAMPLE_ACCESSES: u64 = 10_000;

impl SimConfig {
    /// Checks the configuration.
    pub fn validate(&self) -> Result<(), SimError> {
        match self.sample {
            SamplePeriod::Accesses(0) | SamplePeriod::Time(0) => Err(SimError::BadSamplePeriod(0)),
            _ => Ok(()),
        }
    }
}

/// Counts from one simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SimOutcome {
    /// Requests processed.
    pub accesses: u64,
    /// Requests whose unit was not resident.
    pub misses: u64,
    /// Units evicted (a declined admission counts as one).
    pub evictions: u64,
    /// Samples taken.
    pub samples: u64,
    /// Wall time of the run, reading the requests included.
    pub elapsed: Duration,
}

/// How often [`simulate`] reports progress, in requests.
pub const PROGRESS_EVERY: u64 = 1 << 16;

/// Runs `requests` through `policy`; calls `progress(n)` every [`PROGRESS_EVERY`] requests and
/// at the end with the number processed since the previous call. Stops with `Cancelled` when
/// `cancelled()` turns true (checked at progress points).
pub fn simulate<I>(
    policy: &mut dyn EvictionPolicy,
    requests: I,
    config: &SimConfig,
    progress: &dyn Fn(u64),
    cancelled: &dyn Fn() -> bool,
) -> Result<SimOutcome, SimError>
where
    I: Iterator<Item = Result<Request, SimError>>,
{
    let mut sim = Simulation::new(policy, config, progress, cancelled)?;
    for request in requests {
        sim.step(request?)?;
    }
    Ok(sim.finish())
}

/// [`simulate`] over a [`RequestStream`], read in batches of [`BATCH`] requests: the same
/// result, without a dynamic call and a `Result` per request.
pub fn simulate_stream(
    policy: &mut dyn EvictionPolicy,
    stream: &mut RequestStream,
    config: &SimConfig,
    progress: &dyn Fn(u64),
    cancelled: &dyn Fn() -> bool,
) -> Result<SimOutcome, SimError> {
    let mut sim = Simulation::new(policy, config, progress, cancelled)?;
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        batch.clear();
        let more = stream.next_batch(&mut batch, BATCH)?;
        for &request in &batch {
            sim.step(request)?;
        }
        if !more {
            return Ok(sim.finish());
        }
    }
}

/// The state of one run: the policy, the counters, and when the next sample and progress
/// report are due.
struct Simulation<'a> {
    policy: &'a mut dyn EvictionPolicy,
    sample: SamplePeriod,
    model: InformationModel,
    out: SimOutcome,
    start: Instant,
    until_sample: u64,
    next_sample_time: Option<u64>,
    until_progress: u64,
    progress: &'a dyn Fn(u64),
    cancelled: &'a dyn Fn() -> bool,
}

impl<'a> Simulation<'a> {
    fn new(
        policy: &'a mut dyn EvictionPolicy,
        config: &SimConfig,
        progress: &'a dyn Fn(u64),
        cancelled: &'a dyn Fn() -> bool,
    ) -> Result<Self, SimError> {
        config.validate()?;
        Ok(Self {
            policy,
            sample: config.sample,
            model: config.model,
            out: SimOutcome::default(),
            start: Instant::now(),
            until_sample: match config.sample {
                SamplePeriod::Accesses(n) => n,
                SamplePeriod::Time(_) => u64::MAX,
            },
            next_sample_time: None,
            until_progress: PROGRESS_EVERY,
            progress,
            cancelled,
        })
    }

    /// One request: samples due by trace time, the access, samples due by count, progress.
    #[inline]
    fn step(&mut self, request: Request) -> Result<(), SimError> {
        let Request { time, unit, .. } = request;
        if let SamplePeriod::Time(period) = self.sample {
            self.sample_by_time(time, period);
        }
        let policy = &mut *self.policy;
        self.out.accesses += 1;
        if let Access::Miss { victim } = policy.access(unit, self.model) {
            self.out.misses += 1;
            self.out.evictions += u64::from(victim.is_some());
        }
        self.until_sample -= 1;
        if self.until_sample == 0 {
            policy.on_sample();
            self.out.samples += 1;
            if let SamplePeriod::Accesses(n) = self.sample {
                self.until_sample = n;
            }
        }
        self.until_progress -= 1;
        if self.until_progress == 0 {
            (self.progress)(PROGRESS_EVERY);
            self.until_progress = PROGRESS_EVERY;
            if (self.cancelled)() {
                return Err(SimError::Cancelled);
            }
        }
        Ok(())
    }

    /// Samples once per period boundary that `time` passed, at most [`MAX_SAMPLES_PER_GAP`].
    fn sample_by_time(&mut self, time: u64, period: u64) {
        let next = *self
            .next_sample_time
            .get_or_insert(time.saturating_add(period));
        if time < next {
            return;
        }
        let mut t = next;
        let mut taken = 0;
        while time >= t && taken < MAX_SAMPLES_PER_GAP {
            self.policy.on_sample();
            self.out.samples += 1;
            taken += 1;
            t = t.saturating_add(period);
        }
        self.next_sample_time = Some(if time >= t {
            time.saturating_add(period)
        } else {
            t
        });
    }

    fn finish(mut self) -> SimOutcome {
        (self.progress)(PROGRESS_EVERY - self.until_progress);
        self.out.elapsed = self.start.elapsed();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_policy::PolicySpec;

    fn reqs(ids: &[u64]) -> impl Iterator<Item = Result<Request, SimError>> + '_ {
        ids.iter().enumerate().map(|(i, &u)| {
            Ok(Request {
                time: i as u64 * 10,
                unit: u,
                next_access: None,
            })
        })
    }

    fn run(spec: &str, cap: usize, ids: &[u64], config: SimConfig) -> SimOutcome {
        let mut p = spec
            .parse::<PolicySpec>()
            .unwrap()
            .build(cap, None)
            .unwrap();
        simulate(p.as_mut(), reqs(ids), &config, &|_| {}, &|| false).unwrap()
    }

    #[test]
    fn counts_misses_and_evictions() {
        // LRU, capacity 2: 1 2 1 3 2 -> misses 1,2,3,2 ; evictions at 3 and at the last 2.
        let o = run("lru", 2, &[1, 2, 1, 3, 2], SimConfig::default());
        assert_eq!((o.accesses, o.misses, o.evictions), (5, 4, 2));
        // FIFO: queue [1,2]; 3 evicts 1 -> [2,3]; the final 2 hits.
        let o = run("fifo", 2, &[1, 2, 1, 3, 2], SimConfig::default());
        assert_eq!((o.misses, o.evictions), (3, 1));
    }

    #[test]
    fn sampled_model_hides_hits_until_a_sample() {
        // LRU cap 2: 1 2 1 3. Exact: 1 is recent, 3 evicts 2. Sampled with no sample in between:
        // LRU never learned of the hit on 1, so 3 evicts 1.
        let ids = [1, 2, 1, 3, 1];
        let exact = run("lru", 2, &ids, SimConfig::default());
        let sampled = run(
            "lru",
            2,
            &ids,
            SimConfig {
                model: InformationModel::Sampled,
                ..SimConfig::default()
            },
        );
        assert_eq!(exact.misses, 3);
        assert_eq!(sampled.misses, 4);
    }

    #[test]
    fn samples_follow_the_period_in_accesses_and_time() {
        let ids: Vec<u64> = (0..100).collect();
        let by_count = run(
            "fifo",
            4,
            &ids,
            SimConfig {
                sample: SamplePeriod::Accesses(7),
                ..SimConfig::default()
            },
        );
        assert_eq!(by_count.samples, 100 / 7);
        // Requests are 10 time units apart (0..=990); a period of 25 samples once per
        // threshold 25, 50, ..., 975: 39 samples.
        let by_time = run(
            "fifo",
            4,
            &ids,
            SimConfig {
                sample: SamplePeriod::Time(25),
                ..SimConfig::default()
            },
        );
        assert_eq!(by_time.samples, 39);
    }

    #[test]
    fn zero_period_is_an_error() {
        let mut p = PolicySpec::Lru.build(2, None).unwrap();
        let config = SimConfig {
            sample: SamplePeriod::Accesses(0),
            ..SimConfig::default()
        };
        let e = simulate(p.as_mut(), reqs(&[1]), &config, &|_| {}, &|| false).unwrap_err();
        assert!(e.to_string().contains("sample period"), "{e}");
    }
}
