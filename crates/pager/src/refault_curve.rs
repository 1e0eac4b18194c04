//! [`RefaultCurve`]: how many page-ins more memory would have saved a region, by how much
//! more: the upper part of its miss-ratio curve, measured online.
//!
//! The fault handler keeps a [`RefaultHistory`](memvisor_policy::RefaultHistory) (a stamp per
//! chunk at its eviction, the kernel's refault distance) and counts every page-in that reads
//! a chunk back from swap or an image at the distance, in bytes evicted since the chunk left,
//! at which it would have stayed, in log-linear buckets: one chunk wide up to 32 chunks, then
//! 16 per doubling. The counts are cumulative: a reader (the control socket, a
//! memory broker) takes two snapshots and divides their difference by the time between them.

use std::sync::atomic::{AtomicU64, Ordering};

use memvisor_policy::{Refault, RefaultScale};

/// Buckets per doubling of the refault distance (a resolution of 1/16).
pub(crate) const REFAULT_SUB_BUCKETS: u64 = 16;

/// A snapshot of a region's refault counts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RefaultCurve {
    /// Width of the first buckets in bytes (one chunk).
    pub unit_bytes: u64,
    /// Buckets per doubling of the distance (see [`RefaultScale`]).
    pub sub_buckets: u64,
    /// `refaults[k]`: page-ins that `scale().upper(k)` more bytes of budget would have saved
    /// and `scale().lower(k)` would not.
    pub refaults: Vec<u64>,
    /// Page-ins of evicted chunks that even the last bucket's extra budget would not have
    /// saved.
    pub beyond: u64,
    /// Bytes evicted since the region was created.
    pub evicted_bytes: u64,
}

impl RefaultCurve {
    /// The buckets' bounds, in bytes.
    pub fn scale(&self) -> RefaultScale {
        RefaultScale::new(self.unit_bytes, self.sub_buckets)
    }

    /// Page-ins that `extra` more bytes of budget would have saved (whole buckets only).
    pub fn saved_with(&self, extra: u64) -> u64 {
        memvisor_policy::saved_with(&self.refaults, self.scale(), extra)
    }
}

/// The live counters behind [`RefaultCurve`], written by the handler, read by anyone.
#[derive(Debug)]
pub(crate) struct RefaultCounters {
    unit_bytes: u64,
    buckets: Vec<AtomicU64>,
    beyond: AtomicU64,
    evicted_bytes: AtomicU64,
}

impl RefaultCounters {
    /// Counters for `buckets` buckets whose first ones are `unit_bytes` wide.
    pub fn new(unit_bytes: u64, buckets: usize) -> Self {
        Self {
            unit_bytes,
            buckets: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
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
            unit_bytes: self.unit_bytes,
            sub_buckets: REFAULT_SUB_BUCKETS,
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
        let c = RefaultCounters::new(4096, 40);
        c.record(Refault::Bucket(0));
        c.record(Refault::Bucket(2));
        c.record(Refault::Bucket(2));
        c.record(Refault::Bucket(33)); // past the linear part: 2 units wide
        c.record(Refault::Beyond);
        c.record(Refault::Bucket(40)); // out of range: ignored
        c.evicted(8192);
        let s = c.snapshot();
        assert_eq!(s.refaults.len(), 40);
        assert_eq!(s.refaults[..3], [1, 0, 2]);
        assert_eq!(s.beyond, 1);
        assert_eq!(s.evicted_bytes, 8192);
        assert_eq!(s.saved_with(4095), 0);
        assert_eq!(s.saved_with(4096), 1);
        assert_eq!(s.saved_with(3 * 4096), 3);
        assert_eq!(s.scale().upper(33), 36 * 4096);
        assert_eq!(s.saved_with(36 * 4096), 4);
        assert_eq!(RefaultCurve::default().saved_with(1 << 30), 0);
    }
}
