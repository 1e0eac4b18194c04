//! [`RegionStats`]: counters of one region, updated by its fault handler, read from any thread.

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a region's counters. Chunk counts are the state at the time of the snapshot;
/// the rest count events since the region was created.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegionStats {
    /// Chunks in the region.
    pub chunks: u64,
    /// Chunks with at least one page in memory (including overrun chunks).
    pub resident_chunks: u64,
    /// Pages in memory: what the budget counts.
    pub resident_pages: u64,
    /// Chunks whose data is in the swap file only.
    pub swapped_chunks: u64,
    /// Chunks neither resident nor stored: never touched, or all zeros when evicted.
    pub zero_chunks: u64,
    /// Chunks whose page-in failed: accesses raise SIGBUS.
    pub poisoned_chunks: u64,
    /// Resident chunks over the budget, kept because their page-out failed.
    pub overrun_chunks: u64,
    /// Missing-fault messages handled.
    pub missing_faults: u64,
    /// Minor-fault messages handled.
    pub minor_faults: u64,
    /// Fault messages for chunks already resident (concurrent faults, served by a wake).
    pub resident_faults: u64,
    /// Page-ins that read from swap (a page or a whole chunk).
    pub page_ins: u64,
    /// Page-ins of the faulting page alone, chosen because faults were scattered (see the
    /// adaptive page-in in the crate docs); the others bring in the whole chunk.
    pub scattered_page_ins: u64,
    /// Of the scattered page-ins: pages read on their own with other reads in flight beside
    /// them (parallel page-in), the fault loop serving other faults meanwhile.
    pub parallel_page_reads: u64,
    /// Page-ins that filled zeros only (never written, or zero when evicted).
    pub zero_fills: u64,
    /// Chunk evictions that wrote to swap (each writes the chunk's written pages).
    pub page_outs: u64,
    /// Evicted chunks found all-zero (not written).
    pub zero_page_outs: u64,
    /// Evicted chunks unchanged since they were read from swap (or zero-filled): dropped
    /// without a write, thanks to dirty tracking.
    pub clean_evictions: u64,
    /// Swap copies punched because the program discarded their pages (a written resident
    /// page's stale copy keeps its blocks until the page is written out again in its place).
    pub stale_punches: u64,
    /// Whole chunks discarded ([`Region::discard`](crate::Region::discard)): dropped from memory
    /// and swap, or reset from poisoned.
    pub discarded_chunks: u64,
    /// Asynchronous page-out: fault messages for chunks being written (served when the write
    /// completes, by keeping the chunk in memory).
    pub faults_during_write: u64,
    /// Asynchronous page-out: chunks kept in memory after their write because a fault asked
    /// for them meanwhile (no read needed).
    pub rescued_chunks: u64,
    /// Asynchronous page-out: page-ins that had to wait for a write to complete to stay within
    /// the budget (the headroom was used up).
    pub page_in_write_waits: u64,
    /// Sequential readahead: chunks read ahead of their fault.
    pub readahead_reads: u64,
    /// Sequential readahead: page-ins served from data read ahead (the rest of the readahead
    /// reads were not used: the next fault went elsewhere, or the chunk changed meanwhile).
    pub readahead_hits: u64,
    /// Map-ahead: chunks brought in ahead of a forward stream while no fault waited (its
    /// thread then found them mapped).
    pub chunks_mapped_ahead: u64,
    /// Asynchronous page-in: page-ins whose faulting thread was released as soon as its own
    /// page was read and verified, before the rest of the chunk.
    pub early_wakes: u64,
    /// Evictions put off because a direct-I/O read was filling the chunk (it stayed as
    /// overrun).
    pub pinned_evictions_skipped: u64,
    /// Chunks of the program's own memory that eviction passed over to take a chunk an image
    /// holds (image-first eviction), counted per chunk passed.
    pub own_chunks_spared: u64,
    /// Chunks dirty tracking reported clean whose checksum said otherwise (then written):
    /// should stay 0.
    pub dirty_tracking_misses: u64,
    /// Swap mapper: pages now associated with an image block (their eviction writes nothing).
    pub image_pages: u64,
    /// Swap mapper: bytes of pages whose eviction wrote nothing because an image holds them
    /// (each association counted once: its first eviction, which would have been a write).
    pub swap_write_bytes_avoided: u64,
    /// Swap mapper: bytes read back from images at page-in.
    pub image_read_bytes: u64,
    /// Swap mapper: associations ended because the program wrote the page.
    pub image_associations_ended_by_guest: u64,
    /// Swap mapper: associations ended because the image block was about to be written.
    pub image_associations_ended_by_image: u64,
    /// Swap mapper: pages a complete image read covered but that were not associated (a
    /// write to the image during the read, the page not equal to the block, no dirty
    /// tracking).
    pub image_associations_refused: u64,
    /// False-read preventer: bytes of pages a file read was about to overwrite that were
    /// mapped as zeros instead of being read from swap.
    pub false_read_bytes_avoided: u64,
    /// Live migration (source): pages read for sending, from memory, swap or image.
    pub migration_pages_read: u64,
    /// Live migration (destination): pages received and installed in memory or swap.
    pub migration_pages_installed: u64,
    /// Bytes read from swap.
    pub bytes_read: u64,
    /// Bytes written to swap.
    pub bytes_written: u64,
    /// Failed swap writes.
    pub write_errors: u64,
    /// Failed swap reads and checksum mismatches.
    pub read_errors: u64,
    /// Episodes of a full swap filesystem: runs of page-outs failing for lack of space (see
    /// [`OnSwapFull`](crate::OnSwapFull)), each ended by a successful write.
    pub swap_full_episodes: u64,
    /// Page-outs that failed for lack of space (also counted in `write_errors`).
    pub swap_full_failures: u64,
    /// Whether an episode is going on now: the swap filesystem was full at the last write.
    pub swap_full: bool,
    /// Nanoseconds the handler spent serving faults that needed a page-in (eviction included).
    pub page_in_nanos: u64,
    /// Of which: making room (page-outs, including their swap writes).
    pub evict_nanos: u64,
    /// Nanoseconds in swap writes.
    pub swap_write_nanos: u64,
    /// Nanoseconds in swap reads (checksum included).
    pub swap_read_nanos: u64,
    /// Access samples taken (see [`RegionConfig::sample_interval`](crate::RegionConfig)).
    pub samples: u64,
    /// Access samples due but not taken: the region could need no victim soon (it fits its
    /// budget, or holds less than half of it).
    pub samples_skipped: u64,
    /// Times the handler stopped busy polling for a while because it was taking a CPU that
    /// other threads were waiting for (see `--busy-poll`).
    pub busy_poll_backoffs: u64,
    /// Times the handler began to hold its request that idle CPUs poll instead of halting
    /// (`CpuWakeLatency`, while it busy-polls; see `--cpu-wake-latency`).
    pub cpu_wake_latency_holds: u64,
    /// Times the handler lifted that request (20 ms after it stopped polling); equal to the
    /// holds whenever none is in force.
    pub cpu_wake_latency_releases: u64,
    /// Nanoseconds spent taking samples (dropping page-table entries).
    pub sample_nanos: u64,
    /// Median handler service time of a page-in fault (from reading the fault message to the
    /// wake), in nanoseconds: the upper bound of its power-of-two histogram bucket.
    pub page_in_p50_nanos: u64,
    /// 99th percentile of the same, bucket upper bound.
    pub page_in_p99_nanos: u64,
    /// Longest page-in fault service time, exact.
    pub page_in_max_nanos: u64,
}

