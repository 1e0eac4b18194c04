//! [`Region`]: memory of a fixed size paged by userfaultfd within a fixed resident budget.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use memvisor_policy::PolicySpec;

use crate::direct_io_pins::{DirectIoPin, DirectIoPins};
use crate::error_log::ErrorLog;
use crate::event_fd::EventFd;
use crate::fault_handler::{FaultHandler, HandlerShared, RegionMemory};
use crate::image_file::{FileKey, ImageFile, ReadEpoch};
use crate::memfd::{page_size, Mapping, Memfd};
use crate::pagemap::Pagemap;
use crate::pager_error::PagerError;
use crate::refault_curve::{RefaultCounters, RefaultCurve};
use crate::region_command::{CommandQueue, RegionCommand};
use crate::region_config::{PageOut, RegionConfig, ResolveMode};
use crate::region_stats::RegionStats;
use crate::remote_pages::RemotePages;
use crate::residency_hint::ResidencyHint;
use crate::thread_start_hook::spawn_pager_thread;
use crate::userfaultfd::{features, RegisterMode, Userfaultfd};

static REGION_SEQ: AtomicU64 = AtomicU64::new(0);

/// userfaultfd features a region needs.
const NEEDED_FEATURES: u64 = features::MISSING_SHMEM | features::MINOR_SHMEM | features::POISON;
/// userfaultfd features dirty tracking needs on top.
const DIRTY_FEATURES: u64 =
    features::WP_ASYNC | features::WP_HUGETLBFS_SHMEM | features::WP_UNPOPULATED;

/// A region of memory backed by a memfd, of which at most a budget of chunks is resident; the
/// rest lives in a private swap file.
///
/// The memory at [`as_ptr`](Self::as_ptr) is usable by every thread of the process for as long
/// as the region lives. Faults are served by one handler thread per region. Dropping the region
/// stops the handler, unmaps the memory and closes (and so deletes) the swap file; the caller
/// must make sure no thread still uses the memory then.
#[derive(Debug)]
pub struct Region {
    pub(crate) shared: Arc<HandlerShared>,
    handler: Option<JoinHandle<()>>,
    mapping: Mapping,
    size: usize,
    chunk_size: usize,
    resolve: ResolveMode,
    page_out: PageOut,
    swap_direct: bool,
    swap_path: PathBuf,
    dirty_tracking: bool,
    /// A second descriptor of the memfd, for [`memory_bytes`](Self::memory_bytes).
    memfd_fd: OwnedFd,
}

