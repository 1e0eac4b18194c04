//! Private virtual memory for memvisor: a userfaultfd pager.
//!
//! A [`Region`] is `size` bytes of memory backed by a memfd, of which at most `budget` bytes
//! (counted in pages) are resident; the rest lives in a private sparse [`SwapFile`], stored page
//! by page with a CRC32C each. The region is cut into chunks (1 MiB by default): the unit a
//! policy of `memvisor-policy` ranks (chunk index = unit id) and a page-out writes, and the most
//! a page-in reads; a chunk may be partly resident. A handler thread per region serves
//! userfaultfd faults with an *adaptive paging unit* ([`PageInUnit`]): the faulting page alone
//! when the faulting thread's faults are scattered (several such reads in flight at once, for
//! faults of different threads), a window that doubles at each fault in line when they start
//! to stream, and the chunk's missing pages plus the next chunk read ahead once it spans a
//! chunk. To make room it evicts a victim chunk: its changed pages are written to swap
//! with `O_DIRECT` (adjacent ones in one write), unchanged ones dropped, and the chunk punched out
//! of the memfd. Pages are mapped write-protected with `WP_ASYNC`, so `PAGEMAP_SCAN` tells which
//! were written. Optional sampling (minor faults after `MADV_DONTNEED`) feeds the policy's
//! reference bits. Victims are written asynchronously (writer threads or an io_uring,
//! [`PageOut`]), ahead of demand and, with overlapped page-in, while a page-in's read is in
//! flight; asynchronous page-in (the faulting page first) and busy polling of the userfaultfd
//! are optional. Design notes and measurements: the crate's README.
//!
//! ```no_run
//! use memvisor_pager::{Region, RegionConfig};
//! let region = Region::new(RegionConfig::new(64 << 20, 16 << 20, "/var/tmp"))?;
//! // SAFETY: the region is 64 MiB and outlives this use.
//! unsafe { region.as_ptr().add(12345).write(7) };
//! println!("{:?}", region.stats());
//! # Ok::<(), memvisor_pager::PagerError>(())
//! ```
//!
//! Failure semantics: a failed swap write keeps the chunk resident (budget overrun, counted in
//! [`RegionStats::overrun_chunks`], error recorded); a failed swap read or a checksum mismatch
//! poisons the pages it was for with `UFFDIO_POISON`, so accessors get `SIGBUS` and never wrong
//! data. Errors
//! name the region, chunk, offset and swap path; see [`Region::take_errors`].
//!
//! Building blocks usable on their own: [`Userfaultfd`] (safe ioctl wrappers), [`Memfd`] and
//! [`Mapping`], [`SwapFile`], [`crc32c()`](crc32c::crc32c). C callers use [`ffi`] through
//! `include/memvisor.h`.

mod cachestat;
mod chunk_prefetcher;
mod cpu_wake_latency;
pub mod crc32c;
mod demand_reader;
mod device_readahead;
mod direct_io_pins;
mod error_log;
mod event_fd;
mod fault_handler;
mod fault_injector;
mod fd_readiness;
pub mod ffi;
mod guest_held_blocks;
pub mod host_cache;
pub mod image_cache_limit;
pub mod image_cache_model;
mod image_file;
mod memfd;
mod migration_pages;
mod page_bitmap;
mod page_cache_calls;
mod page_in_unit;
mod page_out_engine;
mod page_reads;
mod pagemap;
mod pager_error;
mod raw_memory_calls;
mod refault_curve;
mod region;
mod region_command;
mod region_config;
mod region_migration;
mod region_stats;
mod remote_pages;
mod residency_hint;
mod straddled_drops;
mod swap_file;
mod swap_full;
mod swap_io;
#[cfg(test)]
mod test_rng;
mod thread_pool_writer;
mod thread_start_hook;
mod uring_completion;
mod uring_writer;
pub mod userfaultfd;
mod write_job;

pub use cachestat::{cachestat, CacheStat};
pub use cpu_wake_latency::{CpuWakeLatency, CPU_LATENCY_DEVICE};
pub use direct_io_pins::DirectIoPin;
pub use fault_injector::FaultInjector;
pub use host_cache::{HostCache, HostCacheStats};
pub use image_cache_model::{ImageCacheFigures, ImageCacheModel};
pub use image_file::{FileKey, ImageFile, ReadEpoch};
pub use memfd::{page_size, Mapping, Memfd};
pub use migration_pages::{InstallOutcome, MigrationPages};
pub use page_in_unit::PageInUnit;
pub use pagemap::Pagemap;
pub use pager_error::PagerError;
pub use refault_curve::RefaultCurve;
pub use region::Region;
pub use region_config::{
    PageOut, RegionConfig, ResolveMode, DEFAULT_BUSY_POLL, DEFAULT_CHUNK_SIZE, DEFAULT_HEADROOM,
    DEFAULT_POLICY, DEFAULT_SAMPLE_INTERVAL, SMALL_CHUNK,
};
pub use region_stats::RegionStats;
pub use swap_file::{is_zero, ReadError, SwapFile, WriteOutcome, DIRECT_ALIGN};
pub use swap_full::OnSwapFull;
pub use thread_start_hook::{set_thread_start_hook, spawn_scoped_started, spawn_started};
pub use userfaultfd::{FaultEvent, FaultKind, RegisterMode, Userfaultfd};
