//! [`ManagedProcess`]: the regions of this process and the decisions the interposed calls
//! take on them.
//!
//! * The **arena**: one region of `arena_size` bytes (sparse memfd, sparse swap), created at
//!   start, from which every private anonymous `mmap` of at least `min_region` bytes is
//!   carved in whole chunks ([`ArenaAllocator`]). One budget, one handler thread, one policy
//!   for all of them.
//! * **Fixed regions**: a private anonymous read-write `mmap(MAP_FIXED)` of at least
//!   `min_region` outside the arena (QEMU's plain guest RAM placed over its `PROT_NONE`
//!   reservation) gets a region of its own at that address; a `MAP_SHARED` mapping of QEMU's
//!   `memory-backend-memfd` guest-RAM memfd gets a region adopting that memfd, and one of an
//!   empty regular file on tmpfs (QEMU's `memory-backend-file` with `mem-path` under
//!   `/dev/shm`) a region adopting that file (the interposer decides which mappings qualify).
//! * **Code regions**: a range of an untouched `PROT_NONE` reservation that the program makes
//!   readable, writable and executable with one `mprotect` of at least `min_region` (QEMU's
//!   TCG translated-code buffer; see [`reservations`](crate::reservations)) gets a region at
//!   that address, mapped executable. (Made only readable and writable, the range gets a
//!   fixed anonymous region, as a `MAP_FIXED` mapping would.)
//! * **Budget split**: the process budget is divided among the regions by their claims
//!   ([`split_budget`](crate::budget_split::split_budget)): a code region its allotment, set
//!   by its page-in rate ([`CodeAllotment`], checked every [`ALLOTMENT_CHECK_PERIOD`]), the
//!   others the rest, guest RAM and fixed regions by size, the arena by the bytes mapped in
//!   it; again whenever a region comes or goes, the budget is set, or an allotment changes.

use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use libc::c_int;
use memvisor_control::{ProcessStatus, RefaultStatus, RegionStatus, SetRules};
use memvisor_pager::{Region, RegionConfig};
use memvisor_policy::PolicySpec;

use crate::arena_allocator::{ArenaAllocator, Span};
use crate::budget_split::{split_budget, Claim};
use crate::code_allotment::CodeAllotment;
use crate::pager_worker::run_on_worker;
use crate::preload_config::PreloadConfig;
use crate::preload_error::PreloadError;

/// Most fixed regions at once (QEMU has one per memory backend).
pub const MAX_FIXED: usize = 32;
/// Entries each arena list can hold before mappings are left to the kernel.
const ARENA_LIST_CAPACITY: usize = 1 << 16;
/// Alignment of the arena's start (helps allocators that want aligned extents).
const ARENA_ALIGN: usize = 2 << 20;

/// Whether the library manages this process (false before start, after a fork, or when
/// `memvisor run` did not ask).
pub static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Smallest mapping managed.
pub static MIN_REGION: AtomicUsize = AtomicUsize::new(usize::MAX);
/// Whether image reads into fixed regions go through the swap mapper (`--swap-mapper`).
pub static SWAP_MAPPER: AtomicBool = AtomicBool::new(false);
/// Whether reservations made accessible by one `mprotect` become regions (`--reservations`).
pub static RESERVATIONS: AtomicBool = AtomicBool::new(false);
/// Whether the host cache of images read into guest RAM is exclusive (`--host-cache`).
pub static EXCLUSIVE_HOST_CACHE: AtomicBool = AtomicBool::new(false);
/// Whether the program is QEMU (its name starts with `qemu-system` or `qemu-kvm`): only then
/// is an empty tmpfs file mapped shared taken for guest RAM (`memory-backend-file`). Another
/// program's shared tmpfs file is often shared with other processes (`shm_open` segments),
/// which would see holes where memvisor paged memory out.
pub static PROGRAM_IS_QEMU: AtomicBool = AtomicBool::new(false);
/// The arena's address range, `[start, end)`.
static ARENA_START: AtomicUsize = AtomicUsize::new(0);
static ARENA_END: AtomicUsize = AtomicUsize::new(0);
/// The arena region (leaked: it lives as long as the process).
static ARENA: AtomicPtr<Region> = AtomicPtr::new(std::ptr::null_mut());
/// Ranges discarded in the arena on the program's behalf.
static ARENA_DISCARDS: AtomicU64 = AtomicU64::new(0);
/// Fixed regions' ranges, readable without the lock: `(start, end)`, 0 = empty slot.
static FIXED_SPANS: [(AtomicUsize, AtomicUsize); MAX_FIXED] =
    [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_FIXED];
static FIXED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// The process state, behind one lock.
static STATE: Mutex<Option<ManagedProcess>> = Mutex::new(None);

/// What kind of memory a fixed region holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixedKind {
    /// QEMU `memory-backend-memfd` guest RAM.
    GuestMemfd,
    /// Guest RAM in a regular file on tmpfs that held no data when it was mapped (QEMU's
    /// `memory-backend-file` with `mem-path` on `/dev/shm`, `share=on`).
    GuestFile,
    /// A private anonymous mapping at a fixed address.
    FixedAnonymous,
    /// Executable private anonymous memory made accessible in an untouched reservation
    /// (QEMU's TCG translated-code buffer).
    Code,
}

