//! [`WorkloadSpec`]: deterministic synthetic workloads named by specs such as
//! `zipf:n=100000:alpha=0.99`.

use std::fmt;
use std::str::FromStr;

use crate::permutation::Permutation;
use crate::request::Request;
use crate::rng::{mix64, probability_threshold, Rng};
use crate::spec_params::{split_spec, SpecParams};
use crate::trace_error::TraceError;
use crate::zipf::{Zipf, MAX_EXPONENT};

const WHAT: &str = "workload";
const DEFAULT_ALPHA: f64 = 0.99;

/// A workload kind and its own parameters (see [`WorkloadSpec`] for their meaning).
#[derive(Debug, Clone, PartialEq)]
pub enum WorkloadKind {
    /// A one-time sequential stream.
    Seq,
    /// A cyclic scan over `n` units.
    Loop,
    /// Uniform over `n` units.
    Uniform,
    /// Zipf over `n` units.
    Zipf {
        /// The exponent, in `0..=100`.
        alpha: f64,
        /// Ranks mapped to ids by a fixed pseudo-random permutation (popular ids scattered);
        /// `false`: rank `r` is id `r - 1`, so the popular ids are contiguous from 0.
        scatter: bool,
    },
    /// A hot set, optionally polluted by scans of cold units.
    HotSet {
        /// The fraction of units that are hot, in `(0, 1)`.
        hot: f64,
        /// The probability that a (non-scan) request goes to the hot set, in `[0, 1]`.
        hot_prob: f64,
        /// Non-scan requests between scans; 0 disables scans.
        scan_every: u64,
        /// Units per scan (at least 1 when scans are enabled).
        scan_len: u64,
    },
    /// Zipf over a window that moves between phases.
    Phases {
        /// The number of phases, in `1..=n`.
        phases: u64,
        /// The Zipf exponent within a window.
        alpha: f64,
        /// The window size in units, in `1..=n`.
        ws: u64,
    },
}

/// A deterministic synthetic workload: a kind, a universe of `n` units, a length and a seed,
/// spelled as a spec such as `zipf:n=100000:alpha=0.99`.
///
/// Spelling: `KIND:n=UNITS[:KEY=VALUE...]`. Every kind takes `n` (the number of distinct units,
/// required, at least 1), `len` (the number of requests, default `10 * n`) and `seed` (default
/// 1). Kinds and their own parameters:
///
/// | kind | requests | universe |
/// |---|---|---|
/// | `seq` | a one-time sequential stream: units `0, 1, ..., len - 1`, each once (`n` only sets the default `len`) | `len` |
/// | `loop` | a cyclic scan: unit `i mod n` | `n` |
/// | `uniform` | uniform over `0..n` | `n` |
/// | `zipf:alpha=0.99[:scatter=off]` | Zipf(alpha) over `n` units; `alpha` in `0..=100` (0 is uniform); ranks are mapped to ids by a fixed pseudo-random permutation, so popular ids are not contiguous; with `scatter=off` rank `r` is id `r - 1`, so the most popular ids are `0, 1, 2, ...` | `n` |
/// | `hotset:hot=0.1:hot-prob=0.9[:scan-every=K:scan-len=L]` | units `0..h` (`h = round(hot * n)`, clamped to `1..n`) are hot: each request picks a uniform hot unit with probability `hot-prob`, else a uniform cold unit (`h..n`). With `scan-every=K > 0`, after every `K` such requests comes a scan of `L` consecutive cold units (default `L = n - h`), continuing where the previous scan stopped and wrapping around the cold range | `n` |
/// | `phases:phases=4[:alpha=0.99][:ws=W]` | the stream is cut into `phases` equal parts; part `p` draws Zipf(alpha) over a window of `W` units (default `n / phases`) starting at unit `p * (n / phases)` (wrapping modulo `n`), with its own rank-to-id permutation within the window | `n` |
///
/// Same spec, same requests: on every run, platform and build (integer PRNG, own Zipf sampler,
/// own `ln`/`exp`). Requests carry `time` = their index and never a `next_access`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    kind: WorkloadKind,
    n: u64,
    len: u64,
    seed: u64,
}

