//! The fault handler's optional features, grouped by the part of its work they shape:
//! [`LoopTiming`] (how the fault loop waits), [`PageInOptions`] (how chunks are mapped in) and
//! [`PageOutOptions`] (how far ahead victims are written, and what a full swap does).

use std::time::Duration;

use crate::memfd::{page_size, Mapping};
use crate::region_config::{RegionConfig, ResolveMode};
use crate::swap_file::DIRECT_ALIGN;
use crate::swap_full::SwapFullEpisodes;

/// How the fault loop waits between events.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoopTiming {
    /// Access sampling period; `None` disables sampling.
    pub sample_interval: Option<Duration>,
    /// Adaptive busy-polling window (see `BusyPoll`); `None`: block at once.
    pub busy_poll: Option<Duration>,
    /// Whether the loop asks that idle CPUs poll while it busy-polls (`WakeLatencyHold`).
    pub cpu_wake_latency: bool,
}

impl LoopTiming {
    pub fn from_config(config: &RegionConfig) -> Self {
        Self {
            sample_interval: config.sample_interval.filter(|i| !i.is_zero()),
            busy_poll: config.busy_poll,
            cpu_wake_latency: config.cpu_wake_latency && config.busy_poll.is_some(),
        }
    }
}

/// How page-ins map chunks.
#[derive(Debug)]
pub(crate) struct PageInOptions {
    pub resolve: ResolveMode,
    /// Bounce buffer for `ResolveMode::Copy` (one chunk, page-aligned).
    pub bounce: Option<Mapping>,
    /// Asynchronous page-in: map the faulting page first (the swap file keeps page checksums).
    pub async_page_in: bool,
}

impl PageInOptions {
    /// The options `config` asks for; `bounce` is its bounce buffer, if it resolves by copy.
    pub fn from_config(config: &RegionConfig, bounce: Option<Mapping>) -> Self {
        Self {
            resolve: config.resolve,
            bounce,
            async_page_in: Self::async_page_in(config),
        }
    }

    /// Whether `config` gets asynchronous page-in: asked for, by copy, with pages the size of
    /// the swap file's alignment, and chunks of more than one page.
    pub fn async_page_in(config: &RegionConfig) -> bool {
        config.async_page_in
            && config.resolve == ResolveMode::Copy
            && page_size() == DIRECT_ALIGN
            && config.chunk_size > page_size()
    }
}

/// How victims are written.
#[derive(Debug)]
pub(crate) struct PageOutOptions {
    /// Chunks kept free ahead of demand with asynchronous page-out.
    pub headroom: usize,
    /// Swap writes failing for lack of space: reported per episode, and what to do meanwhile.
    pub swap_full: SwapFullEpisodes,
}

impl PageOutOptions {
    pub fn from_config(config: &RegionConfig) -> Self {
        Self {
            headroom: config.headroom,
            swap_full: SwapFullEpisodes::new(config.on_swap_full),
        }
    }
}