impl FixedKind {
    /// The kind's name in the status (`memvisor stat`) and the region's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::GuestMemfd => "guest-memfd",
            Self::GuestFile => "guest-file",
            Self::FixedAnonymous => "fixed",
            Self::Code => "code",
        }
    }

    /// Whether the region holds guest RAM that a live migration moves.
    pub fn is_guest_memory(self) -> bool {
        matches!(self, Self::GuestMemfd | Self::GuestFile)
    }
}

/// Whether the program's heap is managed memory (`memvisor run --malloc jemalloc`): `fork` is
/// then refused (`entry_points::fork`).
pub static HEAP_MANAGED: AtomicBool = AtomicBool::new(false);

/// How often code regions' allotments are checked (while one exists).
pub const ALLOTMENT_CHECK_PERIOD: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Debug)]
struct FixedRegion {
    /// Shared with a live migration while one runs (see [`guest_memory_regions`]).
    region: Arc<Region>,
    kind: FixedKind,
    slot: usize,
    discards: u64,
    /// Identity of the region's memfd, taken once at creation (a hole punched in it by the
    /// program is looked up by it).
    memfd_key: Option<memvisor_pager::FileKey>,
    /// A code region's allotment (`None` for the other kinds).
    code: Option<CodeAllotment>,
}

/// The regions of this process.
#[derive(Debug)]
pub struct ManagedProcess {
    config: PreloadConfig,
    program: String,
    started_ms: u64,
    budget: usize,
    policy: PolicySpec,
    arena: ArenaAllocator,
    fixed: Vec<FixedRegion>,
    unmanaged: u64,
    warned_unmanaged: bool,
    /// The arena's allotment when it holds the program's heap (`memvisor run --malloc
    /// jemalloc`), set by its page-in rate as a code region's: a heap's hot part is small
    /// beside what it mapped (jemalloc maps ahead and keeps what the program frees: 130 MiB
    /// mapped, 10 MiB in use), and in proportion to what it used it thrashed.
    arena_allotment: Option<CodeAllotment>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Locks the state (a poisoned lock is taken over: the state is kept consistent by each
/// critical section not panicking half-way).
fn lock() -> MutexGuard<'static, Option<ManagedProcess>> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// The arena region, once created.
fn arena_region() -> Option<&'static Region> {
    let p = ARENA.load(Ordering::Acquire);
    // SAFETY: ARENA is only ever set to a leaked Box<Region>, which is never freed.
    (!p.is_null()).then(|| unsafe { &*p })
}

/// A region handed to the worker thread while its owner waits (the state lock held).
#[derive(Clone, Copy)]
struct RegionRef(*const Region);

// SAFETY: `Region` is Sync (its methods take &self and synchronize internally); the pointer
// is only dereferenced while the owner keeps the region alive (see `get`).
unsafe impl Send for RegionRef {}

impl RegionRef {
    /// The region.
    ///
    /// # Safety
    ///
    /// The region must still be alive: its owner waits for the job that calls this.
    unsafe fn get(self) -> &'static Region {
        // SAFETY: guaranteed alive by the caller.
        unsafe { &*self.0 }
    }
}

/// Overlap of `[a, a + len)` with `[s, e)`.
fn intersect(a: usize, len: usize, s: usize, e: usize) -> Option<Span> {
    let lo = a.max(s);
    let hi = (a.saturating_add(len)).min(e);
    (lo < hi).then(|| (lo, hi - lo))
}

/// Managed ranges overlapping `[a, a + len)`, as `(start, len, owner)` with owner `None` for
/// the arena and `Some(slot)` for a fixed region; sorted by start. Lock-free.
pub fn managed_overlaps(
    a: usize,
    len: usize,
) -> ([(usize, usize, Option<usize>); MAX_FIXED + 1], usize) {
    let mut out = [(0, 0, None); MAX_FIXED + 1];
    let mut n = 0;
    if let Some(s) = intersect(
        a,
        len,
        ARENA_START.load(Ordering::Acquire),
        ARENA_END.load(Ordering::Acquire),
    ) {
        out[n] = (s.0, s.1, None);
        n += 1;
    }
    if FIXED_COUNT.load(Ordering::Acquire) > 0 {
        for (i, (s, e)) in FIXED_SPANS.iter().enumerate() {
            let (s, e) = (s.load(Ordering::Acquire), e.load(Ordering::Acquire));
            if e > s {
                if let Some(x) = intersect(a, len, s, e) {
                    out[n] = (x.0, x.1, Some(i));
                    n += 1;
                }
            }
        }
    }
    out[..n].sort_unstable_by_key(|o| o.0);
    (out, n)
}

