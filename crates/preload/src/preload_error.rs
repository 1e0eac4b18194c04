//! [`PreloadError`]: failures of the preload library, naming the variable or region at fault.

/// A preload library failure.
#[derive(Debug, thiserror::Error)]
pub enum PreloadError {
    /// An environment variable set by `memvisor run` is malformed.
    #[error("environment variable {name}='{value}': {reason}")]
    Env {
        /// Variable name.
        name: &'static str,
        /// Its value.
        value: String,
        /// What is wrong.
        reason: String,
    },

    /// The pager refused a region.
    #[error("{what}: {source}")]
    Pager {
        /// Which region, and what was attempted.
        what: String,
        /// The pager's error.
        #[source]
        source: memvisor_pager::PagerError,
    },

    /// The control socket could not be set up.
    #[error("control socket: {0}")]
    Control(#[from] memvisor_control::ControlError),

    /// The live-migration destination could not start (key file, listening address).
    #[error("migration: {0}")]
    Migration(String),
}
