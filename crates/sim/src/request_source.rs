//! [`RequestSource`]: where a simulation's requests come from, a trace file or a workload.

use std::path::PathBuf;
use std::sync::Arc;

use memvisor_policy::Future;
use memvisor_trace::{open_trace, Request, TraceFormat, TraceReader, WorkloadSpec};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::sim_error::SimError;

/// Requests read per batch by [`simulate_stream`](crate::simulate_stream).
pub const BATCH: usize = 4096;

/// A stream of requests that can be opened any number of times, each time from the start.
#[derive(Debug, Clone)]
pub enum RequestSource {
    /// A trace file in a given format, streamed from disk.
    Trace {
        /// The file.
        path: PathBuf,
        /// Its format.
        format: TraceFormat,
    },
    /// A deterministic generated workload.
    Workload(WorkloadSpec),
}

/// A boxed stream of requests.
pub type Requests = Box<dyn Iterator<Item = Result<Request, SimError>> + Send>;

/// An open source read in batches (see [`crate::simulate_stream`]).
pub enum RequestStream {
    /// A trace file's reader.
    Trace(Box<TraceReader>),
    /// A workload's generator.
    Workload(Box<dyn Iterator<Item = Request> + Send>),
}

impl RequestStream {
    /// Appends up to `max` requests to `out`; returns whether more may follow.
    pub fn next_batch(&mut self, out: &mut Vec<Request>, max: usize) -> Result<bool, SimError> {
        match self {
            Self::Trace(reader) => Ok(reader.next_batch(out, max)?),
            Self::Workload(requests) => {
                let before = out.len();
                out.extend(requests.by_ref().take(max));
                Ok(out.len() - before == max)
            }
        }
    }
}

/// What one pass over a source found.
#[derive(Debug, Clone)]
pub struct SourceProfile {
    /// Number of requests.
    pub requests: u64,
    /// Number of distinct units (the footprint).
    pub unique_units: u64,
    /// Next-access index of every request, if asked for.
    pub future: Option<Future>,
}

impl RequestSource {
    /// A name for reports: the file path, or the workload spec.
    pub fn name(&self) -> String {
        match self {
            Self::Trace { path, format } => format!("{} ({format})", path.display()),
            Self::Workload(spec) => spec.to_string(),
        }
    }

    /// Opens the source from its start, for reading in batches.
    pub fn stream(&self) -> Result<RequestStream, SimError> {
        Ok(match self {
            Self::Trace { path, format } => {
                RequestStream::Trace(Box::new(open_trace(path, format)?))
            }
            Self::Workload(spec) => RequestStream::Workload(Box::new(spec.requests())),
        })
    }

    /// Opens the stream from its start.
    pub fn open(&self) -> Result<Requests, SimError> {
        Ok(match self {
            Self::Trace { path, format } => {
                Box::new(open_trace(path, format)?.map(|r| r.map_err(SimError::from)))
            }
            Self::Workload(spec) => Box::new(spec.requests().map(Ok)),
        })
    }

    /// One pass: counts requests and distinct units and, if `with_future`, computes each
    /// request's next access (this holds one `u64` per request in memory, twice, during the pass).
    pub fn profile(&self, with_future: bool) -> Result<SourceProfile, SimError> {
        let mut requests = 0u64;
        let mut units: FxHashSet<u64> = FxHashSet::default();
        let mut ids: Vec<u64> = Vec::new();
        let mut stream = self.stream()?;
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            batch.clear();
            let more = stream.next_batch(&mut batch, BATCH)?;
            requests += batch.len() as u64;
            for r in &batch {
                units.insert(r.unit);
            }
            if with_future {
                ids.extend(batch.iter().map(|r| r.unit));
            }
            if !more {
                break;
            }
        }
        if requests == 0 {
            return Err(SimError::EmptySource {
                source_name: self.name(),
            });
        }
        let future = with_future.then(|| next_accesses(&ids));
        Ok(SourceProfile {
            requests,
            unique_units: units.len() as u64,
            future,
        })
    }
}

/// For each position `i`, the next position holding the same id, or `u64::MAX`.
pub fn next_accesses(ids: &[u64]) -> Future {
    let mut next = vec![u64::MAX; ids.len()];
    let mut seen: FxHashMap<u64, u64> = FxHashMap::default();
    for (i, &id) in ids.iter().enumerate().rev() {
        if let Some(j) = seen.insert(id, i as u64) {
            next[i] = j;
        }
    }
    Arc::from(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_accesses_point_forward() {
        let f = next_accesses(&[1, 2, 1, 3, 2, 1]);
        assert_eq!(&*f, &[2, 4, 5, u64::MAX, u64::MAX, u64::MAX]);
    }
}
