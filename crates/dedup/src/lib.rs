//! Page deduplication for memvisor (seed 001, chapter 4: Singleton).
//!
//! A [`Scanner`] reads pages from [`PageSource`]s — other processes by pid
//! ([`ProcessMemory`], `process_vm_readv` on the pages `/proc/PID/pagemap` reports present),
//! ranges of memvisor's own memory ([`LocalMemory`]), or owned ranges tracked for writes
//! ([`TrackedMemory`], userfaultfd `WP_ASYNC` + `PAGEMAP_SCAN`, so rescans read only the pages
//! written since the previous pass) — and indexes them in a [`PageIndex`]: a hash table from
//! each page's xxh3 hash to classes of pages with identical bytes (Singleton's replacement for
//! KSM's trees). A hash match is always confirmed by comparing the bytes; after page X matched
//! Y, the seed's lookahead compares X+1 with Y+1 before hashing.
//!
//! ```no_run
//! use memvisor_dedup::{ProcessMemory, Scanner, ScannerConfig};
//! let mut scanner = Scanner::new(ScannerConfig::default());
//! for pid in [1234, 5678] {
//!     scanner.add_source(Box::new(ProcessMemory::open(pid)?));
//! }
//! let pass = scanner.pass();
//! println!("{pass:?} {:?}", scanner.summary());
//! # Ok::<(), memvisor_dedup::DedupError>(())
//! ```
//!
//! The kernel's side: [`KsmStatus`] and [`ProcessKsmStat`] read what KSM merged,
//! [`KsmSettings`] and [`KsmSettingsGuard`] change and restore ksmd's rate (one process at a
//! time: [`KsmSettingsLock`], a lock file in root's private `/run/memvisor`), and [`KsmTuner`]
//! is the control loop that steers that rate from the measured arrival of new duplicates.

mod class_list;
mod cpu_time;
mod dedup_error;
mod ksm_control;
mod ksm_settings_lock;
mod ksm_status;
mod ksm_tuner;
mod mergeable;
mod page;
mod page_fingerprint;
mod page_index;
mod page_source;
mod pages_child;
mod process_maps;
mod process_memory;
mod scan_stats;
mod scanner;
mod tracked_memory;

pub use cpu_time::{parse_stat_cpu_ticks, process_cpu_time, thread_cpu_time};
pub use dedup_error::DedupError;
pub use ksm_control::{ksmd_pid, KsmSettings, KsmSettingsGuard};
pub use ksm_settings_lock::{ksm_lock_dir, KsmSettingsLock, KSM_LOCK_TIMEOUT};
pub use ksm_status::{parse_number, KsmStatus, ProcessKsmStat, KSM_SYSFS};
pub use ksm_tuner::{KsmTuner, KsmTunerConfig, TunerStep};
pub use mergeable::{madvise_mergeable, madvise_unmergeable};
pub use page::{fill_seeded, is_zero_page, page_hash, page_prefix, PAGE_SIZE};
pub use page_fingerprint::PageFingerprint;
pub use page_index::{ClassId, IndexSummary, PageIndex, PageLocation, SourceSummary};
pub use page_source::{LocalMemory, PageSource, PageState};
pub use pages_child::{ChildBacking, PagesChild};
pub use process_maps::MapEntry;
pub use process_memory::{is_exited, read_maps, ProcessMemory};
pub use scan_stats::{MatchStats, PassStats, SourceReport};
pub use scanner::{Scanner, ScannerConfig, DEFAULT_BATCH_PAGES};
pub use tracked_memory::TrackedMemory;
