//! [`WorkloadSpec`]: which pages the workload touches, in what order, and how much of each.

use std::fmt;
use std::str::FromStr;

use crate::bench_error::BenchError;
use crate::page_pattern::WORDS_PER_PAGE;

/// The order of page accesses.
#[derive(Debug, Clone, PartialEq)]
pub enum AccessOrder {
    /// `passes` passes over every page, first to last.
    Sequential {
        /// Number of passes (after the fill).
        passes: u64,
    },
    /// Pages drawn by a `memvisor-trace` workload over `n` = the number of pages, e.g.
    /// `uniform:len=100000` or `zipf:alpha=0.99:len=100000`: `spec` is the kind and its
    /// parameters without `n`.
    Random {
        /// The trace workload spec without `n`.
        spec: String,
    },
    /// Three phases over the same data, each measured on its own: `passes` sequential
    /// passes, then `accesses` uniform random accesses, then `accesses` Zipf(`alpha`) ones.
    Phased {
        /// Sequential passes of the first phase.
        passes: u64,
        /// Accesses of each random phase.
        accesses: u64,
        /// Skew of the Zipf phase.
        alpha: f64,
    },
}

/// One phase of a phased order: its name and its access order.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    /// `seq`, `uniform` or `zipf`.
    pub name: &'static str,
    /// The phase's order (sequential or random).
    pub order: AccessOrder,
}

impl AccessOrder {
    /// The phases of this order: itself alone, or a phased order's three.
    pub fn phases(&self) -> Vec<Phase> {
        match self {
            AccessOrder::Phased {
                passes,
                accesses,
                alpha,
            } => vec![
                Phase {
                    name: "seq",
                    order: AccessOrder::Sequential { passes: *passes },
                },
                Phase {
                    name: "uniform",
                    order: AccessOrder::Random {
                        spec: format!("uniform:len={accesses}"),
                    },
                },
                Phase {
                    name: "zipf",
                    order: AccessOrder::Random {
                        spec: format!("zipf:alpha={alpha}:len={accesses}"),
                    },
                },
            ],
            other => vec![Phase {
                name: "run",
                order: other.clone(),
            }],
        }
    }

    /// The `memvisor-trace` spec of a random order over `pages` pages, `None` otherwise.
    pub fn trace_spec(&self, pages: u64) -> Option<String> {
        match self {
            AccessOrder::Random { spec } => {
                let (kind, rest) = spec.split_once(':').unwrap_or((spec.as_str(), ""));
                Some(if rest.is_empty() {
                    format!("{kind}:n={pages}")
                } else {
                    format!("{kind}:n={pages}:{rest}")
                })
            }
            _ => None,
        }
    }
}

/// A workload, spelled `KIND[:KEY=VALUE...]`:
///
/// * `seq:passes=N`: N sequential passes over every page;
/// * `membench:passes=N`: the seed's memory benchmark — N sequential passes, each
///   reading, checking and rewriting every word of every page (same as
///   `seq:passes=N:words=all`);
/// * `phased:passes=N:accesses=K[:alpha=A]`: one region, three phases measured one by one
///   (reported as `WORKLOAD#seq`, `#uniform`, `#zipf`): N sequential passes, then K uniform
///   random accesses, then K Zipf accesses (skew A, default 0.99);
/// * any other `memvisor-trace` workload kind (`uniform`, `zipf`, `hotset`, `phases`, `loop`)
///   with its parameters, `n` being the number of pages; `accesses=K` is an alias of `len=K`:
///   `uniform:accesses=100000`, `zipf:alpha=0.99:accesses=100000`.
///
/// Common keys: `words=W` (8-byte words touched per page access, from the page start; `all` =
/// the whole page; default 1 — `membench`: all), `mode=rmw|read` (read, check and write back
/// the incremented value, the default, or only read and check). Random orders also take
/// `threads=T` (1 to 16, default 1): T threads share the accesses, thread `t` making those to
/// pages `p` with `p % T == t`, in trace order, all at once.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    text: String,
    order: AccessOrder,
    words: usize,
    write: bool,
    threads: usize,
}

impl WorkloadSpec {
    /// Threads making the accesses (1 for sequential orders).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The access order.
    pub fn order(&self) -> &AccessOrder {
        &self.order
    }

    /// Words touched per page access (1..=512).
    pub fn words(&self) -> usize {
        self.words
    }

    /// Whether accesses write (read-modify-write) or only read.
    pub fn writes(&self) -> bool {
        self.write
    }

