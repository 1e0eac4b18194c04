//! [`RegionConfig`] and [`ResolveMode`]: how a region is built.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use memvisor_policy::PolicySpec;

use crate::fault_injector::FaultInjector;

/// Default chunk size: 256 pages of 4 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = 1 << 20;

/// The default policy: chunk queues (seed 003, section 4.2).
pub const DEFAULT_POLICY: &str = "chunk-queues";

/// Default access sampling period (see [`RegionConfig::sample_interval`]).
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// How a fault handler maps a chunk it brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResolveMode {
    /// Read swap data into a bounce buffer and `UFFDIO_COPY` the whole chunk (zero chunks:
    /// `UFFDIO_ZEROPAGE`). The default: on the development VM it was faster than
    /// [`AliasContinue`](Self::AliasContinue) at every chunk size (1 MiB read passes: 4.8 vs
    /// 6.0 us per page with swap on tmpfs, 8.6 vs 10.6 on disk; see the crate README).
    #[default]
    Copy,
    /// Read swap data into a second, unregistered mapping of the memfd (populated first with
    /// `MADV_POPULATE_WRITE`; zero chunks: allocated with `fallocate`), then map the whole chunk
    /// with one `UFFDIO_CONTINUE`. No bounce copy, but the pages are zeroed before the read.
    AliasContinue,
}

impl ResolveMode {
    /// Name as a command line would spell it.
    pub fn name(self) -> &'static str {
        match self {
            Self::AliasContinue => "alias-continue",
            Self::Copy => "copy",
        }
    }
}

/// How evicted chunks that need a write get to swap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageOut {
    /// Written inside the fault that needs room: the faulting thread waits for the write.
    Sync,
    /// Written by `n` writer threads (blocking `pwrite`); the fault handler maps the next
    /// chunk meanwhile (seed 003, section 4.3).
    Threads(usize),
    /// Submitted by the fault handler to an io_uring of depth `n`; no extra threads.
    IoUring(usize),
}

impl Default for PageOut {
    fn default() -> Self {
        Self::Threads(2)
    }
}

impl std::fmt::Display for PageOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sync => write!(f, "sync"),
            Self::Threads(n) => write!(f, "threads:{n}"),
            Self::IoUring(n) => write!(f, "io-uring:{n}"),
        }
    }
}

impl std::str::FromStr for PageOut {
    type Err = String;

    /// `sync`, `threads[:N]` (default 2) or `io-uring[:N]` (default 4), N from 1 to 64.
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, n) = match s.split_once(':') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let count = |default: usize| -> Result<usize, String> {
            let Some(n) = n else { return Ok(default) };
            match n.parse::<usize>() {
                Ok(v @ 1..=64) => Ok(v),
                _ => Err(format!("page-out {s:?}: {n:?} is not a count from 1 to 64")),
            }
        };
        match name {
            "sync" if n.is_none() => Ok(Self::Sync),
            "threads" => Ok(Self::Threads(count(2)?)),
            "io-uring" => Ok(Self::IoUring(count(4)?)),
            _ => Err(format!(
                "page-out {s:?}: expected sync, threads[:N] or io-uring[:N]"
            )),
        }
    }
}

/// Default free chunks an asynchronous page-out keeps ahead of demand.
pub const DEFAULT_HEADROOM: usize = 2;

