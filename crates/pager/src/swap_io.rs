//! [`SwapIo`]: all swap I/O of one region behind the operations the fault handler needs:
//! read a chunk into a buffer (through the demand reader's io_uring when there is one, so the
//! handler can work while the disk reads), start a write (on the page-out engine), reap
//! finished writes, prefetch the next chunk, punch a chunk, and the checksums and stored state
//! those decisions need. It owns the [`SwapFile`], the [`PageOutEngine`], the
//! [`DemandReader`] and the [`ChunkPrefetcher`]; the handler never reaches into them.

use std::io;
use std::path::Path;
use std::time::Duration;

use crate::chunk_prefetcher::ChunkPrefetcher;
use crate::demand_reader::DemandReader;
use crate::memfd::Mapping;
use crate::page_out_engine::PageOutEngine;
use crate::pager_error::PagerError;
use crate::region_config::{PageOut, RegionConfig, ResolveMode};
use crate::swap_file::{ReadError, SwapFile, WriteOutcome};
use crate::thread_pool_writer::ThreadPoolWriter;
use crate::uring_writer::UringWriter;
use crate::write_job::{WriteDone, WriteJob};

/// How [`SwapIo::start_read`] went.
pub(crate) enum ReadStart {
    /// The read is over (synchronously): its outcome, as [`SwapFile::read_chunk`] gives it.
    Done(Result<bool, ReadError>),
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
    /// Reused buffer of finished writes.
    done_buf: Vec<WriteDone>,
    /// Declared last so it is closed after the reader and writers that use its descriptor.
    swap: SwapFile,
}

