//! Streaming trace readers and deterministic workload generators for memvisor.
//!
//! A trace is a sequence of [`Request`]s, each an access to one *unit* (a page, a chunk, or a
//! cache object). Traces come from files — [`open_trace`] with a [`TraceFormat`] — or from
//! synthetic generators — [`WorkloadSpec::requests`]. Both are named by specs in the house
//! style `NAME[:KEY=VALUE...]`:
//!
//! - formats: `lackey[:instructions=true|false][:page-size=4096]`, `text`,
//!   `csv:column=N[:time-column=M][:header=true|false][:delimiter=,]`, `oracle-general`
//!   (details in [`TraceFormat`]);
//! - workloads: `seq`, `loop`, `uniform`, `zipf`, `hotset`, `phases`, each with `n=UNITS` and
//!   optional `len=` and `seed=` (details in [`WorkloadSpec`]).
//!
//! Readers stream in constant memory and return errors, never panic, on malformed input; every
//! error names the file and the line (text formats) or record and byte offset (binary). Input
//! that starts with the zstd magic bytes is decompressed on the fly. Generators are
//! deterministic across runs and platforms: integer PRNG (xoshiro256**), a rejection-inversion
//! Zipf sampler, and their own `ln`/`exp` instead of the platform's libm.
//!
//! Writers: [`write_oracle_general`] (libCacheSim-compatible, with next-access times) and
//! [`write_text`].
//!
//! ```
//! use memvisor_trace::{open_trace, write_oracle_general, TraceFormat, WorkloadSpec};
//!
//! let workload: WorkloadSpec = "zipf:n=1000:alpha=0.99:len=5000".parse()?;
//! assert_eq!((workload.len(), workload.universe()), (5000, 1000));
//! let first: Vec<u64> = workload.requests().take(3).map(|r| r.unit).collect();
//! assert_eq!(first.len(), 3);
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("zipf.oracleGeneral.zst");
//! write_oracle_general(&path, workload.requests().map(|r| r.unit))?;
//! let format = TraceFormat::detect(&path).expect("known extension");
//! for request in open_trace(&path, &format)? {
//!     let request = request?; // errors name the file and the record
//!     assert!(request.next_access.is_none_or(|next| next > request.time));
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod byte_counter;
mod csv;
mod detmath;
mod lackey;
mod line_reader;
mod oracle_general;
mod output;
mod permutation;
mod request;
mod rng;
mod spec_params;
mod text;
mod trace_error;
mod trace_format;
mod trace_reader;
mod unit_id;
mod workload;
mod zipf;

pub use oracle_general::{
    try_write_oracle_general, write_oracle_general, ORACLE_GENERAL_RECORD_SIZE,
};
pub use request::Request;
pub use text::{try_write_text, write_text};
pub use trace_error::TraceError;
pub use trace_format::TraceFormat;
pub use trace_reader::{open_trace, TraceReader};
pub use unit_id::hash_unit_id;
pub use workload::{WorkloadKind, WorkloadSpec};
