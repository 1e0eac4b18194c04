//! The host memory broker: one memory total divided among every process under memvisor.
//!
//! Each managed process reports, through its control socket, the page-ins a larger budget
//! would have saved it (its regions' refault curves, see `memvisor_control::RefaultStatus`),
//! and for each disk image with a host cache limit, the block misses a larger limit would have
//! saved (the curve of the image's CAR model). The broker turns two snapshots into a
//! [`UtilityCurve`] per claimant ([`ClaimantKey`]: a process's budget, an image's cache), in
//! one unit (milliseconds the program waits per second), divides the total with [`partition`]
//! (static, proportional, or by utility) and applies the budgets and limits through the same
//! `set` and `set_image_cache` requests `memvisor set` sends ([`Broker`]).

mod broker;
mod broker_error;
mod broker_metrics;
mod claimant_key;
mod curve_history;
mod partitioner;
mod process_limit;
mod status_bounds;
mod utility_curve;

pub use broker::{Broker, BrokerOptions, Round};
pub use broker_error::BrokerError;
pub use broker_metrics::SplitRow;
pub use claimant_key::ClaimantKey;
pub use partitioner::{partition, Allocation, Claimant, Limits, Mode, Reason};
pub use process_limit::{process_label, ProcessLimit};
pub use utility_curve::UtilityCurve;