    /// The `memvisor-trace` spec of a random order over `pages` pages, `None` for sequential
    /// and phased orders.
    pub fn trace_spec(&self, pages: u64) -> Option<String> {
        self.order.trace_spec(pages)
    }

    /// Checks the spec against a data set of `pages` pages (a random order's parameters are
    /// only validated once `n` is known).
    pub fn validate(&self, pages: u64) -> Result<(), BenchError> {
        for phase in self.order.phases() {
            if let Some(t) = phase.order.trace_spec(pages) {
                t.parse::<memvisor_trace::WorkloadSpec>()
                    .map_err(|e| BenchError::bad("workload", &self.text, e.to_string()))?;
            }
        }
        Ok(())
    }

    /// Page accesses of one run over `pages` pages.
    pub fn accesses(&self, pages: u64) -> u64 {
        self.order
            .phases()
            .iter()
            .map(|phase| match &phase.order {
                AccessOrder::Sequential { passes } => passes * pages,
                order => order
                    .trace_spec(pages)
                    .and_then(|t| t.parse::<memvisor_trace::WorkloadSpec>().ok())
                    .map_or(0, |w| w.len()),
            })
            .sum()
    }
}

impl FromStr for WorkloadSpec {
    type Err = BenchError;

    fn from_str(text: &str) -> Result<Self, BenchError> {
        let text = text.trim();
        let bad = |reason: String| BenchError::bad("workload", text, reason);
        let mut parts = text.split(':');
        let kind = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let mut words = if kind == "membench" {
            WORDS_PER_PAGE
        } else {
            1
        };
        let mut write = true;
        let mut threads = 1;
        let mut passes: Option<u64> = None;
        let mut phased_accesses: Option<u64> = None;
        let mut alpha: Option<f64> = None;
        let mut rest: Vec<String> = Vec::new();
        for kv in parts {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| bad(format!("{kv:?} is not KEY=VALUE")))?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "words" => {
                    words = if v == "all" {
                        WORDS_PER_PAGE
                    } else {
                        v.parse()
                            .ok()
                            .filter(|w| (1..=WORDS_PER_PAGE).contains(w))
                            .ok_or_else(|| {
                                bad(format!("words must be 1..={WORDS_PER_PAGE} or all"))
                            })?
                    }
                }
                "mode" => {
                    write = match v {
                        "rmw" => true,
                        "read" => false,
                        _ => return Err(bad("mode must be rmw or read".into())),
                    }
                }
                "accesses" if kind == "phased" => {
                    phased_accesses = Some(
                        v.parse()
                            .ok()
                            .filter(|&a| a >= 1)
                            .ok_or_else(|| bad("accesses must be a positive integer".into()))?,
                    )
                }
                "alpha" if kind == "phased" => {
                    alpha = Some(
                        v.parse()
                            .ok()
                            .filter(|a: &f64| a.is_finite() && *a > 0.0)
                            .ok_or_else(|| bad("alpha must be a positive number".into()))?,
                    )
                }
                "passes" if kind == "seq" || kind == "membench" || kind == "phased" => {
                    passes = Some(
                        v.parse()
                            .ok()
                            .filter(|&p| p >= 1)
                            .ok_or_else(|| bad("passes must be a positive integer".into()))?,
                    )
                }
                "threads" if kind != "seq" && kind != "membench" && kind != "phased" => {
                    threads = v
                        .parse()
                        .ok()
                        .filter(|t| (1..=16).contains(t))
                        .ok_or_else(|| bad("threads must be 1..=16".into()))?
                }
                "n" => return Err(bad("n is the number of pages: leave it out".into())),
                "accesses" => rest.push(format!("len={v}")),
                _ => rest.push(format!("{k}={v}")),
            }
        }
        let order = match kind.as_str() {
            "seq" | "membench" => {
                if !rest.is_empty() {
                    return Err(bad(format!(
                        "unknown key(s) {} (seq and membench take passes, words, mode)",
                        rest.join(", ")
                    )));
                }
                AccessOrder::Sequential {
                    passes: passes.unwrap_or(1),
                }
            }
            "phased" => {
                if !rest.is_empty() {
                    return Err(bad(format!(
                        "unknown key(s) {} (phased takes passes, accesses, alpha, words, mode)",
                        rest.join(", ")
                    )));
                }
                AccessOrder::Phased {
                    passes: passes.unwrap_or(1),
                    accesses: phased_accesses
                        .ok_or_else(|| bad("phased needs accesses=K".into()))?,
                    alpha: alpha.unwrap_or(0.99),
                }
            }
            k if memvisor_trace::WorkloadSpec::NAMES.contains(&k) => {
                let mut spec = k.to_string();
                for r in &rest {
                    spec.push(':');
                    spec.push_str(r);
                }
                AccessOrder::Random { spec }
            }
            _ => {
                return Err(bad(format!(
                    "unknown kind {kind:?} (seq, membench, phased, or a trace workload: {})",
                    memvisor_trace::WorkloadSpec::NAMES.join(", ")
                )))
            }
        };
        let spec = Self {
            text: text.to_string(),
            order,
            words,
            write,
            threads,
        };
        spec.validate(1 << 20)?;
        Ok(spec)
    }
}

