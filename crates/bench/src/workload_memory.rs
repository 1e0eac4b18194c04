//! [`WorkloadMemory`]: the workload's data set, in plain anonymous memory (the kernel
//! variant) or in a memvisor region.

use memvisor_pager::{Mapping, Region, RegionConfig};

use crate::bench_error::BenchError;
use crate::region_counters::RegionCounters;
use crate::variant::Variant;

/// Memory of `size` bytes, page-aligned and zero-initialized.
pub enum WorkloadMemory {
    /// `mmap(MAP_PRIVATE | MAP_ANONYMOUS)`: the kernel pages it (under the cgroup's limit).
    Anonymous(Mapping),
    /// A memvisor region.
    Region(Region),
}

impl WorkloadMemory {
    /// Allocates `size` bytes for `variant`; a memvisor region gets `budget` and swaps to
    /// `swap_dir`.
    pub fn new(
        variant: &Variant,
        size: usize,
        budget: usize,
        swap_dir: &std::path::Path,
    ) -> Result<Self, BenchError> {
        match variant {
            Variant::Kernel { .. } => Mapping::anonymous(size)
                .map(Self::Anonymous)
                .map_err(|e| BenchError::io("mmap anonymous memory of", "(anonymous)", e)),
            Variant::Memvisor(opts) => {
                let config = opts.apply(RegionConfig::new(size, budget, swap_dir).name("kbench"));
                Ok(Self::Region(Region::new(config)?))
            }
        }
    }

    /// The memory as 8-byte words.
    pub fn words(&mut self) -> &mut [u64] {
        let (ptr, len) = match self {
            Self::Anonymous(m) => (m.as_ptr(), m.len()),
            Self::Region(r) => (r.as_ptr(), r.len()),
        };
        // SAFETY: both kinds are read-write mappings valid for `len` bytes for as long as
        // `self` lives, page-aligned (so aligned for u64), and zero-initialized (a region's
        // untouched chunks are zero-filled on first access); nothing else in this process
        // accesses them, and the returned slice borrows `self` mutably, so it is the only
        // reference while it lives.
        unsafe { std::slice::from_raw_parts_mut(ptr.cast::<u64>(), len / 8) }
    }

    /// The region's counters (`None` for anonymous memory).
    pub fn region_counters(&self) -> Option<RegionCounters> {
        match self {
            Self::Anonymous(_) => None,
            Self::Region(r) => Some(RegionCounters::of(&r.stats())),
        }
    }

    /// The region, if any.
    pub fn region(&self) -> Option<&Region> {
        match self {
            Self::Anonymous(_) => None,
            Self::Region(r) => Some(r),
        }
    }
}
