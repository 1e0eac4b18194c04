//! [`SwapIo`]: all swap I/O of one region behind the operations the fault handler needs:
//! read a run of pages of a chunk into a buffer (through the demand reader's io_uring when there is one, so the
//! handler can work while the disk reads), start a write of a run of pages (on the page-out
//! engine), reap finished writes, prefetch the next chunk, punch pages, and the per-page stored
//! state and checksums those decisions need. It owns the [`SwapFile`], the [`PageOutEngine`], the
//! [`DemandReader`] and the [`ChunkPrefetcher`]; the handler never reaches into them.

use std::io;
use std::path::Path;
use std::time::Duration;

use crate::chunk_prefetcher::ChunkPrefetcher;
use crate::crc32c::crc32c;
use crate::demand_reader::DemandReader;
use crate::fd_readiness::readable_within;
use crate::memfd::Mapping;
use crate::page_out_engine::PageOutEngine;
use crate::page_reads::{PageReadDone, PageReads};
use crate::pager_error::PagerError;
use crate::region_config::{PageOut, RegionConfig, ResolveMode};
use crate::swap_file::{ReadError, SwapFile, WriteOutcome, DIRECT_ALIGN};
use crate::thread_pool_writer::ThreadPoolWriter;
use crate::uring_writer::UringWriter;
use crate::write_job::{WriteDone, WriteJob};

/// Parallel single-page reads kept in flight at most.
const PAGE_READ_SLOTS: usize = 8;

/// How [`SwapIo::start_read`] went.
pub(crate) enum ReadStart {
    /// The read is over (synchronously): its outcome, as [`SwapFile::read_pages`] gives it
    /// (how many of the pages are stored; 0: none, the buffer is untouched).
    Done(Result<usize, ReadError>),
    /// The read is in flight: do other work, then [`SwapIo::finish_read`].
    InFlight,
}

/// The swap file of a region and the machinery that reads and writes it.
#[derive(Debug)]
pub(crate) struct SwapIo {
    /// Asynchronous writer of victims; `None` for synchronous page-out.
    engine: Option<PageOutEngine>,
    /// With asynchronous page-out: page-in reads go through this io_uring; `None`: `pread`.
    demand: Option<DemandReader>,
    /// Sequential readahead of the next chunk; `None` if off.
    prefetcher: Option<ChunkPrefetcher>,
    /// Single-page reads in flight side by side (parallel page-ins of scattered faults);
    /// `None` without a demand reader or where pages are not one swap page.
    page_reads: Option<PageReads>,
    /// Reused buffer of finished writes.
    done_buf: Vec<WriteDone>,
    /// Swap pages ([`DIRECT_ALIGN`]) per memory page: the methods count memory pages.
    swap_pages_per_page: usize,
    /// Declared last so it is closed after the reader and writers that use its descriptor.
    swap: SwapFile,
}

impl SwapIo {
    /// The swap I/O `config` asks for, for region `region` of `chunks` chunks (`len` bytes):
    /// a new swap file, the page-out engine, the
    /// demand reader (with an engine, where io_uring works) and the prefetcher (readahead by
    /// copy). `tag` names the swap file and the threads.
    pub fn create(
        config: &RegionConfig,
        tag: &str,
        region: &str,
        chunks: usize,
        len: usize,
    ) -> Result<Self, PagerError> {
        let cs = config.chunk_size;
        let thread_error = |source| PagerError::Thread {
            region: region.to_string(),
            source,
        };
        let swap = SwapFile::create(
            &config.swap_dir,
            tag,
            cs,
            chunks,
            config.fault_injector.clone(),
        )?;
        let engine = match config.page_out.resolve(cs) {
            PageOut::Sync | PageOut::Auto => None,
            PageOut::Threads(n) => Some(PageOutEngine::Threads(
                ThreadPoolWriter::new(tag, n).map_err(thread_error)?,
            )),
            PageOut::IoUring(n) => Some(PageOutEngine::Uring(Box::new(
                UringWriter::new(n).map_err(|source| PagerError::Memory {
                    region: region.to_string(),
                    op: "io_uring setup",
                    offset: 0,
                    len,
                    source,
                })?,
            ))),
        };
        // Without io_uring, page-in reads stay synchronous.
        let demand = if engine.is_some() && config.overlapped_page_in {
            DemandReader::new().ok()
        } else {
            None
        };
        let page_reads = if demand.is_some()
            && config.parallel_page_in
            && config.resolve == ResolveMode::Copy
            && crate::memfd::page_size() == DIRECT_ALIGN
        {
            PageReads::new(PAGE_READ_SLOTS, DIRECT_ALIGN).ok()
        } else {
            None
        };
        let prefetcher = if config.readahead && config.resolve == ResolveMode::Copy {
            Some(ChunkPrefetcher::new(tag, cs).map_err(thread_error)?)
        } else {
            None
        };
        Ok(Self {
            engine,
            demand,
            prefetcher,
            page_reads,
            done_buf: Vec::new(),
            swap_pages_per_page: (crate::memfd::page_size() / DIRECT_ALIGN).max(1),
            swap,
        })
    }

