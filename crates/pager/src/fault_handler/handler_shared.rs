//! [`HandlerShared`]: what a region and its fault handler thread share: statistics, recorded
//! errors, the stop signal, the command queue and the handler's current budget and policy.

use std::collections::VecDeque;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Condvar, Mutex};

use crate::direct_io_pins::DirectIoPins;
use crate::error_log::ErrorLog;
use crate::event_fd::EventFd;
use crate::pager_error::PagerError;
use crate::refault_curve::RefaultCounters;
use crate::region_command::CommandQueue;
use crate::region_stats::StatsCounters;
use crate::remote_pages::RemotePages;
use crate::residency_hint::ResidencyHint;

/// How many recorded errors are kept (older ones are dropped, their count kept).
const MAX_ERRORS: usize = 256;

/// State shared between a region and its handler thread.
#[derive(Debug)]
pub(crate) struct HandlerShared {
    pub name: String,
    pub stats: StatsCounters,
    /// Page-ins of evicted chunks by refault distance.
    pub refaults: RefaultCounters,
    pub errors: Mutex<VecDeque<PagerError>>,
    /// Where recorded errors are printed (rate-limited); `None`: not printed.
    pub log: Option<ErrorLog>,
    /// Signalling it stops the handler.
    pub stop: EventFd,
    /// Run-time changes for the handler to make.
    pub commands: CommandQueue,
    /// The budget in chunks, as the handler enforces it now.
    pub budget_chunks: AtomicUsize,
    /// The policy's spec, as the handler runs it now.
    pub policy: Mutex<String>,
    /// Which pages are resident, for other threads (the chunk table's copy).
    pub residency: Arc<ResidencyHint>,
    /// Remote pages (post-copy migration): how many are left, which ones faults wait for.
    pub remote: RemotePages,
    /// Chunks a direct-I/O read is filling: not evicted until it returns.
    pub pins: DirectIoPins,
    /// Set (and announced) once the handler thread runs.
    pub running: Mutex<bool>,
    pub started: Condvar,
}

impl HandlerShared {
    pub(crate) fn record(&self, e: PagerError) {
        if let Some(log) = &self.log {
            log.print(&e);
        }
        self.record_quietly(e);
    }

    /// Records `e` without printing it (its episode is reported instead, see
    /// [`SwapFullEpisodes`](crate::swap_full::SwapFullEpisodes)).
    pub(crate) fn record_quietly(&self, e: PagerError) {
        if let Ok(mut q) = self.errors.lock() {
            if q.len() == MAX_ERRORS {
                q.pop_front();
            }
            q.push_back(e);
        }
    }
}
