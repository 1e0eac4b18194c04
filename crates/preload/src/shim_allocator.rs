//! [`ShimAllocator`]: the heap of every line of Rust in this library (std and the pager
//! included), kept apart from the program's `malloc`.
//!
//! The program's allocator calls `mmap`/`munmap`/`madvise` — which this library interposes —
//! while holding its own locks (jemalloc in redis does, seen deadlocking in development: a
//! `munmap` from inside `calloc` re-entered jemalloc through the library's own allocation).
//! With a separate heap, nothing the library does while serving an interposed call can wait
//! for the program's allocator. Memory comes from raw `mmap` system calls: power-of-two size
//! classes from 16 bytes to 64 KiB, carved in order from 1 MiB blocks as they are asked for and
//! recycled through per-class free lists (never returned to the kernel); larger allocations are
//! mapped and unmapped directly. Carving a block only as it is used keeps its untouched pages
//! out of memory: threading a new block's every piece onto the free list at once wrote a word
//! in each of its pages, and made about 8.5 MiB resident in every managed process (a 1 MiB
//! block for each class of a page or less). A zeroed large allocation is a fresh mapping left
//! untouched: its pages cost nothing until written (the pager's per-page tables of a large
//! arena are mostly never written; zeroing them by hand made about 1 KiB per MiB of arena
//! resident, 48 MiB per process with the default arena here).
//!
//! Freed large allocations of up to [`REUSED_MAX`] bytes are kept for reuse, at most
//! [`REUSED_TOTAL`] bytes of them (the oldest unmapped to make room), and handed out again for
//! a request of the same length class (zeroed by hand when asked for zeroed memory): large
//! allocations up to [`REUSED_MAX`] are mapped in power-of-two lengths, so buffers of varying
//! sizes (a migration message of 37 pages, then one of 201) find a kept one. These are I/O
//! buffers: a live migration allocates one per chunk or batch it sends or receives, and a
//! fresh mapping costs a page fault per 4 KiB on first write (3 to 13 µs each here, 1 to 3 ms
//! per MiB), several times the cost of the copy itself.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::UnsafeCell;
use std::sync::{Mutex, MutexGuard};

const MIN_SHIFT: u32 = 4;
const MAX_SHIFT: u32 = 16;
const CLASSES: usize = (MAX_SHIFT - MIN_SHIFT + 1) as usize;
const BLOCK: usize = 1 << 20;
const PAGE: usize = 4096;

/// The size classes, smallest first.
static SIZE_CLASSES: Mutex<[SizeClass; CLASSES]> = Mutex::new([SizeClass::EMPTY; CLASSES]);
/// The largest freed mapping kept for reuse.
pub const REUSED_MAX: usize = 4 << 20;
/// At most this many bytes of freed mappings are kept.
pub const REUSED_TOTAL: usize = 16 << 20;
/// How many freed mappings are kept at most.
const REUSED_SLOTS: usize = 64;
/// Freed large mappings kept for reuse.
static REUSED: Mutex<ReusedMappings> = Mutex::new(ReusedMappings::new());

/// Freed large mappings (page-aligned; length a multiple of the page), as (length, address)
/// in `kept[..count]`. A fixed array: the allocator never allocates for itself.
struct ReusedMappings {
    kept: [(usize, usize); REUSED_SLOTS],
    count: usize,
    bytes: usize,
}

impl ReusedMappings {
    /// None kept.
    const fn new() -> Self {
        Self {
            kept: [(0, 0); REUSED_SLOTS],
            count: 0,
            bytes: 0,
        }
    }

    /// A kept mapping of exactly `len` bytes (the most recently freed one), if any.
    fn take(&mut self, len: usize) -> Option<*mut u8> {
        let i = self.kept[..self.count]
            .iter()
            .rposition(|&(l, _)| l == len)?;
        let (l, addr) = self.kept[i];
        self.kept.copy_within(i + 1..self.count, i);
        self.count -= 1;
        self.bytes -= l;
        Some(addr as *mut u8)
    }

