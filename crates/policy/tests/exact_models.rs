//! Policies compared step by step with naive reference implementations of the same algorithm.

use std::collections::VecDeque;

use memvisor_policy::DeterministicRng as Rng;
use memvisor_policy::{Clock, EvictionPolicy, Fifo, Lru};

/// Drives `p` and `reference` with the same stream; the reference returns (hit, victim).
fn compare(
    p: &mut dyn EvictionPolicy,
    mut reference: impl FnMut(u64) -> (bool, Option<u64>),
    universe: u64,
) {
    let mut rng = Rng::new(0x1234_5678);
    for i in 0..50_000 {
        // Skewed stream: half the accesses go to an eighth of the universe.
        let u = if rng.below(2) == 0 {
            rng.below(universe / 8 + 1)
        } else {
            rng.below(universe)
        };
        let (hit, victim) = reference(u);
        assert_eq!(p.contains(u), hit, "{} step {i} unit {u}", p.name());
        if hit {
            p.on_hit(u);
        } else {
            assert_eq!(p.admit(u), victim, "{} step {i} unit {u}", p.name());
        }
    }
}

#[test]
fn fifo_matches_a_queue() {
    let cap = 37;
    let mut q: VecDeque<u64> = VecDeque::new();
    compare(
        &mut Fifo::new(cap),
        |u| {
            if q.contains(&u) {
                return (true, None);
            }
            let v = (q.len() == cap).then(|| q.pop_front().unwrap());
            q.push_back(u);
            (false, v)
        },
        200,
    );
}

#[test]
fn lru_matches_a_recency_stack() {
    let cap = 37;
    let mut q: VecDeque<u64> = VecDeque::new();
    compare(
        &mut Lru::new(cap),
        |u| {
            if let Some(i) = q.iter().position(|&x| x == u) {
                q.remove(i);
                q.push_back(u);
                return (true, None);
            }
            let v = (q.len() == cap).then(|| q.pop_front().unwrap());
            q.push_back(u);
            (false, v)
        },
        200,
    );
}

#[test]
fn clock_matches_a_circular_buffer_with_a_hand() {
    let cap = 37;
    let mut frames: Vec<(u64, bool)> = Vec::new();
    let mut hand = 0usize;
    compare(
        &mut Clock::new(cap),
        |u| {
            if let Some(f) = frames.iter_mut().find(|f| f.0 == u) {
                f.1 = true;
                return (true, None);
            }
            if frames.len() < cap {
                frames.push((u, false));
                return (false, None);
            }
            loop {
                if frames[hand].1 {
                    frames[hand].1 = false;
                    hand = (hand + 1) % cap;
                } else {
                    let v = frames[hand].0;
                    frames[hand] = (u, false);
                    hand = (hand + 1) % cap;
                    return (false, Some(v));
                }
            }
        },
        200,
    );
}
