//! The host memory broker: one memory total divided among every process under memvisor.
//!
//! Each managed process reports, through its control socket, the page-ins a larger budget
//! would have saved it (its regions' refault curves, see `memvisor_control::RefaultStatus`).
//! The broker turns two snapshots into a [`UtilityCurve`] per process, divides the total with
//! [`partition`] (static, proportional, or by utility) and applies the budgets through the
//! same `set` request `memvisor set` sends ([`Broker`]).

mod broker;
mod broker_error;
mod broker_metrics;
mod partitioner;
mod process_limit;
mod utility_curve;

pub use broker::{Broker, BrokerOptions, Round};
pub use broker_error::BrokerError;
pub use broker_metrics::SplitRow;
pub use partitioner::{partition, Allocation, Claimant, Limits, Mode, Reason};
pub use process_limit::{process_label, ProcessLimit};
pub use utility_curve::UtilityCurve;
