//! [`partition`]: divides one memory total among claimants, as a [`Mode`] says, within
//! [`Limits`]: each claimant's minimum and maximum, a step, hysteresis and a rate limit. A
//! claimant ([`ClaimantKey`]) is a process's budget or the host cache limit of one of its
//! disk images; the partitioner treats both alike (their curves are in the same unit, time
//! the program waits), so "budget" below stands for either.
//!
//! * `static`: equal shares; `proportional`: shares in proportion to each claimant's weight
//!   (a process's guest RAM size, an image's size). Both by water-filling: a share below a
//!   minimum or above a maximum is pinned there and the rest is divided again.
//! * `utility`: by waiting time saved ([`UtilityCurve`]), in three phases. *Fit*: if the
//!   budgets exceed the total, the claimants whose next step saves the least give steps back.
//!   *Give*: memory nobody holds goes, step by step, to the claimant whose curve promises the
//!   most time saved per byte, with utility-based partitioning's lookahead (Qureshi and Patt,
//!   MICRO 2006) so a cliff beyond a flat stretch is seen. *Exchange*: memory moves from the
//!   claimant that loses least to the one that gains most, while the gain per byte beats the
//!   loss per byte by a margin. A pager (or an image's cache model) measures only what *more*
//!   memory would save (refaults of evicted chunks or blocks), so a donor's loss is estimated
//!   from its curve at its current budget and from the last curve measured when its budget
//!   was lower ([`Claimant::below`]: what the top of its budget saves; a working set that just
//!   fits refaults nothing above it), over all that a move would take from it (a donor's
//!   second move in one decision is priced from where its first left it); a claimant not
//!   measured at its present size yet gives nothing. The broker climbs the hill a step
//!   at a time, as Cliffhanger does with shadow queues (Cidon et al., NSDI 2016), and a
//!   donor that starts to refault wins its memory back at the next decision. The rate limit
//!   bounds what one decision moves, and in the exchange a donor gives at most an eighth of
//!   its budget in one decision ([`DONOR_SHARE`]), so a loss estimate that was wrong costs at
//!   most that eighth, which the next measurement corrects (fitting a smaller total or a
//!   bound is not limited).
//!
//! Budgets change only by at least the hysteresis (except to fit the total or the bounds),
//! and no decision leaves the sum of budgets above the total.

use std::fmt;
use std::str::FromStr;

use crate::broker_error::BrokerError;
use crate::claimant_key::ClaimantKey;
use crate::utility_curve::UtilityCurve;

/// In the exchange, a donor gives at most `1 / DONOR_SHARE` of its budget (as the decision
/// found it) in one decision, to all receivers together (rounded down to whole steps; at
/// least the hysteresis, so that it can give at all). A curve that shows no refaults says
/// nothing about data the program has not re-read yet: a guest reading its disk for the
/// first time, or whose working set just fits, refaults nothing, and each of four identical
/// TCG guests under one total lost 224M to 256M in one decision on that evidence, then
/// refaulted and climbed back by 32M a decision (47 changes in one run, 3.4x the page-ins of
/// the kernel; `docs/benchmarks.md`, density with larger guests). Taken an eighth at a time,
/// the next curve, measured at the smaller budget, shows the loss first.
pub const DONOR_SHARE: u64 = 8;

/// How the total is divided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Equal shares.
    Static,
    /// Shares in proportion to each process's weight.
    Proportional,
    /// By measured utility (page-in time saved per byte).
    Utility,
}

impl FromStr for Mode {
    type Err = BrokerError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "static" => Ok(Self::Static),
            "proportional" => Ok(Self::Proportional),
            "utility" => Ok(Self::Utility),
            _ => Err(BrokerError::Option {
                option: format!("--mode {s}"),
                reason: "expected static, proportional or utility".into(),
            }),
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Static => "static",
            Self::Proportional => "proportional",
            Self::Utility => "utility",
        })
    }
}

/// One claimant of memory: a process's budget, or one of its images' cache limits.
#[derive(Debug, Clone)]
pub struct Claimant {
    /// What memory it stands for.
    pub key: ClaimantKey,
    /// Its budget (or cache limit) now.
    pub current: u64,
    /// The least it may get.
    pub min: u64,
    /// The most it may get.
    pub max: u64,
    /// Its weight in `proportional` mode (guest RAM size, image size).
    pub weight: u64,
    /// What more memory saves it (`utility` mode; `None`: not measured at this size yet: it
    /// is counted as saving nothing when memory is handed out, and gives none to others).
    pub curve: Option<UtilityCurve>,
    /// A curve measured while its budget was `offset` bytes lower, `(offset, curve)`: what the
    /// top `offset` bytes of its budget save, so what taking them back would cost. A process
    /// whose working set just fits shows no refaults at all above its budget; without this it
    /// would look free to rob.
    pub below: Option<(u64, UtilityCurve)>,
}

impl Claimant {
    /// What taking `x` bytes more costs per byte (ms/s per byte), once `taken` bytes have been
    /// taken from it in this decision: the most of what `x` bytes more would save (its curve,
    /// the first guess at what the top of its budget saves) and what its curve from below
    /// says the next `x` bytes under those `taken` save (`lost_below`). Over the whole amount
    /// taken, not one step extrapolated: the top step of a loop that fits saves nothing, the
    /// next few its cliff; and a donor asked twice in one decision is priced from where its
    /// first move left it, not from its top again.
    fn loss_per_byte(&self, taken: u64, x: u64) -> f64 {
        let above = self.curve.as_ref().map_or(0.0, |c| c.saved_with(x));
        let below = self.lost_below(taken + x) - self.lost_below(taken);
        above.max(below) / x.max(1) as f64
    }