    /// Keeps `[p, p + len)` (at most [`REUSED_MAX`] bytes) if there is room and returns
    /// `None`; otherwise gives back the oldest kept mapping, (length, address), for the caller
    /// to unmap before trying again. Sizes nobody asks for again age out this way.
    fn keep(&mut self, p: *mut u8, len: usize) -> Option<(usize, usize)> {
        debug_assert!(len <= REUSED_MAX);
        if self.count < REUSED_SLOTS && self.bytes + len <= REUSED_TOTAL {
            self.kept[self.count] = (len, p as usize);
            self.count += 1;
            self.bytes += len;
            return None;
        }
        let oldest = self.kept[0];
        self.kept.copy_within(1..self.count, 0);
        self.count -= 1;
        self.bytes -= oldest.0;
        Some(oldest)
    }
}

/// One size class: the blocks freed (a list threaded through their first words) and the part of
/// its newest 1 MiB block not handed out yet, carved in address order.
#[derive(Debug, Clone, Copy)]
struct SizeClass {
    /// The first freed block (0: none); each stores the next one's address.
    free: usize,
    /// The next block never handed out, and the end of the mapping it lies in.
    next: usize,
    end: usize,
}

impl SizeClass {
    /// Nothing mapped yet.
    const EMPTY: Self = Self {
        free: 0,
        next: 0,
        end: 0,
    };

    /// A block of `size` bytes (this class's): the last one freed, else the next one never
    /// handed out (a new 1 MiB mapping once the current one is used up). Null if the mapping
    /// fails.
    fn take(&mut self, size: usize) -> *mut u8 {
        if self.free != 0 {
            let p = self.free;
            // SAFETY: a freed block stores the address of the next one in its first word.
            self.free = unsafe { (p as *const usize).read() };
            return p as *mut u8;
        }
        if self.end - self.next < size {
            // Used up (a mapping is a whole number of blocks: nothing is left over).
            let len = BLOCK.max(size);
            let block = map(len);
            if block.is_null() {
                return block;
            }
            self.next = block as usize;
            self.end = self.next + len;
        }
        let p = self.next;
        self.next += size;
        p as *mut u8
    }

    /// Puts block `p` back on the free list.
    ///
    /// # Safety
    /// `p` is a block of this class that [`take`](Self::take) handed out and nobody uses any
    /// more.
    unsafe fn give_back(&mut self, p: *mut u8) {
        // SAFETY: the block is the caller's to give up, aligned for a usize and at least 16
        // bytes: its first word now holds the free-list link.
        unsafe { (p as *mut usize).write(self.free) };
        self.free = p as usize;
    }
}

fn size_classes() -> MutexGuard<'static, [SizeClass; CLASSES]> {
    SIZE_CLASSES.lock().unwrap_or_else(|e| e.into_inner())
}

fn reused() -> MutexGuard<'static, ReusedMappings> {
    REUSED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The heap's locks while a thread forks: taken before `fork` and released after it in the
/// parent and in the child. A child gets only the forking thread: a heap lock that another
/// thread held at that moment (a fault handler allocating) would stay locked there for good,
/// and the child's first allocation through the library (a `setuid` after a daemon's fork, a
/// vectored read) would hang.
struct HeldForFork(UnsafeCell<Option<HeapLocks>>);

/// Both heap locks, held.
type HeapLocks = (
    MutexGuard<'static, [SizeClass; CLASSES]>,
    MutexGuard<'static, ReusedMappings>,
);

// SAFETY: the cell is written and emptied only by a thread holding both heap locks (set right
// after taking them, taken right before releasing them), so no two threads touch it at once.
unsafe impl Sync for HeldForFork {}

static HELD_FOR_FORK: HeldForFork = HeldForFork(UnsafeCell::new(None));

/// `pthread_atfork` prepare handler: takes the heap's locks (in the one order the allocator
/// ever takes them; it never holds both otherwise).
pub extern "C" fn lock_heap_before_fork() {
    let held = (size_classes(), reused());
    // SAFETY: both heap locks are held (see `HeldForFork`).
    unsafe { *HELD_FOR_FORK.0.get() = Some(held) };
}