/// Starts managing this process: creates the arena. Called once, at library start.
pub fn start(config: PreloadConfig, program: String) -> Result<(), PreloadError> {
    let page = memvisor_pager::page_size();
    // Reserve an aligned range for the arena, then place the region in it.
    let size = config.arena_size / config.chunk_size * config.chunk_size;
    let reserve = size + ARENA_ALIGN;
    // SAFETY: a fresh PROT_NONE reservation, not MAP_FIXED: touches no existing memory.
    let base = unsafe {
        crate::raw_calls::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(PreloadError::Env {
            name: memvisor_control::launch_env::ARENA_SIZE,
            value: size.to_string(),
            reason: format!(
                "cannot reserve the arena's address space: {}",
                std::io::Error::last_os_error()
            ),
        });
    }
    let start = (base as usize).next_multiple_of(ARENA_ALIGN);
    let cfg = RegionConfig::new(size, config.budget, &config.swap_dir)
        .policy(config.policy.clone())
        .chunk_size(config.chunk_size)
        .busy_poll(config.busy_poll)
        .cpu_wake_latency(config.cpu_wake_latency)
        .on_swap_full(config.on_swap_full)
        .name("arena");
    // SAFETY: [start, start + size) lies inside the reservation made above, which nothing
    // else uses.
    let cfg = unsafe { cfg.address(start) };
    let region = Region::new(cfg).map_err(|source| PreloadError::Pager {
        what: format!("arena of {size} bytes in {}", config.swap_dir.display()),
        source,
    })?;
    // Give back the unused ends of the reservation.
    // SAFETY: both ranges are parts of our own reservation outside the region.
    unsafe {
        if start > base as usize {
            crate::raw_calls::munmap(base, start - base as usize);
        }
        let tail = start + size;
        let res_end = base as usize + reserve;
        if res_end > tail {
            crate::raw_calls::munmap(tail as *mut libc::c_void, res_end - tail);
        }
    }
    let region: &'static Region = Box::leak(Box::new(region));
    // Start the worker, and have it and the handler serve one command now, before the program
    // runs: both are then past their thread start-up (which uses the program's malloc).
    crate::pager_worker::start().map_err(|e| PreloadError::Env {
        name: memvisor_control::launch_env::BUDGET,
        value: config.budget.to_string(),
        reason: format!("cannot start the library's worker thread: {e}"),
    })?;
    let budget = config.budget;
    run_on_worker(move || region.set_budget(budget).map_err(|_| libc::EIO)).map_err(|e| {
        PreloadError::Env {
            name: memvisor_control::launch_env::BUDGET,
            value: budget.to_string(),
            reason: format!("the arena's fault handler does not answer (errno {e})"),
        }
    })?;
    ARENA.store(region as *const Region as *mut Region, Ordering::Release);
    ARENA_START.store(start, Ordering::Release);
    ARENA_END.store(start + size, Ordering::Release);
    MIN_REGION.store(config.min_region, Ordering::Release);
    SWAP_MAPPER.store(config.swap_mapper, Ordering::Release);
    RESERVATIONS.store(config.reservations, Ordering::Release);
    // Only if jemalloc is the program's `malloc` indeed (the loader may have skipped the
    // library `memvisor run` preloaded).
    let heap_managed =
        config.heap_managed && crate::library_malloc_arena::program_malloc_is_jemalloc();
    HEAP_MANAGED.store(heap_managed, Ordering::Release);
    EXCLUSIVE_HOST_CACHE.store(
        config.host_cache == memvisor_pager::HostCache::Exclusive,
        Ordering::Release,
    );
    crate::image_io::set_default_cache_limit(config.image_cache);
    PROGRAM_IS_QEMU.store(is_qemu(&program), Ordering::Release);
    let arena_allotment =
        heap_managed.then(|| CodeAllotment::new(config.budget, config.chunk_size));
    let state = ManagedProcess {
        budget: config.budget,
        policy: config.policy.clone(),
        arena: ArenaAllocator::new(size, config.chunk_size, page, ARENA_LIST_CAPACITY),
        program,
        started_ms: now_ms(),
        config,
        fixed: Vec::new(),
        unmanaged: 0,
        warned_unmanaged: false,
        arena_allotment,
    };
    *lock() = Some(state);
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// After `fork` in the child: nothing is managed any more (the regions' mappings are not in
/// the child, their handler threads neither). Touches no lock.
pub fn forget_after_fork() {
    ACTIVE.store(false, Ordering::Release);
    ARENA_START.store(0, Ordering::Release);
    ARENA_END.store(0, Ordering::Release);
    FIXED_COUNT.store(0, Ordering::Release);
    for (s, e) in &FIXED_SPANS {
        s.store(0, Ordering::Release);
        e.store(0, Ordering::Release);
    }
}

impl ManagedProcess {
    fn note_unmanaged(&mut self, len: usize, why: &str) {
        self.unmanaged += 1;
        if !self.warned_unmanaged {
            self.warned_unmanaged = true;
            eprintln!(
                "memvisor-preload: a mapping of {len} bytes is left unmanaged: {why} \
                 (further ones are only counted)"
            );
        }
    }

    /// The arena's claim on the budget: its allotment when it holds QEMU's heap (`memvisor run
    /// --malloc jemalloc`) beside guest RAM, else its weight, the bytes mapped in it. Without a
    /// region weighted by its size beside it (QEMU before its guest RAM, or with guest RAM the
    /// library does not manage; another program), an allotment would leave the rest of the
    /// budget to nobody.
    fn arena_claim(&self) -> Claim {
        let beside_guest_ram =
            PROGRAM_IS_QEMU.load(Ordering::Acquire) && self.fixed.iter().any(|f| f.code.is_none());
        match &self.arena_allotment {
            Some(a) if beside_guest_ram => Claim::Allotment(a.bytes()),
            _ => Claim::Weighted(self.arena.mapped_bytes().max(self.config.chunk_size)),
        }
    }

    /// The claim of a fixed region on the budget.
    fn claim(&self, f: &FixedRegion) -> Claim {
        match &f.code {
            Some(a) => Claim::Allotment(a.bytes()),
            None => Claim::Weighted(f.region.len()),
        }
    }

    /// The fixed regions' claims, in `fixed` order.
    fn claims(&self) -> Vec<Claim> {
        self.fixed.iter().map(|f| self.claim(f)).collect()
    }

    /// Applies the budget split to every region.
    fn rebalance(&self) -> Result<(), String> {
        let claims = self.claims();
        let (arena_budget, budgets) = split_budget(
            self.budget,
            self.config.chunk_size,
            self.arena_claim(),
            &claims,
        );
        let mut jobs: Vec<(RegionRef, usize)> = Vec::new();
        if let Some(a) = arena_region() {
            jobs.push((RegionRef(a), arena_budget));
        }
        for (f, b) in self.fixed.iter().zip(budgets) {
            jobs.push((RegionRef(Arc::as_ptr(&f.region)), b));
        }
        for (r, budget) in jobs {
            // SAFETY: the state lock is held by our caller while the worker runs this, so the
            // region (owned by the state, or leaked) outlives the job.
            run_on_worker(move || unsafe { r.get() }.set_budget(budget).map_err(|_| libc::EIO))
                .map_err(|_| format!("setting a budget of {budget} bytes failed"))?;
        }
        Ok(())
    }

    fn status(&self) -> ProcessStatus {
        let cs = self.config.chunk_size as u64;
        let region_status = |r: &Region, kind: &str, mapped: u64, discards: u64| {
            let s = r.stats();
            let curve = r.refault_curve();
            RegionStatus {
                name: r.name().to_string(),
                kind: kind.to_string(),
                address: r.as_ptr() as u64,
                size_bytes: r.len() as u64,
                mapped_bytes: mapped,
                budget_bytes: r.budget_bytes() as u64,
                policy: r.policy_name(),
                resident_bytes: s.resident_pages * memvisor_pager::page_size() as u64,
                swapped_bytes: s.swapped_chunks * cs,
                missing_faults: s.missing_faults,
                minor_faults: s.minor_faults,
                page_ins: s.page_ins,
                page_outs: s.page_outs,
                clean_evictions: s.clean_evictions,
                bytes_read: s.bytes_read,
                bytes_written: s.bytes_written,
                read_errors: s.read_errors,
                write_errors: s.write_errors,
                poisoned_chunks: s.poisoned_chunks,
                overrun_chunks: s.overrun_chunks,
                page_in_p50_nanos: s.page_in_p50_nanos,
                page_in_p99_nanos: s.page_in_p99_nanos,
                page_in_nanos: s.page_in_nanos,
                discards,
                swap_full_episodes: s.swap_full_episodes,
                swap_full_failures: s.swap_full_failures,
                swap_full: s.swap_full,
                image_bytes: s.image_pages * memvisor_pager::page_size() as u64,
                swap_write_bytes_avoided: s.swap_write_bytes_avoided,
                image_read_bytes: s.image_read_bytes,
                false_read_bytes_avoided: s.false_read_bytes_avoided,
                image_associations_ended_by_guest: s.image_associations_ended_by_guest,
                image_associations_ended_by_image: s.image_associations_ended_by_image,
                own_chunks_spared: s.own_chunks_spared,
                pinned_evictions_skipped: s.pinned_evictions_skipped,
                refaults: RefaultStatus {
                    unit_bytes: curve.unit_bytes,
                    sub_buckets: curve.sub_buckets,
                    refaults: curve.refaults,
                    beyond: curve.beyond,
                    evicted_bytes: curve.evicted_bytes,
                },
            }
        };
        let mut regions = Vec::new();
        if let Some(a) = arena_region() {
            regions.push(region_status(
                a,
                "arena",
                self.arena.mapped_bytes() as u64,
                ARENA_DISCARDS.load(Ordering::Relaxed),
            ));
        }
        for f in &self.fixed {
            regions.push(region_status(
                &f.region,
                f.kind.name(),
                f.region.len() as u64,
                f.discards,
            ));
        }
        ProcessStatus {
            pid: std::process::id(),
            program: self.program.clone(),
            budget_bytes: self.budget as u64,
            policy: self.policy.to_string(),
            chunk_size: cs,
            min_region_bytes: self.config.min_region as u64,
            at_unix_ms: now_ms(),
            started_unix_ms: self.started_ms,
            unmanaged_mappings: self.unmanaged,
            regions,
            migration: crate::migration_service::status(),
            images: crate::image_io::image_statuses(),
        }
    }
}

/// The status of this process (for the control socket).
pub fn status() -> ProcessStatus {
    match lock().as_ref() {
        Some(p) => p.status(),
        None => ProcessStatus {
            pid: std::process::id(),
            ..Default::default()
        },
    }
}

/// Sets the process budget and/or policy (for the control socket).
pub fn set(budget: Option<u64>, policy: Option<&str>) -> Result<(), String> {
    let mut guard = lock();
    let Some(p) = guard.as_mut() else {
        return Err("this process is not managed".into());
    };
    // The rules `memvisor set`, `run` and the broker check by (the server checked them too:
    // one definition, applied again here where the values are used).
    let rules = SetRules {
        host_ram_bytes: memvisor_control::host_memory::mem_total_bytes()
            .map_err(|e| e.to_string())?,
        chunk_bytes: p.config.chunk_size as u64,
    };
    let spec = policy
        .map(|text| rules.check_policy(text))
        .transpose()
        .map_err(|e| e.to_string())?;
    if let Some(b) = budget {
        rules.check_budget(b).map_err(|e| e.to_string())?;
        let b = usize::try_from(b).map_err(|_| format!("budget {b} is too large"))?;
        p.budget = b;
        p.rebalance()?;
    }
    if let Some(spec) = spec {
        let mut regions: Vec<RegionRef> =
            arena_region().map(|a| RegionRef(a)).into_iter().collect();
        regions.extend(p.fixed.iter().map(|f| RegionRef(Arc::as_ptr(&f.region))));
        for r in regions {
            let spec = spec.clone();
            // SAFETY: the state lock is held until the worker has run this, so the region
            // outlives the job.
            run_on_worker(move || unsafe { r.get() }.set_policy(spec).map_err(|_| libc::EIO))
                .map_err(|_| "setting the policy failed".to_string())?;
        }
        p.policy = spec;
    }
    Ok(())
}

/// Carves `len` bytes from the arena; `None` leaves the mapping to the kernel.
pub fn arena_map(len: usize) -> Option<usize> {
    let mut guard = lock();
    let p = guard.as_mut()?;
    match p.arena.alloc(len) {
        Some(off) => Some(ARENA_START.load(Ordering::Acquire) + off),
        None => {
            p.note_unmanaged(len, "the arena is full (raise --arena)");
            None
        }
    }
}

/// Discards `[addr, addr + len)` of the arena (page-aligned, inside it).
fn arena_discard(addr: usize, len: usize) -> Result<(), c_int> {
    let Some(region) = arena_region() else {
        return Err(libc::EINVAL);
    };
    let off = addr - ARENA_START.load(Ordering::Acquire);
    ARENA_DISCARDS.fetch_add(1, Ordering::Relaxed);
    run_on_worker(move || {
        region.discard(off, len).map_err(|e| {
            eprintln!("memvisor-preload: {e}");
            libc::EIO
        })
    })
}

/// Unmaps `[addr, addr + len)` of the arena: the program's pages there read as zeros from now
/// on and whole chunks return to the free list.
pub fn arena_unmap(addr: usize, len: usize) -> Result<(), c_int> {
    let base = ARENA_START.load(Ordering::Acquire);
    let released = {
        let mut guard = lock();
        let p = guard.as_mut().ok_or(libc::EINVAL)?;
        p.arena.unmap(addr - base, len)
    };
    let mut result = Ok(());
    for d in &released.discard {
        if let Err(e) = arena_discard(base + d.0, d.1) {
            result = Err(e);
        }
    }
    let mut guard = lock();
    if let Some(p) = guard.as_mut() {
        for c in released.chunks {
            p.arena.add_free(c);
        }
    }
    result
}

/// `MAP_FIXED` of private anonymous memory over arena space: the range reads as zeros, is the
/// program's again, and gets protection `prot`.
pub fn arena_remap_fixed(addr: usize, len: usize, prot: c_int) -> Result<(), c_int> {
    let base = ARENA_START.load(Ordering::Acquire);
    {
        let mut guard = lock();
        let p = guard.as_mut().ok_or(libc::EINVAL)?;
        if !p.arena.claim(addr - base, len) {
            p.note_unmanaged(len, "MAP_FIXED over a partly free part of the arena");
            return Err(libc::ENOMEM);
        }
    }
    arena_discard(addr, len)?;
    // SAFETY: the range is arena memory the program owns and asked to remap with `prot`.
    if unsafe { crate::raw_calls::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
        return Err(libc::ENOMEM);
    }
    Ok(())
}

/// Discards `[addr, addr + len)` of arena memory (`MADV_DONTNEED` and friends).
pub fn arena_advise_discard(addr: usize, len: usize) -> Result<(), c_int> {
    arena_discard(addr, len)
}

/// Grows or shrinks an arena mapping (`mremap`); returns the new address.
pub fn arena_remap(
    old: usize,
    old_len: usize,
    new_len: usize,
    may_move: bool,
) -> Result<usize, c_int> {
    let page = memvisor_pager::page_size();
    let base = ARENA_START.load(Ordering::Acquire);
    let (old_len, new_len) = (
        old_len.next_multiple_of(page),
        new_len.next_multiple_of(page),
    );
    if new_len == 0 {
        return Err(libc::EINVAL);
    }
    {
        let guard = lock();
        let p = guard.as_ref().ok_or(libc::EINVAL)?;
        if !p.arena.is_mapped(old - base, old_len) {
            return Err(libc::EFAULT);
        }
    }
    if new_len <= old_len {
        if new_len < old_len {
            arena_unmap(old + new_len, old_len - new_len)?;
        }
        return Ok(old);
    }
    {
        let mut guard = lock();
        let p = guard.as_mut().ok_or(libc::EINVAL)?;
        if p.arena.grow_in_place(old - base, old_len, new_len) {
            return Ok(old);
        }
    }
    if !may_move {
        return Err(libc::ENOMEM);
    }
    let new = arena_map(new_len).ok_or(libc::ENOMEM)?;
    // SAFETY: both ranges are mapped arena memory of the program, disjoint (the new one was
    // just carved from free chunks), and `old_len` fits both.
    unsafe { std::ptr::copy_nonoverlapping(old as *const u8, new as *mut u8, old_len) };
    arena_unmap(old, old_len)?;
    Ok(new)
}

/// Creates a fixed region at `addr` (for `MAP_FIXED` or guest RAM) and rebalances the budget.
/// `memfd`: the guest-RAM memfd or tmpfs file to adopt (a duplicate is taken). `None` leaves
/// the mapping to the kernel (the reason is printed once).
pub fn fixed_map(
    addr: Option<usize>,
    len: usize,
    kind: FixedKind,
    memfd: Option<c_int>,
) -> Option<usize> {
    let mut guard = lock();
    let p = guard.as_mut()?;
    let Some(slot) = FIXED_SPANS
        .iter()
        .position(|(s, e)| s.load(Ordering::Acquire) == 0 && e.load(Ordering::Acquire) == 0)
    else {
        p.note_unmanaged(len, "too many fixed regions");
        return None;
    };
    // The first budget; the rebalance below sets every region's.
    let code = (kind == FixedKind::Code).then(|| CodeAllotment::new(p.budget, p.config.chunk_size));
    let mut claims = p.claims();
    claims.push(match &code {
        Some(a) => Claim::Allotment(a.bytes()),
        None => Claim::Weighted(len),
    });
    let (_, budgets) = split_budget(p.budget, p.config.chunk_size, p.arena_claim(), &claims);
    let budget = budgets.last().copied().unwrap_or(p.config.chunk_size);
    let mut cfg = RegionConfig::new(len, budget, &p.config.swap_dir)
        .policy(p.policy.clone())
        .chunk_size(p.config.chunk_size)
        .busy_poll(p.config.busy_poll)
        .cpu_wake_latency(p.config.cpu_wake_latency)
        .on_swap_full(p.config.on_swap_full)
        .name(kind.name());
    if let Some(a) = addr {
        // SAFETY: the program asked for MAP_FIXED at `a`: it gives up whatever is there.
        cfg = unsafe { cfg.address(a) };
    }
    if let Some(fd) = memfd {
        // SAFETY: F_DUPFD_CLOEXEC takes a descriptor number and returns a new one or -1.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            p.note_unmanaged(len, "cannot duplicate the guest-RAM file descriptor");
            return None;
        }
        // SAFETY: fcntl returned a fresh descriptor that nothing else owns.
        cfg = cfg.memfd(unsafe { OwnedFd::from_raw_fd(dup) });
    }
    let region = match Region::new(cfg) {
        Ok(r) => r,
        Err(e) => {
            p.note_unmanaged(len, &e.to_string());
            return None;
        }
    };
    let start = region.as_ptr() as usize;
    FIXED_SPANS[slot].0.store(start, Ordering::Release);
    FIXED_SPANS[slot].1.store(
        start + len.next_multiple_of(memvisor_pager::page_size()),
        Ordering::Release,
    );
    FIXED_COUNT.fetch_add(1, Ordering::AcqRel);
    let memfd_key = region.memfd_key().ok();
    p.fixed.push(FixedRegion {
        region: Arc::new(region),
        kind,
        slot,
        discards: 0,
        memfd_key,
        code,
    });
    if let Err(e) = p.rebalance() {
        eprintln!("memvisor-preload: rebalancing budgets: {e}");
    }
    let allotments = p.arena_allotment.is_some() || p.fixed.iter().any(|f| f.code.is_some());
    drop(guard);
    // Code allotments and the arena's (with the program's heap in it) move as it runs.
    if allotments {
        crate::allotment_watcher::start();
    }
    Some(start)
}