impl WorkloadSpec {
    /// Every kind name the parser accepts.
    pub const NAMES: &'static [&'static str] =
        &["seq", "loop", "uniform", "zipf", "hotset", "phases"];

    /// The kind's name (`"zipf"`, ...).
    pub fn name(&self) -> &str {
        match self.kind {
            WorkloadKind::Seq => "seq",
            WorkloadKind::Loop => "loop",
            WorkloadKind::Uniform => "uniform",
            WorkloadKind::Zipf { .. } => "zipf",
            WorkloadKind::HotSet { .. } => "hotset",
            WorkloadKind::Phases { .. } => "phases",
        }
    }

    /// The kind and its own parameters.
    pub fn kind(&self) -> &WorkloadKind {
        &self.kind
    }

    /// The `n` parameter.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The number of requests.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the workload has no requests (`len=0`).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// An upper bound on the number of distinct units: every unit id is below it.
    pub fn universe(&self) -> u64 {
        match self.kind {
            WorkloadKind::Seq => self.len,
            _ => self.n,
        }
    }

    /// The requests, generated lazily in O(1) memory and O(1) expected time each.
    pub fn requests(&self) -> impl Iterator<Item = Request> + Send {
        Requests::new(self)
    }
}

impl fmt::Display for WorkloadSpec {
    /// The canonical spec with every parameter spelled out; it parses back to an equal spec.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:n={}", self.name(), self.n)?;
        match self.kind {
            WorkloadKind::Seq | WorkloadKind::Loop | WorkloadKind::Uniform => {}
            WorkloadKind::Zipf { alpha, scatter } => {
                write!(f, ":alpha={alpha}")?;
                if !scatter {
                    // Spelled only when not the default, so specs written before it existed
                    // keep their canonical form.
                    write!(f, ":scatter=off")?;
                }
            }
            WorkloadKind::HotSet {
                hot,
                hot_prob,
                scan_every,
                scan_len,
            } => {
                write!(f, ":hot={hot}:hot-prob={hot_prob}")?;
                if scan_every > 0 {
                    write!(f, ":scan-every={scan_every}:scan-len={scan_len}")?;
                }
            }
            WorkloadKind::Phases { phases, alpha, ws } => {
                write!(f, ":phases={phases}:alpha={alpha}:ws={ws}")?
            }
        }
        write!(f, ":len={}:seed={}", self.len, self.seed)
    }
}

impl FromStr for WorkloadSpec {
    type Err = TraceError;

