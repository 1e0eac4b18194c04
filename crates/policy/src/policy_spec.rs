//! [`PolicySpec`]: a policy chosen by name, with parameters, and built into a resident set.
//!
//! Spelling: `NAME` or `NAME:KEY=VALUE[:KEY=VALUE...]`, e.g. `clock`, `chunk-queues:m=6`.

use std::fmt;
use std::str::FromStr;

use crate::aging::Aging;
use crate::arc::Arc as ArcPolicy;
use crate::belady::{Belady, Future};
use crate::car::Car;
use crate::chunk_queues::ChunkQueues;
use crate::clock::Clock;
use crate::eviction_policy::EvictionPolicy;
use crate::fifo::Fifo;
use crate::lru::Lru;
use crate::mglru::Mglru;
use crate::policy_error::PolicyError;
use crate::s3fifo::S3Fifo;
use crate::sieve::Sieve;
use crate::unit_table::NO_SLOT;

/// A policy and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub enum PolicySpec {
    /// [`Fifo`].
    Fifo,
    /// [`Clock`].
    Clock,
    /// [`Lru`].
    Lru,
    /// [`crate::Arc`].
    Arc,
    /// [`Car`].
    Car,
    /// [`Sieve`].
    Sieve,
    /// [`S3Fifo`].
    S3Fifo {
        /// S's share of the capacity (`small`, default 0.1).
        small: f64,
        /// G's size as a share of the capacity (`ghost`, default 0.9).
        ghost: f64,
        /// Hits in S that move a unit to M (`threshold`, default 2, at most 3).
        threshold: u8,
        /// Until the first eviction, units that find S full go to M (`fill=main`, the default,
        /// as libCacheSim) rather than to S (`fill=small`, as the paper's Algorithm 1).
        fill_main: bool,
    },
    /// [`Aging`] with `bits`-bit counters.
    Aging {
        /// Counter width, 1..=32.
        bits: u32,
    },
    /// [`ChunkQueues`] over 2^`m` queues, aging every `age_every` samples.
    ChunkQueues {
        /// Queue bits, 1..=12.
        m: u32,
        /// Samples between aging steps, at least 1.
        age_every: u32,
    },
    /// [`Mglru`] with at most `gens` generations.
    Mglru {
        /// Maximum number of generations, 2..=16.
        gens: u32,
    },
    /// [`Belady`]'s OPT (offline).
    Opt,
}