/// The program makes `[addr, addr + len)` of an untouched `PROT_NONE` reservation accessible
/// with `prot` (read-write, or read-write-execute): puts a region there (a code region if
/// executable), mapped with `prot`. False leaves the `mprotect` to the kernel: the range is
/// then a `PROT_NONE` private anonymous mapping again, as before the call (the reason is
/// printed once).
pub fn reserved_map(addr: usize, len: usize, prot: c_int) -> bool {
    let kind = if prot & libc::PROT_EXEC != 0 {
        FixedKind::Code
    } else {
        FixedKind::FixedAnonymous
    };
    let restore_reservation = || {
        // Where a failed region left a hole, a fresh PROT_NONE anonymous mapping is what the
        // program had (its untouched reservation held no data). MAP_FIXED_NOREPLACE: where
        // the reservation is still there this does nothing, and a mapping another thread
        // made in the hole meanwhile is never replaced.
        // SAFETY: NOREPLACE maps only where nothing is mapped; no memory in use changes.
        unsafe {
            crate::raw_calls::mmap(
                addr as *mut libc::c_void,
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
                -1,
                0,
            )
        };
    };
    // Whatever calls the library did not see (a raw system call, `shmat`), a range with a page
    // in memory or in swap holds data: only an empty one may become zeros in a region.
    match memvisor_pager::Pagemap::open().and_then(|p| p.any_page(addr, len)) {
        Ok(false) => {}
        Ok(true) => {
            note_unmanaged(len, "a reservation made accessible already holds pages");
            return false;
        }
        Err(e) => {
            note_unmanaged(len, &format!("cannot scan /proc/self/pagemap: {e}"));
            return false;
        }
    }
    if fixed_map(Some(addr), len, kind, None) != Some(addr) {
        // A region that failed half-way may have unmapped the range.
        restore_reservation();
        return false;
    }
    if prot != libc::PROT_READ | libc::PROT_WRITE {
        // SAFETY: the range is the region just mapped at the program's request.
        if unsafe { crate::raw_calls::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
            let e = std::io::Error::last_os_error();
            let (over, n) = managed_overlaps(addr, len);
            if let Some(slot) = over[..n].iter().find_map(|o| o.2) {
                let _ = fixed_unmap(slot, addr, len);
            }
            restore_reservation();
            note_unmanaged(len, &format!("mprotect of its region failed: {e}"));
            return false;
        }
    }
    true
}