impl RegionStats {
    /// Nanoseconds of page-in work spent neither evicting nor reading swap: zeroing or
    /// allocating, and mapping the chunk (the resolution ioctls).
    pub fn map_nanos(&self) -> u64 {
        self.page_in_nanos
            .saturating_sub(self.evict_nanos)
            .saturating_sub(self.swap_read_nanos)
    }
}

/// The live counters behind [`RegionStats`].
#[derive(Debug, Default)]
pub(crate) struct StatsCounters {
    pub chunks: AtomicU64,
    pub resident_chunks: AtomicU64,
    pub resident_pages: AtomicU64,
    pub swapped_chunks: AtomicU64,
    pub poisoned_chunks: AtomicU64,
    pub overrun_chunks: AtomicU64,
    pub missing_faults: AtomicU64,
    pub minor_faults: AtomicU64,
    pub resident_faults: AtomicU64,
    pub page_ins: AtomicU64,
    pub scattered_page_ins: AtomicU64,
    pub parallel_page_reads: AtomicU64,
    pub zero_fills: AtomicU64,
    pub page_outs: AtomicU64,
    pub zero_page_outs: AtomicU64,
    pub clean_evictions: AtomicU64,
    pub dirty_tracking_misses: AtomicU64,
    pub stale_punches: AtomicU64,
    pub discarded_chunks: AtomicU64,
    pub faults_during_write: AtomicU64,
    pub rescued_chunks: AtomicU64,
    pub page_in_write_waits: AtomicU64,
    pub readahead_reads: AtomicU64,
    pub readahead_hits: AtomicU64,
    pub chunks_mapped_ahead: AtomicU64,
    pub early_wakes: AtomicU64,
    pub pinned_evictions_skipped: AtomicU64,
    pub own_chunks_spared: AtomicU64,
    pub image_pages: AtomicU64,
    pub swap_write_bytes_avoided: AtomicU64,
    pub image_read_bytes: AtomicU64,
    pub image_associations_ended_by_guest: AtomicU64,
    pub image_associations_ended_by_image: AtomicU64,
    pub image_associations_refused: AtomicU64,
    pub false_read_bytes_avoided: AtomicU64,
    pub migration_pages_read: AtomicU64,
    pub migration_pages_installed: AtomicU64,
    pub bytes_read: AtomicU64,
    pub bytes_written: AtomicU64,
    pub write_errors: AtomicU64,
    pub read_errors: AtomicU64,
    pub swap_full_episodes: AtomicU64,
    pub swap_full_failures: AtomicU64,
    /// 1 during a swap-full episode, else 0.
    pub swap_full: AtomicU64,
    pub page_in_nanos: AtomicU64,
    pub evict_nanos: AtomicU64,
    pub swap_write_nanos: AtomicU64,
    pub swap_read_nanos: AtomicU64,
    pub samples: AtomicU64,
    pub samples_skipped: AtomicU64,
    pub busy_poll_backoffs: AtomicU64,
    pub cpu_wake_latency_holds: AtomicU64,
    pub cpu_wake_latency_releases: AtomicU64,
    pub sample_nanos: AtomicU64,
    pub page_in_max_nanos: AtomicU64,
    /// Bucket `i` counts page-in service times in `[2^i, 2^(i+1))` ns (bucket 0 also 0).
    pub page_in_hist: Log2Histogram,
}