/// `pthread_atfork` parent and child handler: releases what [`lock_heap_before_fork`] took.
/// In the child the forking thread is the only one, and the locks are plain futexes without
/// an owner: releasing them there is releasing them for good.
pub extern "C" fn unlock_heap_after_fork() {
    // SAFETY: both heap locks are still held by this thread (see `HeldForFork`).
    let held = unsafe { (*HELD_FOR_FORK.0.get()).take() };
    drop(held);
}

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

/// The mapping length of a large allocation: a power of two up to [`REUSED_MAX`] (the
/// length classes of kept mappings), whole pages beyond.
fn large_len(layout: Layout) -> usize {
    let len = layout.size().next_multiple_of(PAGE);
    if len <= REUSED_MAX {
        len.next_power_of_two()
    } else {
        len
    }
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
                return reused().take(len).unwrap_or_else(|| map(len));
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
        size_classes()[c].take(1usize << (c as u32 + MIN_SHIFT))
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if class_of(layout)
            .filter(|_| layout.align() <= PAGE)
            .is_none()
        {
            if layout.align() > PAGE {
                // SAFETY: the caller's layout contract is passed on. An over-aligned large
                // allocation is a fresh anonymous mapping, which reads as zeros.
                return unsafe { self.alloc(layout) };
            }
            let len = large_len(layout);
            return match reused().take(len) {
                Some(p) => {
                    // SAFETY: `p` is a kept mapping of `len` bytes, now the caller's; the
                    // caller's `layout.size()` bytes of it are zeroed.
                    unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
                    p
                }
                // A fresh anonymous mapping reads as zeros: nothing to write.
                None => map(len),
            };
        }
        // SAFETY: as above; a class block may be recycled, so it is zeroed (its `size` bytes
        // are the caller's).
        let p = unsafe { self.alloc(layout) };
        if !p.is_null() {
            // SAFETY: `p` is a block of at least `layout.size()` bytes just handed out.
            unsafe { std::ptr::write_bytes(p, 0, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match class_of(layout).filter(|_| layout.align() <= PAGE) {
            // SAFETY: the caller returns a block of this class it no longer uses.
            Some(c) => unsafe { size_classes()[c].give_back(ptr) },
            None => {
                let len = large_len(layout);
                // Only page-aligned mappings are kept (an over-aligned one was trimmed to
                // `len` too, but is left to the kernel).
                if layout.align() > PAGE || len > REUSED_MAX {
                    unmap(ptr, len);
                    return;
                }
                // Unmapped outside the lock: the oldest kept mappings make room.
                loop {
                    let evicted = reused().keep(ptr, len);
                    match evicted {
                        None => break,
                        Some((l, addr)) => unmap(addr as *mut u8, l),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A thread holding a heap lock while another forks: with the fork handlers, the fork
    /// waits for it and the child's heap works; without them, the child's first allocation of
    /// that class would wait for a thread that does not exist in it.
    #[test]
    fn a_child_forked_while_another_thread_allocates_can_allocate() {
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let holder = std::thread::spawn(move || {
            let g = size_classes();
            held_tx.send(()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(g);
        });
        held_rx.recv().unwrap();
        lock_heap_before_fork();
        // SAFETY: the child only calls the allocator's functions and _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unlock_heap_after_fork();
            let layout = Layout::from_size_align(64, 8).unwrap();
            // SAFETY: a valid layout; the block is freed with it.
            let ok = unsafe {
                let p = ShimAllocator.alloc(layout);
                let ok = !p.is_null();
                ShimAllocator.dealloc(p, layout);
                ok
            };
            // SAFETY: _exit ends the child at once.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        unlock_heap_after_fork();
        holder.join().unwrap();
        assert!(pid > 0);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: waits for our own child without blocking.
            let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if r == pid {
                break;
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: our own child.
                unsafe { libc::kill(pid, libc::SIGKILL) };
                panic!("the child's allocation hung");
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "{status:#x}"
        );
    }

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

    /// Resident pages of `[p, p + len)` (page-aligned `p`).
    fn resident_pages(p: *mut u8, len: usize) -> usize {
        let mut vec = vec![0u8; len.div_ceil(PAGE)];
        // SAFETY: `[p, p + len)` is one live mapping; mincore writes one byte per page.
        let r = unsafe { libc::mincore(p.cast(), len, vec.as_mut_ptr()) };
        assert_eq!(r, 0);
        vec.iter().filter(|&&v| v & 1 != 0).count()
    }

    #[test]
    fn zeroed_blocks_are_zero_and_large_ones_stay_untouched() {
        let a = ShimAllocator;
        // A small class block, dirtied, freed and handed out again zeroed.
        let small = Layout::from_size_align(200, 8).unwrap();
        // SAFETY: a non-zero layout; freed with it below.
        let p = unsafe { a.alloc(small) };
        // SAFETY: the block is 200 bytes.
        unsafe { std::ptr::write_bytes(p, 0xa5, 200) };
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(p, small) };
        // SAFETY: a non-zero layout.
        let q = unsafe { a.alloc_zeroed(small) };
        assert_eq!(q, p, "the dirtied block is reused");
        // SAFETY: 200 readable bytes.
        assert!(unsafe { std::slice::from_raw_parts(q, 200) }
            .iter()
            .all(|&b| b == 0));
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(q, small) };
        // A large zeroed table: all zeros, and not one page resident until written.
        let len = 8 << 20;
        let large = Layout::from_size_align(len, 8).unwrap();
        // SAFETY: a non-zero layout; freed with it below.
        let t = unsafe { a.alloc_zeroed(large) };
        assert!(!t.is_null());
        assert_eq!(resident_pages(t, len), 0, "a zeroed table was written");
        // SAFETY: one byte inside the block.
        unsafe { t.add(len / 2).write(1) };
        assert_eq!(resident_pages(t, len), 1);
        // SAFETY: `len` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(t, len) };
        assert_eq!(bytes.iter().filter(|&&b| b != 0).count(), 1);
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(t, large) };
    }

    #[test]
    fn freed_buffers_are_reused_and_zeroed_on_request() {
        let a = ShimAllocator;
        // A length no other test uses (the kept mappings are shared by the process).
        let len = 3 * (1 << 20) + 5 * PAGE;
        let layout = Layout::from_size_align(len, 8).unwrap();
        // SAFETY: a non-zero layout; freed with it below.
        let p = unsafe { a.alloc(layout) };
        // SAFETY: `len` writable bytes.
        unsafe { std::ptr::write_bytes(p, 0xa5, len) };
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(p, layout) };
        // SAFETY: a non-zero layout.
        let q = unsafe { a.alloc_zeroed(layout) };
        assert_eq!(q, p, "the freed buffer is handed out again");
        // SAFETY: `len` readable bytes.
        assert!(unsafe { std::slice::from_raw_parts(q, len) }
            .iter()
            .all(|&b| b == 0));
        assert_eq!(
            resident_pages(q, len),
            len / PAGE,
            "a reused buffer is resident"
        );
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(q, layout) };
        // SAFETY: a non-zero layout.
        let r = unsafe { a.alloc(layout) };
        assert_eq!(r, p);
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(r, layout) };

        // Another length of the same power-of-two class gets the same buffer.
        let other = Layout::from_size_align(len + 7 * PAGE + 1, 8).unwrap();
        // SAFETY: a non-zero layout; freed with it below.
        let o = unsafe { a.alloc_zeroed(other) };
        assert_eq!(o, p, "a kept buffer of the class is handed out");
        // SAFETY: `len + 7 pages + 1` readable bytes.
        assert!(unsafe { std::slice::from_raw_parts(o, other.size()) }
            .iter()
            .all(|&b| b == 0));
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(o, other) };

        // Larger than REUSED_MAX: unmapped at once, never kept.
        let big = Layout::from_size_align(REUSED_MAX + PAGE, 8).unwrap();
        // SAFETY: a non-zero layout; freed with it below.
        let b = unsafe { a.alloc(big) };
        // SAFETY: one writable byte.
        unsafe { b.write(1) };
        // SAFETY: freed once with its layout.
        unsafe { a.dealloc(b, big) };
        let mut v = 0u8;
        // SAFETY: mincore on an unmapped range only reports ENOMEM.
        let r = unsafe { libc::mincore(b.cast(), PAGE, &mut v) };
        assert_eq!(r, -1, "a buffer beyond REUSED_MAX stayed mapped");
    }

    #[test]
    fn a_class_block_is_carved_as_it_is_used() {
        let mut class = SizeClass::EMPTY;
        let size = 64;
        let first = class.take(size);
        assert!(!first.is_null());
        // One small block in use: one page of its 1 MiB mapping in memory, not all of them.
        // SAFETY: the block is `size` bytes.
        unsafe { std::ptr::write_bytes(first, 0xa5, size) };
        assert_eq!(resident_pages(first, BLOCK), 1);
        // The next blocks follow in order, to the end of the mapping; then a new one.
        let mut last = first;
        for _ in 1..BLOCK / size {
            let p = class.take(size);
            assert_eq!(p as usize, last as usize + size);
            last = p;
        }
        let other = class.take(size);
        let first_mapping = first as usize..first as usize + BLOCK;
        assert!(!first_mapping.contains(&(other as usize)), "a new mapping");
        // Freed blocks come back first, the last freed first.
        // SAFETY: both were handed out by `take` and are not used any more.
        unsafe {
            class.give_back(first);
            class.give_back(last);
        }
        assert_eq!(class.take(size), last);
        assert_eq!(class.take(size), first);
        assert_eq!(class.take(size) as usize, other as usize + size);
        // The test's mappings stay: unmapping them would need their bounds kept here.
    }

    #[test]
    fn kept_mappings_are_bounded_and_the_oldest_make_room() {
        let mut kept = ReusedMappings::new();
        let mb = 1 << 20;
        for i in 0..REUSED_TOTAL / mb {
            assert_eq!(kept.keep((i * mb) as *mut u8, mb), None);
        }
        // Full: the oldest comes back to be unmapped, then there is room.
        assert_eq!(kept.keep(0x7000_0000 as *mut u8, mb), Some((mb, 0)));
        assert_eq!(kept.keep(0x7000_0000 as *mut u8, mb), None);
        assert_eq!(kept.take(2 * mb), None);
        assert_eq!(
            kept.take(mb),
            Some(0x7000_0000 as *mut u8),
            "the last freed first"
        );
        assert_eq!(kept.take(mb), Some((15 * mb) as *mut u8));
        assert_eq!(kept.bytes, 14 * mb);
        // A 4 MiB buffer needs the two oldest 1 MiB ones gone (16 MiB at most).
        assert_eq!(kept.keep(0x8000_0000 as *mut u8, 4 * mb), Some((mb, mb)));
        assert_eq!(
            kept.keep(0x8000_0000 as *mut u8, 4 * mb),
            Some((mb, 2 * mb))
        );
        assert_eq!(kept.keep(0x8000_0000 as *mut u8, 4 * mb), None);
        assert_eq!(kept.bytes, REUSED_TOTAL);
        // Slots run out before bytes with small buffers.
        let mut small = ReusedMappings::new();
        for i in 0..REUSED_SLOTS {
            assert_eq!(small.keep((i * 2 * PAGE) as *mut u8, 2 * PAGE), None);
        }
        assert_eq!(
            small.keep(0x7000_0000 as *mut u8, 2 * PAGE),
            Some((2 * PAGE, 0)),
            "over REUSED_SLOTS"
        );
        assert_eq!(small.count, REUSED_SLOTS - 1);
    }
}