    fn from_str(s: &str) -> Result<Self, TraceError> {
        let (name, rest) = split_spec(s);
        let Some(&canonical) = Self::NAMES.iter().find(|k| **k == name) else {
            return Err(TraceError::UnknownName {
                what: WHAT,
                name,
                known: Self::NAMES.join(", "),
            });
        };
        let mut p = SpecParams::parse(WHAT, canonical, rest)?;
        let n: u64 = p.require("n")?;
        p.check(n >= 1, "n", n, "must be at least 1")?;
        let len = p.take("len", n.saturating_mul(10))?;
        let seed = p.take("seed", 1u64)?;
        let alpha = |p: &mut SpecParams| -> Result<f64, TraceError> {
            let alpha: f64 = p.take("alpha", DEFAULT_ALPHA)?;
            p.check(
                (0.0..=MAX_EXPONENT).contains(&alpha),
                "alpha",
                alpha,
                "must be between 0 and 100",
            )?;
            Ok(alpha)
        };
        let kind = match canonical {
            "seq" => WorkloadKind::Seq,
            "loop" => WorkloadKind::Loop,
            "uniform" => WorkloadKind::Uniform,
            "zipf" => WorkloadKind::Zipf {
                alpha: alpha(&mut p)?,
                scatter: match p.take("scatter", "on".to_string())?.as_str() {
                    "on" => true,
                    "off" => false,
                    other => return Err(p.error("scatter", other, "must be on or off")),
                },
            },
            "hotset" => {
                p.check(n >= 2, "n", n, "hotset needs at least 2 units")?;
                let hot: f64 = p.take("hot", 0.1)?;
                p.check(
                    hot > 0.0 && hot < 1.0,
                    "hot",
                    hot,
                    "must be a fraction strictly between 0 and 1",
                )?;
                let hot_prob: f64 = p.take("hot-prob", 0.9)?;
                p.check(
                    (0.0..=1.0).contains(&hot_prob),
                    "hot-prob",
                    hot_prob,
                    "must be a probability between 0 and 1",
                )?;
                let scan_every: u64 = p.take("scan-every", 0)?;
                let scan_len: Option<u64> = p.take_opt("scan-len")?;
                let scan_len = match (scan_every, scan_len) {
                    (0, None) => 0,
                    (0, Some(l)) => {
                        return Err(p.error("scan-len", l, "needs scan-every > 0 to have effect"))
                    }
                    (_, None) => n - hot_units(n, hot),
                    (_, Some(l)) => {
                        p.check(l >= 1, "scan-len", l, "must be at least 1")?;
                        l
                    }
                };
                WorkloadKind::HotSet {
                    hot,
                    hot_prob,
                    scan_every,
                    scan_len,
                }
            }
            "phases" => {
                let phases: u64 = p.take("phases", 4)?;
                p.check(
                    (1..=n).contains(&phases),
                    "phases",
                    phases,
                    "must be between 1 and n",
                )?;
                let alpha = alpha(&mut p)?;
                let ws: u64 = p.take("ws", (n / phases).max(1))?;
                p.check((1..=n).contains(&ws), "ws", ws, "must be between 1 and n")?;
                WorkloadKind::Phases { phases, alpha, ws }
            }
            _ => unreachable!("every name in NAMES has a parser"),
        };
        p.finish()?;
        Ok(Self { kind, n, len, seed })
    }
}

/// The number of hot units of a hot set: `round(hot * n)` clamped to `1..n`.
fn hot_units(n: u64, hot: f64) -> u64 {
    ((hot * n as f64).round() as u64).clamp(1, n - 1)
}

/// The state of one generator.
#[derive(Debug, Clone)]
enum Generator {
    Seq,
    Loop {
        n: u64,
    },
    Uniform {
        n: u64,
    },
    Zipf {
        zipf: Zipf,
        /// `None`: ranks in address order.
        ids: Option<Permutation>,
    },
    HotSet {
        hot: u64,
        cold: u64,
        hot_threshold: u64,
        scan_every: u64,
        scan_len: u64,
        since_scan: u64,
        scan_left: u64,
        scan_pos: u64,
    },
    Phases {
        n: u64,
        phases: u64,
        stride: u64,
        zipf: Zipf,
        phase: u64,
        /// The first request index of phase `phase + 1`.
        next_start: u64,
        window: Permutation,
        key: u64,
    },
}

/// The first request index of phase `p` of `phases` over `len` requests: request `i` is in
/// phase `floor(i * phases / len)`, so phase `p` starts at `ceil(p * len / phases)`.
fn phase_start(p: u64, phases: u64, len: u64) -> u64 {
    let start = (u128::from(p) * u128::from(len)).div_ceil(u128::from(phases));
    u64::try_from(start).unwrap_or(u64::MAX)
}

/// The request iterator of a [`WorkloadSpec`].
#[derive(Debug, Clone)]
struct Requests {
    generator: Generator,
    rng: Rng,
    index: u64,
    len: u64,
}