/// 64 power-of-two buckets of nanoseconds.
#[derive(Debug)]
pub(crate) struct Log2Histogram(pub [AtomicU64; 64]);

impl Default for Log2Histogram {
    fn default() -> Self {
        Self(std::array::from_fn(|_| AtomicU64::new(0)))
    }
}

impl StatsCounters {
    /// Records one page-in fault served in `nanos`.
    pub fn record_page_in(&self, nanos: u64) {
        add(&self.page_in_nanos, nanos);
        self.page_in_max_nanos.fetch_max(nanos, Ordering::Relaxed);
        let bucket = 63 - (nanos | 1).leading_zeros() as usize;
        add(&self.page_in_hist.0[bucket], 1);
    }

    /// Upper bound of the bucket holding quantile `q` (0..=1) of the page-in histogram.
    fn page_in_quantile(&self, q: f64) -> u64 {
        let counts: Vec<u64> = self
            .page_in_hist
            .0
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let rank = ((total as f64 * q).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, &c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return if i >= 63 { u64::MAX } else { (2u64 << i) - 1 };
            }
        }
        u64::MAX
    }
}

/// Adds `n` to counter `c`.
pub(crate) fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Subtracts `n` from counter `c`.
pub(crate) fn sub(c: &AtomicU64, n: u64) {
    c.fetch_sub(n, Ordering::Relaxed);
}

