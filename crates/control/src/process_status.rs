//! [`ProcessStatus`] and [`RegionStatus`]: what a managed process reports about its memory.

use serde::{Deserialize, Serialize};

use crate::migration_status::MigrationStatus;

/// The state of one managed process: its budget, policy, and every managed region.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessStatus {
    /// Process id.
    pub pid: u32,
    /// Program name (`/proc/PID/comm`).
    pub program: String,
    /// The process budget in bytes: the sum of its regions' budgets (see the preload crate's
    /// README for how it is split).
    pub budget_bytes: u64,
    /// Policy spec every region runs.
    pub policy: String,
    /// Paging unit in bytes.
    pub chunk_size: u64,
    /// Smallest anonymous mapping that is managed.
    pub min_region_bytes: u64,
    /// When this snapshot was taken, milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// When the process started being managed, milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// Large mappings left unmanaged (the arena was full or a region could not be created).
    pub unmanaged_mappings: u64,
    /// Managed regions.
    pub regions: Vec<RegionStatus>,
    /// The live migration this process takes part in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub migration: Option<MigrationStatus>,
    /// Disk images the program read into guest RAM, and their host page cache.
    #[serde(default)]
    pub images: Vec<ImageStatus>,
}

/// A disk image the program read into guest RAM (through the interposed reads), and what
/// memvisor did with its host page cache (`memvisor run --host-cache`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ImageStatus {
    /// The path the image was opened from (it may have been renamed since).
    pub path: String,
    /// `default` (the kernel's cache) or `exclusive` (blocks the guest holds are dropped: at
    /// once, or under a limit when the room is needed).
    pub host_cache: String,
    /// Bytes the program read from the image into guest RAM.
    pub guest_read_bytes: u64,
    /// Bytes of the image in the host page cache now (`cachestat(2)`; 0 if refused).
    pub cached_bytes: u64,
    /// Bytes dropped from the host cache because the guest held them (cumulative).
    pub host_cache_dropped_bytes: u64,
    /// Bytes the guest held that stayed cached because they were dirty or under writeback.
    pub host_cache_kept_dirty_bytes: u64,
    /// Bytes let back into the host cache when memvisor evicted the guest's copy (demotion).
    pub host_cache_demoted_bytes: u64,
    /// Failed drops or demotions (`cachestat`, `posix_fadvise`).
    pub host_cache_errors: u64,
    /// The limit on the image's host cache (`memvisor run --image-cache`, `memvisor set
    /// --image-cache`); `None`: no limit.
    pub cache_limit_bytes: Option<u64>,
    /// Bytes the limit's CAR model holds (what the host cache should hold).
    pub cache_model_bytes: u64,
    /// Of [`cache_model_bytes`](Self::cache_model_bytes), the bytes the guest holds too (an
    /// `exclusive` host cache under a limit keeps them until the room is needed).
    pub cache_guest_held_bytes: u64,
    /// Bytes the guest let go while the model still held them (cumulative): kept in the host
    /// cache as blocks only it holds, instead of being read from the disk again.
    pub cache_guest_released_bytes: u64,
    /// Block accesses of the image the model found in it (cumulative, since the limit was
    /// set).
    pub cache_hits: u64,
    /// Block accesses it did not.
    pub cache_misses: u64,
    /// Bytes dropped from the host cache because the model evicted them.
    pub cache_evicted_dropped_bytes: u64,
    /// Bytes dropped because the host cache held them and the model did not (reconciliation).
    pub cache_reconciled_bytes: u64,
    /// Bytes dropped in 2 MiB windows around large page-cache folios that also held blocks of
    /// the model, when reconciliation alone left the host cache above the limit plus the
    /// slack (the model forgot its blocks that left).
    pub cache_folio_dropped_bytes: u64,
    /// Bytes of victims kept because they were dirty or under writeback (at each try).
    pub cache_kept_dirty_bytes: u64,
    /// Nanoseconds the program spent in reads of the image that missed in the model, and
    /// [`cache_timed_misses`](Self::cache_timed_misses) the block misses of those reads: their
    /// ratio is what one miss costs (what the broker weighs the curve with).
    pub cache_miss_read_nanos: u64,
    /// Block misses of the timed reads.
    pub cache_timed_misses: u64,
    /// The image cache's curve: misses a larger limit would have saved, by distance (in
    /// bytes of the model's blocks).
    pub cache_refaults: RefaultStatus,
}

