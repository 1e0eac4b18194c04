//! [`RefaultCurve`]: how many page-ins more memory would have saved a region, by how much
//! more: the upper part of its miss-ratio curve, measured online.
//!
//! The fault handler keeps a [`RefaultHistory`](memvisor_policy::RefaultHistory) (a stamp per
//! chunk at its eviction, the kernel's refault distance) and counts every page-in that reads
//! a chunk back from swap or an image at the distance, in bytes evicted since the chunk left,
//! at which it would have stayed. The counts are cumulative: a reader (the control socket, a
//! memory broker) takes two snapshots and divides their difference by the time between them.

use std::sync::atomic::{AtomicU64, Ordering};

use memvisor_policy::Refault;

/// Buckets of a region's curve: its size in 128 steps.
pub(crate) const REFAULT_BUCKETS: usize = 128;

/// A snapshot of a region's refault counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefaultCurve {
    /// Width of one bucket in bytes (a whole number of pages).
    pub bucket_bytes: u64,
    /// `refaults[k]`: page-ins that `(k + 1) * bucket_bytes` more budget would have saved
    /// and `k * bucket_bytes` would not (refault distance in `(k, k + 1]` buckets).
    pub refaults: Vec<u64>,
    /// Page-ins of evicted chunks that even the last bucket's extra budget would not have
    /// saved.
    pub beyond: u64,
    /// Bytes evicted since the region was created.
    pub evicted_bytes: u64,
}

impl RefaultCurve {
    /// Page-ins that `extra` more bytes of budget would have saved (whole buckets only).
    pub fn saved_with(&self, extra: u64) -> u64 {
        memvisor_policy::saved_with(&self.refaults, self.bucket_bytes, extra)
    }
}

/// The live counters behind [`RefaultCurve`], written by the handler, read by anyone.
#[derive(Debug)]
pub(crate) struct RefaultCounters {
    bucket_bytes: u64,
    buckets: Vec<AtomicU64>,
    beyond: AtomicU64,
    evicted_bytes: AtomicU64,
}

impl RefaultCounters {
    /// Counters for buckets of `bucket_bytes` each.
    pub fn new(bucket_bytes: u64) -> Self {
        Self {
            bucket_bytes,
            buckets: (0..REFAULT_BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            beyond: AtomicU64::new(0),
            evicted_bytes: AtomicU64::new(0),
        }
    }

    /// Counts one refault where the history placed it.
    pub fn record(&self, refault: Refault) {
        match refault {
            Refault::Bucket(k) => {
                if let Some(b) = self.buckets.get(k) {
                    b.fetch_add(1, Ordering::Relaxed);
                }
            }
            Refault::Beyond => {
                self.beyond.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Counts `bytes` more evicted.
    pub fn evicted(&self, bytes: u64) {
        self.evicted_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    /// A snapshot.
    pub fn snapshot(&self) -> RefaultCurve {
        RefaultCurve {
            bucket_bytes: self.bucket_bytes,
            refaults: self
                .buckets
                .iter()
                .map(|b| b.load(Ordering::Relaxed))
                .collect(),
            beyond: self.beyond.load(Ordering::Relaxed),
            evicted_bytes: self.evicted_bytes.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_snapshot_and_saved_bytes() {
        let c = RefaultCounters::new(4096);
        c.record(Refault::Bucket(0));
        c.record(Refault::Bucket(2));
        c.record(Refault::Bucket(2));
        c.record(Refault::Beyond);
        c.record(Refault::Bucket(REFAULT_BUCKETS)); // out of range: ignored
        c.evicted(8192);
        let s = c.snapshot();
        assert_eq!(s.refaults.len(), REFAULT_BUCKETS);
        assert_eq!(s.refaults[..3], [1, 0, 2]);
        assert_eq!(s.beyond, 1);
        assert_eq!(s.evicted_bytes, 8192);
        assert_eq!(s.saved_with(4095), 0);
        assert_eq!(s.saved_with(4096), 1);
        assert_eq!(s.saved_with(3 * 4096), 3);
        assert_eq!(RefaultCurve::default().saved_with(1 << 30), 0);
    }
}
