//! Belady's OPT, built through its spec, misses no more than any online policy, in either model.

use std::collections::HashMap;

use memvisor_policy::{EvictionPolicy, Future, PolicyError, PolicySpec};

fn stream(seed: u64, len: usize, universe: u64) -> Vec<u64> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 33;
            // A hot set of a tenth of the units gets half the requests.
            if r & 1 == 0 {
                (r >> 1) % (universe / 10)
            } else {
                (r >> 1) % universe
            }
        })
        .collect()
}

fn future_of(stream: &[u64]) -> Future {
    let mut next = vec![u64::MAX; stream.len()];
    let mut seen: HashMap<u64, u64> = HashMap::new();
    for (i, &u) in stream.iter().enumerate().rev() {
        if let Some(&j) = seen.get(&u) {
            next[i] = j;
        }
        seen.insert(u, i as u64);
    }
    next.into()
}

fn misses(p: &mut dyn EvictionPolicy, stream: &[u64], sampled: bool) -> usize {
    let mut misses = 0;
    for (i, &u) in stream.iter().enumerate() {
        if !p.contains(u) {
            misses += 1;
            p.admit(u);
        } else if sampled {
            p.mark_referenced(u);
        } else {
            p.on_hit(u);
        }
        if i % 100 == 99 {
            p.on_sample();
        }
    }
    misses
}

#[test]
fn opt_is_a_lower_bound_in_both_models() {
    let opt: PolicySpec = "opt".parse().unwrap();
    for (seed, capacity, universe) in [(1, 10, 200), (2, 50, 400), (3, 200, 1000)] {
        let s = stream(seed, 20_000, universe);
        let future = future_of(&s);
        let exact = misses(
            opt.build(capacity, Some(future.clone())).unwrap().as_mut(),
            &s,
            false,
        );
        let sampled = misses(
            opt.build(capacity, Some(future.clone())).unwrap().as_mut(),
            &s,
            true,
        );
        assert_eq!(
            exact, sampled,
            "OPT does not depend on the information model"
        );
        for spec in PolicySpec::all().into_iter().filter(|p| !p.is_offline()) {
            for model in [false, true] {
                let online = misses(spec.build(capacity, None).unwrap().as_mut(), &s, model);
                assert!(
                    exact <= online,
                    "{spec} (sampled={model}) missed {online} < OPT {exact}, seed {seed}"
                );
            }
        }
    }
    assert!(matches!(
        opt.build(10, None),
        Err(PolicyError::NeedsFuture { policy: "opt" })
    ));
}
