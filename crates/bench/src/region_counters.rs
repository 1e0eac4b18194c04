//! [`RegionCounters`]: the event counters of a memvisor region's
//! [`RegionStats`](memvisor_pager::RegionStats), serializable and subtractable, so a phase of
//! the workload reports only its own paging.

use memvisor_pager::RegionStats;
use serde::{Deserialize, Serialize};

macro_rules! region_counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// Event counters of a region (see `RegionStats` for each one's meaning).
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
        #[serde(default)]
        pub struct RegionCounters {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl RegionCounters {
            /// The counters of `s`.
            pub fn of(s: &RegionStats) -> Self {
                Self { $($name: s.$name,)* }
            }

            /// The change from `earlier` to `self`.
            pub fn since(&self, earlier: &Self) -> Self {
                Self { $($name: self.$name.saturating_sub(earlier.$name),)* }
            }
        }
    };
}

region_counters!(
    /// Missing-fault messages handled.
    missing_faults,
    /// Minor-fault messages handled.
    minor_faults,
    /// Faults on chunks already resident.
    resident_faults,
    /// Chunks read from swap.
    page_ins,
    /// Chunks filled with zeros.
    zero_fills,
    /// Chunks written to swap.
    page_outs,
    /// Evicted chunks found all-zero.
    zero_page_outs,
    /// Evicted chunks dropped without a write (clean).
    clean_evictions,
    /// Bytes read from swap.
    bytes_read,
    /// Bytes written to swap.
    bytes_written,
    /// Handler nanoseconds in page-in faults (eviction included).
    page_in_nanos,
    /// Of which making room.
    evict_nanos,
    /// Nanoseconds in swap reads.
    swap_read_nanos,
    /// Nanoseconds in swap writes.
    swap_write_nanos,
    /// Access samples taken.
    samples,
    /// Nanoseconds taking samples.
    sample_nanos,
    /// Clean verdicts contradicted by the checksum (must stay 0).
    dirty_tracking_misses,
    /// Failed swap writes.
    write_errors,
    /// Failed swap reads and checksum mismatches.
    read_errors,
    /// Chunks read ahead of their fault (sequential readahead).
    readahead_reads,
    /// Page-ins served from data read ahead.
    readahead_hits,
    /// Chunks mapped ahead of a forward stream.
    chunks_mapped_ahead,
    /// Asynchronous page-ins: the faulting thread released after its own page.
    early_wakes,
    /// Page-ins of a scattered fault (the page alone).
    scattered_page_ins,
    /// Single-page reads the fault loop did not wait for (parallel page-in).
    parallel_page_reads,
    /// Times busy polling backed off because the CPUs were contended.
    busy_poll_backoffs,
    /// Times idle CPUs were asked to poll while the handler did.
    cpu_wake_latency_holds,
    /// Page-ins that waited for page-out writes to free room.
    page_in_write_waits,
    /// Faults on a chunk while it was being written.
    faults_during_write,
);

impl RegionCounters {
    /// Fault messages of either kind.
    pub fn faults(&self) -> u64 {
        self.missing_faults + self.minor_faults
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subtracts_field_by_field() {
        let a = RegionStats {
            page_ins: 5,
            bytes_read: 10,
            minor_faults: 1,
            ..Default::default()
        };
        let b = RegionStats {
            page_ins: 7,
            bytes_read: 30,
            missing_faults: 2,
            minor_faults: 1,
            ..Default::default()
        };
        let d = RegionCounters::of(&b).since(&RegionCounters::of(&a));
        assert_eq!((d.page_ins, d.bytes_read, d.faults()), (2, 20, 2));
    }
}
