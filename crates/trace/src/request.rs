//! [`Request`]: one access of a trace or workload.

/// One access to one unit (a page, a chunk, or a cache object).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Request {
    /// The trace's timestamp if it has one (oracleGeneral's time field, the CSV time column if
    /// one is configured), otherwise the request's index (0-based) in the stream.
    pub time: u64,
    /// The unit accessed.
    pub unit: u64,
    /// The 0-based index of the next request for the same unit, when the source knows it
    /// (oracleGeneral traces). `None` means "never again" for oracleGeneral, and "not known"
    /// for every other source: text formats and generated workloads never fill it.
    pub next_access: Option<u64>,
}