/// Checks every code region's allotment, and the arena's if it has one, against its page-in
/// rate over the last `secs` seconds, and rebalances the budget split if one changed. Run
/// every [`ALLOTMENT_CHECK_PERIOD`] by the allotment watcher.
pub fn check_claims(secs: f64) {
    let mut guard = lock();
    let Some(p) = guard.as_mut() else {
        return;
    };
    let (budget, cs) = (p.budget, p.config.chunk_size);
    let mut changed = false;
    for f in &mut p.fixed {
        if let Some(a) = &mut f.code {
            changed |= a.check_region(&f.region.stats(), secs, budget, cs);
        }
    }
    if let (Some(a), Some(r)) = (&mut p.arena_allotment, arena_region()) {
        changed |= a.check_region(&r.stats(), secs, budget, cs);
    }
    if changed {
        if let Err(e) = p.rebalance() {
            eprintln!("memvisor-preload: rebalancing budgets: {e}");
        }
    }
}

/// Unmaps `[addr, addr + len)` of fixed region `slot`: the whole region drops it; a part is
/// discarded (reads as zeros; the mapping stays).
pub fn fixed_unmap(slot: usize, addr: usize, len: usize) -> Result<(), c_int> {
    let mut guard = lock();
    let p = guard.as_mut().ok_or(libc::EINVAL)?;
    let i = p
        .fixed
        .iter()
        .position(|f| f.slot == slot)
        .ok_or(libc::EINVAL)?;
    let start = p.fixed[i].region.as_ptr() as usize;
    let whole = FIXED_SPANS[slot].1.load(Ordering::Acquire) - start;
    if addr == start && len >= whole {
        FIXED_SPANS[slot].0.store(0, Ordering::Release);
        FIXED_SPANS[slot].1.store(0, Ordering::Release);
        FIXED_COUNT.fetch_sub(1, Ordering::AcqRel);
        let f = p.fixed.remove(i);
        // A migration reading the region lets go of it first (it is cancelled): the mapping
        // must be gone when the program's munmap returns.
        crate::migration_service::release_region(&f.region);
        // So does a read or discard under way on it (`with_fixed` and its kin run outside the
        // state lock on a reference of their own): the region is out of the table, so no new
        // one is taken, and the ones in use end with their system call. Bounded: a holder
        // that keeps it longer (an incoming migration) lets go of it later, as before.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while Arc::strong_count(&f.region) > 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_micros(50));
        }
        drop(f.region);
        if let Err(e) = p.rebalance() {
            eprintln!("memvisor-preload: rebalancing budgets: {e}");
        }
        return Ok(());
    }
    discard_on_worker(&mut p.fixed[i], addr, len)
}