impl fmt::Display for WorkloadSpec {
    /// The text it was parsed from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse() {
        let s: WorkloadSpec = "seq:passes=3".parse().unwrap();
        assert_eq!(s.order(), &AccessOrder::Sequential { passes: 3 });
        assert_eq!((s.words(), s.writes()), (1, true));
        assert_eq!(s.accesses(10), 30);
        let m: WorkloadSpec = "membench:passes=2".parse().unwrap();
        assert_eq!(m.words(), WORDS_PER_PAGE);
        let z: WorkloadSpec = "zipf:alpha=0.99:accesses=5000:mode=read".parse().unwrap();
        assert!(!z.writes());
        assert_eq!(z.trace_spec(100).unwrap(), "zipf:n=100:alpha=0.99:len=5000");
        assert_eq!(z.accesses(100), 5000);
        let u: WorkloadSpec = "uniform:len=7:words=4".parse().unwrap();
        assert_eq!((u.words(), u.accesses(3)), (4, 7));
        assert_eq!(u.to_string(), "uniform:len=7:words=4");
    }

    #[test]
    fn random_orders_take_threads() {
        let s: WorkloadSpec = "uniform:accesses=10:threads=4".parse().unwrap();
        assert_eq!(s.threads(), 4);
        assert_eq!(s.trace_spec(100).unwrap(), "uniform:n=100:len=10");
        assert_eq!(
            "zipf:alpha=0.9".parse::<WorkloadSpec>().unwrap().threads(),
            1
        );
        for bad in ["uniform:threads=0", "uniform:threads=17", "seq:threads=2"] {
            assert!(bad.parse::<WorkloadSpec>().is_err(), "{bad}");
        }
    }

    #[test]
    fn phased_has_three_phases_over_the_same_pages() {
        let s: WorkloadSpec = "phased:passes=2:accesses=50".parse().unwrap();
        let phases = s.order().phases();
        let names: Vec<_> = phases.iter().map(|p| p.name).collect();
        assert_eq!(names, ["seq", "uniform", "zipf"]);
        assert_eq!(phases[0].order, AccessOrder::Sequential { passes: 2 });
        assert_eq!(
            phases[2].order.trace_spec(10).unwrap(),
            "zipf:n=10:alpha=0.99:len=50"
        );
        assert_eq!(s.accesses(10), 20 + 50 + 50);
        assert_eq!(s.trace_spec(10), None);
        let a: WorkloadSpec = "phased:accesses=5:alpha=0.8".parse().unwrap();
        assert_eq!(
            a.order().phases()[2].order.trace_spec(4).unwrap(),
            "zipf:n=4:alpha=0.8:len=5"
        );
        assert_eq!(
            "seq:passes=1"
                .parse::<WorkloadSpec>()
                .unwrap()
                .order()
                .phases()[0]
                .name,
            "run"
        );
    }

    #[test]
    fn bad_specs_name_the_problem() {
        for (s, needle) in [
            ("walk", "unknown kind"),
            ("seq:passes=0", "passes"),
            ("seq:alpha=1", "unknown key"),
            ("zipf:n=5", "leave it out"),
            ("zipf:alpha=-1", "alpha"),
            ("uniform:words=513", "words"),
            ("uniform:mode=write", "mode"),
            ("uniform:len", "KEY=VALUE"),
            ("phased:passes=2", "needs accesses"),
            ("phased:accesses=0", "accesses"),
            ("phased:accesses=5:alpha=0", "alpha"),
            ("phased:accesses=5:threads=2", "unknown key"),
            ("phased:accesses=5:hot=3", "unknown key"),
        ] {
            let e = s.parse::<WorkloadSpec>().unwrap_err().to_string();
            assert!(e.contains(needle), "{s}: {e}");
        }
    }
}