impl PolicySpec {
    /// Every policy name the parser accepts, in the order tables list them.
    pub const NAMES: &'static [&'static str] = &[
        "fifo",
        "clock",
        "lru",
        "aging",
        "chunk-queues",
        "car",
        "arc",
        "sieve",
        "s3-fifo",
        "mglru",
        "opt",
    ];

    /// The policy's name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Clock => "clock",
            Self::Lru => "lru",
            Self::Arc => "arc",
            Self::Car => "car",
            Self::Sieve => "sieve",
            Self::S3Fifo { .. } => "s3-fifo",
            Self::Aging { .. } => "aging",
            Self::ChunkQueues { .. } => "chunk-queues",
            Self::Mglru { .. } => "mglru",
            Self::Opt => "opt",
        }
    }

    /// Every policy with default parameters.
    pub fn all() -> Vec<PolicySpec> {
        Self::NAMES
            .iter()
            .map(|n| n.parse().expect("built-in name parses"))
            .collect()
    }

    /// Whether the policy needs the trace's future.
    pub fn is_offline(&self) -> bool {
        matches!(self, Self::Opt)
    }

    /// Builds a resident set of `capacity` units. `future` is required by offline policies and
    /// ignored by the others.
    pub fn build(
        &self,
        capacity: usize,
        future: Option<Future>,
    ) -> Result<Box<dyn EvictionPolicy>, PolicyError> {
        let policy = self.name();
        if capacity == 0 {
            return Err(PolicyError::ZeroCapacity { policy });
        }
        let max = NO_SLOT as usize / 2 - 1;
        if capacity > max {
            return Err(PolicyError::CapacityTooLarge {
                policy,
                capacity,
                max,
            });
        }
        Ok(match self {
            Self::Fifo => Box::new(Fifo::new(capacity)),
            Self::Clock => Box::new(Clock::new(capacity)),
            Self::Lru => Box::new(Lru::new(capacity)),
            Self::Arc => Box::new(ArcPolicy::new(capacity)),
            Self::Car => Box::new(Car::new(capacity)),
            Self::Sieve => Box::new(Sieve::new(capacity)),
            &Self::S3Fifo {
                small,
                ghost,
                threshold,
                fill_main,
            } => Box::new(S3Fifo::with_parameters(
                capacity, small, ghost, threshold, fill_main,
            )),
            Self::Aging { bits } => Box::new(Aging::new(capacity, *bits)),
            Self::ChunkQueues { m, age_every } => {
                Box::new(ChunkQueues::new(capacity, *m, *age_every))
            }
            Self::Mglru { gens } => Box::new(Mglru::new(capacity, *gens)),
            Self::Opt => match future {
                Some(future) => Box::new(Belady::new(capacity, future)),
                None => return Err(PolicyError::NeedsFuture { policy }),
            },
        })
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        match *self {
            Self::Aging { bits } if bits != Aging::DEFAULT_BITS => write!(f, ":bits={bits}"),
            Self::ChunkQueues { m, age_every } => {
                if m != ChunkQueues::DEFAULT_M {
                    write!(f, ":m={m}")?;
                }
                if age_every != 1 {
                    write!(f, ":age-every={age_every}")?;
                }
                Ok(())
            }
            Self::Mglru { gens } if gens != Mglru::DEFAULT_GENS => write!(f, ":gens={gens}"),
            Self::S3Fifo {
                small,
                ghost,
                threshold,
                fill_main,
            } => {
                if small != S3Fifo::DEFAULT_SMALL {
                    write!(f, ":small={small}")?;
                }
                if ghost != S3Fifo::DEFAULT_GHOST {
                    write!(f, ":ghost={ghost}")?;
                }
                if threshold != S3Fifo::DEFAULT_THRESHOLD {
                    write!(f, ":threshold={threshold}")?;
                }
                if !fill_main {
                    f.write_str(":fill=small")?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// The `KEY=VALUE` parameters after a policy name, consumed one by one.
#[derive(Debug)]
pub struct PolicyParams<'a> {
    policy: &'static str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> PolicyParams<'a> {
    fn parse(policy: &'static str, rest: &'a str) -> Result<Self, PolicyError> {
        let mut pairs = Vec::new();
        for item in rest.split(':').filter(|s| !s.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| PolicyError::BadParameter {
                    policy,
                    param: item.to_string(),
                    reason: "expected KEY=VALUE".into(),
                })?;
            pairs.push((k.trim(), v.trim()));
        }
        Ok(Self { policy, pairs })
    }

    /// Takes parameter `key` parsed as `T`, or `default` if absent.
    pub fn take<T: FromStr>(&mut self, key: &str, default: T) -> Result<T, PolicyError>
    where
        T::Err: fmt::Display,
    {
        match self.pairs.iter().position(|(k, _)| *k == key) {
            None => Ok(default),
            Some(i) => {
                let (k, v) = self.pairs.remove(i);
                v.parse().map_err(|e: T::Err| PolicyError::BadParameter {
                    policy: self.policy,
                    param: format!("{k}={v}"),
                    reason: e.to_string(),
                })
            }
        }
    }

    /// Fails if `ok` is false, naming `key` and `value`.
    pub fn check(
        &self,
        ok: bool,
        key: &str,
        value: impl fmt::Display,
        reason: &str,
    ) -> Result<(), PolicyError> {
        if ok {
            Ok(())
        } else {
            Err(PolicyError::BadParameter {
                policy: self.policy,
                param: format!("{key}={value}"),
                reason: reason.into(),
            })
        }
    }

    /// Fails on any parameter not taken.
    pub fn finish(self) -> Result<(), PolicyError> {
        match self.pairs.first() {
            None => Ok(()),
            Some((k, v)) => Err(PolicyError::BadParameter {
                policy: self.policy,
                param: format!("{k}={v}"),
                reason: "unknown parameter".into(),
            }),
        }
    }
}

impl FromStr for PolicySpec {
    type Err = PolicyError;

    fn from_str(s: &str) -> Result<Self, PolicyError> {
        let s = s.trim();
        let (name, rest) = s.split_once(':').unwrap_or((s, ""));
        let name = name.to_ascii_lowercase().replace('_', "-");
        let Some(&canonical) = Self::NAMES.iter().find(|n| **n == name) else {
            return Err(PolicyError::UnknownPolicy {
                name: name.to_string(),
                known: Self::NAMES.join(", "),
            });
        };
        let mut params = PolicyParams::parse(canonical, rest)?;
        let spec = match canonical {
            "fifo" => Self::Fifo,
            "clock" => Self::Clock,
            "lru" => Self::Lru,
            "arc" => Self::Arc,
            "car" => Self::Car,
            "sieve" => Self::Sieve,
            "s3-fifo" => {
                let small = params.take("small", S3Fifo::DEFAULT_SMALL)?;
                params.check(
                    small > 0.0 && small < 1.0,
                    "small",
                    small,
                    "must be in (0, 1)",
                )?;
                let ghost = params.take("ghost", S3Fifo::DEFAULT_GHOST)?;
                params.check(
                    (0.0..=1.0).contains(&ghost),
                    "ghost",
                    ghost,
                    "must be in [0, 1]",
                )?;
                let threshold = params.take("threshold", S3Fifo::DEFAULT_THRESHOLD)?;
                params.check(
                    (1..=3).contains(&threshold),
                    "threshold",
                    threshold,
                    "must be 1, 2 or 3 (a 2-bit counter)",
                )?;
                let fill: String = params.take("fill", "main".to_string())?;
                params.check(
                    fill == "main" || fill == "small",
                    "fill",
                    &fill,
                    "must be main (as libCacheSim) or small (as the paper)",
                )?;
                Self::S3Fifo {
                    small,
                    ghost,
                    threshold,
                    fill_main: fill == "main",
                }
            }
            "aging" => {
                let bits: u32 = params.take("bits", Aging::DEFAULT_BITS)?;
                params.check(
                    (1..=Aging::MAX_BITS).contains(&bits),
                    "bits",
                    bits,
                    "must be 1..=32",
                )?;
                Self::Aging { bits }
            }
            "chunk-queues" => {
                let m: u32 = params.take("m", ChunkQueues::DEFAULT_M)?;
                params.check(
                    (1..=ChunkQueues::MAX_M).contains(&m),
                    "m",
                    m,
                    "must be 1..=12",
                )?;
                let age_every: u32 = params.take("age-every", 1)?;
                params.check(age_every >= 1, "age-every", age_every, "must be at least 1")?;
                Self::ChunkQueues { m, age_every }
            }
            "mglru" => {
                let gens: u32 = params.take("gens", Mglru::DEFAULT_GENS)?;
                params.check(
                    (Mglru::MIN_GENS..=Mglru::MAX_GENS).contains(&gens),
                    "gens",
                    gens,
                    "must be 2..=16",
                )?;
                Self::Mglru { gens }
            }
            "opt" => Self::Opt,
            _ => unreachable!("every name in NAMES has a parser"),
        };
        params.finish()?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_build() {
        for spec in PolicySpec::all() {
            let again: PolicySpec = spec.name().parse().unwrap();
            assert_eq!(again, spec);
            assert_eq!(spec.to_string(), spec.name());
            let future = spec.is_offline().then(|| Future::from(vec![u64::MAX; 4]));
            let p = spec.build(4, future).unwrap();
            assert_eq!(p.capacity(), 4);
            assert_eq!(p.name(), spec.name());
        }
    }

    #[test]
    fn s3_fifo_parameters_parse() {
        let spec: PolicySpec = "S3_FIFO:small=0.2:threshold=1:ghost=0.5:fill=small"
            .parse()
            .unwrap();
        assert_eq!(
            spec,
            PolicySpec::S3Fifo {
                small: 0.2,
                ghost: 0.5,
                threshold: 1,
                fill_main: false,
            }
        );
        assert_eq!(spec.build(10, None).unwrap().name(), "s3-fifo");
        assert_eq!(
            spec.to_string(),
            "s3-fifo:small=0.2:ghost=0.5:threshold=1:fill=small"
        );
        assert_eq!(spec.to_string().parse::<PolicySpec>().unwrap(), spec);
    }

    #[test]
    fn bad_names_and_parameters_are_errors() {
        let e = "nope".parse::<PolicySpec>().unwrap_err();
        assert!(e.to_string().contains("unknown policy \"nope\""), "{e}");
        let e = "fifo:x=1".parse::<PolicySpec>().unwrap_err();
        assert!(e.to_string().contains("unknown parameter"), "{e}");
        let e = "fifo:x".parse::<PolicySpec>().unwrap_err();
        assert!(e.to_string().contains("KEY=VALUE"), "{e}");
        let e = "s3-fifo:small=1.5".parse::<PolicySpec>().unwrap_err();
        assert!(e.to_string().contains("small=1.5"), "{e}");
        let e = "s3-fifo:threshold=4".parse::<PolicySpec>().unwrap_err();
        assert!(e.to_string().contains("2-bit"), "{e}");
        assert!(matches!(
            PolicySpec::Lru.build(0, None),
            Err(PolicyError::ZeroCapacity { .. })
        ));
    }

    #[test]
    fn parameters_parse_validate_and_display() {
        let spec: PolicySpec = "chunk-queues:m=6".parse().unwrap();
        assert_eq!(spec, PolicySpec::ChunkQueues { m: 6, age_every: 1 });
        assert_eq!(spec.to_string(), "chunk-queues:m=6");
        for text in [
            "chunk-queues:m=6:age-every=4",
            "chunk-queues:age-every=2",
            "aging:bits=16",
            "mglru:gens=2",
        ] {
            let spec: PolicySpec = text.parse().unwrap();
            assert_eq!(spec.to_string(), text);
        }
        assert_eq!(
            "chunk_queues:m=8"
                .parse::<PolicySpec>()
                .unwrap()
                .to_string(),
            "chunk-queues"
        );
        for bad in [
            "aging:bits=0",
            "aging:bits=33",
            "chunk-queues:m=0",
            "chunk-queues:m=13",
            "chunk-queues:age-every=0",
            "chunk-queues:m=x",
            "mglru:gens=1",
            "mglru:gens=17",
            "opt:k=1",
        ] {
            let e = bad.parse::<PolicySpec>().unwrap_err();
            assert!(matches!(e, PolicyError::BadParameter { .. }), "{bad}: {e}");
        }
    }

    #[test]
    fn opt_is_offline_and_needs_the_future() {
        let opt: PolicySpec = "opt".parse().unwrap();
        assert!(opt.is_offline());
        assert_eq!(
            opt.build(4, None).err(),
            Some(PolicyError::NeedsFuture { policy: "opt" })
        );
        assert!(PolicySpec::all()
            .iter()
            .filter(|s| s.is_offline())
            .eq([&opt]));
    }
}