/// `MAP_FIXED` of private anonymous memory over `[addr, addr + len)` of fixed region `slot`
/// (the twin of [`arena_remap_fixed`]): the range reads as zeros and gets protection `prot`.
/// Executable only over a code region (mapped executable already): `ENOMEM` otherwise, as
/// any mapping over managed memory that cannot be honoured. The region's kind is checked
/// and the range discarded under one hold of the state lock.
pub fn fixed_remap_fixed(slot: usize, addr: usize, len: usize, prot: c_int) -> Result<(), c_int> {
    {
        let mut guard = lock();
        let f = fixed_region(&mut guard, slot)?;
        if prot & libc::PROT_EXEC != 0 && f.kind != FixedKind::Code {
            return Err(libc::ENOMEM);
        }
        discard_on_worker(f, addr, len)?;
    }
    // SAFETY: the range is managed memory the program owns and asked to remap with `prot`.
    if unsafe { crate::raw_calls::mprotect(addr as *mut libc::c_void, len, prot) } != 0 {
        return Err(libc::ENOMEM);
    }
    Ok(())
}

/// `madvise(advice)` of `[addr, addr + len)` of fixed region `slot`, as the kernel treats
/// that advice on the mapping the program made. Guest RAM (a shared mapping of a memfd or a
/// tmpfs file): `MADV_REMOVE` punches, so the range is discarded; `MADV_DONTNEED` only drops
/// page-table entries and the file keeps its content, so nothing changes (QEMU makes it right
/// after punching the same range itself); `MADV_FREE` is `EINVAL` on a shared mapping. A
/// private anonymous region: every discarding advice reads as zeros afterwards.
pub fn fixed_advise(slot: usize, addr: usize, len: usize, advice: c_int) -> Result<(), c_int> {
    let mut guard = lock();
    let f = fixed_region(&mut guard, slot)?;
    if f.kind.is_guest_memory() {
        match advice {
            libc::MADV_REMOVE => {}
            libc::MADV_FREE => return Err(libc::EINVAL),
            _ => return Ok(()),
        }
    }
    discard_on_worker(f, addr, len)
}

