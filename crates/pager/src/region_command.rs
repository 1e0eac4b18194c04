//! [`RegionCommand`] and [`CommandQueue`]: what other threads ask of a region's fault handler at
//! run time (new budget, new policy, discard a range), and how the request reaches it.
//!
//! The handler thread owns all of a region's paging state, so a change is made by that thread,
//! between two faults: the caller queues a command, wakes the handler's `poll` through an
//! eventfd and waits for the answer.

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Mutex;

use memvisor_policy::PolicySpec;

use crate::event_fd::EventFd;
use crate::pager_error::PagerError;

/// A change to a running region.
#[derive(Debug)]
pub(crate) enum RegionCommand {
    /// At most this many chunks resident from now on (evicting at once if more are).
    SetBudget(usize),
    /// Replace the policy; the resident chunks are carried over in the old policy's eviction
    /// order.
    SetPolicy(PolicySpec),
    /// `[offset, offset + len)` reads as zeros afterwards (page-aligned, inside the region).
    Discard { offset: usize, len: usize },
}

type Reply = SyncSender<Result<(), PagerError>>;

/// Commands waiting for the handler, and the eventfd that wakes it.
#[derive(Debug)]
pub(crate) struct CommandQueue {
    pending: Mutex<VecDeque<(RegionCommand, Reply)>>,
    pub wake: EventFd,
}

impl CommandQueue {
    pub fn new(wake: EventFd) -> Self {
        Self {
            pending: Mutex::new(VecDeque::new()),
            wake,
        }
    }

    /// Queues `cmd`, wakes the handler and waits for its answer. `region` names the region in
    /// the error if the handler is gone.
    pub fn submit(&self, region: &str, cmd: RegionCommand) -> Result<(), PagerError> {
        let (tx, rx) = sync_channel(1);
        match self.pending.lock() {
            Ok(mut q) => q.push_back((cmd, tx)),
            Err(_) => return Err(Self::gone(region)),
        }
        self.wake.signal();
        rx.recv().unwrap_or_else(|_| Err(Self::gone(region)))
    }

    /// Takes every queued command (the handler answers each through its reply sender).
    pub fn take_all(&self) -> Vec<(RegionCommand, Reply)> {
        self.wake.clear();
        match self.pending.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn gone(region: &str) -> PagerError {
        PagerError::Config(format!("{region}: the fault handler is not running"))
    }
}
