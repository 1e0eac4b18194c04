//! [`FaultHandler`]: the thread that serves a region's userfaultfd.
//!
//! It owns everything mutable about the region: the policy, the per-chunk state
//! ([`ChunkTable`](chunk_table::ChunkTable)), the swap I/O
//! ([`SwapIo`](crate::swap_io::SwapIo): swap file, page-out engine, demand reader,
//! prefetcher), the memfd and its mappings ([`RegionMemory`]). Being the only actor, it needs
//! no locks; other threads see it through [`HandlerShared`] (statistics, errors, the stop
//! signal). It is built whole from the region's configuration by [`FaultHandler::builder`].
//! The loop itself is in `fault_loop.rs`, page-out completion in `async_page_out.rs`,
//! run-time commands in `commands.rs`.
//!
//! The region's unit of policy and page-out is the chunk; its unit of residency is the page.
//! A missing fault brings in what the access pattern needs (`page_in.rs`,
//! [`AccessPattern`](access_pattern::AccessPattern)): the faulting page alone when faults are
//! scattered, a growing window as they start to stream, the chunk's missing pages and the next
//! chunk ahead once the window spans a chunk. The budget
//! counts resident pages; the policy ranks chunks, each of which may be partly resident. A
//! scattered page-in may only start its read and return to the loop (parallel page-in,
//! [`PageReads`](crate::page_reads::PageReads)); its completion maps the page.
//!
//! Page-out of chunk `v` (`page_out.rs`): `MADV_DONTNEED` on the registered mapping (any access
//! now raises a minor fault and waits for this thread), write its changed resident pages from
//! the alias mapping to swap (adjacent ones in one I/O; unchanged pages are dropped, zero pages
//! punched), then punch `v` out of the memfd (the next access raises a missing fault). A failed
//! write leaves `v` resident: its page-table entries come back on the next minor fault.
//!
//! A failed read or checksum poisons the pages it was for (`UFFDIO_POISON`): their accessors
//! get SIGBUS, never garbage.
//!
//! Live migration's side is in `migration.rs`; a post-copy destination's *remote* pages (their
//! content still at the source: never mapped or read, faults on them wait) in
//! `remote_pages.rs`.

mod access_pattern;
mod async_page_out;
mod busy_poll;
mod chunk_table;
mod commands;
mod fault_handler_builder;
mod fault_loop;
mod handler_shared;
mod image_blocks;
mod image_first;
mod map_ahead;
mod migration;
mod options;
mod page_in;
mod page_out;
mod refaults;
mod region_memory;
mod remote_pages;
mod sample_pacer;
mod swap_mapper;
mod thread_usage;
mod wake_latency_hold;

use chunk_table::ChunkState;
pub(crate) use fault_handler_builder::refault_scale;
pub(crate) use fault_loop::FaultHandler;
use fault_loop::Fill;
pub(crate) use handler_shared::HandlerShared;
pub(crate) use region_memory::RegionMemory;
