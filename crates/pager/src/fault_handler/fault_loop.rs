//! [`FaultHandler`]: the fault loop of one region: polls the userfaultfd, the stop signal, the
//! command queue and write completions, and serves each fault (page-in, remap, poison).

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use memvisor_policy::{EvictionPolicy, PolicySpec};

use crate::crc32c::crc32c;
use crate::pagemap::Pagemap;
use crate::pager_error::PagerError;
use crate::raw_memory_calls;
use crate::region_config::ResolveMode;
use crate::region_stats::{add, sub, StatsCounters};
use crate::swap_file::{is_zero, ReadError, WriteOutcome};
use crate::swap_io::{ReadStart, SwapIo};
use crate::userfaultfd::{FaultEvent, FaultKind, PartialError, UffdMsg, Userfaultfd};

use super::chunk_table::{ChunkState, ChunkTable};
use super::handler_shared::HandlerShared;
use super::options::{LoopTiming, PageInOptions, PageOutOptions};
use super::region_memory::RegionMemory;

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
    /// The chunk of the last page-in, to detect sequential page-ins.
    pub(super) last_page_in: Option<usize>,
    /// Region offset of the page whose fault started the page-in being served.
    pub(super) fault_offset: Option<usize>,
    pub(super) uffd_error_logged: bool,
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
        let mut next_sample = self.timing.sample_interval.map(|i| Instant::now() + i);
        // While busy polling, until when.
        let mut spin_until: Option<Instant> = None;
        loop {
            let mut timeout = match next_sample {
                None => -1,
                Some(at) => {
                    let now = Instant::now();
                    if now >= at {
                        self.sample();
                        let i = self
                            .timing
                            .sample_interval
                            .unwrap_or(Duration::from_secs(1));
                        next_sample = Some(now + i);
                        i.as_millis().min(i32::MAX as u128) as i32
                    } else {
                        ((at - now).as_millis() as i32).max(1)
                    }
                }
            };
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
            ];
            if let Some(until) = spin_until {
                if Instant::now() < until {
                    timeout = 0;
                } else {
                    spin_until = None;
                }
            }
            // SAFETY: `fds` is a live array of pollfds; poll writes only their `revents`.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
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
            if fds[2].revents != 0 {
                self.run_commands();
                self.check_invariants("command");
            }
            if fds[0].revents == 0 {
                continue;
            }
            if fds[0].revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                let e = io::Error::other(format!("revents {:#x}", fds[0].revents));
                self.transient_error("poll userfaultfd", e);
                continue;
            }
            let n = match self.uffd.read_messages(&mut msgs) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.transient_error("read userfaultfd", e);
                    continue;
                }
            };
            for m in &msgs[..n] {
                if let Some(ev) = m.pagefault() {
                    self.on_fault(ev);
                }
            }
            if let Some(window) = self.timing.busy_poll {
                spin_until = Some(Instant::now() + window);
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
    fn sample(&mut self) {
        let t = Instant::now();
        self.policy.on_sample();
        // One madvise per run of chunks rather than one per chunk (65,536 calls a sample for a
        // 256 MiB budget of 4 KiB chunks). A run may include chunks that are out or being
        // written: they have no entries in the registered mapping, so dropping is a no-op
        // there. It ends at overrun chunks (resident, not the policy's) and poisoned ones.
        let mut run: Option<usize> = None;
        for c in 0..=self.chunks.len() {
            let in_run = self.chunks.state(c).is_some_and(|st| match st {
                ChunkState::In => self.policy.contains(c as u64),
                ChunkState::Out | ChunkState::Writing => true,
                ChunkState::Poisoned => false,
            });
            match (in_run, run) {
                (true, None) => run = Some(c),
                (false, Some(first)) => {
                    run = None;
                    let start = self.chunk_range(first).0;
                    let end = self.chunk_range(c - 1);
                    let len = end.0 + end.1 - start;
                    if let Err(e) = self.registered_dontneed(start, len) {
                        self.memory_error("MADV_DONTNEED (sampling)", start, len, e);
                    }
                }
                _ => {}
            }
        }
        add(&self.stats().samples, 1);
        add(&self.stats().sample_nanos, nanos(t));
    }

    /// Debug builds: the chunk table's invariants against the policy (see
    /// [`ChunkTable::check_invariants`]).
    fn check_invariants(&self, at: &str) {
        let policy = &self.policy;
        self.chunks
            .check_invariants(at, |c| policy.contains(c as u64));
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
        let page_addr = ev.address & !(self.memory.page - 1);
        let Some(offset) = page_addr
            .checked_sub(self.memory.base)
            .filter(|&o| o < self.memory.len)
        else {
            // Not ours (cannot happen: only the region is registered); do not leave it hanging.
            let _ = self.uffd.wake(page_addr, self.memory.page);
            return;
        };
        let c = offset / self.memory.chunk_size;
        let Some(state) = self.chunks.state(c) else {
            let _ = self.uffd.wake(page_addr, self.memory.page);
            return;
        };
        match state {
            ChunkState::In => {
                add(&self.stats().resident_faults, 1);
                if ev.kind == FaultKind::Minor {
                    // Page-table entries were dropped (page-out attempt or sampling): map the
                    // whole chunk again, after saving its written state (mapping it
                    // write-protected clears that state).
                    self.policy.mark_referenced(c as u64);
                    let (start, len) = self.chunk_range(c);
                    self.harvest_dirty(c, start, len);
                    // A stale message (another thread's fault on the chunk, already mapped
                    // again): the faulting page is mapped, so only wake.
                    let wp = self.pagemap.is_some();
                    if let Err(e) = self
                        .uffd
                        .continue_range(page_addr, self.memory.page, false, wp)
                    {
                        if e.error.raw_os_error() == Some(libc::EEXIST) {
                            let _ = self.uffd.wake(page_addr, self.memory.page);
                            return;
                        }
                    }
                    if self.chunks.is_written(c) && self.io.is_stored(c) {
                        // The swap copy is stale for good: give its blocks back now.
                        match self.io.punch(c) {
                            Ok(()) => add(&self.stats().stale_punches, 1),
                            Err(e) => self.memory_error("punch stale swap copy", start, len, e),
                        }
                    }
                    if let Err(e) = self.fill(start, len, Fill::Continue) {
                        self.memory_error("UFFDIO_CONTINUE", start, len, e);
                    }
                }
                // A concurrent fault already served by the page-in that woke it: wake is a
                // harmless no-op then, and needed if it raced past the range wake.
                let _ = self.uffd.wake(page_addr, self.memory.page);
            }
            ChunkState::Poisoned => {
                let (start, len) = self.chunk_range(c);
                self.poison(start, len);
            }
            ChunkState::Writing => {
                // Served when the write completes: the chunk stays in memory then.
                add(&self.stats().resident_faults, 1);
                add(&self.stats().faults_during_write, 1);
                self.chunks.request_rescue(c);
            }
            ChunkState::Out => {
                let t = Instant::now();
                self.fault_offset = Some(offset);
                self.page_in(c);
                self.fault_offset = None;
                self.stats().record_page_in(nanos(t));
            }
        }
    }

    /// Frees room for one more chunk: retries one overrun chunk, then evicts a policy victim if
    /// the policy is full.
    fn make_room(&mut self) {
        self.reap_writes(false);
        // Take the chunk off the list first: page_out may complete other writes, which can put
        // chunks on the list.
        if let Some(o) = self.chunks.pop_overrun() {
            if self.page_out(o).is_err() {
                self.chunks.push_overrun(o);
            } else {
                sub(&self.stats().overrun_chunks, 1);
            }
        }
        if self.policy.len() >= self.policy.capacity() {
            if let Some(v) = self.policy.evict() {
                self.evict_or_overrun(v as usize);
            }
        }
        // Chunks being written still occupy memory: stay within the budget.
        let mut waited = false;
        while self.chunks.writing() > 0
            && self.policy.len() + self.chunks.overrun_len() + self.chunks.writing()
                >= self.policy.capacity()
        {
            waited = true;
            self.reap_writes(true);
        }
        if waited {
            add(&self.stats().page_in_write_waits, 1);
        }
    }

    pub(super) fn evict_or_overrun(&mut self, v: usize) {
        if !self.chunks.is(v, ChunkState::In) {
            // The policy named a chunk that is not in memory: nothing to write or free.
            self.memory_error(
                "evict",
                v.saturating_mul(self.memory.chunk_size),
                self.memory.chunk_size,
                io::Error::other("policy victim is not resident"),
            );
            return;
        }
        if self.page_out(v).is_err() {
            self.chunks.push_overrun(v);
            add(&self.stats().overrun_chunks, 1);
        }
    }

    /// Writes resident chunk `v` to swap and drops it from memory. On failure `v` stays
    /// resident (its data intact in the memfd) and the error is recorded.
    fn page_out(&mut self, v: usize) -> Result<(), ()> {
        self.wait_for_write_slot();
        let (start, len) = self.chunk_range(v);
        if let Err(e) = self.registered_dontneed(start, len) {
            self.memory_error("MADV_DONTNEED", start, len, e);
            return Err(());
        }
        // The entries are gone, so nobody writes the chunk now: its written state is final.
        self.harvest_dirty(v, start, len);
        // Map the alias pages in one call rather than faulting on each while reading them.
        let _ = self.memory.alias.populate_read(start, len);
        // SAFETY: the alias mapping covers the whole region, so `[start, start + len)` is inside
        // it. Nobody else writes these pages now: the registered mapping's entries were just
        // dropped, so program accesses fault and wait for this (the only handler) thread.
        let data =
            unsafe { std::slice::from_raw_parts(self.memory.alias.as_ptr().add(start), len) };
        if !self.chunks.is_written(v) && self.is_clean(v, data) {
            return self.drop_chunk(v, start, len);
        }
        if self.io.writes_async() {
            return self.start_write(v, start, len);
        }
        let t = Instant::now();
        let written = self.io.write_now(v, data);
        add(&self.stats().swap_write_nanos, nanos(t));
        match written {
            Ok(WriteOutcome::Written) => {
                add(&self.stats().page_outs, 1);
                add(&self.stats().bytes_written, len as u64);
                self.page_out_options
                    .swap_full
                    .write_succeeded(&self.shared.stats, &self.shared.name);
            }
            Ok(WriteOutcome::Zero) => add(&self.stats().zero_page_outs, 1),
            Err(source) => {
                self.write_failed(v, start, source);
                return Err(());
            }
        }
        // Swap now holds exactly the memory's content.
        self.chunks.set_written(v, false);
        self.drop_chunk(v, start, len)
    }

    /// Whether chunk `v`, which dirty tracking reports unwritten since it was mapped, really
    /// needs no write: its swap copy (or, if none, all zeros) matches `data`. The checksum
    /// comparison is a safety net: a mismatch means tracking missed a write, which is counted
    /// and answered with a normal write.
    fn is_clean(&self, v: usize, data: &[u8]) -> bool {
        if self.pagemap.is_none() {
            return false;
        }
        let clean = match self.io.stored_crc(v) {
            Some(crc) => crc32c(data) == crc,
            None => is_zero(data),
        };
        if clean {
            if self.io.is_stored(v) {
                add(&self.stats().clean_evictions, 1);
            } else {
                add(&self.stats().zero_page_outs, 1);
            }
        } else {
            add(&self.stats().dirty_tracking_misses, 1);
        }
        clean
    }

    /// Sets chunk `c`'s sticky dirty bit if any of its pages was written since it was last
    /// mapped write-protected. Without tracking, or if the scan fails, the chunk counts as dirty.
    fn harvest_dirty(&mut self, c: usize, start: usize, len: usize) {
        let written = match &self.pagemap {
            None => true,
            Some(p) => match p.any_written(self.memory.base + start, len) {
                Ok(w) => w,
                Err(e) => {
                    self.memory_error("PAGEMAP_SCAN", start, len, e);
                    true
                }
            },
        };
        if written {
            self.chunks.set_written(c, true);
        }
    }

    /// Punches chunk `v` (saved or clean) out of the memfd and marks it out.
    pub(super) fn drop_chunk(&mut self, v: usize, start: usize, len: usize) -> Result<(), ()> {
        if let Err(e) = self.memory.memfd.punch_hole(start, len) {
            // The data is in swap (or clean) and still in memory: keep it resident.
            self.memory_error("punch memfd", start, len, e);
            return Err(());
        }
        self.chunks.set_out(v);
        sub(&self.stats().resident_chunks, 1);
        if self.io.is_stored(v) {
            add(&self.stats().swapped_chunks, 1);
        }
        Ok(())
    }

    pub(super) fn registered_dontneed(&self, start: usize, len: usize) -> io::Result<()> {
        // SAFETY: `[base + start, base + start + len)` lies inside the registered mapping, which
        // the region keeps alive until this thread has been joined. MADV_DONTNEED on a shared
        // file mapping drops page-table entries only; the data stays in the memfd.
        unsafe { raw_memory_calls::madvise(self.memory.base + start, len, libc::MADV_DONTNEED) }
    }

    fn page_in(&mut self, c: usize) {
        self.page_in_zeroing(c, None);
    }

    /// Brings chunk `c` in; with `zero = Some((at, len))`, that part of the chunk (offsets in
    /// the chunk) is zeroed between the read and the mapping, so no thread ever sees the old
    /// bytes (a partial discard of a chunk that is out).
    pub(super) fn page_in_zeroing(&mut self, c: usize, zero: Option<(usize, usize)>) {
        let t = Instant::now();
        self.make_room();
        add(&self.stats().evict_nanos, nanos(t));
        let (start, len) = self.chunk_range(c);
        let stored = self.io.is_stored(c);
        let result = match self.page_in_options.resolve {
            ResolveMode::AliasContinue => self.page_in_alias(c, start, len, stored, zero),
            ResolveMode::Copy => self.page_in_copy(c, start, len, stored, zero),
        };
        match result {
            Ok(()) => {
                if stored {
                    add(&self.stats().page_ins, 1);
                    add(&self.stats().bytes_read, len as u64);
                    sub(&self.stats().swapped_chunks, 1);
                } else {
                    add(&self.stats().zero_fills, 1);
                }
                // Zeroed on the way in: the memory no longer matches the swap copy.
                self.chunks.set_in(c, zero.is_some());
                if zero.is_some() && stored {
                    if let Err(e) = self.io.punch(c) {
                        self.memory_error("punch stale swap copy", start, len, e);
                    }
                }
                add(&self.stats().resident_chunks, 1);
                // Counters first, then the wake: a woken thread sees consistent statistics.
                let _ = self.uffd.wake(self.memory.base + start, len);
                if let Some(declined) = self.policy.admit(c as u64) {
                    // Only a policy with admission control returns a victim here (room was
                    // made). Declining `c` itself: keep it resident outside the policy (as
                    // overrun, paged out first at the next page-in) rather than take it away
                    // from the thread that is about to use it.
                    let d = declined as usize;
                    if d == c {
                        self.chunks.push_overrun(d);
                        add(&self.stats().overrun_chunks, 1);
                    } else {
                        self.evict_or_overrun(d);
                    }
                }
                self.keep_headroom();
                self.last_page_in = Some(c);
            }
            Err(PageInError::Read(e)) => self.fail_chunk(c, start, len, e),
            Err(PageInError::Map(e)) => {
                self.memory_error("map chunk", start, len, e);
                // Never leave threads waiting on a range we could not fill.
                let _ = self.memory.memfd.punch_hole(start, len);
                if stored {
                    sub(&self.stats().swapped_chunks, 1);
                }
                self.chunks.set_poisoned(c);
                add(&self.stats().poisoned_chunks, 1);
                self.poison(start, len);
            }
        }
    }

    fn page_in_alias(
        &mut self,
        c: usize,
        start: usize,
        len: usize,
        stored: bool,
        zero: Option<(usize, usize)>,
    ) -> Result<(), PageInError> {
        if stored {
            // Allocate and map the chunk's pages in one call, so the read below does not fault
            // them in one by one.
            self.memory
                .alias
                .populate_write(start, len)
                .map_err(PageInError::Map)?;
            // SAFETY: the alias mapping covers `[start, start + len)`. The chunk is out of
            // memory, so the registered mapping has no entries there: program accesses fault and
            // wait for this thread, and no other reference to these bytes exists.
            let buf = unsafe {
                std::slice::from_raw_parts_mut(self.memory.alias.as_ptr().add(start), len)
            };
            let t = Instant::now();
            let r = self.read_stored(c, buf);
            add(&self.stats().swap_read_nanos, nanos(t));
            r.map_err(PageInError::Read)?;
            if let Some((at, n)) = zero {
                buf[at..at + n].fill(0);
            }
        } else {
            self.memory
                .memfd
                .allocate(start, len)
                .map_err(PageInError::Map)?;
        }
        self.fill_wake(start, len, Fill::Continue, false)
            .map_err(PageInError::Map)
    }

    fn page_in_copy(
        &mut self,
        c: usize,
        start: usize,
        len: usize,
        stored: bool,
        zero: Option<(usize, usize)>,
    ) -> Result<(), PageInError> {
        if !stored {
            return self
                .fill_wake(start, len, Fill::Zero, false)
                .map_err(PageInError::Map);
        }
        let Some(mut bounce) = self.page_in_options.bounce.take() else {
            return Err(PageInError::Map(io::Error::other("no bounce buffer")));
        };
        let t = Instant::now();
        // Read ahead: the prefetcher's buffer becomes the bounce buffer if it holds `c`.
        let prefetched = self.io.take_prefetched(c, &mut bounce);
        // SAFETY: the bounce buffer is a private mapping of one chunk owned by this handler.
        let buf = unsafe { std::slice::from_raw_parts_mut(bounce.as_ptr(), len) };
        let read = if prefetched {
            let r = self.io.verify_prefetched(c, buf).map(|()| true);
            if r.is_ok() {
                add(&self.stats().readahead_hits, 1);
            }
            r
        } else {
            self.map_faulting_page_first(c, start, buf, zero)
                .and_then(|()| self.read_stored(c, buf))
        };
        add(&self.stats().swap_read_nanos, nanos(t));
        if read.is_ok() {
            // Start reading the next chunk now, so the read overlaps this chunk's mapping.
            self.read_ahead(c);
        }
        if let (Ok(_), Some((at, n))) = (&read, zero) {
            buf[at..at + n].fill(0);
        }
        let r = match read {
            Ok(_) => self
                .fill_wake(start, len, Fill::Copy(buf), false)
                .map_err(PageInError::Map),
            Err(e) => Err(PageInError::Read(e)),
        };
        self.page_in_options.bounce = Some(bounce);
        r
    }

    /// Asynchronous page-in (seed 003, section 4.3): reads the faulting page of stored chunk
    /// `c` (at `start`) on its own, verifies it against its page checksum, maps it and wakes
    /// the thread waiting on it; the caller then reads and maps the rest of the chunk (a
    /// whole-chunk read verified by the chunk's checksum, mapped around the page that is
    /// already there). A failed page read fails the page-in; anything else (off, no page
    /// checksum, a partial discard pending, a mapping error) leaves the whole-chunk path to
    /// do everything.
    fn map_faulting_page_first(
        &mut self,
        c: usize,
        start: usize,
        buf: &mut [u8],
        zero: Option<(usize, usize)>,
    ) -> Result<(), ReadError> {
        let Some(offset) = self.fault_offset.take() else {
            return Ok(());
        };
        if !self.page_in_options.async_page_in || zero.is_some() || offset < start {
            return Ok(());
        }
        let in_chunk = offset - start;
        let Some(page_buf) = buf.get_mut(in_chunk..in_chunk + self.memory.page) else {
            return Ok(());
        };
        if !self
            .io
            .read_page(c, in_chunk / self.memory.page, page_buf)?
        {
            return Ok(());
        }
        if self
            .fill_wake(
                start + in_chunk,
                self.memory.page,
                Fill::Copy(page_buf),
                true,
            )
            .is_ok()
        {
            add(&self.stats().early_wakes, 1);
        }
        Ok(())
    }

    /// Reads stored chunk `c` into `buf` (its page-in buffer: the bounce buffer or the chunk's
    /// alias pages), as [`SwapFile::read_chunk`](crate::SwapFile::read_chunk) does. With a
    /// demand reader the read is submitted to its io_uring and, while the disk works, victims
    /// are chosen and their writes started for the headroom this page-in will use up, so that
    /// work is off the faulting thread's wait.
    fn read_stored(&mut self, c: usize, buf: &mut [u8]) -> Result<bool, ReadError> {
        // SAFETY: `buf` is chunk `c`'s page-in buffer: the handler's bounce buffer, or the
        // alias pages of a chunk that is out of memory (program accesses fault and wait for
        // this thread). Nothing touches it until `finish_read` below returns, and the
        // evictions meanwhile never pick `c` (it is not resident).
        match unsafe { self.io.start_read(c, buf) } {
            ReadStart::Done(r) => r,
            ReadStart::InFlight => {
                self.keep_headroom_for(1);
                self.io.finish_read(c, buf)
            }
        }
    }

    /// During the page-in of stored chunk `c`: if the previous page-in was `c - 1`, starts
    /// reading `c + 1` ahead (if it is out and stored).
    fn read_ahead(&mut self, c: usize) {
        let next = c + 1;
        if c == 0 || self.last_page_in != Some(c - 1) || !self.chunks.is(next, ChunkState::Out) {
            return;
        }
        let len = self.chunk_range(next).1;
        if self.io.prefetch(next, len) {
            add(&self.stats().readahead_reads, 1);
        }
    }

    /// Maps `[start, start + len)` of the registered mapping and wakes its waiters, skipping
    /// pages that are already mapped (`EEXIST`) and retrying after `EAGAIN`.
    pub(super) fn fill(&self, start: usize, len: usize, how: Fill<'_>) -> io::Result<()> {
        self.fill_wake(start, len, how, true)
    }

    /// [`fill`](Self::fill), waking the waiters only if `wake`.
    fn fill_wake(&self, start: usize, len: usize, how: Fill<'_>, wake: bool) -> io::Result<()> {
        let mut done = 0;
        let mut again = 0;
        let wp = self.pagemap.is_some();
        while done < len {
            let dst = self.memory.base + start + done;
            let rest = len - done;
            let r = match how {
                Fill::Continue => self.uffd.continue_range(dst, rest, wake, wp),
                // No write-protect mode for zero pages: such chunks read as written, and their
                // eviction finds them zero without I/O.
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
                    _ => return Err(error),
                },
            }
        }
        Ok(())
    }

    /// Gives up on chunk `c` after a failed read: records the error and poisons the chunk.
    fn fail_chunk(&mut self, c: usize, start: usize, len: usize, e: ReadError) {
        add(&self.stats().read_errors, 1);
        let region = self.shared.name.clone();
        let path = self.io.path().to_path_buf();
        let err = match e {
            ReadError::Io(source) => PagerError::SwapRead {
                region,
                chunk: c as u64,
                offset: start as u64,
                path,
                source,
            },
            ReadError::Checksum { expected, actual } => PagerError::Checksum {
                region,
                chunk: c as u64,
                offset: start as u64,
                path,
                expected,
                actual,
            },
        };
        self.shared.record(err);
        // Drop whatever a partial read left in the memfd; it must never be mapped.
        if let Err(e) = self.memory.memfd.punch_hole(start, len) {
            self.memory_error("punch memfd", start, len, e);
        }
        sub(&self.stats().swapped_chunks, 1);
        self.chunks.set_poisoned(c);
        add(&self.stats().poisoned_chunks, 1);
        self.poison(start, len);
    }

    /// Installs poison markers over `[start, start + len)` (skipping mapped pages) and wakes
    /// the waiters, who then get SIGBUS.
    fn poison(&self, start: usize, len: usize) {
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
fn nanos(t: Instant) -> u64 {
    t.elapsed().as_nanos().min(u64::MAX as u128) as u64
}

#[derive(Clone, Copy)]
pub(super) enum Fill<'a> {
    Continue,
    Zero,
    Copy(&'a [u8]),
}

enum PageInError {
    /// Reading the chunk failed: poison it.
    Read(ReadError),
    /// Mapping it failed.
    Map(io::Error),
}
