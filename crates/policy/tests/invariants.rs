//! Randomized invariant tests for every policy against a shadow model of the resident set.
//!
//! Whatever the policy decides, the resident set it reports must match the set implied by the
//! operations and the victims it returned: no unit lost, none duplicated, capacity respected.

use std::collections::HashSet;

use memvisor_policy::DeterministicRng as Rng;
use memvisor_policy::{EvictionPolicy, PolicySpec};

fn check_against_shadow(spec: &PolicySpec, capacity: usize, universe: u64, seed: u64) {
    let ops = 20_000usize;
    let mut rng = Rng::new(seed);
    // Offline policies get the future of the access stream; generate it first.
    let stream: Vec<u64> = (0..ops).map(|_| rng.below(universe)).collect();
    let future = spec.is_offline().then(|| {
        let mut next = vec![u64::MAX; ops];
        let mut last = std::collections::HashMap::new();
        for i in (0..ops).rev() {
            if let Some(&j) = last.get(&stream[i]) {
                next[i] = j;
            }
            last.insert(stream[i], i as u64);
        }
        next.into()
    });
    let mut p: Box<dyn EvictionPolicy> = spec.build(capacity, future).unwrap();
    let mut shadow: HashSet<u64> = HashSet::new();
    let sampled = seed % 2 == 1;
    for (i, &unit) in stream.iter().enumerate() {
        let ctx = || format!("{spec} cap={capacity} seed={seed} step={i} unit={unit}");
        assert_eq!(p.contains(unit), shadow.contains(&unit), "{}", ctx());
        if shadow.contains(&unit) {
            if sampled {
                p.mark_referenced(unit);
            } else {
                p.on_hit(unit);
            }
        } else {
            let was_full = shadow.len() == capacity;
            match p.admit(unit) {
                Some(v) if v == unit => {} // declined admission
                Some(v) => {
                    assert!(shadow.remove(&v), "{}: victim {v} was not resident", ctx());
                    shadow.insert(unit);
                }
                None => {
                    assert!(!was_full, "{}: full but nothing evicted", ctx());
                    shadow.insert(unit);
                }
            }
        }
        assert_eq!(p.len(), shadow.len(), "{}", ctx());
        assert!(p.len() <= capacity, "{}", ctx());
        if i % 97 == 0 {
            p.on_sample();
        }
        if !spec.is_offline() && i % 211 == 0 {
            // The pager's page-out worker and munmap: evict ahead of demand, remove at random.
            if let Some(v) = p.evict() {
                assert!(shadow.remove(&v), "{}: evicted {v} not resident", ctx());
            }
            // And the pager's eviction that spares units it must write out (odd units here):
            // only resident units are asked about; CLOCK takes an unreferenced even unit if
            // there was one when the selection began.
            let cold_clean = shadow.iter().any(|&u| {
                u % 2 == 0
                    && !p
                        .units()
                        .is_referenced(p.units().slot(u).expect("resident"))
            });
            let mut asked_outside = None;
            let mut costly = |u: u64| {
                if !shadow.contains(&u) {
                    asked_outside = Some(u);
                }
                u % 2 == 1
            };
            if let Some(v) = p.evict_sparing(&mut costly) {
                assert_eq!(
                    asked_outside,
                    None,
                    "{}: asked about a unit not resident",
                    ctx()
                );
                assert!(
                    shadow.remove(&v),
                    "{}: spared eviction {v} not resident",
                    ctx()
                );
                if spec.to_string() == "clock" {
                    assert!(
                        v % 2 == 0 || !cold_clean,
                        "{}: clock evicted costly {v} beside an unreferenced clean unit",
                        ctx()
                    );
                }
            }
            let r = rng.below(universe);
            assert_eq!(p.remove(r), shadow.remove(&r), "{}: remove {r}", ctx());
        }
    }
    for u in 0..universe {
        assert_eq!(p.contains(u), shadow.contains(&u), "{spec} final unit {u}");
    }
    while let Some(v) = p.evict() {
        assert!(shadow.remove(&v), "{spec}: drained {v} not resident");
    }
    assert!(
        shadow.is_empty() || spec.is_offline(),
        "{spec}: evict() stopped early"
    );
}

#[test]
fn every_policy_keeps_the_resident_set_consistent() {
    for spec in PolicySpec::all() {
        for (capacity, universe) in [(1, 4), (2, 3), (8, 40), (64, 100), (100, 5000)] {
            for seed in 0..4 {
                check_against_shadow(&spec, capacity, universe, seed);
            }
        }
    }
}

#[test]
fn access_does_what_the_separate_calls_do() {
    use memvisor_policy::{Access, InformationModel};
    for spec in PolicySpec::all().into_iter().filter(|s| !s.is_offline()) {
        for model in [InformationModel::Exact, InformationModel::Sampled] {
            let mut combined = spec.build(50, None).unwrap();
            let mut separate = spec.build(50, None).unwrap();
            let mut rng = Rng::new(7);
            for i in 0..30_000 {
                // Runs of repeats (the MRU shortcut) mixed with a skewed stream.
                let unit = if rng.below(4) == 0 {
                    rng.below(400)
                } else {
                    rng.below(60)
                };
                let expected = if separate.contains(unit) {
                    match model {
                        InformationModel::Exact => separate.on_hit(unit),
                        InformationModel::Sampled => separate.mark_referenced(unit),
                    }
                    Access::Hit
                } else {
                    Access::Miss {
                        victim: separate.admit(unit),
                    }
                };
                assert_eq!(
                    combined.access(unit, model),
                    expected,
                    "{spec} {model:?} step {i}"
                );
                if i % 101 == 0 {
                    combined.on_sample();
                    separate.on_sample();
                }
            }
        }
    }
}
