//! [`bounded`]: a managed process's status as the broker may use it.
//!
//! A status is what a process says of itself, and the process may be any local user's (root's
//! broker reads every user's control directory). The broker sums budgets, limits and sizes
//! over every process and takes a process's chunk as its least budget, so a reply of
//! `u64::MAX` bytes would overflow those sums, and a huge chunk would make the minimums
//! exceed the total and stop every decision on the host. Every quantity the broker uses is
//! clamped here, once, to what a real process can have: budgets, limits and sizes to the
//! host's RAM, the chunk to the largest chunk memvisor runs with.

use memvisor_control::launch_env::MAX_CHUNK_BYTES;
use memvisor_control::ProcessStatus;

/// `status` with every quantity the broker uses within what a process on a host with
/// `host_ram` bytes of RAM can have.
pub fn bounded(mut status: ProcessStatus, host_ram: u64) -> ProcessStatus {
    let ram = |v: &mut u64| *v = (*v).min(host_ram);
    ram(&mut status.budget_bytes);
    status.chunk_size = status.chunk_size.clamp(1, MAX_CHUNK_BYTES);
    for r in &mut status.regions {
        // Sizes are address space, not memory: a region may be larger than RAM, not larger
        // than a 64-bit address space cut to 2^48 bytes.
        r.size_bytes = r.size_bytes.min(1 << 48);
        r.mapped_bytes = r.mapped_bytes.min(1 << 48);
        ram(&mut r.budget_bytes);
    }
    for i in &mut status.images {
        if let Some(l) = &mut i.cache_limit_bytes {
            ram(l);
        }
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_control::{ImageStatus, RegionStatus};

    #[test]
    fn a_lying_status_is_cut_to_what_a_process_can_have() {
        let status = ProcessStatus {
            budget_bytes: u64::MAX,
            chunk_size: u64::MAX,
            regions: vec![RegionStatus {
                size_bytes: u64::MAX,
                mapped_bytes: u64::MAX,
                budget_bytes: u64::MAX,
                ..Default::default()
            }],
            images: vec![ImageStatus {
                cache_limit_bytes: Some(u64::MAX),
                ..Default::default()
            }],
            ..Default::default()
        };
        let b = bounded(status, 8 << 30);
        assert_eq!((b.budget_bytes, b.chunk_size), (8 << 30, MAX_CHUNK_BYTES));
        assert_eq!(b.regions[0].size_bytes, 1 << 48);
        assert_eq!(b.regions[0].budget_bytes, 8 << 30);
        assert_eq!(b.images[0].cache_limit_bytes, Some(8 << 30));
        // A sane status is unchanged.
        let sane = ProcessStatus {
            budget_bytes: 256 << 20,
            chunk_size: 1 << 20,
            ..Default::default()
        };
        let b = bounded(sane, 8 << 30);
        assert_eq!((b.budget_bytes, b.chunk_size), (256 << 20, 1 << 20));
        assert_eq!(bounded(ProcessStatus::default(), 1 << 30).chunk_size, 1);
    }
}
