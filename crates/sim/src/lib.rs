//! The trace-driven simulator of memvisor's eviction policies.
//!
//! A [`Sweep`] runs every (policy, size) pair of a [`RequestSource`] (a trace file or a generated
//! workload) through [`simulate`], on all cores, with Belady's OPT as the bound; the resulting
//! [`SweepReport`] renders as a table, CSV, JSON, or miss-ratio curves ([`miss_ratio_svg`]).
//! Policies come from `memvisor-policy`, the same library the pager uses, driven through the
//! same two information models (exact, sampled).

mod cache_size;
mod miss_ratio_plot;
mod report;
mod request_source;
mod sim_error;
mod simulation;
mod svg_document;
mod sweep;

pub use cache_size::{CacheSize, SWEEP_FRACTIONS};
pub use miss_ratio_plot::miss_ratio_svg;
pub use request_source::{
    next_accesses, RequestSource, RequestStream, Requests, SourceProfile, BATCH,
};
pub use sim_error::SimError;
pub use simulation::{
    simulate, simulate_stream, SamplePeriod, SimConfig, SimOutcome, DEFAULT_SAMPLE_ACCESSES,
    MAX_SAMPLES_PER_GAP, PROGRESS_EVERY,
};
pub use svg_document::{escape as svg_escape, nice_ceiling, svg_document};
pub use sweep::{Sweep, SweepReport, SweepRow};