    /// The descriptor that becomes readable when a parallel page read finishes; `-1` (which
    /// `poll` ignores) without them.
    pub fn page_read_fd(&self) -> i32 {
        self.page_reads.as_ref().map_or(-1, |r| r.completion_fd())
    }

    /// Whether single-page reads can be kept in flight side by side.
    pub fn has_page_reads(&self) -> bool {
        self.page_reads.is_some()
    }

    /// Whether a parallel page read can start now (a slot is free).
    pub fn page_read_slot_free(&self) -> bool {
        self.page_reads.as_ref().is_some_and(|r| r.has_free_slot())
    }

    /// Starts reading page `page` of chunk `c` (stored) on its own; returns its slot and the
    /// chunk's version now (if that changes before the read is used, the data may be stale).
    /// `None`: not started (not stored, no free slot, or no parallel reads; read it now).
    pub fn start_page_read(&mut self, c: usize, page: usize) -> Option<(usize, u32)> {
        let (fd, offset) = self.swap.page_source(c, page)?;
        let reads = self.page_reads.as_mut()?;
        // A refusal: this page is read synchronously. The reader stays, whatever happened:
        // the reads it has in flight must still complete through it (their pages' threads
        // wait for them).
        // SAFETY: `fd` is the swap file's, open as long as `self.swap`, which outlives the
        // reader (declared last); the reader waits for its reads when dropped.
        let slot = unsafe { reads.start(fd, offset) }.ok()?;
        Some((slot, self.swap.version(c)))
    }

    /// Takes the finished parallel page reads; with `wait`, waits for one if any is in
    /// flight.
    pub fn take_page_reads(&mut self, out: &mut Vec<PageReadDone>, wait: bool) {
        if let Some(r) = self.page_reads.as_mut() {
            r.take_done(out, wait);
        }
    }

    /// The data of finished page read `slot`, accepted as page `page` of chunk `c` exactly as
    /// a read is (checksum, injected failures).
    pub fn accept_page_read(
        &mut self,
        c: usize,
        page: usize,
        slot: usize,
    ) -> Result<&mut [u8], ReadError> {
        let Some(reads) = self.page_reads.as_mut() else {
            return Err(ReadError::Io(io::Error::other(
                "parallel page reads are gone",
            )));
        };
        let buf = reads.buffer(slot);
        self.swap.accept_read(c, page, buf)?;
        Ok(buf)
    }

    /// Gives page read `slot`'s buffer back.
    pub fn release_page_read(&mut self, slot: usize) {
        if let Some(r) = self.page_reads.as_mut() {
            r.release(slot);
        }
    }

    /// A number that changes whenever chunk `c`'s stored content changes.
    pub fn version(&self, c: usize) -> u32 {
        self.swap.version(c)
    }

