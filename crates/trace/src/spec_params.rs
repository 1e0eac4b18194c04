//! [`SpecParams`]: the `KEY=VALUE` parameters of a `NAME[:KEY=VALUE...]` spec.

use std::fmt;
use std::str::FromStr;

use crate::trace_error::TraceError;

/// The `KEY=VALUE` parameters after a spec's name, consumed one by one.
///
/// Keys are matched exactly after trimming; `_` in keys is read as `-`.
#[derive(Debug)]
pub(crate) struct SpecParams<'a> {
    what: &'static str,
    name: &'static str,
    pairs: Vec<(String, &'a str)>,
}

impl<'a> SpecParams<'a> {
    /// Splits `rest` (everything after `NAME:`) into pairs; `what` and `name` label errors.
    pub(crate) fn parse(
        what: &'static str,
        name: &'static str,
        rest: &'a str,
    ) -> Result<Self, TraceError> {
        let mut pairs: Vec<(String, &'a str)> = Vec::new();
        for item in rest.split(':').filter(|s| !s.trim().is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| TraceError::BadParameter {
                    what,
                    name,
                    param: item.to_string(),
                    reason: "expected KEY=VALUE".into(),
                })?;
            let key = k.trim().to_ascii_lowercase().replace('_', "-");
            if pairs.iter().any(|(seen, _)| *seen == key) {
                return Err(TraceError::BadParameter {
                    what,
                    name,
                    param: item.to_string(),
                    reason: "parameter given twice".into(),
                });
            }
            pairs.push((key, v.trim()));
        }
        Ok(Self { what, name, pairs })
    }

    /// Takes the raw text of parameter `key`, if present.
    pub(crate) fn take_str(&mut self, key: &str) -> Option<&'a str> {
        let i = self.pairs.iter().position(|(k, _)| k == key)?;
        Some(self.pairs.remove(i).1)
    }

    /// Takes parameter `key` parsed as `T`, if present.
    pub(crate) fn take_opt<T: FromStr>(&mut self, key: &str) -> Result<Option<T>, TraceError>
    where
        T::Err: fmt::Display,
    {
        match self.take_str(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|e: T::Err| self.error(key, v, &e.to_string())),
        }
    }

    /// Takes parameter `key` parsed as `T`, or `default` if absent.
    pub(crate) fn take<T: FromStr>(&mut self, key: &str, default: T) -> Result<T, TraceError>
    where
        T::Err: fmt::Display,
    {
        Ok(self.take_opt(key)?.unwrap_or(default))
    }

    /// Takes parameter `key` parsed as `T`; fails if it is absent.
    pub(crate) fn require<T: FromStr>(&mut self, key: &str) -> Result<T, TraceError>
    where
        T::Err: fmt::Display,
    {
        self.take_opt(key)?.ok_or_else(|| TraceError::BadParameter {
            what: self.what,
            name: self.name,
            param: key.to_string(),
            reason: "required parameter is missing".into(),
        })
    }

    /// An error about parameter `key` with value `value`.
    pub(crate) fn error(&self, key: &str, value: impl fmt::Display, reason: &str) -> TraceError {
        TraceError::BadParameter {
            what: self.what,
            name: self.name,
            param: format!("{key}={value}"),
            reason: reason.into(),
        }
    }

    /// Fails with [`SpecParams::error`] unless `ok`.
    pub(crate) fn check(
        &self,
        ok: bool,
        key: &str,
        value: impl fmt::Display,
        reason: &str,
    ) -> Result<(), TraceError> {
        if ok {
            Ok(())
        } else {
            Err(self.error(key, value, reason))
        }
    }

    /// Fails on any parameter not taken.
    pub(crate) fn finish(self) -> Result<(), TraceError> {
        match self.pairs.first() {
            None => Ok(()),
            Some((k, v)) => Err(self.error(k, v, "unknown parameter")),
        }
    }
}

/// Splits a spec into its lower-cased name (with `_` read as `-`) and the rest after the first
/// `:`.
pub(crate) fn split_spec(spec: &str) -> (String, &str) {
    let spec = spec.trim();
    let (name, rest) = spec.split_once(':').unwrap_or((spec, ""));
    (name.trim().to_ascii_lowercase().replace('_', "-"), rest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_requires_and_rejects() {
        let mut p = SpecParams::parse("workload", "zipf", "n=10: alpha = 0.5 :seed_x=3").unwrap();
        assert_eq!(p.require::<u64>("n").unwrap(), 10);
        assert_eq!(p.take::<f64>("alpha", 1.0).unwrap(), 0.5);
        assert_eq!(p.take::<u64>("len", 7).unwrap(), 7);
        let e = p.finish().unwrap_err().to_string();
        assert!(
            e.contains("\"seed-x=3\"") && e.contains("unknown parameter"),
            "{e}"
        );

        let mut p = SpecParams::parse("workload", "zipf", "").unwrap();
        let e = p.require::<u64>("n").unwrap_err().to_string();
        assert!(e.contains("missing"), "{e}");

        let e = SpecParams::parse("workload", "zipf", "n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("KEY=VALUE"), "{e}");
        let e = SpecParams::parse("workload", "zipf", "n=1:n=2")
            .unwrap_err()
            .to_string();
        assert!(e.contains("twice"), "{e}");

        let mut p = SpecParams::parse("workload", "zipf", "n=x").unwrap();
        let e = p.require::<u64>("n").unwrap_err().to_string();
        assert!(e.contains("workload zipf: parameter \"n=x\""), "{e}");
    }

    #[test]
    fn split_spec_normalizes_the_name() {
        assert_eq!(
            split_spec(" Oracle_General "),
            ("oracle-general".into(), "")
        );
        assert_eq!(
            split_spec("csv:column=2:x=y"),
            ("csv".into(), "column=2:x=y")
        );
    }
}