impl Region {
    /// Whether this process can create regions (userfaultfd with the needed features).
    pub fn check_supported() -> Result<(), PagerError> {
        let f = Userfaultfd::available_features().map_err(PagerError::Unavailable)?;
        if f & NEEDED_FEATURES != NEEDED_FEATURES {
            return Err(PagerError::Unavailable(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("features {f:#x} lack some of {NEEDED_FEATURES:#x}"),
            )));
        }
        Ok(())
    }

    /// Creates a region as `config` says and starts its fault handler.
    pub fn new(config: RegionConfig) -> Result<Self, PagerError> {
        let page = page_size();
        let seq = REGION_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}#{seq}", config.name);
        let cs = config.chunk_size;
        if cs == 0 || cs % page != 0 {
            return Err(PagerError::Config(format!(
                "{name}: chunk size {cs} is not a positive multiple of the page size {page}"
            )));
        }
        if config.size == 0 {
            return Err(PagerError::Config(format!("{name}: size is zero")));
        }
        if config.budget < cs {
            return Err(PagerError::Config(format!(
                "{name}: budget {} is smaller than one chunk ({cs})",
                config.budget
            )));
        }
        let len = config.size.next_multiple_of(page);
        let chunks = len.div_ceil(cs);
        let budget_chunks = (config.budget / cs).min(chunks);
        let builder = FaultHandler::builder(&config, &name, budget_chunks)?;
        let mem_err = |op: &'static str| {
            let name = name.clone();
            move |source: io::Error| PagerError::Memory {
                region: name,
                op,
                offset: 0,
                len,
                source,
            }
        };
        let memfd = match &config.memfd {
            Some(fd) => fd
                .try_clone()
                .and_then(|fd| Memfd::adopt(fd, len))
                .map_err(mem_err("adopt memfd"))?,
            None => Memfd::new(&format!("memvisor-{name}"), len).map_err(mem_err("memfd"))?,
        };
        let mapping = match config.address {
            Some(addr) if addr % page != 0 => {
                return Err(PagerError::Config(format!(
                    "{name}: address {addr:#x} is not page-aligned"
                )))
            }
            // SAFETY: the address was set through the `unsafe` `RegionConfig::address`, whose
            // caller vouched that nothing in the range is in use.
            Some(addr) => unsafe { memfd.map_shared_at(addr) }.map_err(mem_err("mmap fixed"))?,
            None => memfd.map_shared().map_err(mem_err("mmap"))?,
        };
        let memfd_fd = memfd.try_clone_fd().map_err(mem_err("dup memfd"))?;
        let alias = memfd.map_shared().map_err(mem_err("mmap alias"))?;
        // A forked child would see the memfd without the pager: reading a chunk that is out
        // would allocate zero pages in the shared file behind the handler's back.
        mapping.dont_fork().map_err(mem_err("MADV_DONTFORK"))?;
        alias.dont_fork().map_err(mem_err("MADV_DONTFORK"))?;
        // Dirty tracking if asked for and the kernel has it; plain paging otherwise.
        let tracked = if config.dirty_tracking {
            Userfaultfd::new(NEEDED_FEATURES | DIRTY_FEATURES | features::THREAD_ID)
                .ok()
                .and_then(|u| Pagemap::open().ok().map(|p| (u, p)))
        } else {
            None
        };
        let (uffd, pagemap, mode) = match tracked {
            Some((u, p)) => (
                u,
                Some(p),
                RegisterMode::MISSING | RegisterMode::MINOR | RegisterMode::WP,
            ),
            None => (
                Userfaultfd::new(NEEDED_FEATURES | features::THREAD_ID)
                    .map_err(PagerError::Unavailable)?,
                None,
                RegisterMode::MISSING | RegisterMode::MINOR,
            ),
        };
        uffd.register(mapping.addr(), len, mode)
            .map_err(mem_err("UFFDIO_REGISTER"))?;
        let dirty_tracking = pagemap.is_some();
        let stop = EventFd::new().map_err(mem_err("eventfd"))?;
        let wake = EventFd::new().map_err(mem_err("eventfd"))?;
        let shared = Arc::new(HandlerShared {
            name: name.clone(),
            stats: Default::default(),
            refaults: {
                let scale = crate::fault_handler::refault_scale(cs / page_size());
                RefaultCounters::new((cs) as u64, scale.buckets_for((len / page_size()) as u64))
            },
            errors: Mutex::new(VecDeque::new()),
            log: config.log_errors.then(|| ErrorLog::new(&name)),
            stop,
            commands: CommandQueue::new(wake),
            budget_chunks: AtomicUsize::new(budget_chunks),
            policy: Mutex::new(config.policy.to_string()),
            residency: Arc::new(ResidencyHint::new(len / page_size())),
            remote: RemotePages::new(EventFd::new().map_err(mem_err("eventfd"))?),
            pins: DirectIoPins::new(chunks),
            running: Mutex::new(false),
            started: Condvar::new(),
        });
        shared.stats.chunks.store(chunks as u64, Ordering::Relaxed);
        let memory = RegionMemory::new(memfd, alias, mapping.addr(), len, cs);
        let handler = builder.build(&seq.to_string(), shared.clone(), uffd, memory, pagemap)?;
        let swap_direct = handler.swap_is_direct();
        let swap_path = handler.swap_path().to_path_buf();
        let thread = spawn_pager_thread(format!("pager-{seq}"), move || handler.run()).map_err(
            |source| PagerError::Thread {
                region: name.clone(),
                source,
            },
        )?;
        // Return only once the handler serves: the first fault or command then never waits
        // for a thread that is still starting.
        if let Ok(mut running) = shared.running.lock() {
            while !*running {
                running = match shared.started.wait(running) {
                    Ok(r) => r,
                    Err(_) => break,
                };
            }
        }
        Ok(Self {
            shared,
            handler: Some(thread),
            mapping,
            size: config.size,
            chunk_size: cs,
            resolve: config.resolve,
            page_out: config.page_out,
            swap_direct,
            swap_path,
            memfd_fd,
            dirty_tracking,
        })
    }

    /// Start of the memory. Valid for [`len`](Self::len) bytes while the region lives, from any
    /// thread; the region does not synchronize accesses between threads.
    pub fn as_ptr(&self) -> *mut u8 {
        self.mapping.as_ptr()
    }

    /// Size in bytes, as configured.
    pub fn len(&self) -> usize {
        self.size
    }

    /// Whether the region is empty (never: sizes are positive).
    pub fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// Paging unit in bytes.
    pub fn chunk_size(&self) -> usize {
        self.chunk_size
    }

    /// How many chunks may be resident (as last set).
    pub fn budget_chunks(&self) -> usize {
        self.shared.budget_chunks.load(Ordering::Relaxed)
    }

    /// The resident budget in bytes (whole chunks).
    pub fn budget_bytes(&self) -> usize {
        self.budget_chunks() * self.chunk_size
    }

    /// The policy's spec, as [`PolicySpec`]'s `Display` spells it (e.g. `chunk-queues`, or `aging:bits=4` where a parameter differs from its default).
    pub fn policy_name(&self) -> String {
        self.shared
            .policy
            .lock()
            .map(|p| p.clone())
            .unwrap_or_default()
    }

    /// Sets the resident budget to `bytes` (whole chunks, at least one, at most the region) at
    /// run time. Shrinking pages out the excess before returning; the resident chunks keep
    /// their ranking.
    pub fn set_budget(&self, bytes: usize) -> Result<(), PagerError> {
        if bytes < self.chunk_size {
            return Err(PagerError::Config(format!(
                "{}: budget {bytes} is smaller than one chunk ({})",
                self.name(),
                self.chunk_size
            )));
        }
        let chunks =
            (bytes / self.chunk_size).min(self.len_pages_rounded().div_ceil(self.chunk_size));
        self.shared
            .commands
            .submit(self.name(), RegionCommand::SetBudget(chunks))
    }

    /// Replaces the eviction policy at run time. The resident chunks move to the new policy in
    /// the order the old one would have evicted them. Offline policies (`opt`) are refused.
    pub fn set_policy(&self, policy: PolicySpec) -> Result<(), PagerError> {
        self.shared
            .commands
            .submit(self.name(), RegionCommand::SetPolicy(policy))
    }

    /// Makes `[offset, offset + len)` read as zeros, as `MADV_DONTNEED` does on private
    /// anonymous memory (or `MADV_REMOVE` on shared memory): whole chunks in the range leave
    /// memory and swap, and parts of chunks are zeroed. A poisoned chunk that the range covers
    /// whole becomes a fresh zero chunk again (the way to recover from a failed page-in).
    /// `offset` must be page-aligned; `len` is rounded up to a page.
    pub fn discard(&self, offset: usize, len: usize) -> Result<(), PagerError> {
        let page = page_size();
        let end = offset
            .checked_add(len)
            .map(|e| e.next_multiple_of(page))
            .filter(|&e| e <= self.len_pages_rounded());
        let Some(end) = end.filter(|_| offset % page == 0) else {
            return Err(PagerError::Config(format!(
                "{}: discard of [{offset:#x}, +{len:#x}) is not a page-aligned range inside the \
                 region ({:#x} bytes)",
                self.name(),
                self.size
            )));
        };
        if end == offset {
            return Ok(());
        }
        self.shared.commands.submit(
            self.name(),
            RegionCommand::Discard {
                offset,
                len: end - offset,
            },
        )
    }

    /// Checks that `[offset, offset + len)` lies inside the region (`what` names the request
    /// in the error).
    fn check_range(&self, what: &str, offset: usize, len: usize) -> Result<(), PagerError> {
        if offset
            .checked_add(len)
            .is_some_and(|e| e <= self.len_pages_rounded())
        {
            return Ok(());
        }
        Err(PagerError::Config(format!(
            "{}: {what} of [{offset:#x}, +{len:#x}) is not inside the region ({:#x} bytes)",
            self.name(),
            self.size
        )))
    }

    /// False-read preventer (VSwapper): a read from a file is about to overwrite
    /// `[offset, offset + len)`. Every page the range covers whole and that is not in memory
    /// becomes a resident zero page instead of being read from swap; if the read then fails,
    /// those pages read as zeros (as a failed DMA leaves a guest buffer undefined).
    pub fn prepare_overwrite(&self, offset: usize, len: usize) -> Result<(), PagerError> {
        self.check_range("prepare_overwrite", offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.shared
            .commands
            .submit(self.name(), RegionCommand::PrepareOverwrite { offset, len })
    }

    /// A direct-I/O read (`O_DIRECT`) is about to fill `[offset, offset + len)`: the chunks
    /// it touches are not evicted until the returned pin is dropped (after the read returned).
    /// The kernel pins the buffer's pages while the device writes them, and an eviction
    /// meanwhile would lose what it wrote (`direct_io_pins.rs`).
    pub fn pin_for_direct_io(&self, offset: usize, len: usize) -> Result<DirectIoPin, PagerError> {
        self.check_range("pin_for_direct_io", offset, len)?;
        let cs = self.chunk_size;
        let chunks = offset / cs..(offset + len).div_ceil(cs);
        Ok(DirectIoPin::new(self.shared.clone(), chunks))
    }

    /// Whether every page that `[offset, offset + len)` covers whole was resident when the
    /// fault handler last changed it: a hint, read without asking the handler, that may lag a
    /// page-in or an eviction under way (see `ResidencyHint`). True if the range covers no
    /// whole page; false if it leaves the region.
    pub fn covered_pages_resident(&self, offset: usize, len: usize) -> bool {
        let pages = crate::memfd::covered_pages(offset, len, page_size());
        pages.is_empty() || self.shared.residency.all_resident(pages.start, pages.len())
    }

    /// Swap mapper (VSwapper): a complete read of `len` bytes at byte `file_offset` of
    /// `image`, started when `epoch` was taken ([`ImageFile::read_epoch`]), landed in
    /// `[offset, offset + len)`. Each page it covered whole, in memory,
    /// is associated with the block: its eviction writes nothing (once the page was found
    /// equal to the block, at its first eviction) and its page-in reads the block again
    /// (verified by checksum). Pages of a read that overlapped a write to the image are not
    /// associated. The request is posted without waiting for the handler ([`barrier`] waits);
    /// it is dropped if too many are waiting.
    ///
    /// [`barrier`]: Self::barrier
    pub fn associate(
        &self,
        offset: usize,
        len: usize,
        image: &Arc<ImageFile>,
        file_offset: u64,
        epoch: ReadEpoch,
    ) -> Result<(), PagerError> {
        self.check_range("associate", offset, len)?;
        if len == 0 {
            return Ok(());
        }
        // Posted, not waited for: the caller (QEMU's I/O thread) goes on at once; an
        // association made late is still checked against the image before it saves a write.
        self.shared.commands.post(RegionCommand::Associate {
            offset,
            len,
            image: image.clone(),
            file_offset,
            epoch,
        });
        Ok(())
    }

    /// Returns once every request posted to the handler before (associations) is carried
    /// out.
    pub fn barrier(&self) -> Result<(), PagerError> {
        self.shared
            .commands
            .submit(self.name(), RegionCommand::Barrier)
    }

    /// Swap mapper: bytes `[from, to)` of the image `image` are about to change (a write, a
    /// hole punched, a truncation: `to = u64::MAX`). Returns once every page associated with
    /// a block they overlap holds its content on its own (read back into memory if it was
    /// out) and is no longer associated. Call it after [`ImageFile::begin_write`] and before
    /// the change reaches the file.
    pub fn image_written(&self, image: FileKey, from: u64, to: u64) -> Result<(), PagerError> {
        if from >= to {
            return Ok(());
        }
        self.shared
            .commands
            .submit(self.name(), RegionCommand::ImageWritten { image, from, to })
    }

    /// Hands `cmd` to the fault handler and waits for its answer.
    pub(crate) fn submit(&self, cmd: RegionCommand) -> Result<(), PagerError> {
        self.shared.commands.submit(self.name(), cmd)
    }

    fn len_pages_rounded(&self) -> usize {
        self.size.next_multiple_of(page_size())
    }

    /// How faults are resolved.
    pub fn resolve_mode(&self) -> ResolveMode {
        self.resolve
    }

    /// How victims are written to swap.
    pub fn page_out(&self) -> PageOut {
        self.page_out
    }

    /// Whether dirty tracking is on (clean chunks are evicted without a write).
    pub fn dirty_tracking(&self) -> bool {
        self.dirty_tracking
    }

    /// Whether swap I/O uses `O_DIRECT`.
    pub fn swap_is_direct(&self) -> bool {
        self.swap_direct
    }

    /// The path the swap file had; it was unlinked right after creation, so it only shows in
    /// `/proc/self/fd` (as `PATH (deleted)`) while the region lives.
    pub fn swap_path(&self) -> &Path {
        &self.swap_path
    }

    /// Identity (device, inode) of the region's memfd: a program's descriptor of the same
    /// memfd (QEMU's guest RAM) has the same.
    pub fn memfd_key(&self) -> Result<FileKey, PagerError> {
        use std::os::unix::fs::MetadataExt;
        let file = std::fs::File::from(self.memfd_fd.try_clone().map_err(|source| {
            PagerError::Memory {
                region: self.name().to_string(),
                op: "dup memfd",
                offset: 0,
                len: self.size,
                source,
            }
        })?);
        let meta = file.metadata().map_err(|source| PagerError::Memory {
            region: self.name().to_string(),
            op: "fstat memfd",
            offset: 0,
            len: self.size,
            source,
        })?;
        Ok(FileKey {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// Bytes of memory the region's memfd really holds, as the kernel counts them: at most
    /// the budget plus overrun chunks (plus one chunk while a page-in is in flight).
    pub fn memory_bytes(&self) -> Result<u64, PagerError> {
        crate::memfd::allocated_bytes(self.memfd_fd.as_fd()).map_err(|source| PagerError::Memory {
            region: self.shared.name.clone(),
            op: "fstat memfd",
            offset: 0,
            len: self.size,
            source,
        })
    }

    /// The region's name, as errors spell it.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RegionStats {
        self.shared.stats.snapshot()
    }

    /// Page-ins that more budget would have saved, by how much more (cumulative counts).
    pub fn refault_curve(&self) -> RefaultCurve {
        self.shared.refaults.snapshot()
    }

    /// Removes and returns the errors recorded so far (the last 256 at most).
    pub fn take_errors(&self) -> Vec<PagerError> {
        match self.shared.errors.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Whether the fault handler is still running (it stops only on drop or a fatal
    /// userfaultfd error, which is recorded).
    pub fn handler_alive(&self) -> bool {
        self.handler.as_ref().is_some_and(|h| !h.is_finished())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.shared.stop.signal();
        if let Some(h) = self.handler.take() {
            let _ = h.join();
        }
        // Fields drop next: the mapping is unmapped after the handler (which owned the uffd,
        // the memfd, the alias and the swap file) is gone.
    }
}
