//! TEMPORARY stand-in for the trace crate (replaced by the real one at merge).
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub time: u64,
    pub unit: u64,
    pub next_access: Option<u64>,
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("bad spec {0}")]
    Spec(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum TraceFormat {
    Text,
}
impl TraceFormat {
    pub fn detect(_p: &Path) -> Option<TraceFormat> {
        Some(TraceFormat::Text)
    }
}
impl std::str::FromStr for TraceFormat {
    type Err = TraceError;
    fn from_str(_s: &str) -> Result<Self, TraceError> {
        Ok(TraceFormat::Text)
    }
}
impl std::fmt::Display for TraceFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("text")
    }
}
pub struct TraceReader(std::vec::IntoIter<Result<Request, TraceError>>);
impl Iterator for TraceReader {
    type Item = Result<Request, TraceError>;
    fn next(&mut self) -> Option<Self::Item> {
        self.0.next()
    }
}
pub fn open_trace(path: &Path, _f: &TraceFormat) -> Result<TraceReader, TraceError> {
    let s = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.into(),
        source,
    })?;
    let v: Vec<_> = s
        .lines()
        .enumerate()
        .map(|(i, l)| {
            Ok(Request {
                time: i as u64,
                unit: l.trim().parse().unwrap_or(0),
                next_access: None,
            })
        })
        .collect();
    Ok(TraceReader(v.into_iter()))
}
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSpec {
    n: u64,
    len: u64,
    seed: u64,
}
impl std::str::FromStr for WorkloadSpec {
    type Err = TraceError;
    fn from_str(s: &str) -> Result<Self, TraceError> {
        let n: u64 = s
            .split(':')
            .find_map(|kv| kv.strip_prefix("n="))
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| TraceError::Spec(s.into()))?;
        Ok(Self {
            n,
            len: 10 * n,
            seed: 1,
        })
    }
}
impl std::fmt::Display for WorkloadSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uniform:n={}", self.n)
    }
}
impl WorkloadSpec {
    pub fn requests(&self) -> impl Iterator<Item = Request> + Send {
        let mut x = self.seed;
        let n = self.n;
        (0..self.len).map(move |i| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            Request {
                time: i,
                unit: (x >> 33) % n,
                next_access: None,
            }
        })
    }
    pub fn len(&self) -> u64 {
        self.len
    }
    pub fn universe(&self) -> u64 {
        self.n
    }
    pub fn name(&self) -> &str {
        "uniform"
    }
}