/// Fixed region `slot` of the state (held locked by the caller); `EINVAL` if there is none.
fn fixed_region(
    state: &mut Option<ManagedProcess>,
    slot: usize,
) -> Result<&mut FixedRegion, c_int> {
    state
        .as_mut()
        .ok_or(libc::EINVAL)?
        .fixed
        .iter_mut()
        .find(|f| f.slot == slot)
        .ok_or(libc::EINVAL)
}

/// Discards `[addr, addr + len)` of fixed region `f` through the library's worker thread and
/// counts it. `f` is borrowed from the state, whose lock the caller holds until this returns.
fn discard_on_worker(f: &mut FixedRegion, addr: usize, len: usize) -> Result<(), c_int> {
    let start = f.region.as_ptr() as usize;
    f.discards += 1;
    let r = RegionRef(Arc::as_ptr(&f.region));
    // SAFETY: the state lock is held until the worker has run this.
    run_on_worker(move || {
        // SAFETY: the state lock is held by the waiting caller, so the region is alive.
        unsafe { r.get() }.discard(addr - start, len).map_err(|e| {
            eprintln!("memvisor-preload: {e}");
            libc::EIO
        })
    })
}

/// Runs `f` on fixed region `slot` and its start address; `None` if there is no such region.
/// The state lock is held only to find it: `f` runs on a reference of its own (the region
/// stays alive), so that `f` may wait for the region's handler (a [`Region`] command) while
/// other threads map, unmap and read (QEMU's I/O workers read into guest RAM in parallel).
pub fn with_fixed<R>(slot: usize, f: impl FnOnce(&Region, usize) -> R) -> Option<R> {
    let region = lock()
        .as_ref()?
        .fixed
        .iter()
        .find(|f| f.slot == slot)?
        .region
        .clone();
    Some(f(&region, region.as_ptr() as usize))
}