impl StatsCounters {
    /// A consistent-enough snapshot (each counter is read atomically, not all at once).
    pub fn snapshot(&self) -> RegionStats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let chunks = g(&self.chunks);
        let resident_chunks = g(&self.resident_chunks);
        let swapped_chunks = g(&self.swapped_chunks);
        let poisoned_chunks = g(&self.poisoned_chunks);
        RegionStats {
            chunks,
            resident_chunks,
            resident_pages: g(&self.resident_pages),
            swapped_chunks,
            zero_chunks: chunks
                .saturating_sub(resident_chunks)
                .saturating_sub(swapped_chunks)
                .saturating_sub(poisoned_chunks),
            poisoned_chunks,
            overrun_chunks: g(&self.overrun_chunks),
            missing_faults: g(&self.missing_faults),
            minor_faults: g(&self.minor_faults),
            resident_faults: g(&self.resident_faults),
            page_ins: g(&self.page_ins),
            scattered_page_ins: g(&self.scattered_page_ins),
            parallel_page_reads: g(&self.parallel_page_reads),
            zero_fills: g(&self.zero_fills),
            page_outs: g(&self.page_outs),
            zero_page_outs: g(&self.zero_page_outs),
            clean_evictions: g(&self.clean_evictions),
            dirty_tracking_misses: g(&self.dirty_tracking_misses),
            stale_punches: g(&self.stale_punches),
            discarded_chunks: g(&self.discarded_chunks),
            faults_during_write: g(&self.faults_during_write),
            rescued_chunks: g(&self.rescued_chunks),
            page_in_write_waits: g(&self.page_in_write_waits),
            readahead_reads: g(&self.readahead_reads),
            readahead_hits: g(&self.readahead_hits),
            chunks_mapped_ahead: g(&self.chunks_mapped_ahead),
            early_wakes: g(&self.early_wakes),
            pinned_evictions_skipped: g(&self.pinned_evictions_skipped),
            own_chunks_spared: g(&self.own_chunks_spared),
            image_pages: g(&self.image_pages),
            swap_write_bytes_avoided: g(&self.swap_write_bytes_avoided),
            image_read_bytes: g(&self.image_read_bytes),
            image_associations_ended_by_guest: g(&self.image_associations_ended_by_guest),
            image_associations_ended_by_image: g(&self.image_associations_ended_by_image),
            image_associations_refused: g(&self.image_associations_refused),
            false_read_bytes_avoided: g(&self.false_read_bytes_avoided),
            migration_pages_read: g(&self.migration_pages_read),
            migration_pages_installed: g(&self.migration_pages_installed),
            bytes_read: g(&self.bytes_read),
            bytes_written: g(&self.bytes_written),
            write_errors: g(&self.write_errors),
            read_errors: g(&self.read_errors),
            swap_full_episodes: g(&self.swap_full_episodes),
            swap_full_failures: g(&self.swap_full_failures),
            swap_full: g(&self.swap_full) != 0,
            page_in_nanos: g(&self.page_in_nanos),
            evict_nanos: g(&self.evict_nanos),
            swap_write_nanos: g(&self.swap_write_nanos),
            swap_read_nanos: g(&self.swap_read_nanos),
            samples: g(&self.samples),
            samples_skipped: g(&self.samples_skipped),
            busy_poll_backoffs: g(&self.busy_poll_backoffs),
            cpu_wake_latency_holds: g(&self.cpu_wake_latency_holds),
            cpu_wake_latency_releases: g(&self.cpu_wake_latency_releases),
            sample_nanos: g(&self.sample_nanos),
            page_in_p50_nanos: self.page_in_quantile(0.5),
            page_in_p99_nanos: self.page_in_quantile(0.99),
            page_in_max_nanos: g(&self.page_in_max_nanos),
        }
    }
}
