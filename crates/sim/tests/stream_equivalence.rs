//! The batched simulation path gives exactly what the one-request-at-a-time path gives.

use memvisor_policy::{InformationModel, PolicySpec};
use memvisor_sim::{simulate, simulate_stream, RequestSource, SamplePeriod, SimConfig, SimOutcome};
use memvisor_trace::{write_oracle_general, TraceFormat};

fn both(source: &RequestSource, spec: &PolicySpec, config: &SimConfig) -> (SimOutcome, SimOutcome) {
    let profile = source.profile(spec.is_offline()).unwrap();
    let mut a = spec.build(257, profile.future.clone()).unwrap();
    let one = simulate(a.as_mut(), source.open().unwrap(), config, &|_| {}, &|| {
        false
    })
    .unwrap();
    let mut b = spec.build(257, profile.future).unwrap();
    let mut stream = source.stream().unwrap();
    let batched = simulate_stream(b.as_mut(), &mut stream, config, &|_| {}, &|| false).unwrap();
    (one, batched)
}

#[test]
fn batched_and_iterated_runs_agree_for_every_policy_and_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("z.oracleGeneral");
    let workload: memvisor_trace::WorkloadSpec = "zipf:n=3000:alpha=0.9:len=20011".parse().unwrap();
    write_oracle_general(&path, workload.requests().map(|r| r.unit)).unwrap();
    let sources = [
        RequestSource::Workload(workload),
        RequestSource::Trace {
            path,
            format: TraceFormat::OracleGeneral,
        },
    ];
    let configs = [
        SimConfig::default(),
        SimConfig {
            model: InformationModel::Sampled,
            sample: SamplePeriod::Accesses(333),
        },
        SimConfig {
            model: InformationModel::Sampled,
            sample: SamplePeriod::Time(1000),
        },
    ];
    for source in &sources {
        for spec in PolicySpec::all() {
            for config in &configs {
                let (one, batched) = both(source, &spec, config);
                assert_eq!(one.accesses, 20011, "{spec}");
                assert_eq!(
                    (one.misses, one.evictions, one.samples),
                    (batched.misses, batched.evictions, batched.samples),
                    "{spec} {config:?} {}",
                    source.name()
                );
            }
        }
    }
}

#[test]
fn sizes_beyond_the_footprint_only_miss_compulsorily() {
    use memvisor_sim::{CacheSize, Sweep};
    let workload: memvisor_trace::WorkloadSpec = "zipf:n=300:alpha=0.7:len=5000".parse().unwrap();
    let footprint = RequestSource::Workload(workload.clone())
        .profile(false)
        .unwrap()
        .unique_units;
    let sweep = Sweep {
        source: RequestSource::Workload(workload.clone()),
        policies: PolicySpec::all(),
        // Far beyond the footprint: capped when built, reported as asked.
        sizes: vec![CacheSize::Units(1 << 30), CacheSize::Units(footprint)],
        config: SimConfig::default(),
        with_opt: true,
        threads: 2,
    };
    let report = sweep.run(&|_| {}, &|_| {}).unwrap();
    for row in &report.rows {
        assert_eq!(row.misses, footprint, "{} at {}", row.policy, row.size);
    }
    assert!(report.rows.iter().any(|r| r.size == 1 << 30));
    // Uncapped, at a size above the footprint but small enough to build: the same misses.
    for spec in PolicySpec::all().into_iter().filter(|s| !s.is_offline()) {
        let mut p = spec.build(footprint as usize * 3, None).unwrap();
        let source = RequestSource::Workload(workload.clone());
        let out = simulate(
            p.as_mut(),
            source.open().unwrap(),
            &SimConfig::default(),
            &|_| {},
            &|| false,
        )
        .unwrap();
        assert_eq!(out.misses, footprint, "{spec}");
    }
}
