//! [`RegionConfig`] and [`ResolveMode`]: how a region is built.

use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use memvisor_policy::PolicySpec;

use crate::fault_injector::FaultInjector;
use crate::page_in_unit::PageInUnit;
use crate::swap_full::OnSwapFull;

/// Default chunk size: 256 pages of 4 KiB.
pub const DEFAULT_CHUNK_SIZE: usize = 1 << 20;

/// The default policy: CLOCK, chosen by measurement (`docs/benchmarks.md`, Run I: the lowest
/// geometric mean of the bench workloads' run times in each of three runs of every online
/// policy; chunk queues, seed 003's policy and the default before, ranked second, second and
/// seventh).
pub const DEFAULT_POLICY: &str = "clock";

/// Default access sampling period (see [`RegionConfig::sample_interval`]).
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// Default adaptive busy-polling window (`docs/benchmarks.md`, Run H: 200 µs beat 50 µs and
/// sleeping on scattered and sequential access).
pub const DEFAULT_BUSY_POLL: Duration = Duration::from_micros(200);

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PageOut {
    /// Written inside the fault that needs room: the faulting thread waits for the write.
    Sync,
    /// Written by `n` writer threads (blocking `pwrite`); the fault handler maps the next
    /// chunk meanwhile (seed 003, section 4.3).
    Threads(usize),
    /// Submitted by the fault handler to an io_uring of depth `n`; no extra threads.
    IoUring(usize),
    /// Chosen by chunk size when the region is created ([`resolve`](Self::resolve)): two writer
    /// threads for chunks over [`SMALL_CHUNK`], an io_uring of depth 8 for smaller ones.
    #[default]
    Auto,
}

/// Largest chunk for which [`PageOut::Auto`] uses an io_uring.
pub const SMALL_CHUNK: usize = 64 << 10;

impl PageOut {
    /// The engine for chunks of `chunk_size` bytes: [`Auto`](Self::Auto) resolved, any other
    /// choice unchanged. Measured on the development VM (`docs/benchmarks.md`): with 1 MiB
    /// chunks the checksum of each victim is better computed on writer threads than on the
    /// fault handler; with 4 KiB chunks, where a checksum is cheap and victims come one per
    /// fault, the io_uring was 1.3x faster on random access (no thread hand-offs, no threads
    /// competing with the program for the CPUs).
    pub fn resolve(self, chunk_size: usize) -> Self {
        match self {
            Self::Auto if chunk_size <= SMALL_CHUNK => Self::IoUring(8),
            Self::Auto => Self::Threads(2),
            other => other,
        }
    }
}

impl std::fmt::Display for PageOut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Sync => write!(f, "sync"),
            Self::Threads(n) => write!(f, "threads:{n}"),
            Self::IoUring(n) => write!(f, "io-uring:{n}"),
            Self::Auto => write!(f, "auto"),
        }
    }
}

impl std::str::FromStr for PageOut {
    type Err = String;

    /// `auto`, `sync`, `threads[:N]` (default 2) or `io-uring[:N]` (default 4), N from 1 to 64.
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
            "auto" if n.is_none() => Ok(Self::Auto),
            "threads" => Ok(Self::Threads(count(2)?)),
            "io-uring" => Ok(Self::IoUring(count(4)?)),
            _ => Err(format!(
                "page-out {s:?}: expected auto, sync, threads[:N] or io-uring[:N]"
            )),
        }
    }
}

/// Default free chunks an asynchronous page-out keeps ahead of demand.
pub const DEFAULT_HEADROOM: usize = 2;