    /// Milliseconds per second that the top `taken` bytes of its budget save, by the curve
    /// measured when its budget was lower (beyond that curve's offset, its last step's slope
    /// goes on); nothing without one. Non-decreasing in `taken`.
    fn lost_below(&self, taken: u64) -> f64 {
        self.below.as_ref().map_or(0.0, |(offset, c)| {
            let x = taken.min(*offset);
            if x == 0 {
                return 0.0;
            }
            (c.saved_with(*offset) - c.saved_with(offset - x)) * taken as f64 / x as f64
        })
    }
}

/// The bounds every decision keeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// The memory to divide, in bytes.
    pub total: u64,
    /// Budgets move in multiples of this.
    pub step: u64,
    /// The most one decision moves between processes (utility) or changes one budget
    /// (static, proportional), in bytes.
    pub max_move: u64,
    /// Smaller changes are not made (except to fit the total or bounds).
    pub hysteresis: u64,
    /// Utility: a move is made only if it saves at least this many milliseconds of page-in
    /// time per second...
    pub min_gain: f64,
    /// ...and its gain per byte exceeds the donor's loss per byte by this factor.
    pub margin: f64,
}

/// Why a budget is what it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Reason {
    /// Kept.
    Unchanged,
    /// Its share in `static` or `proportional` mode.
    Share,
    /// Brought within its minimum and maximum.
    Bounds,
    /// Shrunk so the budgets fit the total; giving back a step cost this many ms/s.
    Fit {
        /// Milliseconds per second giving back a step costs.
        saved: f64,
    },
    /// Grown, on the way to `toward` more than its current budget (all of it, or part of the
    /// way when the rate limit stops it before a cliff), which saves `saved` ms/s of page-in
    /// time by its curve.
    Gain {
        /// Milliseconds of page-in time per second `toward` saves.
        saved: f64,
        /// Extra bytes the climb aims at.
        toward: u64,
    },
    /// Shrunk for another process; giving back a step cost this many ms/s (its estimate).
    Donor {
        /// Milliseconds per second giving back a step costs.
        saved: f64,
    },
}

/// One claimant's budget after a decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Allocation {
    /// The claimant.
    pub key: ClaimantKey,
    /// Its budget before.
    pub from: u64,
    /// Its budget after.
    pub to: u64,
    /// Why.
    pub reason: Reason,
}

/// Divides `limits.total` among `claimants` as `mode` says. Fails if their minimums alone
/// exceed the total (or a minimum exceeds its maximum).
pub fn partition(
    mode: Mode,
    limits: &Limits,
    claimants: &[Claimant],
) -> Result<Vec<Allocation>, BrokerError> {
    for c in claimants {
        if c.min > c.max {
            return Err(BrokerError::Option {
                option: format!("limits of {}", c.key),
                reason: format!("minimum {} exceeds maximum {}", c.min, c.max),
            });
        }
    }
    let minimums: u64 = claimants.iter().map(|c| c.min).sum();
    if minimums > limits.total {
        return Err(BrokerError::MinimumsExceedTotal {
            minimums,
            claimants: claimants.len(),
            total: limits.total,
        });
    }
    let step = limits.step.max(1);
    let limits = Limits { step, ..*limits };
    Ok(match mode {
        Mode::Static | Mode::Proportional => {
            let weights: Vec<u64> = claimants
                .iter()
                .map(|c| {
                    if mode == Mode::Static {
                        1
                    } else {
                        c.weight.max(1)
                    }
                })
                .collect();
            let targets = water_fill(&limits, claimants, &weights);
            toward_targets(&limits, claimants, &targets)
        }
        Mode::Utility => by_utility(&limits, claimants),
    })
}

/// Shares of `limits.total` by weight, pinned to each claimant's bounds, in whole steps.
fn water_fill(limits: &Limits, claimants: &[Claimant], weights: &[u64]) -> Vec<u64> {
    let n = claimants.len();
    let mut share = vec![0u64; n];
    let mut pinned = vec![false; n];
    loop {
        let pinned_sum: u64 = (0..n).filter(|&i| pinned[i]).map(|i| share[i]).sum();
        let left = limits.total.saturating_sub(pinned_sum) as u128;
        let free_weight: u128 = (0..n)
            .filter(|&i| !pinned[i])
            .map(|i| weights[i] as u128)
            .sum();
        if free_weight == 0 {
            break;
        }
        let mut changed = false;
        for i in (0..n).filter(|&i| !pinned[i]) {
            let raw = (left * weights[i] as u128 / free_weight) as u64;
            share[i] = raw / limits.step * limits.step;
        }
        // Pin shares below their minimum first, and divide again; only when none is left,
        // shares above their maximum (which frees memory for the others, so no share falls
        // below its minimum afterwards).
        for i in 0..n {
            if !pinned[i] && share[i] < claimants[i].min {
                share[i] = claimants[i].min;
                pinned[i] = true;
                changed = true;
            }
        }
        if !changed {
            for i in 0..n {
                if !pinned[i] && share[i] > claimants[i].max {
                    share[i] = claimants[i].max;
                    pinned[i] = true;
                    changed = true;
                }
            }
        }
        if !changed {
            break;
        }
    }
    share
}