/// Pins `[addr, addr + len)` of managed memory (the arena if `owner` is `None`, else fixed
/// region `owner`) for a direct-I/O read: its chunks are not evicted until the pin is dropped.
pub fn pin_for_direct_io(
    addr: usize,
    len: usize,
    owner: Option<usize>,
) -> Option<memvisor_pager::DirectIoPin> {
    match owner {
        None => {
            let r = arena_region()?;
            r.pin_for_direct_io(addr.checked_sub(r.as_ptr() as usize)?, len)
                .ok()
        }
        Some(slot) => {
            with_fixed(slot, |r, start| r.pin_for_direct_io(addr - start, len).ok()).flatten()
        }
    }
}

/// Runs `f` on every fixed region (as [`with_fixed`]: outside the state lock).
pub fn for_each_fixed(mut f: impl FnMut(&Region)) {
    let regions: Vec<Arc<Region>> = lock()
        .as_ref()
        .map(|p| p.fixed.iter().map(|f| f.region.clone()).collect())
        .unwrap_or_default();
    for r in &regions {
        f(r);
    }
}

/// Runs `f` on the fixed region whose memfd has identity `key` (a discard of its memory,
/// counted as one), outside the state lock as [`with_fixed`]; `None` if no region has that
/// memfd.
pub fn with_fixed_memfd<R>(
    key: memvisor_pager::FileKey,
    f: impl FnOnce(&Region) -> R,
) -> Option<R> {
    let region = {
        let mut guard = lock();
        let fixed = guard
            .as_mut()?
            .fixed
            .iter_mut()
            .find(|f| f.memfd_key == Some(key))?;
        fixed.discards += 1;
        fixed.region.clone()
    };
    // Outside the state lock, as `with_fixed`.
    Some(f(&region))
}

/// Whether `program` (the name `argv[0]` gives) is QEMU.
fn is_qemu(program: &str) -> bool {
    program.starts_with("qemu-system") || program.starts_with("qemu-kvm")
}

/// The guest-memory regions in the order they were created, `memory-backend-memfd` RAM
/// ([`FixedKind::GuestMemfd`]) and tmpfs `memory-backend-file` RAM ([`FixedKind::GuestFile`])
/// mixed as QEMU mapped them: what a live migration moves. A region unmapped while a migration
/// holds it cancels the migration first ([`fixed_unmap`]).
pub fn guest_memory_regions() -> Vec<Arc<Region>> {
    let guard = lock();
    let Some(p) = guard.as_ref() else {
        return Vec::new();
    };
    // `fixed` keeps creation order (removals shift, never reorder).
    p.fixed
        .iter()
        .filter(|f| f.kind.is_guest_memory())
        .map(|f| f.region.clone())
        .collect()
}

/// Whether any fixed region exists (lock-free).
pub fn has_fixed() -> bool {
    FIXED_COUNT.load(Ordering::Acquire) > 0
}

/// Records a large mapping left to the kernel.
pub fn note_unmanaged(len: usize, why: &str) {
    if let Some(p) = lock().as_mut() {
        p.note_unmanaged(len, why);
    }
}

#[cfg(test)]
mod tests {
    use super::{is_qemu, FixedKind};

    #[test]
    fn only_qemu_programs_count_as_qemu() {
        for p in ["qemu-system-x86_64", "qemu-system-aarch64", "qemu-kvm"] {
            assert!(is_qemu(p), "{p}");
        }
        for p in ["postgres", "redis-server", "qemu-img", "my-qemu-system", ""] {
            assert!(!is_qemu(p), "{p}");
        }
    }

    #[test]
    fn guest_ram_kinds_are_named_and_migrated() {
        let kinds = [
            FixedKind::GuestMemfd,
            FixedKind::GuestFile,
            FixedKind::FixedAnonymous,
        ];
        let names: Vec<_> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["guest-memfd", "guest-file", "fixed"]);
        let migrated: Vec<_> = kinds.iter().map(|k| k.is_guest_memory()).collect();
        assert_eq!(migrated, [true, true, false]);
    }
}
