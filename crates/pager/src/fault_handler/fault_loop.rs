//! [`FaultHandler`]: the fault loop of one region: polls the userfaultfd, the stop signal, the
//! command queue and write completions, and serves each fault (page-in, remap, poison).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memvisor_policy::{EvictionPolicy, PolicySpec, RefaultHistory};

use crate::fd_readiness::readable_within;
use crate::pagemap::Pagemap;
use crate::pager_error::PagerError;
use crate::raw_memory_calls;
use crate::region_command::POSTED_MAX_WAIT;
use crate::region_stats::{add, StatsCounters};
use crate::swap_io::SwapIo;
use crate::userfaultfd::{FaultEvent, FaultKind, PartialError, UffdMsg, Userfaultfd};

use super::access_pattern::AccessPattern;
use super::busy_poll::{BusyPoll, PollStretch};
use super::chunk_table::{ChunkState, ChunkTable};
use super::handler_shared::HandlerShared;
use super::image_blocks::ImageBlocks;
use super::image_first::ImageFirst;
use super::map_ahead::MapAhead;
use super::options::{LoopTiming, PageInOptions, PageOutOptions};
use super::page_in::PendingPageRead;
use super::region_memory::RegionMemory;
use super::sample_pacer::{samples_can_inform_eviction, SamplePacer};
use super::wake_latency_hold::WakeLatencyHold;
use crate::cpu_wake_latency::CpuWakeLatency;
use crate::page_reads::PageReadDone;

/// Most bytes of the region whose page-table entries a sample drops before it serves the
/// faults that came meanwhile.
const SAMPLE_SLICE: usize = 16 << 20;

/// Zeros to copy from (see [`FaultHandler::fill_wake`]), page-aligned like any copy source.
#[repr(C, align(4096))]
struct Zeros([u8; 64 << 10]);
static ZEROS: Zeros = Zeros([0; 64 << 10]);

/// The fault-serving state of one region; [`run`](Self::run) is the thread body.
pub(crate) struct FaultHandler {
    pub(super) shared: Arc<HandlerShared>,
    pub(super) uffd: Userfaultfd,
    /// The swap file and its readers and writers. Declared before `memory`, whose alias
    /// mapping writes in flight read, so it is dropped first.
    pub(super) io: SwapIo,
    pub(super) memory: RegionMemory,
    pub(super) policy: Box<dyn EvictionPolicy>,
    /// What `policy` was built from (to rebuild it with another budget).
    pub(super) policy_spec: PolicySpec,
    /// Per-chunk state, residency and written bits, overrun chunks.
    pub(super) chunks: ChunkTable,
    pub(super) timing: LoopTiming,
    pub(super) page_in_options: PageInOptions,
    pub(super) page_out_options: PageOutOptions,
    /// Dirty tracking: pages are mapped write-protected (`WP_ASYNC`) and `PAGEMAP_SCAN` tells
    /// which were written; `None` without tracking (every eviction writes).
    pub(super) pagemap: Option<Pagemap>,
    /// Resident pages allowed (the budget).
    pub(super) budget_pages: usize,
    /// Recent missing faults: how much each page-in reads.
    pub(super) pattern: AccessPattern,
    /// Chunks to bring in ahead of a forward stream while no fault waits.
    pub(super) map_ahead: MapAhead,
    /// Eviction stamps of chunks: the distance of each refault.
    pub(super) refault_history: RefaultHistory,
    /// Whether eviction takes image chunks before the program's own, and its guard.
    pub(super) image_first: ImageFirst,
    /// Parallel page reads in flight.
    pub(super) page_reads: Vec<PendingPageRead>,
    /// Reused buffer of finished page reads.
    pub(super) page_reads_done: Vec<PageReadDone>,
    /// The swap mapper's associations of pages with image blocks.
    pub(super) images: ImageBlocks,
    /// Region offset of the page whose fault started the page-in being served.
    /// The chunk the handler is working on while it may evict others (its stored pages being
    /// read, see `read_stored`; a page brought back before an image write, see
    /// `image_written`): no eviction may take it, however it is reached.
    pub(super) pinned_chunk: Option<usize>,
    pub(super) fault_offset: Option<usize>,
    pub(super) uffd_error_logged: bool,
    /// Page-aligned buffer for a live migration's swap reads and writes, while one runs.
    pub(super) migration_buffer: Option<crate::memfd::Mapping>,
    /// Faults on remote pages (a post-copy migration's destination), waiting for their
    /// content; served again once it is installed.
    pub(super) remote_waits: Vec<FaultEvent>,
    /// The CPU wake-latency request, opened by the region's creator (with its privileges)
    /// when `timing.cpu_wake_latency`; taken by the loop as it starts.
    pub(super) wake_request: Option<CpuWakeLatency>,
}

