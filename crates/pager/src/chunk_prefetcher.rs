//! [`ChunkPrefetcher`]: sequential readahead of one chunk. When page-ins come in address order,
//! the handler asks for the next chunk to be read from swap on a reader thread while it maps
//! the current one and the program works on it; the next fault then finds the data read (or
//! being read) instead of starting the read.
//!
//! The prefetched bytes are only a candidate: the handler uses them if the chunk's stored
//! checksum is still the one it had when the read started (its swap slot was not rewritten or
//! punched meanwhile) and the bytes match that checksum, exactly as for a read on the fault
//! path; otherwise it reads the chunk again.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use crate::memfd::Mapping;
use crate::thread_start_hook::spawn_pager_thread;

/// A read to do: `len` bytes at `offset` of `file` into the prefetcher's buffer.
struct ReadJob {
    file: Arc<File>,
    offset: u64,
    len: usize,
    addr: usize,
}

// SAFETY: `addr` is the prefetcher's own buffer, which lives as long as the reader thread (it is
// dropped after the thread is joined) and is not touched by the handler while a read is in
// flight (`ChunkPrefetcher` waits for the read before handing the buffer out or reusing it).
unsafe impl Send for ReadJob {}

/// Outcome of the read in flight, and a condition variable to wait for it.
#[derive(Default)]
struct Completion {
    done: Mutex<Option<io::Result<()>>>,
    cv: Condvar,
}

/// What is in the buffer (or being read into it).
#[derive(Debug, Clone, Copy)]
struct Pending {
    chunk: usize,
    /// The chunk's stored version when the read started ([`SwapFile::version`]).
    ///
    /// [`SwapFile::version`]: crate::SwapFile::version
    version: u32,
}

/// One reader thread and one chunk-sized buffer.
pub(crate) struct ChunkPrefetcher {
    buffer: Mapping,
    jobs: Option<Sender<ReadJob>>,
    completion: Arc<Completion>,
    thread: Option<JoinHandle<()>>,
    pending: Option<Pending>,
}

impl std::fmt::Debug for ChunkPrefetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkPrefetcher")
            .field("pending", &self.pending)
            .finish()
    }
}

impl ChunkPrefetcher {
    /// A prefetcher for chunks of up to `chunk_size` bytes; `region` names its thread.
    pub fn new(region: &str, chunk_size: usize) -> io::Result<Self> {
        let buffer = Mapping::anonymous(chunk_size)?;
        let (tx, rx) = channel::<ReadJob>();
        let completion = Arc::new(Completion::default());
        let c = completion.clone();
        let thread = spawn_pager_thread(format!("pager-ra-{region}"), move || {
            while let Ok(job) = rx.recv() {
                // SAFETY: per `ReadJob`'s contract the buffer is ours alone until the
                // completion below is taken.
                let buf = unsafe { std::slice::from_raw_parts_mut(job.addr as *mut u8, job.len) };
                let r = job.file.read_exact_at(buf, job.offset);
                if let Ok(mut d) = c.done.lock() {
                    *d = Some(r);
                    c.cv.notify_all();
                }
            }
        })?;
        Ok(Self {
            buffer,
            jobs: Some(tx),
            completion,
            thread: Some(thread),
            pending: None,
        })
    }

    /// Starts reading chunk `chunk` (`len` bytes at `offset` of `file`, stored with checksum
    /// `version`), after the previous read, if any, has finished (its data is dropped).
    pub fn start(&mut self, chunk: usize, version: u32, file: Arc<File>, offset: u64, len: usize) {
        self.wait();
        self.pending = None;
        let len = len.min(self.buffer.len());
        let job = ReadJob {
            file,
            offset,
            len,
            addr: self.buffer.addr(),
        };
        if let Some(tx) = &self.jobs {
            if tx.send(job).is_ok() {
                self.pending = Some(Pending { chunk, version });
            }
        }
    }

    /// If the buffer holds `chunk`, read successfully while the chunk's stored version was
    /// `version_now` (so its swap slot is unchanged), swaps it with `bounce`: the caller's buffer
    /// then holds the data (to be verified against the checksum as after any read) and the
    /// prefetcher reads into the caller's old buffer next. Waits for the read if it is still in
    /// flight. `false`: not prefetched, stale, or the read failed; the caller reads the chunk.
    pub fn take_into(&mut self, chunk: usize, version_now: u32, bounce: &mut Mapping) -> bool {
        let Some(p) = self.pending.filter(|p| p.chunk == chunk) else {
            return false;
        };
        let ok = matches!(self.wait(), Some(Ok(())));
        self.pending = None;
        if !ok || version_now != p.version || bounce.len() < self.buffer.len() {
            return false;
        }
        // The read has completed: the reader thread no longer touches the buffer.
        std::mem::swap(&mut self.buffer, bounce);
        true
    }

    /// Waits for the read in flight, if any, and returns its outcome.
    fn wait(&mut self) -> Option<io::Result<()>> {
        self.pending?;
        let Ok(mut d) = self.completion.done.lock() else {
            return None;
        };
        loop {
            if let Some(r) = d.take() {
                return Some(r);
            }
            d = match self.completion.cv.wait(d) {
                Ok(d) => d,
                Err(_) => return None,
            };
        }
    }
}

impl Drop for ChunkPrefetcher {
    fn drop(&mut self) {
        // Let a read in flight finish before the buffer goes away.
        self.wait();
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