impl Requests {
    fn new(spec: &WorkloadSpec) -> Self {
        let n = spec.n;
        // Independent keys for the random stream and for the permutations.
        let perm_key = mix64(spec.seed ^ 0x5bd1_e995_7f4a_7c15);
        let generator = match spec.kind {
            WorkloadKind::Seq => Generator::Seq,
            WorkloadKind::Loop => Generator::Loop { n },
            WorkloadKind::Uniform => Generator::Uniform { n },
            WorkloadKind::Zipf { alpha, scatter } => Generator::Zipf {
                zipf: Zipf::new(n, alpha),
                ids: scatter.then(|| Permutation::new(n, perm_key)),
            },
            WorkloadKind::HotSet {
                hot,
                hot_prob,
                scan_every,
                scan_len,
            } => {
                let hot = hot_units(n, hot);
                Generator::HotSet {
                    hot,
                    cold: n - hot,
                    hot_threshold: probability_threshold(hot_prob),
                    scan_every,
                    scan_len,
                    since_scan: 0,
                    scan_left: 0,
                    scan_pos: 0,
                }
            }
            WorkloadKind::Phases { phases, alpha, ws } => Generator::Phases {
                n,
                phases,
                stride: n / phases,
                zipf: Zipf::new(ws, alpha),
                phase: 0,
                next_start: phase_start(1, phases, spec.len),
                window: Permutation::new(ws, perm_key),
                key: perm_key,
            },
        };
        Self {
            generator,
            rng: Rng::with_stream(spec.seed, 0),
            index: 0,
            len: spec.len,
        }
    }

    fn unit(&mut self) -> u64 {
        let i = self.index;
        let rng = &mut self.rng;
        match &mut self.generator {
            Generator::Seq => i,
            Generator::Loop { n } => i % *n,
            Generator::Uniform { n } => rng.below(*n),
            Generator::Zipf { zipf, ids } => {
                let rank = zipf.sample(rng) - 1;
                ids.as_ref().map_or(rank, |p| p.apply(rank))
            }
            Generator::HotSet {
                hot,
                cold,
                hot_threshold,
                scan_every,
                scan_len,
                since_scan,
                scan_left,
                scan_pos,
            } => {
                if *scan_every > 0 && *scan_left == 0 && *since_scan == *scan_every {
                    *scan_left = *scan_len;
                    *since_scan = 0;
                }
                if *scan_left > 0 {
                    *scan_left -= 1;
                    let unit = *hot + *scan_pos;
                    *scan_pos = (*scan_pos + 1) % *cold;
                    unit
                } else {
                    *since_scan += 1;
                    if rng.next_53() < *hot_threshold {
                        rng.below(*hot)
                    } else {
                        *hot + rng.below(*cold)
                    }
                }
            }
            Generator::Phases {
                n,
                phases,
                stride,
                zipf,
                phase,
                next_start,
                window,
                key,
            } => {
                if i >= *next_start {
                    while i >= *next_start && *phase + 1 < *phases {
                        *phase += 1;
                        *next_start = phase_start(*phase + 1, *phases, self.len);
                    }
                    if *phase + 1 == *phases {
                        *next_start = u64::MAX;
                    }
                    *window = Permutation::new(zipf.n(), mix64(*key ^ *phase));
                }
                let p = *phase;
                debug_assert_eq!(
                    u128::from(p),
                    u128::from(i) * u128::from(*phases) / u128::from(self.len)
                );
                let offset = window.apply(zipf.sample(rng) - 1);
                let start = u128::from(p) * u128::from(*stride);
                ((start + u128::from(offset)) % u128::from(*n)) as u64
            }
        }
    }
}

impl Iterator for Requests {
    type Item = Request;