    /// Whether swap I/O bypasses the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.swap.is_direct()
    }

    /// The swap file's name in messages.
    pub fn path(&self) -> &Path {
        self.swap.path()
    }

    /// The swap file (its name and its filesystem's free space, for messages).
    pub fn swap_file(&self) -> &SwapFile {
        &self.swap
    }

    /// Whether any page of chunk `c` is stored (else it reads as zero).
    pub fn is_stored(&self, c: usize) -> bool {
        self.swap.is_stored(c)
    }

    /// How many swap pages of memory pages `first..first + n` of chunk `c` are stored (0:
    /// they all read as zero). Memory pages are a whole number of swap pages
    /// ([`DIRECT_ALIGN`]).
    pub fn stored_in(&self, c: usize, first: usize, n: usize) -> usize {
        let k = self.swap_pages_per_page;
        self.swap.stored_pages_in(c, first * k, n * k)
    }

    /// Whether memory page `page` of chunk `c`, holding `data`, matches its swap copy:
    /// `Some(true)` if every part of it is stored with `data`'s checksum, `Some(false)` if
    /// stored but different, `None` if not (wholly) stored.
    pub fn matches_stored(&self, c: usize, page: usize, data: &[u8]) -> Option<bool> {
        let k = self.swap_pages_per_page;
        let mut same = true;
        for (i, part) in data.chunks(DIRECT_ALIGN).enumerate().take(k) {
            let crc = self.swap.page_crc(c, page * k + i)?;
            same &= crc32c(part) == crc;
        }
        Some(same)
    }

    /// The CRC32C recorded for swap page `page` of chunk `c`, if it is stored.
    #[cfg(test)]
    pub fn page_crc(&self, c: usize, page: usize) -> Option<u32> {
        self.swap.page_crc(c, page)
    }

    /// Frees chunk `c`'s swap copy; it reads as zero from now on.
    pub fn punch(&mut self, c: usize) -> io::Result<()> {
        self.swap.punch(c)
    }

    /// Frees the swap copies of memory pages `first..first + n` of chunk `c`.
    pub fn punch_pages(&mut self, c: usize, first: usize, n: usize) -> io::Result<()> {
        let k = self.swap_pages_per_page;
        self.swap.punch_pages(c, first * k, n * k)
    }

    /// Whether writes are asynchronous ([`start_write`](Self::start_write)) rather than
    /// synchronous ([`write_now`](Self::write_now)).
    pub fn writes_async(&self) -> bool {
        self.engine.is_some()
    }

    /// How many asynchronous writes may be in flight at once; `None` without an engine.
    pub fn write_depth(&self) -> Option<usize> {
        self.engine.as_ref().map(|e| e.depth())
    }

    /// The descriptor that becomes readable when a write finishes; `-1` (which `poll`
    /// ignores) without an engine.
    pub fn completion_fd(&self) -> i32 {
        self.engine.as_ref().map_or(-1, |e| e.completion_fd())
    }

    /// Writes `data` as pages `first..` of chunk `c` now (all zeros: punched instead).
    pub fn write_now(&mut self, c: usize, first: usize, data: &[u8]) -> io::Result<WriteOutcome> {
        self.swap
            .write_pages(c, first * self.swap_pages_per_page, data)
    }

    /// Starts writing `data` as pages `first..` of chunk `c` on the page-out engine; their old
    /// swap copies are forgotten now, their new checksums recorded when
    /// [`reap_writes`](Self::reap_writes) reports the write done and the caller
    /// [`accept_write`](Self::accept_write)s it.
    ///
    /// # Safety
    ///
    /// `data` must stay mapped, and nobody may write it, until the write has been reaped
    /// (the engine reads it on another thread or in the kernel after this returns).
    pub unsafe fn start_write(&mut self, c: usize, first: usize, data: &[u8]) -> io::Result<()> {
        let Some(engine) = self.engine.as_mut() else {
            return Err(io::Error::other("no asynchronous page-out engine"));
        };
        let first = first * self.swap_pages_per_page;
        let target = self.swap.prepare_write(c, first, data)?;
        engine.submit(WriteJob {
            chunk: c,
            first_page: first,
            addr: data.as_ptr() as usize,
            len: data.len(),
            target,
        });
        Ok(())
    }

    /// Takes the finished writes; with `wait`, waits until at least one has finished (the
    /// caller passes `wait` only while writes are in flight). Give the vector back with
    /// [`recycle`](Self::recycle).
    pub fn reap_writes(&mut self, wait: bool) -> Vec<WriteDone> {
        let mut done = std::mem::take(&mut self.done_buf);
        if let Some(engine) = self.engine.as_mut() {
            loop {
                engine.take_done(&mut done);
                if !done.is_empty() || !wait {
                    break;
                }
                // A bounded wait: `take_done` also retries submissions the kernel refused.
                wait_readable(engine.completion_fd(), Duration::from_millis(10));
            }
        }
        done
    }

    /// Returns the (drained) vector [`reap_writes`](Self::reap_writes) gave out, for reuse.
    pub fn recycle(&mut self, done: Vec<WriteDone>) {
        self.done_buf = done;
    }

    /// Records that a write reported done by [`reap_writes`](Self::reap_writes) succeeded
    /// with these checksums; `first_page` is the [`WriteDone`]'s (in swap pages).
    pub fn accept_write(&mut self, c: usize, first_page: usize, crcs: &[u32]) {
        self.swap.record_written(c, first_page, crcs);
    }

    /// Memory pages of a [`WriteDone`] run given in swap pages: its first page and count.
    pub fn memory_pages(&self, first_page: usize, pages: usize) -> (usize, usize) {
        let k = self.swap_pages_per_page;
        (first_page / k, pages / k)
    }

    /// Starts reading pages `first..` of chunk `c` into `buf`: through the demand reader when there is
    /// one (and writes are asynchronous), returning [`ReadStart::InFlight`]; otherwise reads
    /// it now. A read the ring refuses is done synchronously, and later reads too.
    ///
    /// # Safety
    ///
    /// After [`ReadStart::InFlight`], `buf` must stay valid and untouched by anyone until
    /// [`finish_read`](Self::finish_read) is called with it (the kernel writes it meanwhile).
    pub unsafe fn start_read(&mut self, c: usize, first: usize, buf: &mut [u8]) -> ReadStart {
        let first = first * self.swap_pages_per_page;
        if self.engine.is_none() || self.demand.is_none() {
            return ReadStart::Done(self.swap.read_pages(c, first, buf));
        }
        let (fd, offset) = match self.swap.read_target(c, first, buf) {
            Ok(Some(t)) => t,
            Ok(None) => return ReadStart::Done(Ok(0)),
            Err(e) => return ReadStart::Done(Err(ReadError::Io(e))),
        };
        let started = match self.demand.as_mut() {
            // SAFETY: the caller keeps `buf` valid and untouched until `finish_read`; `fd` is
            // the swap file's, open as long as `self.swap`, which outlives the reader.
            Some(d) => unsafe { d.start(fd, offset, buf) },
            None => return ReadStart::Done(self.swap.read_pages(c, first, buf)),
        };
        if started.is_err() {
            // The ring refused the read: read synchronously from now on.
            self.demand = None;
            return ReadStart::Done(self.swap.read_pages(c, first, buf));
        }
        ReadStart::InFlight
    }

    /// Waits for the read [`start_read`](Self::start_read) left in flight and checks what
    /// it read into `buf` against the pages' checksums; returns how many were stored.
    pub fn finish_read(
        &mut self,
        c: usize,
        first: usize,
        buf: &mut [u8],
    ) -> Result<usize, ReadError> {
        let first = first * self.swap_pages_per_page;
        let done = match self.demand.as_mut() {
            Some(d) => d.finish(),
            None => Err(io::Error::other("demand reader lost")),
        };
        done.map_err(ReadError::Io)?;
        self.swap.accept_read(c, first, buf)?;
        Ok(self
            .swap
            .stored_pages_in(c, first, buf.len() / DIRECT_ALIGN))
    }

    /// Reads page `page` of chunk `c` into `buf` (one page) now and verifies it; `Ok(0)` if it
    /// is not stored (`buf` untouched).
    pub fn read_page(&self, c: usize, page: usize, buf: &mut [u8]) -> Result<usize, ReadError> {
        self.swap
            .read_pages(c, page * self.swap_pages_per_page, buf)
    }

    /// Starts reading stored chunk `c` (`len` bytes) ahead, on the prefetcher; whether a
    /// read was started (not without a prefetcher or for a chunk that is not stored).
    pub fn prefetch(&mut self, c: usize, len: usize) -> bool {
        let Some(pf) = self.prefetcher.as_mut() else {
            return false;
        };
        let Some((file, offset, version)) = self.swap.read_source(c) else {
            return false;
        };
        pf.start(c, version, file, offset, len);
        true
    }

    /// If chunk `c` was read ahead and its swap slot is unchanged since, swaps the prefetch
    /// buffer with `bounce`, which then holds the data; check it with
    /// [`verify_prefetched`](Self::verify_prefetched). `false`: read the chunk.
    pub fn take_prefetched(&mut self, c: usize, bounce: &mut Mapping) -> bool {
        let version_now = self.swap.version(c);
        self.prefetcher
            .as_mut()
            .is_some_and(|pf| pf.take_into(c, version_now, bounce))
    }

    /// Accepts `buf`, taken from the prefetcher, as chunk `c`'s content exactly as a read is
    /// accepted (checksums, injected failures, pages not stored zeroed).
    pub fn verify_prefetched(&self, c: usize, buf: &mut [u8]) -> Result<(), ReadError> {
        self.swap.accept_read(c, 0, buf)
    }
}