/// One managed region's state and counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RegionStatus {
    /// Region name (as pager errors spell it).
    pub name: String,
    /// `arena` (anonymous mappings carved from one region), `guest-memfd` (QEMU
    /// `memory-backend-memfd` guest RAM), `guest-file` (QEMU `memory-backend-file` guest RAM in
    /// an empty tmpfs file) or `fixed` (an anonymous mapping at a fixed address, e.g. QEMU's
    /// plain guest RAM).
    pub kind: String,
    /// Start address of the region's mapping.
    pub address: u64,
    /// Size of the region in bytes (for the arena: its virtual size).
    pub size_bytes: u64,
    /// Bytes the program has mapped in the region (the arena: carved and not yet unmapped).
    pub mapped_bytes: u64,
    /// Resident budget in bytes.
    pub budget_bytes: u64,
    /// Policy the region runs.
    pub policy: String,
    /// Bytes in memory.
    pub resident_bytes: u64,
    /// Bytes whose only copy is in the swap file.
    pub swapped_bytes: u64,
    /// Missing faults served.
    pub missing_faults: u64,
    /// Minor faults served.
    pub minor_faults: u64,
    /// Chunks read from swap.
    pub page_ins: u64,
    /// Chunks written to swap.
    pub page_outs: u64,
    /// Chunks evicted without a write (unchanged since read, or zero).
    pub clean_evictions: u64,
    /// Bytes read from swap.
    pub bytes_read: u64,
    /// Bytes written to swap.
    pub bytes_written: u64,
    /// Failed swap reads and checksum mismatches.
    pub read_errors: u64,
    /// Failed swap writes.
    pub write_errors: u64,
    /// Chunks whose page-in failed (accesses raise SIGBUS).
    pub poisoned_chunks: u64,
    /// Resident chunks over the budget (their page-out failed).
    pub overrun_chunks: u64,
    /// Median page-in service time, ns (log2 bucket upper bound).
    pub page_in_p50_nanos: u64,
    /// 99th percentile page-in service time, ns (log2 bucket upper bound).
    pub page_in_p99_nanos: u64,
    /// Nanoseconds the handler spent serving faults that needed a page-in (evictions
    /// included) since the region was created: with `page_ins`, the mean cost of one.
    pub page_in_nanos: u64,
    /// Ranges discarded on behalf of the program (munmap, MADV_DONTNEED, ...).
    pub discards: u64,
    /// Episodes of a full swap filesystem (runs of page-outs failing for lack of space).
    pub swap_full_episodes: u64,
    /// Page-outs that failed for lack of space (included in `write_errors`).
    pub swap_full_failures: u64,
    /// Whether the swap filesystem is full now (an episode is going on).
    pub swap_full: bool,
    /// Swap mapper: bytes of pages associated with a disk-image block now (evicted without a
    /// write, paged in from the image).
    pub image_bytes: u64,
    /// Swap mapper: bytes whose eviction wrote nothing because an image holds them.
    pub swap_write_bytes_avoided: u64,
    /// Swap mapper: bytes read back from images at page-in.
    pub image_read_bytes: u64,
    /// False-read preventer: bytes of pages about to be overwritten by a file read that were
    /// not read from swap.
    pub false_read_bytes_avoided: u64,
    /// Swap mapper: associations ended because the program wrote the page.
    pub image_associations_ended_by_guest: u64,
    /// Swap mapper: associations ended because the image block was written.
    pub image_associations_ended_by_image: u64,
    /// Swap mapper: chunks of the program's own memory that eviction passed over to take one
    /// an image holds.
    pub own_chunks_spared: u64,
    /// Evictions put off because a direct-I/O read (`O_DIRECT`, synchronous or asynchronous)
    /// was filling the chunk: it stayed resident over the budget until the read completed.
    pub pinned_evictions_skipped: u64,
    /// Page-ins that more budget would have saved, by how much more (cumulative).
    pub refaults: RefaultStatus,
}

/// A region's refault counts (its online miss-ratio curve above the current budget): the
/// page-ins since it was created that a larger budget would have saved. Cumulative; a rate
/// is the difference of two snapshots over the time between them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RefaultStatus {
    /// Width of the first buckets in bytes (one chunk).
    pub unit_bytes: u64,
    /// Buckets per doubling of the distance: `2 * sub_buckets` buckets of `unit_bytes`, then
    /// `sub_buckets` per doubling (`memvisor_policy::RefaultScale`).
    pub sub_buckets: u64,
    /// `refaults[k]`: page-ins that `scale().upper(k)` more bytes of budget would have saved
    /// and `scale().lower(k)` would not.
    pub refaults: Vec<u64>,
    /// Page-ins of evicted memory farther than the last bucket.
    pub beyond: u64,
    /// Bytes evicted since the region was created.
    pub evicted_bytes: u64,
}

impl RefaultStatus {
    /// Page-ins that `extra` more bytes of budget would have saved (whole buckets only).
    pub fn saved_with(&self, extra: u64) -> u64 {
        memvisor_policy::saved_with(&self.refaults, self.scale(), extra)
    }

    /// The buckets' bounds, in bytes.
    pub fn scale(&self) -> memvisor_policy::RefaultScale {
        memvisor_policy::RefaultScale::new(self.unit_bytes, self.sub_buckets)
    }
}

impl ProcessStatus {
    /// Sum of `f` over the regions (saturating: a status is what a process says, and the
    /// readers of every user's processes must not overflow on a lying one).
    pub fn total(&self, f: impl Fn(&RegionStatus) -> u64) -> u64 {
        self.regions.iter().map(f).fold(0, u64::saturating_add)
    }

    /// Bytes resident over all regions.
    pub fn resident_bytes(&self) -> u64 {
        self.total(|r| r.resident_bytes)
    }

    /// Bytes swapped over all regions.
    pub fn swapped_bytes(&self) -> u64 {
        self.total(|r| r.swapped_bytes)
    }

    /// Faults (missing + minor) over all regions.
    pub fn faults(&self) -> u64 {
        self.total(|r| r.missing_faults + r.minor_faults)
    }

    /// Swap bytes read plus written over all regions.
    pub fn io_bytes(&self) -> u64 {
        self.total(|r| r.bytes_read + r.bytes_written)
    }
}
