//! [`PolicyError`]: what can go wrong when choosing or building a policy.

/// Errors of the policy library.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    /// The policy name is not known.
    #[error("unknown policy {name:?} (known: {known})")]
    UnknownPolicy {
        /// The name given.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// A policy parameter is unknown or has a bad value.
    #[error("policy {policy}: parameter {param:?}: {reason}")]
    BadParameter {
        /// The policy.
        policy: &'static str,
        /// The parameter as written.
        param: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A resident set must hold at least one unit.
    #[error("policy {policy}: capacity must be at least 1 unit")]
    ZeroCapacity {
        /// The policy.
        policy: &'static str,
    },
    /// The capacity is beyond what the library indexes.
    #[error("policy {policy}: capacity {capacity} exceeds the maximum of {max} units")]
    CapacityTooLarge {
        /// The policy.
        policy: &'static str,
        /// The capacity asked for.
        capacity: usize,
        /// The largest capacity supported.
        max: usize,
    },
    /// An offline policy was built without the future of the trace.
    #[error("policy {policy} is offline: it needs the trace's future (next-access times)")]
    NeedsFuture {
        /// The policy.
        policy: &'static str,
    },
}