/// Waits until `fd` is readable or `timeout` passes.
fn wait_readable(fd: i32, timeout: Duration) {
    let _ = readable_within(fd, timeout.as_millis() as i32);
}

#[cfg(test)]
mod tests {
    use super::*;

    const CS: usize = 64 * 1024;

    fn filled(byte: u8) -> Mapping {
        let m = Mapping::anonymous(CS).unwrap();
        // SAFETY: test-only; the mapping is `CS` bytes and nobody else uses it.
        unsafe { std::ptr::write_bytes(m.as_ptr(), byte, CS) };
        m
    }

    fn bytes(m: &mut Mapping) -> &mut [u8] {
        // SAFETY: test-only; the mapping is `CS` bytes, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), CS) }
    }

    /// Every engine: a started write is reaped, accepted, read back through `start_read` /
    /// `finish_read` and through the prefetcher, and punched.
    #[test]
    fn write_reap_read_prefetch_punch() {
        for page_out in [PageOut::Sync, PageOut::Threads(2), PageOut::IoUring(4)] {
            let dir = tempfile::tempdir().unwrap();
            let config = RegionConfig::new(4 * CS, CS, dir.path())
                .chunk_size(CS)
                .page_out(page_out)
                .overlapped_page_in(true)
                .readahead(true)
                .resolve(ResolveMode::Copy);
            let mut io = match SwapIo::create(&config, "t", "test", 4, 4 * CS) {
                Ok(io) => io,
                // io_uring may be disabled here; the other engines still run.
                Err(e) if page_out == PageOut::IoUring(4) => {
                    eprintln!("io_uring unavailable ({e}): skipped");
                    continue;
                }
                Err(e) => panic!("{e}"),
            };
            let mut data = filled(0x5a);
            if io.writes_async() {
                // SAFETY: `data` lives and is unchanged until the write is reaped below.
                unsafe { io.start_write(2, 0, bytes(&mut data)) }.unwrap();
                let mut done = Vec::new();
                while done.is_empty() {
                    done = io.reap_writes(true);
                }
                let d = done.pop().unwrap();
                assert_eq!(d.chunk, 2);
                assert_eq!((d.first_page, d.pages), (0, CS / 4096));
                io.accept_write(2, 0, &d.result.unwrap());
                io.recycle(done);
            } else {
                assert_eq!(
                    io.write_now(2, 0, bytes(&mut data)).unwrap(),
                    WriteOutcome::Written
                );
            }
            assert!(io.is_stored(2) && !io.is_stored(1));
            let mut back = filled(0);
            let buf = bytes(&mut back);
            // SAFETY: `buf` is untouched until `finish_read`.
            let read = match unsafe { io.start_read(2, 0, buf) } {
                ReadStart::Done(r) => r,
                ReadStart::InFlight => io.finish_read(2, 0, buf),
            };
            assert_eq!(read.unwrap(), CS / 4096, "{page_out:?}");
            assert!(buf.iter().all(|&b| b == 0x5a));
            assert!(io.prefetch(2, CS));
            let mut bounce = filled(0);
            assert!(io.take_prefetched(2, &mut bounce));
            io.verify_prefetched(2, bytes(&mut bounce)).unwrap();
            assert!(bytes(&mut bounce).iter().all(|&b| b == 0x5a));
            assert!(!io.prefetch(1, CS), "not stored: nothing to read ahead");
            io.punch(2).unwrap();
            assert!(!io.is_stored(2) && io.page_crc(2, 0).is_none());
        }
    }

