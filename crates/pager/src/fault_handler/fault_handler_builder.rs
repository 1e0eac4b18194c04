//! [`FaultHandlerBuilder`]: builds a [`FaultHandler`] whole from a [`RegionConfig`], in two
//! steps around the region's own setup: [`FaultHandler::builder`] makes what can fail before
//! any memory exists (the policy), [`build`](FaultHandlerBuilder::build) the rest once the
//! memory is mapped and registered (bounce buffer, swap I/O, chunk table, options).

use std::sync::Arc;

use memvisor_policy::{EvictionPolicy, RefaultHistory, RefaultScale};

use super::access_pattern::AccessPattern;
use super::chunk_table::ChunkTable;
use super::image_blocks::ImageBlocks;
use super::image_first::ImageFirst;
use super::map_ahead::MapAhead;
use super::options::{LoopTiming, PageInOptions, PageOutOptions};
use super::region_memory::RegionMemory;
use super::{FaultHandler, HandlerShared};
use crate::cpu_wake_latency::CpuWakeLatency;
use crate::memfd::Mapping;
use crate::pagemap::Pagemap;
use crate::pager_error::PagerError;
use crate::refault_curve::REFAULT_SUB_BUCKETS;
use crate::region_config::{RegionConfig, ResolveMode};
use crate::swap_io::SwapIo;
use crate::userfaultfd::Userfaultfd;

/// A fault handler under construction: its configuration and its policy.
pub(crate) struct FaultHandlerBuilder<'a> {
    config: &'a RegionConfig,
    policy: Box<dyn EvictionPolicy>,
    budget_pages: usize,
}

impl FaultHandler {
    /// Starts building the handler of region `region` as `config` says, with a budget of
    /// `budget_chunks`: builds its policy, so a bad policy is refused before the region sets
    /// anything up.
    pub fn builder<'a>(
        config: &'a RegionConfig,
        region: &str,
        budget_chunks: usize,
    ) -> Result<FaultHandlerBuilder<'a>, PagerError> {
        let pages_per_chunk = config.chunk_size / crate::memfd::page_size();
        let chunks = config.size.div_ceil(config.chunk_size);
        let capacity = super::commands::policy_capacity(chunks, budget_chunks * pages_per_chunk);
        let policy = config
            .policy
            .build(capacity, None)
            .map_err(|source| PagerError::Policy {
                region: region.to_string(),
                source,
            })?;
        Ok(FaultHandlerBuilder {
            config,
            policy,
            budget_pages: budget_chunks * pages_per_chunk,
        })
    }
}

impl FaultHandlerBuilder<'_> {
    /// The finished handler of `memory`, registered with `uffd` (write-protected when
    /// `pagemap`, dirty tracking, is given); `shared` is what the region sees of it; `tag`
    /// names the swap file and the handler's helper threads.
    pub fn build(
        self,
        tag: &str,
        shared: Arc<HandlerShared>,
        uffd: Userfaultfd,
        memory: RegionMemory,
        pagemap: Option<Pagemap>,
    ) -> Result<FaultHandler, PagerError> {
        let config = self.config;
        let name = shared.name.clone();
        let chunks = memory.chunks();
        let bounce = match config.resolve {
            ResolveMode::Copy => Some(Mapping::anonymous(memory.chunk_size).map_err(|source| {
                PagerError::Memory {
                    region: name.clone(),
                    op: "mmap bounce",
                    offset: 0,
                    len: memory.len,
                    source,
                }
            })?),
            ResolveMode::AliasContinue => None,
        };
        let page_in_options = PageInOptions::from_config(config, bounce);
        let io = SwapIo::create(config, tag, &name, chunks, memory.len)?;
        let pages_per_chunk = memory.chunk_size / memory.page;
        let region_pages = memory.len / memory.page;
        let residency = shared.residency.clone();
        let image_first = ImageFirst::new(chunks, pagemap.is_some());
        let timing = LoopTiming::from_config(config);
        Ok(FaultHandler {
            shared,
            uffd,
            io,
            chunks: ChunkTable::with_residency_hint(region_pages, pages_per_chunk, residency),
            memory,
            policy: self.policy,
            policy_spec: config.policy.clone(),
            timing,
            page_in_options,
            page_out_options: PageOutOptions::from_config(config),
            pagemap,
            budget_pages: self.budget_pages,
            pattern: AccessPattern::new(pages_per_chunk, config.page_in_unit),
            map_ahead: MapAhead::new(config.map_ahead),
            refault_history: RefaultHistory::new(
                chunks,
                refault_scale(pages_per_chunk),
                region_pages as u64,
            ),
            image_first,
            page_reads: Vec::new(),
            page_reads_done: Vec::new(),
            images: ImageBlocks::new(region_pages),
            fault_offset: None,
            pinned_chunk: None,
            uffd_error_logged: false,
            migration_buffer: None,
            remote_waits: Vec::new(),
            // Opened here, in the thread creating the region (a program may drop root once
            // its memory is set up); without root there is no request.
            wake_request: timing
                .cpu_wake_latency
                .then(CpuWakeLatency::open)
                .and_then(Result::ok),
        })
    }
}

/// The refault distance buckets of a region with chunks of `pages_per_chunk` pages, in
/// pages: one chunk wide at first, [`REFAULT_SUB_BUCKETS`] per doubling (distances up to the
/// region's size: a budget that large evicts nothing).
pub(crate) fn refault_scale(pages_per_chunk: usize) -> RefaultScale {
    RefaultScale::new(pages_per_chunk as u64, REFAULT_SUB_BUCKETS)
}
