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
//! Page-out of chunk `v`: `MADV_DONTNEED` on the registered mapping (any access now raises a
//! minor fault and waits for this thread), write the data from the alias mapping to swap, then
//! punch `v` out of the memfd (the next access raises a missing fault). A failed write leaves
//! `v` resident: its page-table entries come back on the next minor fault.
//!
//! Page-in of chunk `c`: make room, then read `c` from swap (or zero it) and map the whole chunk
//! at once, which wakes every thread waiting anywhere in it. A failed read or checksum poisons
//! the chunk (`UFFDIO_POISON`): its accessors get SIGBUS, never garbage.

mod async_page_out;
mod chunk_table;
mod commands;
mod fault_handler_builder;
mod fault_loop;
mod handler_shared;
mod options;
mod page_bitmap;
mod region_memory;

use chunk_table::ChunkState;
pub(crate) use fault_loop::FaultHandler;
use fault_loop::Fill;
pub(crate) use handler_shared::HandlerShared;
pub(crate) use region_memory::RegionMemory;
