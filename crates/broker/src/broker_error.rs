//! [`BrokerError`]: what can go wrong in the broker, with the process or option concerned.

use memvisor_control::ControlError;

/// An error of the memory broker.
#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    /// An option or limit is unusable.
    #[error("broker option {option}: {reason}")]
    Option {
        /// The option as spelled on the command line.
        option: String,
        /// Why it is refused.
        reason: String,
    },
    /// The minimums of the processes do not fit the total.
    #[error("the minimum budgets ({minimums} bytes over {processes} processes) exceed the total ({total} bytes)")]
    MinimumsExceedTotal {
        /// Sum of the minimums.
        minimums: u64,
        /// Processes counted.
        processes: usize,
        /// The total to divide.
        total: u64,
    },
    /// Talking to a managed process failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}