/// Default [`RegionConfig::map_ahead`]: chunks brought in ahead of a forward stream.
pub const DEFAULT_MAP_AHEAD: usize = 2;

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
    ///
    /// This is the shortest interval: while samples cost the program more than 1,000 minor
    /// faults a second, the fault loop doubles it, up to 16 times this (`SamplePacer`).
    pub sample_interval: Option<Duration>,
    /// Track written pages (userfaultfd `WP_ASYNC` + `PAGEMAP_SCAN`) so chunks unchanged since
    /// they were read from swap are evicted without a write. Default on; silently off if the
    /// kernel lacks the features (see [`Region::dirty_tracking`](crate::Region::dirty_tracking)).
    pub dirty_tracking: bool,
    /// How dirty victims are written: synchronously, or asynchronously on writer threads or an
    /// io_uring (default: [`PageOut::Auto`], by chunk size).
    pub page_out: PageOut,
    /// With asynchronous page-out: chunks kept free ahead of demand (victims are written while
    /// the program runs, so a page-in seldom waits for a write). At most `budget - 1` chunks
    /// A quarter of the budget at most is used; with 0 (or a budget under 4 chunks) victims
    /// are chosen only when a page-in needs room, as with [`PageOut::Sync`], and only the
    /// write itself overlaps with serving faults.
    pub headroom: usize,
    /// Sequential readahead: when page-ins come in address order, the next chunk is read from
    /// swap on a reader thread while the current one is mapped and used. Default on; only with
    /// [`ResolveMode::Copy`].
    pub readahead: bool,
    /// Map-ahead: after a forward stream's chunk page-in, bring in up to this many chunks past
    /// it while no fault waits, so the streaming thread finds them mapped (0: off). Default
    /// [`DEFAULT_MAP_AHEAD`].
    pub map_ahead: usize,
    /// With asynchronous page-out: page-in reads are submitted to an io_uring, and the victims
    /// that make room for the chunk are chosen and their writes started while the disk reads,
    /// instead of after the faulting thread is woken (where that work delays the next fault).
    /// Default on; falls back to `pread` where io_uring is unavailable.
    pub overlapped_page_in: bool,
    /// Asynchronous page-in (seed 003, section 4.3; `ResolveMode::Copy` only): on a fault
    /// that reads a whole stored chunk, the faulting page is read and verified first (by its
    /// own checksum) and the thread released; the rest of the chunk follows. Default off: the seed measured it 20% slower
    /// on sequential access, see `docs/benchmarks.md` for this pager.
    pub async_page_in: bool,
    /// Parallel page-in: scattered page-ins of stored pages start their read and let the
    /// handler serve other faults meanwhile (several reads in flight), with the demand reader
    /// (asynchronous page-out, overlapped page-in) in copy mode. Default on.
    pub parallel_page_in: bool,
    /// How much a page-in reads: adaptive by default (the faulting page when faults are
    /// scattered, the chunk and the next one when they stream).
    pub page_in_unit: PageInUnit,
    /// Adaptive busy polling: while faults arrive faster than one batch per window, or a
    /// parallel page read is in flight, the handler keeps checking for work without sleeping
    /// for up to this long after each batch of faults. A fault or read completion that arrives
    /// then is seen at once instead of after the handler thread is woken (on the development
    /// VM a cross-CPU wake-up costs tens of microseconds per fault). An idle region, or one
    /// faulting slower than once per window, sleeps. Default [`DEFAULT_BUSY_POLL`]; `None`:
    /// always block at once.
    pub busy_poll: Option<Duration>,
    /// While the handler busy-polls, ask the kernel (CPU latency QoS, `/dev/cpu_dma_latency`)
    /// that idle CPUs poll instead of halting, so that a thread woken after its page-in runs at
    /// once instead of after its CPU leaves an idle state (`CpuWakeLatency`; needs root,
    /// nothing happens without it). Lifted 20 ms after the handler stops polling. Default on;
    /// no effect without `busy_poll`.
    pub cpu_wake_latency: bool,
    /// Name used in errors, the memfd name and the swap file name.
    pub name: String,
    /// Print recorded errors to stderr as they happen (at most a few per 10 s; the rest are
    /// counted).
    pub log_errors: bool,
    /// What to do while the swap filesystem is full (default: overrun the budget).
    pub on_swap_full: OnSwapFull,
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
            readahead: true,
            map_ahead: DEFAULT_MAP_AHEAD,
            overlapped_page_in: true,
            async_page_in: false,
            page_in_unit: PageInUnit::Adaptive,
            parallel_page_in: true,
            busy_poll: Some(DEFAULT_BUSY_POLL),
            cpu_wake_latency: true,
            name: "region".into(),
            log_errors: true,
            on_swap_full: OnSwapFull::Overrun,
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

    /// Turns sequential readahead on or off.
    pub fn readahead(mut self, on: bool) -> Self {
        self.readahead = on;
        self
    }

    /// Chunks mapped ahead of a forward stream (0: off).
    pub fn map_ahead(mut self, chunks: usize) -> Self {
        self.map_ahead = chunks;
        self
    }

    /// Turns overlapped page-in reads on or off.
    pub fn overlapped_page_in(mut self, on: bool) -> Self {
        self.overlapped_page_in = on;
        self
    }

    /// Turns asynchronous page-in on or off.
    pub fn async_page_in(mut self, on: bool) -> Self {
        self.async_page_in = on;
        self
    }

    /// Turns parallel page-in on or off.
    pub fn parallel_page_in(mut self, on: bool) -> Self {
        self.parallel_page_in = on;
        self
    }

    /// Sets how much a page-in reads.
    pub fn page_in_unit(mut self, unit: PageInUnit) -> Self {
        self.page_in_unit = unit;
        self
    }

    /// Sets whether idle CPUs are asked to poll while the handler busy-polls.
    pub fn cpu_wake_latency(mut self, on: bool) -> Self {
        self.cpu_wake_latency = on;
        self
    }

    /// Sets the adaptive busy-polling window (`None`: off).
    pub fn busy_poll(mut self, window: Option<Duration>) -> Self {
        self.busy_poll = window;
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

    /// Sets what to do while the swap filesystem is full.
    pub fn on_swap_full(mut self, action: OnSwapFull) -> Self {
        self.on_swap_full = action;
        self
    }

    /// Sets whether errors are printed to stderr.
    pub fn log_errors(mut self, log: bool) -> Self {
        self.log_errors = log;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_out_spellings_parse_and_auto_follows_the_chunk_size() {
        for s in ["auto", "sync", "threads:3", "io-uring:8"] {
            assert_eq!(s.parse::<PageOut>().unwrap().to_string(), s);
        }
        assert_eq!("threads".parse::<PageOut>(), Ok(PageOut::Threads(2)));
        assert!("auto:2".parse::<PageOut>().is_err());
        assert!("io-uring:0".parse::<PageOut>().is_err());
        assert_eq!(PageOut::default(), PageOut::Auto);
        assert_eq!(PageOut::Auto.resolve(4096), PageOut::IoUring(8));
        assert_eq!(PageOut::Auto.resolve(SMALL_CHUNK), PageOut::IoUring(8));
        assert_eq!(PageOut::Auto.resolve(1 << 20), PageOut::Threads(2));
        assert_eq!(PageOut::Sync.resolve(4096), PageOut::Sync);
    }
}
