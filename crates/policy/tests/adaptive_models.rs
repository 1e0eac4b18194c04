//! ARC, CAR, SIEVE and S3-FIFO compared step by step with naive reference implementations
//! written from the papers' pseudocode (queues searched linearly, nothing shared with the
//! library), in the exact model.

use std::collections::VecDeque;

use memvisor_policy::DeterministicRng as Rng;
use memvisor_policy::{Arc, Car, EvictionPolicy, S3Fifo, Sieve};

/// Drives `p` and `reference` with the same stream; the reference returns (hit, victim).
fn compare(
    p: &mut dyn EvictionPolicy,
    mut reference: impl FnMut(u64) -> (bool, Option<u64>),
    universe: u64,
    seed: u64,
) {
    let mut rng = Rng::new(seed);
    for i in 0..50_000 {
        // Skewed stream with phases: a hot eighth, the whole universe, and short loops.
        let u = match (i / 5_000) % 3 {
            0 if rng.below(2) == 0 => rng.below(universe / 8 + 1),
            2 => (i as u64 * 7) % (universe / 3) + rng.below(2),
            _ => rng.below(universe),
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

fn take(q: &mut VecDeque<u64>, u: u64) -> bool {
    match q.iter().position(|&x| x == u) {
        Some(i) => {
            q.remove(i);
            true
        }
        None => false,
    }
}

/// ARC as in figure 4 of Megiddo & Modha (FAST 2003), with a real-valued target `p`.
struct NaiveArc {
    c: usize,
    p: f64,
    t1: VecDeque<u64>,
    t2: VecDeque<u64>,
    b1: VecDeque<u64>,
    b2: VecDeque<u64>,
}

impl NaiveArc {
    fn replace(&mut self, in_b2: bool) -> u64 {
        let t1 = self.t1.len() as f64;
        if !self.t1.is_empty() && (t1 > self.p || (in_b2 && t1 == self.p)) {
            let v = self.t1.pop_front().unwrap();
            self.b1.push_back(v);
            v
        } else {
            let v = self.t2.pop_front().unwrap();
            self.b2.push_back(v);
            v
        }
    }

    fn access(&mut self, x: u64) -> (bool, Option<u64>) {
        if take(&mut self.t1, x) || take(&mut self.t2, x) {
            self.t2.push_back(x);
            return (true, None);
        }
        let (b1, b2) = (self.b1.len() as f64, self.b2.len() as f64);
        if self.b1.contains(&x) {
            self.p = (self.p + (b2 / b1).max(1.0)).min(self.c as f64);
            let v = self.replace(false);
            take(&mut self.b1, x);
            self.t2.push_back(x);
            return (false, Some(v));
        }
        if self.b2.contains(&x) {
            self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
            let v = self.replace(true);
            take(&mut self.b2, x);
            self.t2.push_back(x);
            return (false, Some(v));
        }
        let l1 = self.t1.len() + self.b1.len();
        let total = l1 + self.t2.len() + self.b2.len();
        let victim = if l1 == self.c {
            if self.t1.len() < self.c {
                self.b1.pop_front();
                Some(self.replace(false))
            } else {
                self.t1.pop_front()
            }
        } else if total >= self.c {
            if total == 2 * self.c {
                self.b2.pop_front();
            }
            Some(self.replace(false))
        } else {
            None
        };
        self.t1.push_back(x);
        (false, victim)
    }
}

#[test]
fn arc_matches_the_paper() {
    for (c, universe, seed) in [(37, 200, 0x1234_5678), (8, 30, 99), (1, 3, 7)] {
        let mut r = NaiveArc {
            c,
            p: 0.0,
            t1: VecDeque::new(),
            t2: VecDeque::new(),
            b1: VecDeque::new(),
            b2: VecDeque::new(),
        };
        compare(&mut Arc::new(c), |u| r.access(u), universe, seed);
    }
}

/// CAR as in figure 2 of Bansal & Modha (FAST 2004): clocks of (unit, reference bit) whose
/// front is the hand, LRU ghost lists whose front is the LRU end.
struct NaiveCar {
    c: usize,
    p: f64,
    t1: VecDeque<(u64, bool)>,
    t2: VecDeque<(u64, bool)>,
    b1: VecDeque<u64>,
    b2: VecDeque<u64>,
}

impl NaiveCar {
    fn replace(&mut self) -> u64 {
        loop {
            if self.t1.len() as f64 >= self.p.max(1.0) {
                let (h, referenced) = self.t1.pop_front().unwrap();
                if !referenced {
                    self.b1.push_back(h);
                    return h;
                }
                self.t2.push_back((h, false));
            } else {
                let (h, referenced) = self.t2.pop_front().unwrap();
                if !referenced {
                    self.b2.push_back(h);
                    return h;
                }
                self.t2.push_back((h, false));
            }
        }
    }

    fn access(&mut self, x: u64) -> (bool, Option<u64>) {
        for clock in [&mut self.t1, &mut self.t2] {
            if let Some(entry) = clock.iter_mut().find(|e| e.0 == x) {
                entry.1 = true;
                return (true, None);
            }
        }
        let in_b1 = self.b1.contains(&x);
        let in_b2 = self.b2.contains(&x);
        let mut victim = None;
        if self.t1.len() + self.t2.len() == self.c {
            victim = Some(self.replace());
            if !in_b1 && !in_b2 {
                let total = self.t1.len() + self.t2.len() + self.b1.len() + self.b2.len();
                if self.t1.len() + self.b1.len() == self.c {
                    self.b1.pop_front();
                } else if total == 2 * self.c {
                    self.b2.pop_front();
                }
            }
        }
        let (b1, b2) = (self.b1.len() as f64, self.b2.len() as f64);
        if in_b1 {
            self.p = (self.p + (b2 / b1).max(1.0)).min(self.c as f64);
            take(&mut self.b1, x);
            self.t2.push_back((x, false));
        } else if in_b2 {
            self.p = (self.p - (b1 / b2).max(1.0)).max(0.0);
            take(&mut self.b2, x);
            self.t2.push_back((x, false));
        } else {
            self.t1.push_back((x, false));
        }
        (false, victim)
    }
}

#[test]
fn car_matches_the_paper() {
    for (c, universe, seed) in [(37, 200, 0x1234_5678), (8, 30, 99), (1, 3, 7)] {
        let mut r = NaiveCar {
            c,
            p: 0.0,
            t1: VecDeque::new(),
            t2: VecDeque::new(),
            b1: VecDeque::new(),
            b2: VecDeque::new(),
        };
        compare(&mut Car::new(c), |u| r.access(u), universe, seed);
    }
}

#[test]
fn sieve_matches_a_queue_with_a_hand_index() {
    for (c, universe, seed) in [(37, 200, 0x1234_5678), (8, 30, 99), (1, 3, 7)] {
        // Oldest first; the hand is an index, and None means "start from the oldest".
        let mut queue: Vec<(u64, bool)> = Vec::new();
        let mut hand: Option<usize> = None;
        compare(
            &mut Sieve::new(c),
            |u| {
                if let Some(e) = queue.iter_mut().find(|e| e.0 == u) {
                    e.1 = true;
                    return (true, None);
                }
                let mut victim = None;
                if queue.len() == c {
                    let mut h = hand.unwrap_or(0);
                    while queue[h].1 {
                        queue[h].1 = false;
                        h = (h + 1) % queue.len();
                    }
                    victim = Some(queue.remove(h).0);
                    hand = (h < queue.len()).then_some(h);
                }
                queue.push((u, false));
                (false, victim)
            },
            universe,
            seed,
        );
    }
}

/// S3-FIFO as in Algorithm 1 of Yang et al. (SOSP 2023) with threshold 2, optionally with
/// libCacheSim's fill rule (until the first eviction, units go to M once S holds its share).
struct NaiveS3Fifo {
    fill_main: bool,
    c: usize,
    small_target: usize,
    ghost_size: usize,
    small: VecDeque<(u64, u8)>,
    main: VecDeque<(u64, u8)>,
    ghost: VecDeque<u64>,
    evicted_once: bool,
}

impl NaiveS3Fifo {
    fn evict(&mut self) -> u64 {
        self.evicted_once = true;
        loop {
            if self.small.len() >= self.small_target || self.main.is_empty() {
                while let Some((u, f)) = self.small.pop_front() {
                    if f >= 2 {
                        self.main.push_back((u, 0));
                    } else {
                        if self.ghost_size > 0 {
                            if self.ghost.len() == self.ghost_size {
                                self.ghost.pop_front();
                            }
                            self.ghost.push_back(u);
                        }
                        return u;
                    }
                }
            } else {
                while let Some((u, f)) = self.main.pop_front() {
                    if f > 0 {
                        self.main.push_back((u, f - 1));
                    } else {
                        return u;
                    }
                }
            }
        }
    }

    fn access(&mut self, x: u64) -> (bool, Option<u64>) {
        for q in [&mut self.small, &mut self.main] {
            if let Some(e) = q.iter_mut().find(|e| e.0 == x) {
                e.1 = (e.1 + 1).min(3);
                return (true, None);
            }
        }
        let remembered = take(&mut self.ghost, x);
        let victim = (self.small.len() + self.main.len() == self.c).then(|| self.evict());
        let filling = self.fill_main && !self.evicted_once;
        if remembered || (filling && self.small.len() >= self.small_target) {
            self.main.push_back((x, 0));
        } else {
            self.small.push_back((x, 0));
        }
        (false, victim)
    }
}

#[test]
fn s3_fifo_matches_the_paper_with_either_fill_rule() {
    let cases = [(37, 200, 0x1234_5678), (100, 400, 99), (1, 3, 7)];
    for ((c, universe, seed), fill_main) in cases.into_iter().flat_map(|k| [(k, true), (k, false)])
    {
        let mut r = NaiveS3Fifo {
            fill_main,
            c,
            small_target: (c / 10).max(1),
            ghost_size: c * 9 / 10,
            small: VecDeque::new(),
            main: VecDeque::new(),
            ghost: VecDeque::new(),
            evicted_once: false,
        };
        let mut p = S3Fifo::with_parameters(c, 0.1, 0.9, 2, fill_main);
        compare(&mut p, |u| r.access(u), universe, seed);
    }
}