/// Everything needed to build a [`Region`](crate::Region).
#[derive(Debug, Clone)]
pub struct RegionConfig {
    /// Bytes of memory (rounded up to a page; need not be a multiple of the chunk size).
    pub size: usize,
    /// Resident budget in bytes; `budget / chunk_size` chunks (at least one chunk) may be
    /// resident.
    pub budget: usize,
    /// Paging unit in bytes: a multiple of the page size. Chunk `i` covers
    /// `[i * chunk_size, (i + 1) * chunk_size)`; a page-sized chunk pages page by page.
    pub chunk_size: usize,
    /// Directory of the private swap file.
    pub swap_dir: PathBuf,
    /// Eviction policy over chunks.
    pub policy: PolicySpec,
    /// How faults are resolved.
    pub resolve: ResolveMode,
    /// Access sampling period. Every period the policy samples (reads and clears reference
    /// bits) and the page-table entries of every resident chunk are dropped; the next access
    /// to a chunk raises a userfaultfd minor fault, which maps the whole chunk again with
    /// `UFFDIO_CONTINUE` and sets its reference bit. `None`: the policy only sees page-ins,
    /// so CLOCK, LRU and chunk queues degrade to FIFO order. Default: [`DEFAULT_SAMPLE_INTERVAL`].
    ///
    /// Cost measured on the development VM (64 MiB resident, every chunk touched between
    /// samples): one sample drops the page tables of the resident set in 4–7 ms, and each chunk
    /// touched afterwards costs a minor fault of 0.2–0.4 ms (1 MiB chunks): read passes slow
    /// down 1.02x at 1 s, 1.16x at 100 ms, 15x at 10 ms.
    pub sample_interval: Option<Duration>,
    /// Track written pages (userfaultfd `WP_ASYNC` + `PAGEMAP_SCAN`) so chunks unchanged since
    /// they were read from swap are evicted without a write. Default on; silently off if the
    /// kernel lacks the features (see [`Region::dirty_tracking`](crate::Region::dirty_tracking)).
    pub dirty_tracking: bool,
    /// How dirty victims are written: synchronously, or asynchronously on writer threads or an
    /// io_uring (default: two writer threads).
    pub page_out: PageOut,
    /// With asynchronous page-out: chunks kept free ahead of demand (victims are written while
    /// the program runs, so a page-in seldom waits for a write). At most `budget - 1` chunks
    /// A quarter of the budget at most is used; with 0 (or a budget under 4 chunks) victims
    /// are chosen only when a page-in needs room, as with [`PageOut::Sync`], and only the
    /// write itself overlaps with serving faults.
    pub headroom: usize,
    /// Name used in errors, the memfd name and the swap file name.
    pub name: String,
    /// Print each recorded error to stderr as it happens.
    pub log_errors: bool,
    /// Fault injection for the swap file (tests).
    pub fault_injector: Option<Arc<FaultInjector>>,
    /// Where the memory goes: `None` lets the kernel choose; `Some(addr)` maps it at `addr`
    /// exactly, replacing whatever is mapped there. Set only through the `unsafe`
    /// [`address`](Self::address) builder.
    pub(crate) address: Option<usize>,
    /// An existing, empty memory file (e.g. a VMM's `memfd_create` guest RAM) to back the
    /// region instead of a new memfd; grown to `size` if shorter. Shared so the config stays
    /// `Clone`; the region keeps its own duplicate of the descriptor.
    pub memfd: Option<Arc<OwnedFd>>,
}

impl RegionConfig {
    /// A region of `size` bytes with resident budget `budget`, swapping to `swap_dir`, with the
    /// default chunk size, policy and resolve mode.
    pub fn new(size: usize, budget: usize, swap_dir: impl Into<PathBuf>) -> Self {
        Self {
            size,
            budget,
            chunk_size: DEFAULT_CHUNK_SIZE,
            swap_dir: swap_dir.into(),
            policy: DEFAULT_POLICY.parse().unwrap_or(PolicySpec::Clock),
            resolve: ResolveMode::default(),
            sample_interval: Some(DEFAULT_SAMPLE_INTERVAL),
            dirty_tracking: true,
            page_out: PageOut::default(),
            headroom: DEFAULT_HEADROOM,
            name: "region".into(),
            log_errors: true,
            fault_injector: None,
            address: None,
            memfd: None,
        }
    }

    /// Sets the chunk size.
    pub fn chunk_size(mut self, chunk_size: usize) -> Self {
        self.chunk_size = chunk_size;
        self
    }

    /// Sets the policy.
    pub fn policy(mut self, policy: PolicySpec) -> Self {
        self.policy = policy;
        self
    }

    /// Sets the resolve mode.
    pub fn resolve(mut self, resolve: ResolveMode) -> Self {
        self.resolve = resolve;
        self
    }

    /// Sets the access sampling period (`None` disables sampling).
    pub fn sample_interval(mut self, interval: Option<Duration>) -> Self {
        self.sample_interval = interval;
        self
    }

    /// Turns dirty tracking on or off.
    pub fn dirty_tracking(mut self, on: bool) -> Self {
        self.dirty_tracking = on;
        self
    }

    /// Sets how victims are written to swap.
    pub fn page_out(mut self, page_out: PageOut) -> Self {
        self.page_out = page_out;
        self
    }

    /// Sets the asynchronous page-out headroom in chunks.
    pub fn headroom(mut self, chunks: usize) -> Self {
        self.headroom = chunks;
        self
    }

    /// Sets the name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Installs a fault injector.
    pub fn fault_injector(mut self, injector: Arc<FaultInjector>) -> Self {
        self.fault_injector = Some(injector);
        self
    }

    /// Maps the region at `addr` exactly (page-aligned), replacing whatever is mapped in
    /// `[addr, addr + size)`, as `mmap(MAP_FIXED)` does. For a program's own reservations (an
    /// `LD_PRELOAD` shim placing a region where the program asked for memory).
    ///
    /// # Safety
    ///
    /// Nothing in `[addr, addr + size)` may be in use when the region is created: memory there
    /// is replaced (and unmapped when the region is dropped).
    pub unsafe fn address(mut self, addr: usize) -> Self {
        self.address = Some(addr);
        self
    }

    /// Backs the region with `memfd`, an existing empty memory file (see
    /// [`memfd`](Self::memfd)).
    pub fn memfd(mut self, memfd: OwnedFd) -> Self {
        self.memfd = Some(Arc::new(memfd));
        self
    }

    /// Sets whether errors are printed to stderr.
    pub fn log_errors(mut self, log: bool) -> Self {
        self.log_errors = log;
        self
    }
}
