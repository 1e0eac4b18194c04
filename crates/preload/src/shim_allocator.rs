//! [`ShimAllocator`]: the heap of every line of Rust in this library (std and the pager
//! included), kept apart from the program's `malloc`.
//!
//! The program's allocator calls `mmap`/`munmap`/`madvise` — which this library interposes —
//! while holding its own locks (jemalloc in redis does, seen deadlocking in development: a
//! `munmap` from inside `calloc` re-entered jemalloc through the library's own allocation).
//! With a separate heap, nothing the library does while serving an interposed call can wait
//! for the program's allocator. Memory comes from raw `mmap` system calls: power-of-two size
//! classes from 16 bytes to 64 KiB, carved from 1 MiB blocks and recycled through per-class
//! free lists (never returned to the kernel); larger allocations are mapped and unmapped
//! directly.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::Mutex;

const MIN_SHIFT: u32 = 4;
const MAX_SHIFT: u32 = 16;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
const BLOCK: usize = 1 << 20;
const PAGE: usize = 4096;

/// Free-list heads (addresses of free blocks; each free block stores the next address).
static FREE: Mutex<[usize; CLASSES]> = Mutex::new([0; CLASSES]);

/// The library's global allocator.
#[derive(Debug)]
pub struct ShimAllocator;

fn map(len: usize) -> *mut u8 {
    // SAFETY: a fresh anonymous mapping (not MAP_FIXED) affects no existing memory.
    let p = unsafe {
        crate::raw_calls::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

fn unmap(p: *mut u8, len: usize) {
    // SAFETY: only called on ranges this allocator mapped and no longer hands out.
    unsafe { crate::raw_calls::munmap(p.cast(), len) };
}

/// Size class of `layout`, or `None` for a large allocation.
fn class_of(layout: Layout) -> Option<usize> {
    let size = layout.size().max(layout.align()).max(1 << MIN_SHIFT);
    let shift = size.next_power_of_two().trailing_zeros();
    (shift <= MAX_SHIFT).then(|| (shift - MIN_SHIFT) as usize)
}

fn large_len(layout: Layout) -> usize {
    layout.size().next_multiple_of(PAGE)
}

// SAFETY: blocks of a class are at least as large and as aligned as every layout mapped to
// that class (power-of-two sizes carved at multiples of their size from page-aligned blocks,
// so aligned to min(size, page); layouts with larger alignment than the page go to the large
// path); large allocations are page-aligned (or explicitly aligned) mappings of at least the
// size. A block is handed out once until it is freed.
unsafe impl GlobalAlloc for ShimAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let class = class_of(layout).filter(|_| layout.align() <= PAGE);
        let Some(c) = class else {
            let len = large_len(layout);
            if layout.align() <= PAGE {
                return map(len);
            }
            // Over-map and trim to the alignment.
            let raw = map(len + layout.align());
            if raw.is_null() {
                return raw;
            }
            let start = (raw as usize).next_multiple_of(layout.align());
            if start > raw as usize {
                unmap(raw, start - raw as usize);
            }
            let end = raw as usize + len + layout.align();
            if end > start + len {
                unmap((start + len) as *mut u8, end - start - len);
            }
            return start as *mut u8;
        };
        let size = 1usize << (c as u32 + MIN_SHIFT);
        let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
        if free[c] == 0 {
            let block = map(BLOCK.max(size));
            if block.is_null() {
                return block;
            }
            // Link every piece of the new block into the free list.
            let pieces = BLOCK.max(size) / size;
            for i in (0..pieces).rev() {
                let piece = block as usize + i * size;
                // SAFETY: the piece lies inside the fresh block, is aligned for a usize, and
                // nothing else refers to it.
                unsafe { (piece as *mut usize).write(free[c]) };
                free[c] = piece;
            }
        }
        let p = free[c];
        // SAFETY: a free block stores the address of the next one in its first word.
        free[c] = unsafe { (p as *const usize).read() };
        p as *mut u8
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match class_of(layout).filter(|_| layout.align() <= PAGE) {
            Some(c) => {
                let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
                // SAFETY: the caller returns a block of this class it no longer uses; its first
                // word now holds the free-list link.
                unsafe { (ptr as *mut usize).write(free[c]) };
                free[c] = ptr as usize;
            }
            None => unmap(ptr, large_len(layout)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_distinct_and_reused() {
        let a = ShimAllocator;
        let mut seen = Vec::new();
        for (size, align) in [
            (1, 1),
            (16, 8),
            (24, 8),
            (100, 64),
            (4096, 4096),
            (70_000, 8),
            (10, 8192),
            (200_000, 65536),
        ] {
            let l = Layout::from_size_align(size, align).unwrap();
            // SAFETY: a non-zero layout; every block is freed with its layout below.
            let p = unsafe { a.alloc(l) };
            assert!(!p.is_null());
            assert_eq!(p as usize % align, 0, "{size} {align}");
            // SAFETY: the block is `size` bytes.
            unsafe { std::ptr::write_bytes(p, 0xa5, size) };
            seen.push((p, l));
        }
        for (i, &(p, l)) in seen.iter().enumerate() {
            for &(q, m) in &seen[i + 1..] {
                let (p, q) = (p as usize, q as usize);
                assert!(p + l.size() <= q || q + m.size() <= p, "overlap");
            }
        }
        let (p, l) = seen[1];
        // SAFETY: freed once, with its layout.
        unsafe { a.dealloc(p, l) };
        // SAFETY: same class again.
        let q = unsafe { a.alloc(l) };
        assert_eq!(q, p, "a freed block is reused first");
        for &(p, l) in &seen[2..] {
            // SAFETY: each block freed once with its layout.
            unsafe { a.dealloc(p, l) };
        }
    }
}