impl FaultHandler {
    /// Whether swap I/O uses `O_DIRECT`.
    pub fn swap_is_direct(&self) -> bool {
        self.io.is_direct()
    }

    /// The swap file's name in messages.
    pub fn swap_path(&self) -> &std::path::Path {
        self.io.path()
    }

    /// Serves faults until the stop eventfd is written or the userfaultfd fails.
    pub fn run(mut self) {
        if let Ok(mut r) = self.shared.running.lock() {
            *r = true;
            self.shared.started.notify_all();
        }
        self.serve();
        self.shared.commands.close();
    }

    fn serve(&mut self) {
        let mut msgs = [UffdMsg::default(); 64];
        let mut pacer = self
            .timing
            .sample_interval
            .map(|i| SamplePacer::new(i, Instant::now()));
        let mut busy_poll = self.timing.busy_poll.map(BusyPoll::new);
        let mut stretch = PollStretch::default();
        // Lifted and closed when the loop returns.
        let mut wake_hold = WakeLatencyHold::new(self.wake_request.take());
        loop {
            let mut timeout = match pacer.as_mut() {
                None => -1,
                Some(pacer) => {
                    let now = Instant::now();
                    if now >= pacer.due() {
                        let i = if samples_can_inform_eviction(
                            self.chunks.region_pages(),
                            self.budget_pages,
                            self.chunks.resident_total(),
                        ) {
                            self.sample();
                            let minor = self.stats().resident_faults.load(Ordering::Relaxed);
                            pacer.after_sample(minor, now)
                        } else {
                            add(&self.stats().samples_skipped, 1);
                            pacer.skipped(now)
                        };
                        i.as_millis().min(i32::MAX as u128) as i32
                    } else {
                        ((pacer.due() - now).as_millis() as i32).max(1)
                    }
                }
            };
            if self.map_ahead.is_pending() && !self.uffd_ready() {
                // Idle between faults: bring in a chunk ahead of the stream (associations
                // posted meanwhile first: the page-in may evict pages they associate).
                if self.shared.commands.has_posted() {
                    self.run_posted();
                }
                self.map_ahead_step();
                self.check_invariants("map-ahead");
                continue;
            }
            if self.shared.commands.has_posted() {
                // Taken within POSTED_MAX_WAIT at most (earlier with a fault or a command).
                let ms = POSTED_MAX_WAIT.as_millis() as i32;
                timeout = if timeout < 0 { ms } else { timeout.min(ms) };
            }
            let mut fds = [
                libc::pollfd {
                    fd: self.uffd_raw(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.shared.stop.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.shared.commands.wake.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    // poll ignores negative descriptors.
                    fd: self.io.completion_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: self.io.page_read_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            let mut spinning = false;
            let now = Instant::now();
            if let Some(b) = busy_poll.as_mut() {
                let spin = b.should_spin(now, !self.page_reads.is_empty());
                let backoffs = b.backoffs();
                // Judges the time spent polling so far; false if the CPUs are contended.
                if stretch.before_poll(b, now, spin) {
                    timeout = 0;
                    spinning = true;
                }
                if b.backoffs() > backoffs {
                    add(&self.stats().busy_poll_backoffs, 1);
                }
            }
            let (hold_change, wake_by) = wake_hold.before_poll(now, spinning);
            match hold_change {
                Some(true) => add(&self.stats().cpu_wake_latency_holds, 1),
                Some(false) => add(&self.stats().cpu_wake_latency_releases, 1),
                None => {}
            }
            if let Some(ms) = wake_by {
                timeout = if timeout < 0 { ms } else { timeout.min(ms) };
            }
            // SAFETY: `fds` is a live array of pollfds; poll writes only their `revents`.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
            if r == 0 && timeout == 0 {
                // Busy polling found nothing: let a thread waiting for this CPU run first (the
                // program's thread this handler just woke is often placed on it, and would
                // otherwise wait for the polling to end).
                // SAFETY: sched_yield takes no arguments and has no preconditions.
                unsafe { libc::sched_yield() };
                continue;
            }
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    self.transient_error("poll userfaultfd", e);
                }
                continue;
            }
            if fds[1].revents != 0 {
                // Every write in flight reads the alias mapping: finish them before leaving.
                while self.chunks.writing() > 0 {
                    self.reap_writes(true);
                }
                return;
            }
            if fds[3].revents != 0 {
                self.reap_writes(false);
            }
            if fds[4].revents != 0 {
                self.reap_page_reads(false);
                self.check_invariants("page reads");
            }
            if fds[2].revents != 0 {
                // Cleared before looking, so a command that arrives meanwhile wakes the next
                // poll (run_commands clears it again for the same reason).
                self.shared.commands.wake.clear();
                if self.shared.commands.has_submitted() {
                    self.run_commands();
                    // Synchronous commands that come fast (a balloon's discards, a page
                    // each) keep the loop polling as fast faults do: each caller waits.
                    if let Some(b) = busy_poll.as_mut() {
                        b.on_faults(Instant::now());
                    }
                    self.check_invariants("command");
                }
            }
            // Posted commands (associations) are taken whenever the handler wakes, and before
            // faults are served (their page-ins may evict pages they associate).
            if self.shared.commands.has_posted() {
                self.run_posted();
                self.check_invariants("posted commands");
            }
            if fds[0].revents == 0 {
                continue;
            }
            if fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                let e = io::Error::other(format!("revents {:#x}", fds[0].revents));
                self.transient_error("poll userfaultfd", e);
                continue;
            }
            match self.serve_queued_faults(&mut msgs) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.transient_error("read userfaultfd", e);
                    continue;
                }
            }
            if let Some(b) = busy_poll.as_mut() {
                b.on_faults(Instant::now());
            }
            self.check_invariants("faults");
        }
    }

    /// An error of the userfaultfd itself. The handler never gives up while the region lives
    /// (exiting would close the userfaultfd, and the kernel would then zero-fill swapped-out
    /// chunks behind the program's back): it records the first such error and retries slowly.
    fn transient_error(&mut self, op: &'static str, e: io::Error) {
        if !self.uffd_error_logged {
            self.uffd_error_logged = true;
            self.memory_error(op, 0, self.memory.len, e);
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    /// One access sample: the policy reads and clears its reference bits, then every chunk it
    /// tracks loses its page-table entries, so its next access raises a minor fault that maps
    /// the chunk again and sets its reference bit.
    ///
    /// Dropping the entries of a whole arena takes milliseconds (3 to 10 ms for redis's 4 GiB
    /// arena with 322 MiB in use), and a fault that came meanwhile used to wait for all of it:
    /// the program's p99 latency was the sample's. The entries are dropped in slices of at most
    /// [`SAMPLE_SLICE`] bytes, and faults that came meanwhile are served between slices (a
    /// fault served after its chunk's slice sets the chunk's new reference bit; one served
    /// before it was an access before the sample).
    fn sample(&mut self) {
        let t = Instant::now();
        self.policy.on_sample();
        let slice_chunks = (SAMPLE_SLICE / self.memory.chunk_size).max(1);
        // One madvise per run of chunks rather than one per chunk (65,536 calls a sample for a
        // 256 MiB budget of 4 KiB chunks). A run may include chunks that are out or being
        // written: they have no entries in the registered mapping, so dropping is a no-op
        // there. It ends at overrun chunks (resident, not the policy's), and after
        // `slice_chunks` chunks. Poison markers it drops come back at the next fault on the page
        // (the table remembers them). States are read again after faults were served.
        let mut run: Option<usize> = None;
        let mut c = 0;
        while c <= self.chunks.len() {
            let in_run = self.chunks.state(c).is_some_and(|st| match st {
                ChunkState::In => self.policy.contains(c as u64),
                ChunkState::Out | ChunkState::Writing => true,
            });
            let end = match (in_run, run) {
                (true, None) => {
                    run = Some(c);
                    (slice_chunks == 1).then_some(c + 1)
                }
                (true, Some(first)) if c + 1 - first >= slice_chunks => Some(c + 1),
                (false, Some(_)) => Some(c),
                _ => None,
            };
            c += 1;
            let (Some(first), Some(end)) = (run, end) else {
                continue;
            };
            run = None;
            let start = self.chunk_range(first).0;
            let last = self.chunk_range(end - 1);
            let len = last.0 + last.1 - start;
            if let Err(e) = self.registered_dontneed(start, len) {
                self.memory_error("MADV_DONTNEED (sampling)", start, len, e);
            }
            self.serve_waiting_faults();
        }
        add(&self.stats().samples, 1);
        add(&self.stats().sample_nanos, nanos(t));
    }

    /// Serves the faults queued on the userfaultfd now, without waiting for any.
    fn serve_waiting_faults(&mut self) {
        let mut msgs = [UffdMsg::default(); 16];
        loop {
            match self.serve_queued_faults(&mut msgs) {
                Ok(0) => return,
                Ok(_) => self.check_invariants("faults during a sample"),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Left to the fault loop's next poll, which reports it.
                Err(_) => return,
            }
        }
    }

    /// Reads the fault messages queued now (at most `msgs.len()`, without waiting) and serves
    /// each; returns how many were read.
    fn serve_queued_faults(&mut self, msgs: &mut [UffdMsg]) -> io::Result<usize> {
        let n = self.uffd.read_messages(msgs)?;
        for m in &msgs[..n] {
            if let Some(ev) = m.pagefault() {
                self.on_fault(ev);
            }
        }
        Ok(n)
    }

    /// Debug builds: the chunk table's invariants against the policy (see
    /// [`ChunkTable::check_invariants`]).
    fn check_invariants(&self, at: &str) {
        let policy = &self.policy;
        self.chunks
            .check_invariants(at, |c| policy.contains(c as u64));
        // Full checks of small tables only (a guest's page cache makes large ones).
        #[cfg(debug_assertions)]
        if self.images.len() <= 4096 {
            if let Err(e) = self.images.check() {
                panic!("{}: image associations after {at}: {e}", self.shared.name);
            }
        }
        #[cfg(debug_assertions)]
        {
            let counted = self
                .stats()
                .image_pages
                .load(std::sync::atomic::Ordering::Relaxed);
            assert_eq!(
                counted as usize,
                self.images.len(),
                "{}: image pages counted after {at}",
                self.shared.name
            );
        }
    }

    /// Whether a fault message waits on the userfaultfd.
    /// (A failed look counts as one: the loop's own `poll` then says what is there.)
    fn uffd_ready(&self) -> bool {
        readable_within(self.uffd_raw(), 0).unwrap_or(true)
    }

    fn uffd_raw(&self) -> i32 {
        use std::os::fd::AsFd;
        self.uffd.as_fd().as_raw_fd()
    }

    pub(super) fn stats(&self) -> &StatsCounters {
        &self.shared.stats
    }

    pub(super) fn chunk_range(&self, c: usize) -> (usize, usize) {
        self.memory.chunk_range(c)
    }

    pub(super) fn memory_error(
        &self,
        op: &'static str,
        offset: usize,
        len: usize,
        source: io::Error,
    ) {
        self.shared.record(PagerError::Memory {
            region: self.shared.name.clone(),
            op,
            offset,
            len,
            source,
        });
    }

    fn on_fault(&mut self, ev: FaultEvent) {
        match ev.kind {
            FaultKind::Minor => add(&self.stats().minor_faults, 1),
            _ => add(&self.stats().missing_faults, 1),
        }
        self.serve_fault(ev);
    }

    /// The chunk, the page in it and the region offset of the page `ev` faulted on; `None`
    /// outside the region.
    pub(super) fn fault_page(&self, ev: &FaultEvent) -> Option<(usize, usize, usize)> {
        let page_addr = ev.address & !(self.memory.page - 1);
        let offset = page_addr
            .checked_sub(self.memory.base)
            .filter(|&o| o < self.memory.len)?;
        let c = offset / self.memory.chunk_size;
        let page = (offset % self.memory.chunk_size) / self.memory.page;
        Some((c, page, offset))
    }

    /// Serves fault `ev` (counted already): a new one, or one that waited for a remote page.
    pub(super) fn serve_fault(&mut self, ev: FaultEvent) {
        let page_addr = ev.address & !(self.memory.page - 1);
        let Some((c, page, offset)) = self.fault_page(&ev) else {
            // Not ours (cannot happen: only the region is registered); do not leave it hanging.
            let _ = self.uffd.wake(page_addr, self.memory.page);
            return;
        };
        let Some(state) = self.chunks.state(c) else {
            let _ = self.uffd.wake(page_addr, self.memory.page);
            return;
        };
        if self.chunks.is_page_poisoned(c, page) {
            self.poison(offset, self.memory.page);
            return;
        }
        if self.chunks.is_page_remote(c, page) {
            // Its content is still at a post-copy migration's source: wait for it.
            self.wait_for_remote(ev, c, page);
            return;
        }
        if self.chunks.is_page_reading(c, page) {
            // Another thread's fault started a read of this page: its completion wakes both.
            add(&self.stats().resident_faults, 1);
            return;
        }
        let resident = self.chunks.is_page_resident(c, page);
        match state {
            ChunkState::Writing if resident => {
                // Served when the writes complete: the chunk stays in memory then.
                add(&self.stats().resident_faults, 1);
                add(&self.stats().faults_during_write, 1);
                self.chunks.request_rescue(c);
            }
            ChunkState::Writing => {
                // A page that is not in memory: let the chunk's writes finish (it leaves
                // memory), then serve the fault as any other.
                add(&self.stats().faults_during_write, 1);
                self.wait_for_write(c);
                self.on_fault_again(ev, c, page, offset);
            }
            ChunkState::In if resident => self.on_resident_fault(ev, c, page),
            ChunkState::In | ChunkState::Out => self.on_missing_page(ev, c, page, offset),
        }
    }

    /// Serves a fault again after waiting for chunk `c`'s writes (its state changed).
    fn on_fault_again(&mut self, ev: FaultEvent, c: usize, page: usize, offset: usize) {
        if self.chunks.is_page_resident(c, page) {
            // The write failed or was rescued: the chunk stayed in memory.
            self.on_resident_fault(ev, c, page);
        } else {
            self.on_missing_page(ev, c, page, offset);
        }
    }

    /// A fault on resident page `page` of chunk `c`: after a sample or a page-out attempt
    /// dropped the chunk's page-table entries (a minor fault), map the run of resident pages
    /// around it again; otherwise a fault already served (a stale message): wake.
    ///
    /// Only the faulting page's run is mapped: the chunk's other runs keep their written state
    /// in their uffd-wp markers and are mapped by their own minor faults, if they come. A
    /// partly resident chunk of scattered pages has many runs (redis's 16 KiB values under 1
    /// MiB chunks), and mapping them all made the first touch of each chunk after a sample
    /// cost one `UFFDIO_CONTINUE` per run (about 14 µs each here), the program's other faults
    /// waiting behind them; a chunk read in whole is one run, mapped by one call as before.
    fn on_resident_fault(&mut self, ev: FaultEvent, c: usize, page: usize) {
        add(&self.stats().resident_faults, 1);
        let page_addr = self.memory.base + self.chunk_range(c).0 + page * self.memory.page;
        if ev.kind == FaultKind::Minor {
            self.policy.mark_referenced(c as u64);
            let run = self
                .chunks
                .run_around(c, page, |p| self.chunks.holds_page(c, p));
            if let Some((first, n)) = run {
                // Save the run's written state first: mapping it write-protected clears it.
                self.harvest_dirty_in(c, first, n);
                // The swap copies of pages found written are stale now; they keep their blocks
                // until the pages are written out again in their place (punching them here cost
                // a filesystem call per run of pages at the first touch after every sample: 0.7
                // ms each for scattered pages on ext4, Run H).
                let pg = self.memory.page;
                let start = self.chunk_range(c).0 + first * pg;
                match self.fill(start, n * pg, Fill::Continue) {
                    // The run holds the faulting page and `fill` woke every page of it
                    // (mapped by it or found mapped): no second wake (a system call per
                    // sampled page's first touch).
                    Ok(()) => return,
                    Err(e) => self.memory_error("UFFDIO_CONTINUE", start, n * pg, e),
                }
            }
        }
        // A concurrent fault already served by the page-in that woke it: wake is a harmless
        // no-op then, and needed if it raced past the range wake.
        let _ = self.uffd.wake(page_addr, self.memory.page);
    }

    /// A fault on page `page` of chunk `c` (region offset `offset`), which is not in memory:
    /// a page-in of what the access pattern asks for.
    fn on_missing_page(&mut self, ev: FaultEvent, c: usize, page: usize, offset: usize) {
        let t = Instant::now();
        let span = self
            .pattern
            .on_missing_fault(ev.thread_id, offset / self.memory.page);
        self.fault_offset = Some(offset);
        self.page_in(c, page, span);
        self.fault_offset = None;
        self.stats().record_page_in(nanos(t));
        self.plan_map_ahead(ev.thread_id, offset / self.memory.page, span);
    }

    pub(super) fn registered_dontneed(&self, start: usize, len: usize) -> io::Result<()> {
        // SAFETY: `[base + start, base + start + len)` lies inside the registered mapping, which
        // the region keeps alive until this thread has been joined. MADV_DONTNEED on a shared
        // file mapping drops page-table entries only; the data stays in the memfd.
        unsafe { raw_memory_calls::madvise(self.memory.base + start, len, libc::MADV_DONTNEED) }
    }

    /// Maps `[start, start + len)` of the registered mapping and wakes its waiters, skipping
    /// pages that are already mapped (`EEXIST`) and retrying after `EAGAIN`.
    pub(super) fn fill(&self, start: usize, len: usize, how: Fill<'_>) -> io::Result<()> {
        self.fill_wake(start, len, how, true)
    }

    /// [`fill`](Self::fill), waking the waiters only if `wake`.
    pub(super) fn fill_wake(
        &self,
        start: usize,
        len: usize,
        how: Fill<'_>,
        wake: bool,
    ) -> io::Result<()> {
        self.fill_wake_counted(start, len, how, wake)
            .map_err(|(_, e)| e)
    }

    /// [`fill_wake`](Self::fill_wake); a failure also says how many bytes from `start` were
    /// mapped before it (whole pages): they are in memory, and the caller must count them.
    pub(super) fn fill_wake_counted(
        &self,
        start: usize,
        len: usize,
        how: Fill<'_>,
        wake: bool,
    ) -> Result<(), (usize, io::Error)> {
        let mut done = 0;
        let mut again = 0;
        let wp = self.pagemap.is_some();
        while done < len {
            let dst = self.memory.base + start + done;
            let rest = len - done;
            let r = match how {
                Fill::Continue => self.uffd.continue_range(dst, rest, wake, wp),
                // UFFDIO_ZEROPAGE has no write-protect mode. While a migration tracks changes,
                // zeros are copied write-protected instead, so that a page only read is not
                // sent again as changed.
                Fill::Zero if wp && self.chunks.tracks_changes() => {
                    self.uffd
                        .copy(dst, &ZEROS.0[..rest.min(ZEROS.0.len())], wake, true)
                }
                // Otherwise such pages read as written, and their eviction finds them zero
                // without I/O.
                Fill::Zero => self.uffd.zeropage(dst, rest, wake),
                Fill::Copy(src) => self.uffd.copy(dst, &src[done..], wake, wp),
            };
            match r {
                Ok(n) if n >= rest || n == 0 => return Ok(()),
                Ok(n) => done += n,
                Err(PartialError { done: n, error }) => match error.raw_os_error() {
                    Some(libc::EEXIST) => {
                        // The page at `done + n` is mapped already (a racing fault on a page
                        // that was never dropped): skip it.
                        done += n - n % self.memory.page + self.memory.page;
                        let _ = self.uffd.wake(dst, n + self.memory.page);
                    }
                    Some(libc::EAGAIN) if again < 100 => {
                        again += 1;
                        done += n - n % self.memory.page;
                    }
                    _ => return Err((done + n - n % self.memory.page, error)),
                },
            }
        }
        Ok(())
    }

    /// Installs poison markers over `[start, start + len)` (skipping mapped pages) and wakes
    /// the waiters, who then get SIGBUS.
    pub(super) fn poison(&self, start: usize, len: usize) {
        if self.pagemap.is_some() {
            // A page that left memory clean keeps a uffd-wp marker in its empty entry, which
            // UFFDIO_POISON refuses (EEXIST): the poison would never be installed and the
            // access would fault forever. These pages are not resident: drop the markers.
            if let Err(e) = self.uffd.unprotect(self.memory.base + start, len) {
                self.memory_error("UFFDIO_WRITEPROTECT (before poison)", start, len, e);
            }
        }
        let mut done = 0;
        while done < len {
            let dst = self.memory.base + start + done;
            match self.uffd.poison(dst, len - done) {
                Ok(_) => break,
                Err(PartialError { done: n, error }) => {
                    if error.raw_os_error() == Some(libc::EEXIST)
                        || error.raw_os_error() == Some(libc::EAGAIN)
                    {
                        done += n - n % self.memory.page + self.memory.page;
                    } else {
                        self.memory_error("UFFDIO_POISON", start + done, len - done, error);
                        break;
                    }
                }
            }
        }
        let _ = self.uffd.wake(self.memory.base + start, len);
    }
}

/// Nanoseconds since `t`.
pub(super) fn nanos(t: Instant) -> u64 {
    t.elapsed().as_nanos().min(u64::MAX as u128) as u64
}

#[derive(Clone, Copy)]
pub(super) enum Fill<'a> {
    Continue,
    Zero,
    Copy(&'a [u8]),
}
