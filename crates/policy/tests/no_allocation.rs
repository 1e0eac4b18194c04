//! No policy allocates per access in steady state: counted with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use memvisor_policy::PolicySpec;

struct CountingAllocator;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call unchanged to the system allocator, only counting allocations.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours, passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours, passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours, passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

#[test]
fn online_policies_do_not_allocate_per_access() {
    let accesses = |seed: u64, n: usize| {
        let mut x = seed;
        (0..n).map(move |_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % 3000
        })
    };
    for spec in PolicySpec::all().into_iter().filter(|s| !s.is_offline()) {
        let mut p = spec.build(1000, None).unwrap();
        let mut drive = |seed: u64, n: usize, sampled: bool| {
            for (i, u) in accesses(seed, n).enumerate() {
                if !p.contains(u) {
                    p.admit(u);
                } else if sampled {
                    p.mark_referenced(u);
                } else {
                    p.on_hit(u);
                }
                if i % 500 == 0 {
                    p.on_sample();
                }
                if i % 777 == 0 {
                    p.evict();
                    p.remove(u);
                }
            }
        };
        // Warm up: fill, churn, let hash tables reach their steady shape.
        drive(1, 200_000, false);
        drive(2, 200_000, true);
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        drive(3, 200_000, false);
        drive(4, 200_000, true);
        let allocated = ALLOCATIONS.load(Ordering::Relaxed) - before;
        assert_eq!(
            allocated, 0,
            "{spec} allocated {allocated} times in steady state"
        );
    }
}
