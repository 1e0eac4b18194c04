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
    /// The minimums of the claimants (budgets and image caches) do not fit the total.
    #[error("the minimum budgets and image caches ({minimums} bytes over {claimants} claimants) exceed the total ({total} bytes)")]
    MinimumsExceedTotal {
        /// Sum of the minimums.
        minimums: u64,
        /// Claimants counted (a budget per process, a limit per image).
        claimants: usize,
        /// The total to divide.
        total: u64,
    },
    /// Talking to a managed process failed.
    #[error(transparent)]
    Control(#[from] ControlError),
}