impl SwapIo {
    /// The swap I/O `config` asks for, for region `region` of `chunks` chunks (`len` bytes):
    /// a new swap file (with page checksums for `async_page_in`), the page-out engine, the
    /// demand reader (with an engine, where io_uring works) and the prefetcher (readahead by
    /// copy). `tag` names the swap file and the threads.
    pub fn create(
        config: &RegionConfig,
        tag: &str,
        region: &str,
        chunks: usize,
        len: usize,
        async_page_in: bool,
    ) -> Result<Self, PagerError> {
        let cs = config.chunk_size;
        let thread_error = |source| PagerError::Thread {
            region: region.to_string(),
            source,
        };
        let mut swap = SwapFile::create(
            &config.swap_dir,
            tag,
            cs,
            chunks,
            config.fault_injector.clone(),
        )?;
        if async_page_in {
            swap.keep_page_checksums();
        }
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
        let prefetcher = if config.readahead && config.resolve == ResolveMode::Copy {
            Some(ChunkPrefetcher::new(tag, cs).map_err(thread_error)?)
        } else {
            None
        };
        Ok(Self {
            engine,
            demand,
            prefetcher,
            done_buf: Vec::new(),
            swap,
        })
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

    /// Whether chunk `c` holds stored data (else it reads as zero).
    pub fn is_stored(&self, c: usize) -> bool {
        self.swap.is_stored(c)
    }

    /// The CRC32C recorded for chunk `c`, if it is stored.
    pub fn stored_crc(&self, c: usize) -> Option<u32> {
        self.swap.stored_crc(c)
    }

    /// Frees chunk `c`'s swap copy; it reads as zero from now on.
    pub fn punch(&mut self, c: usize) -> io::Result<()> {
        self.swap.punch(c)
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

    /// Writes `data` as chunk `c` now (all zeros: punched instead).
    pub fn write_now(&mut self, c: usize, data: &[u8]) -> io::Result<WriteOutcome> {
        self.swap.write_chunk(c, data)
    }

    /// Starts writing `data` as chunk `c` on the page-out engine; the chunk's old swap copy is
    /// forgotten now, its new checksum recorded when [`reap_writes`](Self::reap_writes)
    /// reports the write done and the caller [`accept_write`](Self::accept_write)s it.
    ///
    /// # Safety
    ///
    /// `data` must stay mapped, and nobody may write it, until the write has been reaped
    /// (the engine reads it on another thread or in the kernel after this returns).
    pub unsafe fn start_write(&mut self, c: usize, data: &[u8]) -> io::Result<()> {
        let Some(engine) = self.engine.as_mut() else {
            return Err(io::Error::other("no asynchronous page-out engine"));
        };
        let target = self.swap.prepare_write(c, data)?;
        // The bytes the write will carry: nobody changes them until it completes.
        self.swap.set_page_checksums(c, data);
        engine.submit(WriteJob {
            chunk: c,
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

    /// Records that the write of chunk `c` succeeded with checksum `crc`.
    pub fn accept_write(&mut self, c: usize, crc: u32) {
        self.swap.record_written(c, crc);
    }

    /// Starts reading stored chunk `c` into `buf`: through the demand reader when there is
    /// one (and writes are asynchronous), returning [`ReadStart::InFlight`]; otherwise reads
    /// it now. A read the ring refuses is done synchronously, and later reads too.
    ///
    /// # Safety
    ///
    /// After [`ReadStart::InFlight`], `buf` must stay valid and untouched by anyone until
    /// [`finish_read`](Self::finish_read) is called with it (the kernel writes it meanwhile).
    pub unsafe fn start_read(&mut self, c: usize, buf: &mut [u8]) -> ReadStart {
        if self.engine.is_none() || self.demand.is_none() {
            return ReadStart::Done(self.swap.read_chunk(c, buf));
        }
        let (fd, offset) = match self.swap.read_target(c, buf) {
            Ok(Some(t)) => t,
            Ok(None) => return ReadStart::Done(Ok(false)),
            Err(e) => return ReadStart::Done(Err(ReadError::Io(e))),
        };
        let started = match self.demand.as_mut() {
            // SAFETY: the caller keeps `buf` valid and untouched until `finish_read`; `fd` is
            // the swap file's, open as long as `self.swap`, which outlives the reader.
            Some(d) => unsafe { d.start(fd, offset, buf) },
            None => return ReadStart::Done(self.swap.read_chunk(c, buf)),
        };
        if started.is_err() {
            // The ring refused the read: read synchronously from now on.
            self.demand = None;
            return ReadStart::Done(self.swap.read_chunk(c, buf));
        }
        ReadStart::InFlight
    }

    /// Waits for the read [`start_read`](Self::start_read) left in flight and checks what
    /// it read into `buf` against chunk `c`'s checksum.
    pub fn finish_read(&mut self, c: usize, buf: &mut [u8]) -> Result<bool, ReadError> {
        let done = match self.demand.as_mut() {
            Some(d) => d.finish(),
            None => Err(io::Error::other("demand reader lost")),
        };
        done.map_err(ReadError::Io)?;
        self.swap.accept_read(c, buf).map(|()| true)
    }

    /// Reads page `page` of stored chunk `c` into `buf` and verifies it against its own
    /// checksum; `Ok(false)` if there is none (read the whole chunk instead).
    pub fn read_page(&self, c: usize, page: usize, buf: &mut [u8]) -> Result<bool, ReadError> {
        self.swap.read_page(c, page, buf)
    }

    /// Starts reading stored chunk `c` (`len` bytes) ahead, on the prefetcher; whether a
    /// read was started (not without a prefetcher or for a chunk that is not stored).
    pub fn prefetch(&mut self, c: usize, len: usize) -> bool {
        let Some(pf) = self.prefetcher.as_mut() else {
            return false;
        };
        let Some((file, offset, crc)) = self.swap.read_source(c) else {
            return false;
        };
        pf.start(c, crc, file, offset, len);
        true
    }

    /// If chunk `c` was read ahead and its swap slot is unchanged since, swaps the prefetch
    /// buffer with `bounce`, which then holds the data; check it with
    /// [`verify_prefetched`](Self::verify_prefetched). `false`: read the chunk.
    pub fn take_prefetched(&mut self, c: usize, bounce: &mut Mapping) -> bool {
        let crc_now = self.swap.stored_crc(c);
        self.prefetcher
            .as_mut()
            .is_some_and(|pf| pf.take_into(c, crc_now, bounce))
    }

    /// Accepts `buf`, taken from the prefetcher, as chunk `c`'s content exactly as a read is
    /// accepted (checksum, injected failures).
    pub fn verify_prefetched(&self, c: usize, buf: &mut [u8]) -> Result<(), ReadError> {
        self.swap.accept_read(c, buf)
    }
}

/// Waits until `fd` is readable or `timeout` passes.
fn wait_readable(fd: i32, timeout: Duration) {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd; poll only writes its `revents`.
    unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) };
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
            let mut io = match SwapIo::create(&config, "t", "test", 4, 4 * CS, false) {
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
                unsafe { io.start_write(2, bytes(&mut data)) }.unwrap();
                let mut done = Vec::new();
                while done.is_empty() {
                    done = io.reap_writes(true);
                }
                let d = done.pop().unwrap();
                assert_eq!(d.chunk, 2);
                io.accept_write(2, d.result.unwrap());
                io.recycle(done);
            } else {
                assert_eq!(
                    io.write_now(2, bytes(&mut data)).unwrap(),
                    WriteOutcome::Written
                );
            }
            assert!(io.is_stored(2) && !io.is_stored(1));
            let mut back = filled(0);
            let buf = bytes(&mut back);
            // SAFETY: `buf` is untouched until `finish_read`.
            let read = match unsafe { io.start_read(2, buf) } {
                ReadStart::Done(r) => r,
                ReadStart::InFlight => io.finish_read(2, buf),
            };
            assert!(read.unwrap(), "{page_out:?}");
            assert!(buf.iter().all(|&b| b == 0x5a));
            assert!(io.prefetch(2, CS));
            let mut bounce = filled(0);
            assert!(io.take_prefetched(2, &mut bounce));
            io.verify_prefetched(2, bytes(&mut bounce)).unwrap();
            assert!(bytes(&mut bounce).iter().all(|&b| b == 0x5a));
            assert!(!io.prefetch(1, CS), "not stored: nothing to read ahead");
            io.punch(2).unwrap();
            assert!(!io.is_stored(2) && io.stored_crc(2).is_none());
        }
    }
}