    /// More writes in flight than the io_uring completion queue holds (a ring of one entry
    /// has two completion slots): every one of them is still reaped, without another
    /// submission to flush the completions the kernel kept aside.
    #[test]
    fn more_writes_than_the_completion_queue_holds_are_all_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let config = RegionConfig::new(16 * CS, CS, dir.path())
            .chunk_size(CS)
            .page_out(PageOut::IoUring(1))
            .resolve(ResolveMode::Copy);
        let mut io = match SwapIo::create(&config, "t", "test", 16, 16 * CS) {
            Ok(io) => io,
            Err(e) => {
                eprintln!("io_uring unavailable ({e}): skipped");
                return;
            }
        };
        let mut data: Vec<Mapping> = (0..16).map(|c| filled(c as u8)).collect();
        for (c, m) in data.iter_mut().enumerate() {
            // SAFETY: every mapping lives and is unchanged until all writes are reaped below.
            unsafe { io.start_write(c, 0, bytes(m)) }.unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let mut chunks = Vec::new();
        while chunks.len() < 16 && std::time::Instant::now() < deadline {
            let mut done = io.reap_writes(false);
            for d in done.drain(..) {
                d.result.as_ref().unwrap();
                chunks.push(d.chunk);
            }
            io.recycle(done);
            std::thread::sleep(Duration::from_millis(5));
        }
        chunks.sort_unstable();
        assert_eq!(chunks, (0..16).collect::<Vec<_>>(), "writes never reaped");
    }
}