/// Moves each budget toward its target by at most `max_move` (but always into its bounds
/// and, shrinking further if needed, within the total), skips changes below the hysteresis,
/// and cuts growths to what is free.
fn toward_targets(limits: &Limits, claimants: &[Claimant], targets: &[u64]) -> Vec<Allocation> {
    let mut out: Vec<Allocation> = claimants
        .iter()
        .zip(targets)
        .map(|(c, &t)| {
            let base = c.current.clamp(c.min, c.max);
            let step = if t > base {
                base + (t - base).min(limits.max_move)
            } else {
                base - (base - t).min(limits.max_move)
            };
            let (to, reason) = if step.abs_diff(base) >= limits.hysteresis.max(1) {
                (step, Reason::Share)
            } else if base != c.current {
                (base, Reason::Bounds)
            } else {
                (base, Reason::Unchanged)
            };
            Allocation {
                key: c.key.clone(),
                from: c.current,
                to,
                reason,
            }
        })
        .collect();
    // Growths take only what the others leave: first the rest must fit the total, shrinking
    // toward (and if need be to) the targets regardless of the rate limit.
    let held = |out: &[Allocation]| -> u64 {
        out.iter()
            .zip(claimants)
            .map(|(a, c)| a.to.min(c.current.clamp(c.min, c.max)))
            .sum()
    };
    for (i, t) in targets.iter().enumerate() {
        let over = held(&out).saturating_sub(limits.total);
        if over == 0 {
            break;
        }
        let a = &mut out[i];
        if a.to > *t {
            a.to -= (a.to - t).min(over);
            a.reason = Reason::Share;
        }
    }
    let mut free = limits.total.saturating_sub(held(&out));
    for (a, c) in out.iter_mut().zip(claimants) {
        let base = c.current.clamp(c.min, c.max);
        if a.to > base {
            let grow = (a.to - base).min(free);
            free -= grow;
            a.to = base + grow;
            if grow == 0 {
                a.reason = if base != c.current {
                    Reason::Bounds
                } else {
                    Reason::Unchanged
                };
            }
        }
    }
    out
}