    fn next(&mut self) -> Option<Request> {
        if self.index >= self.len {
            return None;
        }
        let unit = self.unit();
        let request = Request {
            time: self.index,
            unit,
            next_access: None,
        };
        self.index += 1;
        Some(request)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self.len - self.index;
        match usize::try_from(left) {
            Ok(l) => (l, Some(l)),
            Err(_) => (usize::MAX, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> WorkloadSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn units(s: &str) -> Vec<u64> {
        spec(s).requests().map(|r| r.unit).collect()
    }

    #[test]
    fn parses_defaults_and_round_trips() {
        let w = spec("zipf:n=1000");
        assert_eq!(w.name(), "zipf");
        assert_eq!(
            (w.n(), w.len(), w.seed(), w.universe()),
            (1000, 10_000, 1, 1000)
        );
        assert_eq!(w.to_string(), "zipf:n=1000:alpha=0.99:len=10000:seed=1");
        for s in [
            "seq:n=5",
            "loop:n=7:len=3",
            "uniform:n=10:seed=99",
            "zipf:n=100:alpha=1",
            "zipf:n=100:alpha=0.5:len=0",
            "hotset:n=100",
            "hotset:n=100:hot=0.2:hot-prob=0.75:scan-every=50",
            "hotset:n=100:scan-every=50:scan-len=3",
            "phases:n=100",
            "phases:n=100:phases=3:alpha=1.2:ws=50",
            "Zipf : n = 10 : ALPHA = 2",
        ] {
            let w = spec(s);
            let again = spec(&w.to_string());
            assert_eq!(again, w, "{s} -> {w}");
            assert_eq!(again.to_string(), w.to_string());
        }
        assert_eq!(spec("seq:n=5").universe(), 50);
        assert_eq!(spec("seq:n=5:len=3").universe(), 3);
    }

    #[test]
    fn bad_specs_are_errors() {
        for (s, needle) in [
            ("nope:n=1", "unknown workload \"nope\""),
            ("zipf", "\"n\": required parameter is missing"),
            ("zipf:n=0", "\"n=0\": must be at least 1"),
            ("zipf:n=x", "\"n=x\""),
            ("zipf:n=10:alpha=-1", "\"alpha=-1\""),
            ("zipf:n=10:alpha=NaN", "\"alpha=NaN\""),
            ("zipf:n=10:alpha=inf", "\"alpha=inf\""),
            ("zipf:n=10:bogus=1", "unknown parameter"),
            ("uniform:n=10:alpha=1", "unknown parameter"),
            ("hotset:n=1", "at least 2"),
            ("hotset:n=10:hot=1", "\"hot=1\""),
            ("hotset:n=10:hot=0", "\"hot=0\""),
            ("hotset:n=10:hot-prob=1.5", "\"hot-prob=1.5\""),
            ("hotset:n=10:scan-len=3", "needs scan-every"),
            ("hotset:n=10:scan-every=3:scan-len=0", "\"scan-len=0\""),
            ("phases:n=10:phases=0", "\"phases=0\""),
            ("phases:n=10:phases=11", "\"phases=11\""),
            ("phases:n=10:ws=11", "\"ws=11\""),
            ("seq:n=18446744073709551616", "\"n=18446744073709551616\""),
        ] {
            let e = s.parse::<WorkloadSpec>().unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }

    #[test]
    fn deterministic_and_seed_dependent() {
        for s in WorkloadSpec::NAMES {
            let spec = format!("{s}:n=1000:len=5000");
            let a = units(&spec);
            assert_eq!(a.len(), 5000);
            assert_eq!(a, units(&spec), "{spec}");
            let times: Vec<u64> = self::spec(&spec).requests().map(|r| r.time).collect();
            assert_eq!(times, (0..5000).collect::<Vec<_>>());
            let universe = self::spec(&spec).universe();
            assert!(a.iter().all(|&u| u < universe), "{spec}");
            if !matches!(*s, "seq" | "loop") {
                assert_ne!(a, units(&format!("{spec}:seed=2")), "{spec}");
            }
        }
    }

    #[test]
    fn golden_prefixes_pin_the_streams() {
        // If these change, every published result that used these specs changes: do not
        // update them without a very good reason.
        let golden: &[(&str, &[u64])] = &[
            (
                "uniform:n=1000:seed=1",
                &[362, 831, 195, 750, 633, 566, 21, 599],
            ),
            (
                "zipf:n=1000:alpha=0.99:seed=1",
                &[197, 32, 648, 518, 391, 130, 166, 65],
            ),
            (
                "zipf:n=1000000:alpha=1.5:seed=7",
                &[190104, 97011, 190104, 190104, 97011, 69526, 190104, 190104],
            ),
            ("hotset:n=1000:seed=1", &[83, 75, 56, 59, 40, 87, 54, 96]),
            (
                "phases:n=1000:seed=1",
                &[128, 161, 216, 189, 186, 122, 168, 76],
            ),
        ];
        for (s, expected) in golden {
            let got: Vec<u64> = spec(s).requests().take(8).map(|r| r.unit).collect();
            assert_eq!(&got, expected, "{s}");
        }
    }

    #[test]
    fn seq_and_loop() {
        assert_eq!(units("seq:n=2:len=5"), [0, 1, 2, 3, 4]);
        assert_eq!(units("loop:n=3:len=7"), [0, 1, 2, 0, 1, 2, 0]);
        assert!(units("loop:n=3:len=0").is_empty());
        assert!(spec("loop:n=3:len=0").is_empty());
    }

    #[test]
    fn uniform_covers_the_universe() {
        let u = units("uniform:n=1000:len=20000");
        let mut counts = vec![0u32; 1000];
        for x in u {
            counts[x as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 0));
        // Mean 20 per unit; all within a generous band.
        assert!(counts.iter().all(|&c| (2..=50).contains(&c)), "{counts:?}");
    }

    #[test]
    fn zipf_rank_one_frequency_matches_theory() {
        let n = 10_000u64;
        let len = 500_000u64;
        for alpha in [0.7, 0.99, 1.0, 1.3] {
            let s = format!("zipf:n={n}:alpha={alpha}:len={len}");
            let u = units(&s);
            let mut counts = std::collections::HashMap::new();
            for x in &u {
                *counts.entry(*x).or_insert(0u64) += 1;
            }
            let top = *counts.values().max().unwrap() as f64 / len as f64;
            let norm: f64 = (1..=n).map(|k| (k as f64).powf(-alpha)).sum();
            let p1 = 1.0 / norm;
            let sd = (p1 * (1.0 - p1) / len as f64).sqrt();
            assert!((top - p1).abs() < 5.0 * sd, "{s}: top {top} theory {p1}");
            // The most popular id is not simply 0: ranks are shuffled.
            let (&top_id, _) = counts.iter().max_by_key(|(_, c)| **c).unwrap();
            assert!(top_id < n);
        }
        // Popular ids are scattered, not contiguous.
        let w = spec("zipf:n=1000000:alpha=1.2:len=1000");
        let ids: Vec<u64> = w.requests().map(|r| r.unit).collect();
        let small = ids.iter().filter(|&&x| x < 100).count();
        assert!(
            small < 50,
            "{small} of the first 1000 requests hit ids below 100"
        );
    }

    #[test]
    fn zipf_without_scatter_puts_the_popular_ids_first() {
        let s = "zipf:n=1000000:alpha=1.2:len=1000:scatter=off";
        let w = spec(s);
        assert_eq!(
            w.to_string(),
            "zipf:n=1000000:alpha=1.2:scatter=off:len=1000:seed=1"
        );
        assert_eq!(spec(&w.to_string()), w);
        let ids: Vec<u64> = w.requests().map(|r| r.unit).collect();
        let small = ids.iter().filter(|&&x| x < 100).count();
        assert!(small > 500, "{small} of 1000 requests hit ids below 100");
        // Same ranks drawn as the scattered spec: only the mapping differs.
        let scattered = spec("zipf:n=1000000:alpha=1.2:len=1000");
        assert_eq!(
            scattered.to_string(),
            "zipf:n=1000000:alpha=1.2:len=1000:seed=1"
        );
        let e = "zipf:n=10:scatter=maybe"
            .parse::<WorkloadSpec>()
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("scatter=maybe") && e.contains("on or off"),
            "{e}"
        );
    }

    #[test]
    fn hotset_share_matches_hot_prob() {
        let u = units("hotset:n=10000:hot=0.1:hot-prob=0.9:len=200000");
        let hot = u.iter().filter(|&&x| x < 1000).count() as f64 / u.len() as f64;
        assert!((hot - 0.9).abs() < 0.005, "{hot}");
        assert!(u.iter().all(|&x| x < 10_000));
    }

    #[test]
    fn hotset_scans_walk_the_cold_range() {
        let w = spec("hotset:n=100:hot=0.1:hot-prob=1:scan-every=5:scan-len=4:len=30");
        let u: Vec<u64> = w.requests().map(|r| r.unit).collect();
        // 5 hot requests, then 4 scan requests over cold units 10, 11, 12, 13, and so on.
        assert!(u[..5].iter().all(|&x| x < 10), "{u:?}");
        assert_eq!(u[5..9], [10, 11, 12, 13]);
        assert!(u[9..14].iter().all(|&x| x < 10), "{u:?}");
        assert_eq!(u[14..18], [14, 15, 16, 17]);
        // Default scan length: the whole cold range, wrapping.
        let w = spec("hotset:n=4:hot=0.5:hot-prob=1:scan-every=1:len=9");
        let u: Vec<u64> = w.requests().map(|r| r.unit).collect();
        assert_eq!(u[1..3], [2, 3]);
        assert_eq!(u[4..6], [2, 3]);
    }

    #[test]
    fn phases_move_the_working_set() {
        let w = spec("phases:n=1000:phases=4:alpha=0.8:len=40000");
        let u: Vec<u64> = w.requests().map(|r| r.unit).collect();
        for (p, chunk) in u.chunks(10_000).enumerate() {
            let lo = p as u64 * 250;
            assert!(
                chunk.iter().all(|&x| (lo..lo + 250).contains(&x)),
                "phase {p}"
            );
        }
        // Overlapping windows wrap around the universe.
        let w = spec("phases:n=100:phases=2:ws=80:len=1000");
        let u: Vec<u64> = w.requests().map(|r| r.unit).collect();
        assert!(u[500..].iter().all(|&x| !(30..50).contains(&x)));
        assert!(u[500..].iter().any(|&x| x < 30));
    }

    #[test]
    fn phase_boundaries_match_the_definition() {
        for (len, phases) in [
            (10u64, 3u64),
            (3, 10),
            (1, 4),
            (100, 100),
            (7, 1),
            (1000, 7),
        ] {
            let w = spec(&format!("phases:n=100:phases={phases}:len={len}"));
            // The debug assertion in the generator checks every request's phase.
            assert_eq!(w.requests().count() as u64, len);
            for p in 0..phases {
                let s = phase_start(p, phases, len);
                // The first index whose phase is at least p.
                let phase_of = |i: u64| i * phases / len;
                assert!(
                    s == len || phase_of(s) >= p,
                    "len {len} phases {phases} p {p}"
                );
                assert!(
                    s == 0 || phase_of(s - 1) < p,
                    "len {len} phases {phases} p {p}"
                );
            }
        }
        let w = spec("phases:n=18446744073709551615:phases=1000:len=18446744073709551615");
        assert_eq!(w.requests().take(10).count(), 10);
    }

    #[test]
    fn huge_universes_are_cheap() {
        for s in WorkloadSpec::NAMES {
            let w = spec(&format!("{s}:n=18446744073709551615:len=1000"));
            assert_eq!(w.requests().count(), 1000);
        }
    }
}
