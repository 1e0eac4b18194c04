//! [`PolicySpec`]: a policy chosen by name, with parameters, and built into a resident set.
//!
//! Spelling: `NAME` or `NAME:KEY=VALUE[:KEY=VALUE...]`, e.g. `clock`, `chunk-queues:m=6`.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::arc::Arc as ArcPolicy;
use crate::car::Car;
use crate::clock::Clock;
use crate::eviction_policy::EvictionPolicy;
use crate::fifo::Fifo;
use crate::lru::Lru;
use crate::policy_error::PolicyError;
use crate::s3fifo::S3Fifo;
use crate::sieve::Sieve;
use crate::unit_table::NO_SLOT;

/// Next-access times of a whole trace, for offline policies: `future[i]` is the index of the next
/// request for the same unit as request `i`, or `u64::MAX` if there is none.
pub type Future = Arc<[u64]>;

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
}

impl PolicySpec {
    /// Every policy name the parser accepts, in the order tables list them.
    pub const NAMES: &'static [&'static str] =
        &["fifo", "clock", "lru", "arc", "car", "sieve", "s3-fifo"];

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
        false
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
        let _ = future;
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
        })
    }
}

impl fmt::Display for PolicySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
            let p = spec.build(4, None).unwrap();
            assert_eq!(p.capacity(), 4);
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
}