/// The utility mode's three phases (see the module docs).
fn by_utility(limits: &Limits, claimants: &[Claimant]) -> Vec<Allocation> {
    let n = claimants.len();
    let step = limits.step;
    let flat = UtilityCurve::from_points(step, &[], 0.0);
    let curve = |i: usize| claimants[i].curve.as_ref().unwrap_or(&flat);
    // What each has given up in this decision so far, and what its next step costs per byte.
    let taken = |i: usize, to: &[u64]| claimants[i].current.saturating_sub(to[i]);
    let loss_per_byte = |i: usize, to: &[u64]| claimants[i].loss_per_byte(taken(i, to), step);
    let mut to: Vec<u64> = claimants
        .iter()
        .map(|c| c.current.clamp(c.min, c.max))
        .collect();
    let mut reason: Vec<Reason> = claimants
        .iter()
        .zip(&to)
        .map(|(c, &t)| {
            if t != c.current {
                Reason::Bounds
            } else {
                Reason::Unchanged
            }
        })
        .collect();

    // Fit: shed steps from whoever loses least.
    let mut sum: u64 = to.iter().sum();
    while sum > limits.total {
        let Some(i) = (0..n)
            .filter(|&i| to[i] > claimants[i].min)
            .min_by(|&a, &b| loss_per_byte(a, &to).total_cmp(&loss_per_byte(b, &to)))
        else {
            break; // cannot happen: the minimums fit
        };
        let cut = (to[i] - claimants[i].min).min(step).min(sum - limits.total);
        reason[i] = Reason::Fit {
            saved: loss_per_byte(i, &to) * step as f64,
        };
        to[i] -= cut;
        sum -= cut;
    }

    // Gain beyond the current budget (what `to` already adds above it).
    let given = |i: usize, to: &[u64]| to[i].saturating_sub(claimants[i].current);
    let worth = |x: u64, g: f64| g >= limits.min_gain && x > 0;
    // The best lookahead step of claimant `i` within `room`, as (bytes, ms/s saved).
    let lookahead = |i: usize, to: &[u64], room: u64| -> Option<(u64, f64)> {
        let (x, g) = curve(i).best_step(given(i, to), room)?;
        worth(x, g).then_some((x, g))
    };
    // A climb toward a cliff farther than the rate limit allows moves part of the way: the
    // next decision measures the curve from there.
    let reason_gain = |i: usize, to: &[u64], x_full: u64, start: u64| {
        let toward = given(i, to) + x_full;
        Reason::Gain {
            saved: curve(i).gain_beyond(start, toward.saturating_sub(start)),
            toward: toward.saturating_sub(start),
        }
    };
    let start: Vec<u64> = (0..n).map(|i| given(i, &to)).collect();
    // What claimant `j` could give (down to its minimum) losing less per byte than `ratio`
    // over the margin: all it has above its minimum, else the most of one step, two, four...
    // that is cheap enough over the whole amount given.
    let givable = |j: usize, to: &[u64], ratio: f64| -> u64 {
        let spare = to[j].saturating_sub(claimants[j].min);
        let cheap =
            |x: u64| claimants[j].loss_per_byte(taken(j, to), x) * (1.0 + limits.margin) < ratio;
        if spare == 0 || cheap(spare) {
            return spare;
        }
        let mut most = 0;
        let mut x = step;
        while x < spare {
            if cheap(x) {
                most = x;
            }
            x = x.saturating_mul(2);
        }
        most
    };
    // A climb is aimed only at what can be had: memory nobody holds plus what the processes
    // that would lose less per byte than the climb gains could give (each down to its
    // minimum). A cliff out of reach is not climbed part of the way for nothing.
    let reachable = |i: usize, to: &[u64], free: u64, grown: &[u64]| -> Option<(u64, f64)> {
        let room = claimants[i].max.saturating_sub(to[i]);
        let (x, g) = lookahead(i, to, room)?;
        let ratio = g / x as f64;
        let cheap: u64 = (0..n)
            .filter(|&j| j != i && grown[j] == 0 && claimants[j].curve.is_some())
            .map(|j| givable(j, to, ratio))
            .sum();
        let obtainable = room.min(free + cheap);
        if x <= obtainable {
            Some((x, g))
        } else {
            lookahead(i, to, obtainable)
        }
    };
    // Give: hand out what nobody holds, best lookahead first.
    let mut free = limits.total - sum;
    let mut grown = vec![0u64; n];
    let mut aim: Vec<Option<Reason>> = vec![None; n];
    while free >= step {
        let best = (0..n)
            .filter(|&i| grown[i] < limits.max_move)
            .filter_map(|i| reachable(i, &to, free, &grown).map(|(x, g)| (i, x, g)))
            .max_by(|a, b| (a.2 / a.1 as f64).total_cmp(&(b.2 / b.1 as f64)));
        let Some((i, x_full, _)) = best else { break };
        let x = x_full.min(limits.max_move - grown[i]).min(free);
        aim[i] = Some(reason_gain(i, &to, x_full, start[i]));
        to[i] += x;
        grown[i] += x;
        free -= x;
    }
    for i in 0..n {
        if grown[i] == 0 {
            continue;
        }
        if grown[i] < limits.hysteresis {
            to[i] -= grown[i];
            grown[i] = 0;
        } else if let Some(r) = aim[i].take() {
            reason[i] = r;
        }
    }

    // Exchange: from the least loss to the most gain, within the rate limit.
    let mut moved = 0u64;
    let mut donor = vec![false; n];
    // What each claimant has given in this decision, and the most it may give.
    let mut gave = vec![0u64; n];
    let least = limits.hysteresis.div_ceil(step) * step;
    let most_given: Vec<u64> = claimants
        .iter()
        .map(|c| (c.current / DONOR_SHARE / step * step).max(least.max(step)))
        .collect();
    'exchange: while moved < limits.max_move {
        // Receivers best first; the first that finds a donor cheap enough gets its memory.
        let mut receivers: Vec<(usize, u64, f64)> = (0..n)
            .filter(|&i| !donor[i])
            .filter_map(|i| reachable(i, &to, 0, &grown).map(|(x, g)| (i, x, g)))
            .collect();
        receivers.sort_by(|a, b| (b.2 / b.1 as f64).total_cmp(&(a.2 / a.1 as f64)));
        for (r, x_full, g_full) in receivers {
            // At least the hysteresis (`least`): a concave curve's best step is its first,
            // often smaller.
            // The donor that loses least among those that can give that much. A claimant
            // not measured at its present size (just changed: its refaults restart counting)
            // is no donor: its loss is unknown, not nothing. Taken for nothing, a guest shrunk
            // one decision was robbed again at the next (56M, then 20M), refaulted, and won
            // its memory back: 34 changes among four identical guests in 80 s.
            let d = (0..n)
                .filter(|&i| i != r && grown[i] == 0 && claimants[i].curve.is_some())
                .filter(|&i| to[i] >= claimants[i].min + least.max(step))
                .filter(|&i| gave[i] + least.max(step) <= most_given[i])
                .min_by(|&a, &b| loss_per_byte(a, &to).total_cmp(&loss_per_byte(b, &to)));
            let Some(d) = d else { continue };
            let mut x = x_full
                .max(least)
                .min(claimants[r].max.saturating_sub(to[r]))
                .min(limits.max_move - moved)
                .min(to[d] - claimants[d].min)
                .min(most_given[d] - gave[d])
                / step
                * step;
            // Toward a cliff the rate limit cuts short, the climb's own ratio counts.
            let gain_per_byte = |x: u64| {
                if x < x_full {
                    g_full / x_full as f64
                } else {
                    curve(r).gain_beyond(given(r, &to), x) / x.max(1) as f64
                }
            };
            // The donor's loss over all it gives: halve the move until it pays.
            while x >= least.max(step)
                && gain_per_byte(x)
                    <= claimants[d].loss_per_byte(taken(d, &to), x) * (1.0 + limits.margin)
            {
                x = x / 2 / step * step;
            }
            if x == 0 || x < limits.hysteresis {
                continue;
            }
            reason[r] = reason_gain(r, &to, x_full.max(x), start[r]);
            reason[d] = Reason::Donor {
                saved: loss_per_byte(d, &to) * step as f64,
            };
            to[r] += x;
            to[d] -= x;
            grown[r] += x;
            gave[d] += x;
            donor[d] = true;
            moved += x;
            continue 'exchange;
        }
        break;
    }

    claimants
        .iter()
        .enumerate()
        .map(|(i, c)| Allocation {
            key: c.key.clone(),
            from: c.current,
            to: to[i],
            reason: if to[i] == c.current {
                Reason::Unchanged
            } else {
                reason[i].clone()
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: u64 = 1 << 20;

    fn limits(total: u64) -> Limits {
        Limits {
            total,
            step: 16 * M,
            max_move: 1 << 40,
            hysteresis: 16 * M,
            min_gain: 1.0,
            margin: 0.5,
        }
    }

    fn claimant(pid: u32, current: u64, curve: Option<UtilityCurve>) -> Claimant {
        Claimant {
            key: ClaimantKey::Ram(pid),
            current,
            min: 64 * M,
            max: 1024 * M,
            weight: 1024 * M,
            curve,
            below: None,
        }
    }

    /// Saves `per_step` ms/s for each 16 MiB up to `steps` steps, then nothing more.
    fn knee(per_step: f64, steps: usize) -> UtilityCurve {
        let points: Vec<f64> = (1..=64).map(|k| per_step * k.min(steps) as f64).collect();
        UtilityCurve::from_points(16 * M, &points, per_step * steps as f64)
    }

    /// Saves nothing until `steps` steps of 16 MiB more, then `saved`.
    fn cliff(steps: usize, saved: f64) -> UtilityCurve {
        let points: Vec<f64> = (1..=64)
            .map(|k| if k >= steps { saved } else { 0.0 })
            .collect();
        UtilityCurve::from_points(16 * M, &points, saved)
    }

    /// Each 16 MiB step saves less than the one before (40 * sqrt(steps)).
    fn concave() -> UtilityCurve {
        let points: Vec<f64> = (1..=64).map(|k| 40.0 * (k as f64).sqrt()).collect();
        UtilityCurve::from_points(16 * M, &points, 400.0)
    }

    fn budgets(a: &[Allocation]) -> Vec<u64> {
        a.iter().map(|a| a.to / M).collect()
    }

    #[test]
    fn static_is_equal_shares_within_bounds() {
        let mut cs = vec![
            claimant(1, 100 * M, None),
            claimant(2, 100 * M, None),
            claimant(3, 100 * M, None),
        ];
        let a = partition(Mode::Static, &limits(960 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![320, 320, 320]);
        cs[0].max = 128 * M;
        let a = partition(Mode::Static, &limits(960 * M), &cs).unwrap();
        assert_eq!(
            budgets(&a),
            vec![128, 416, 416],
            "the capped one's rest goes to the others"
        );
        cs[0].max = 1024 * M;
        cs[1].min = 600 * M;
        let a = partition(Mode::Static, &limits(960 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![176, 600, 176]);
    }

    #[test]
    fn an_image_cache_claims_beside_the_budgets() {
        // A process's budget, idle, and its image's cache limit, whose hot set is 64 MiB
        // more than it.
        let mut cache = claimant(1, 16 * M, Some(knee(30.0, 4)));
        cache.key = ClaimantKey::ImageCache(1, "/a.img".into());
        cache.min = 4 * M;
        let cs = vec![claimant(1, 256 * M, Some(knee(0.0, 0))), cache];
        let a = partition(Mode::Utility, &limits(512 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![256, 80], "the cache up to its knee");
        assert_eq!(a[1].key, ClaimantKey::ImageCache(1, "/a.img".into()));
        assert!(matches!(a[1].reason, Reason::Gain { saved, .. } if saved == 120.0));
        // Static: a share each.
        let a = partition(Mode::Static, &limits(512 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![256, 256]);
        // Minimums count the caches too; a bad bound names the image.
        let mut bad = cs.clone();
        bad[1].min = 2048 * M;
        let e = partition(Mode::Utility, &limits(1 << 40), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("pid 1 image /a.img"), "{e}");
    }

    #[test]
    fn proportional_follows_weights() {
        let mut cs = vec![claimant(1, 100 * M, None), claimant(2, 100 * M, None)];
        cs[0].weight = 3 * 1024 * M;
        let a = partition(Mode::Proportional, &limits(1024 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![768, 256]);
    }

    #[test]
    fn minimums_over_the_total_are_refused() {
        let cs = vec![claimant(1, 100 * M, None), claimant(2, 100 * M, None)];
        let e = partition(Mode::Utility, &limits(100 * M), &cs)
            .unwrap_err()
            .to_string();
        assert!(e.contains("exceed the total"), "{e}");
        let mut bad = cs.clone();
        bad[0].min = 2048 * M;
        let e = partition(Mode::Static, &limits(1 << 40), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("pid 1") && e.contains("exceeds maximum"), "{e}");
    }

    #[test]
    fn utility_gives_free_memory_to_the_steepest_curve_and_stops_at_its_knee() {
        let cs = vec![
            claimant(1, 256 * M, Some(knee(100.0, 4))), // wants 64 MiB more, badly
            claimant(2, 256 * M, Some(knee(10.0, 64))), // wants everything, a little
            claimant(3, 256 * M, Some(knee(0.0, 0))),   // wants nothing
        ];
        let a = partition(Mode::Utility, &limits(1024 * M), &cs).unwrap();
        // The free 256 MiB: 64 to the first (its knee), 192 to the second; then the idle
        // third gives the second an eighth of its budget.
        assert_eq!(budgets(&a), vec![320, 480, 224]);
        assert!(
            matches!(a[0].reason, Reason::Gain { saved, toward } if saved == 400.0 && toward == 64 * M),
            "{:?}",
            a[0]
        );
        assert!(
            matches!(a[2].reason, Reason::Donor { saved } if saved == 0.0),
            "{:?}",
            a[2]
        );
        // Without the idle one's memory to take, the second keeps what was free.
        let a = partition(Mode::Utility, &limits(1024 * M), &cs[..2]).unwrap();
        assert_eq!(budgets(&a), vec![320, 704]);
    }

    #[test]
    fn utility_moves_memory_from_the_idle_to_the_needy_within_the_rate_limit() {
        let cs = vec![
            claimant(1, 512 * M, Some(knee(0.0, 0))),
            claimant(2, 512 * M, Some(knee(50.0, 16))),
        ];
        let mut l = limits(1024 * M);
        let a = partition(Mode::Utility, &l, &cs).unwrap();
        assert_eq!(budgets(&a), vec![448, 576], "an eighth of the idle one's");
        assert!(matches!(a[0].reason, Reason::Donor { .. }));
        l.max_move = 32 * M;
        let a = partition(Mode::Utility, &l, &cs).unwrap();
        assert_eq!(budgets(&a), vec![480, 544], "at most 32 MiB per decision");
        // At least the hysteresis (an eighth of 112 MiB is less), never below the minimum.
        let mut low = cs.clone();
        low[0].current = 112 * M;
        low[1].current = 912 * M;
        let a = partition(Mode::Utility, &limits(1024 * M), &low).unwrap();
        assert_eq!(budgets(&a), vec![96, 928]);
        low[0].current = 72 * M;
        low[1].current = 952 * M;
        let a = partition(Mode::Utility, &limits(1024 * M), &low).unwrap();
        assert_eq!(
            budgets(&a),
            vec![72, 952],
            "8 MiB above its minimum: less than a step"
        );
    }

    #[test]
    fn a_claimant_not_measured_at_its_size_gives_nothing() {
        // The first was just shrunk: no curve at its new size yet. The second needs memory.
        let cs = vec![
            claimant(1, 256 * M, None),
            claimant(2, 256 * M, Some(knee(50.0, 16))),
        ];
        let a = partition(Mode::Utility, &limits(512 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![256, 256]);
        // Measured (idle), it gives (an eighth of its budget).
        let mut measured = cs.clone();
        measured[0].curve = Some(knee(0.0, 0));
        let a = partition(Mode::Utility, &limits(512 * M), &measured).unwrap();
        assert_eq!(budgets(&a), vec![224, 288]);
        // Unmeasured, its memory is not counted as reachable either: a climb aims only at
        // what the measured ones and the free memory can give.
        let mut three = cs.clone();
        three.push(claimant(3, 96 * M, Some(knee(0.0, 0))));
        let a = partition(Mode::Utility, &limits(608 * M), &three).unwrap();
        assert_eq!(
            budgets(&a),
            vec![256, 272, 80],
            "the third's 16 MiB, in one step"
        );
    }

    #[test]
    fn a_cliff_beyond_the_rate_limit_is_climbed_a_part_at_a_time() {
        // A loop of 384 MiB more than its budget: nothing saved until all of it is there.
        let cliff = cliff(24, 500.0);
        let cs = vec![
            claimant(1, 512 * M, Some(knee(0.0, 0))),
            claimant(2, 256 * M, Some(cliff)),
        ];
        let mut l = limits(1024 * M);
        l.max_move = 64 * M;
        let a = partition(Mode::Utility, &l, &cs).unwrap();
        // 64 MiB of the free 256 (the rate limit), and 64 MiB from the idle one (the
        // exchange's own limit): on the way to the cliff.
        assert_eq!(budgets(&a), vec![448, 384]);
        assert!(
            matches!(a[1].reason, Reason::Gain { saved, toward } if saved == 500.0 && toward == 384 * M),
            "{:?}",
            a[1]
        );
    }

    #[test]
    fn a_working_set_that_just_fits_is_not_robbed() {
        // The second fits at 512 MiB: nothing refaults above it, but measured at 384 MiB its
        // last 128 MiB saved 50 per step. The first would like more, at 20 per step.
        let mut fits = claimant(2, 512 * M, Some(knee(0.0, 0)));
        fits.below = Some((128 * M, knee(50.0, 8)));
        let cs = vec![claimant(1, 512 * M, Some(knee(20.0, 64))), fits.clone()];
        let a = partition(Mode::Utility, &limits(1024 * M), &cs).unwrap();
        assert_eq!(
            budgets(&a),
            vec![512, 512],
            "taking from it would cost more"
        );
        // Without what was measured below, it looks free: it gives an eighth, and the curve
        // measured at its smaller budget then shows the loss.
        let mut blind = cs.clone();
        blind[1].below = None;
        let a = partition(Mode::Utility, &limits(1024 * M), &blind).unwrap();
        assert_eq!(budgets(&a), vec![576, 448]);
    }

    #[test]
    fn a_donor_asked_twice_in_one_decision_is_priced_from_where_its_first_move_left_it() {
        // Measured 128 MiB lower, the donor's top 32 MiB saved nothing and the 16 MiB under
        // them 100 ms/s (a loop's cliff). Two receivers each ask for 32 MiB at 10 ms/s per
        // 16 MiB; an eighth of the donor's 512 MiB would let it give 64 MiB.
        let mut donor = claimant(1, 512 * M, Some(knee(0.0, 0)));
        donor.below = Some((128 * M, cliff(6, 100.0)));
        let wants = cliff(2, 20.0);
        let cs = vec![
            donor,
            claimant(2, 128 * M, Some(wants.clone())),
            claimant(3, 128 * M, Some(wants)),
        ];
        let a = partition(Mode::Utility, &limits(768 * M), &cs).unwrap();
        // The first 32 MiB are free; the next 32 MiB would cross the cliff, so the second
        // receiver gets nothing (priced from the top again, it got them: [448, 160, 160]).
        assert_eq!(budgets(&a), vec![480, 160, 128]);
    }

    #[test]
    fn a_donor_loses_what_all_it_gives_saves_not_its_top_step() {
        // A loop grown from 160 MiB to 288 MiB: measured at 160 MiB, 80 MiB more saved all
        // its 972 ms/s, so its top 48 MiB save nothing and the 80 MiB under them everything.
        // A stream at 288 MiB whose cliff is 112 MiB away (922 ms/s) asks for memory.
        let mut the_loop = claimant(1, 288 * M, Some(knee(0.0, 0)));
        the_loop.below = Some((128 * M, cliff(5, 972.0)));
        let stream = claimant(2, 288 * M, Some(cliff(7, 922.0)));
        let cs = vec![the_loop, stream, claimant(3, 64 * M, Some(knee(0.0, 0)))];
        let a = partition(Mode::Utility, &limits(640 * M), &cs).unwrap();
        // Its top step alone costs nothing, but the 112 MiB the stream needs would cross
        // the loop's cliff: the loop keeps what it uses, the stream does not climb for
        // a part of its cliff it cannot reach.
        assert_eq!(budgets(&a), vec![288, 288, 64]);
        // With the stream's cliff 48 MiB away, the loop's unused top pays for it: 32 MiB of
        // it in this decision (an eighth of 288 MiB, in whole steps), on the way.
        let mut near = cs.clone();
        near[1].curve = Some(cliff(3, 922.0));
        let a = partition(Mode::Utility, &limits(640 * M), &near).unwrap();
        assert_eq!(budgets(&a), vec![256, 320, 64]);
        assert!(
            matches!(a[1].reason, Reason::Gain { toward, .. } if toward == 48 * M),
            "{:?}",
            a[1]
        );
    }

    #[test]
    fn a_cliff_out_of_reach_is_not_climbed_for_nothing() {
        // The first saves 900 once it has 384 MiB more, nothing before; only 192 MiB could be
        // had without robbing the second, whose fitting working set would cost more. The
        // third gains a little from every step: it gets the free memory, and an eighth of the
        // first's own memory, which saves the first nothing below its cliff.
        let cliff = cliff(24, 900.0);
        let mut fits = claimant(2, 448 * M, Some(knee(0.0, 0)));
        fits.below = Some((64 * M, knee(400.0, 4)));
        let cs = vec![
            claimant(1, 256 * M, Some(cliff)),
            fits,
            claimant(3, 128 * M, Some(knee(2.0, 64))),
        ];
        let a = partition(Mode::Utility, &limits(1024 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![224, 448, 352]);
    }

    #[test]
    fn a_donor_gives_an_eighth_of_its_budget_per_decision_whoever_asks() {
        // An idle 1 GiB and three that want much more: the idle one gives 128 MiB in all,
        // not 128 MiB to each.
        let idle = claimant(1, 1024 * M, Some(knee(0.0, 0)));
        let needy =
            [50.0, 40.0, 30.0].map(|per_step| claimant(2, 256 * M, Some(knee(per_step, 64))));
        let mut cs = vec![idle];
        for (pid, c) in (2..).zip(needy) {
            cs.push(Claimant {
                key: ClaimantKey::Ram(pid),
                ..c
            });
        }
        let a = partition(Mode::Utility, &limits(1792 * M), &cs).unwrap();
        assert_eq!(a[0].to, 896 * M, "{a:?}");
        assert_eq!(a.iter().map(|a| a.to).sum::<u64>(), 1792 * M);
        assert!(a[1].to > 256 * M, "the neediest got some: {a:?}");
        // Four decisions in a row, each on the budgets the one before left: an eighth of
        // what is left each time.
        let mut idle = Vec::new();
        for _ in 0..4 {
            let a = partition(Mode::Utility, &limits(1792 * M), &cs).unwrap();
            for (c, a) in cs.iter_mut().zip(&a) {
                c.current = a.to;
            }
            idle.push(cs[0].current / M);
        }
        assert_eq!(idle, vec![896, 784, 688, 608]);
    }

    #[test]
    fn a_concave_curve_gets_memory_in_moves_of_the_hysteresis() {
        // Each 16 MiB step saves less than the one before: the best step is the first, half
        // the 32 MiB hysteresis; the idle one gives at least the hysteresis.
        let cs = vec![
            claimant(1, 512 * M, Some(knee(0.0, 0))),
            claimant(2, 512 * M, Some(concave())),
        ];
        let mut l = limits(1024 * M);
        l.max_move = 32 * M;
        let a = partition(Mode::Utility, &l, &cs).unwrap();
        assert_eq!(budgets(&a), vec![480, 544]);
    }

    #[test]
    fn the_donor_must_be_able_to_give_the_hysteresis() {
        // Two donors lose nothing; the first can give only 16 MiB (less than the hysteresis),
        // the second 96 MiB: the second gives.
        let cs = vec![
            claimant(1, 80 * M, Some(knee(0.0, 0))),
            claimant(2, 160 * M, Some(knee(0.0, 0))),
            claimant(3, 160 * M, Some(concave())),
        ];
        let mut l = limits(400 * M);
        l.max_move = 32 * M;
        l.hysteresis = 32 * M;
        let a = partition(Mode::Utility, &l, &cs).unwrap();
        assert_eq!(budgets(&a), vec![80, 128, 192], "{a:?}");
    }

    #[test]
    fn utility_does_not_trade_equal_utilities_or_small_gains() {
        // Both save the same per byte: moving memory would only churn.
        let cs = vec![
            claimant(1, 512 * M, Some(knee(20.0, 64))),
            claimant(2, 512 * M, Some(knee(25.0, 64))),
        ];
        let a = partition(Mode::Utility, &limits(1024 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![512, 512], "25 does not beat 20 by 50%");
        // A gain below min_gain is not worth a move.
        let cs = vec![
            claimant(1, 512 * M, Some(knee(0.0, 0))),
            claimant(2, 512 * M, Some(knee(0.01, 64))),
        ];
        let a = partition(Mode::Utility, &limits(1024 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![512, 512]);
    }

    #[test]
    fn utility_fits_a_smaller_total_taking_from_the_least_useful() {
        let cs = vec![
            claimant(1, 512 * M, Some(knee(0.0, 0))),
            claimant(2, 512 * M, Some(knee(0.5, 64))), // below min_gain: no exchange after
        ];
        let a = partition(Mode::Utility, &limits(768 * M), &cs).unwrap();
        assert_eq!(budgets(&a), vec![256, 512]);
        assert!(
            matches!(a[0].reason, Reason::Fit { saved } if saved == 0.0),
            "{:?}",
            a[0]
        );
        // Fitting is not rate-limited.
        let mut l = limits(768 * M);
        l.max_move = 16 * M;
        assert_eq!(
            budgets(&partition(Mode::Utility, &l, &cs).unwrap()),
            vec![256, 512]
        );
        assert_eq!(
            budgets(&partition(Mode::Static, &l, &cs).unwrap()),
            vec![384, 384]
        );
    }

    #[test]
    fn hysteresis_keeps_small_changes_out() {
        let cs = vec![claimant(1, 320 * M, None), claimant(2, 330 * M, None)];
        let mut l = limits(650 * M);
        l.step = M;
        let a = partition(Mode::Static, &l, &cs).unwrap();
        assert_eq!(
            budgets(&a),
            vec![320, 330],
            "5 MiB off the share is within 16 MiB"
        );
        l.hysteresis = M;
        let a = partition(Mode::Static, &l, &cs).unwrap();
        assert_eq!(budgets(&a), vec![325, 325]);
    }

    #[test]
    fn sums_never_exceed_the_total_and_bounds_hold_on_random_inputs() {
        let mut x = 12345u64;
        let mut next = |m: u64| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % m
        };
        for round in 0..2000 {
            let n = 1 + next(6) as usize;
            let cs: Vec<Claimant> = (0..n)
                .map(|i| {
                    let min = (1 + next(8)) * 16 * M;
                    let max = min + next(64) * 16 * M;
                    let steps = next(40) as usize;
                    let curve = (next(4) > 0).then(|| knee(next(200) as f64, steps));
                    Claimant {
                        key: ClaimantKey::Ram(i as u32),
                        current: next(80) * 16 * M,
                        min,
                        max,
                        weight: 1 + next(1 << 30),
                        curve,
                        below: (next(3) == 0).then(|| {
                            (
                                (1 + next(8)) * 16 * M,
                                knee(next(100) as f64, next(8) as usize),
                            )
                        }),
                    }
                })
                .collect();
            let mins: u64 = cs.iter().map(|c| c.min).sum();
            let total = mins + next(2048) * M;
            let mut l = limits(total);
            l.max_move = (1 + next(32)) * 16 * M;
            l.hysteresis = next(3) * 16 * M;
            for mode in [Mode::Static, Mode::Proportional, Mode::Utility] {
                let a = partition(mode, &l, &cs).unwrap();
                let sum: u64 = a.iter().map(|a| a.to).sum();
                assert!(sum <= total, "round {round} {mode}: {sum} > {total}");
                for (a, c) in a.iter().zip(&cs) {
                    assert!(
                        a.to >= c.min && a.to <= c.max,
                        "round {round} {mode}: {a:?} {c:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn more_total_never_gives_anyone_less() {
        let cs = vec![
            claimant(1, 256 * M, Some(knee(100.0, 4))),
            claimant(2, 256 * M, Some(knee(10.0, 64))),
            claimant(3, 256 * M, Some(knee(3.0, 8))),
        ];
        for mode in [Mode::Static, Mode::Proportional, Mode::Utility] {
            let mut last = vec![0; 3];
            for total in (768..=3072).step_by(64) {
                let b = budgets(&partition(mode, &limits(total * M), &cs).unwrap());
                for i in 0..3 {
                    assert!(b[i] >= last[i], "{mode} at {total}M: {b:?} after {last:?}");
                }
                last = b;
            }
        }
    }
}
