//! [`UringWriter`]: swap writes submitted to an io_uring by the fault handler itself; no extra
//! threads. Completions raise an eventfd registered with the ring.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{opcode, types, IoUring};

use crate::event_fd::EventFd;
use crate::swap_file::page_checksums;
use crate::uring_completion::{transfer_result, Transfer};
use crate::write_job::{WriteDone, WriteJob};

/// An io_uring for chunk writes.
pub(crate) struct UringWriter {
    ring: IoUring,
    signal: EventFd,
    depth: usize,
    /// Writes in flight, by the id in their entry's user data.
    in_flight: Vec<InFlight>,
    /// The id of the next write.
    next_id: u64,
    /// Writes that failed before reaching the ring (injected failures, a full ring).
    failed: Vec<WriteDone>,
    /// Entries queued but not yet accepted by the kernel (a submit failed; retried).
    unsubmitted: bool,
}

/// A write the ring has: its run, the page checksums of its data, the length it must write.
struct InFlight {
    id: u64,
    chunk: usize,
    first_page: usize,
    crcs: Vec<u32>,
    len: usize,
}

impl std::fmt::Debug for UringWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringWriter")
            .field("depth", &self.depth)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl UringWriter {
    /// A ring for up to `depth` writes at once.
    pub fn new(depth: usize) -> io::Result<Self> {
        let depth = depth.clamp(1, 4096);
        let ring = IoUring::new(depth.next_power_of_two() as u32)?;
        let signal = EventFd::new()?;
        ring.submitter().register_eventfd(signal.as_raw_fd())?;
        Ok(Self {
            ring,
            signal,
            depth,
            in_flight: Vec::with_capacity(depth),
            next_id: 0,
            failed: Vec::new(),
            unsubmitted: false,
        })
    }

    pub fn submit(&mut self, job: WriteJob) {
        if let Err(e) = job.target.injected_failure() {
            return self.fail(&job, e);
        }
        // SAFETY: per `WriteJob`'s contract, the pages stay mapped and unwritten until the
        // write completes; the checksums are taken now, over the same bytes the ring writes.
        let data = unsafe { std::slice::from_raw_parts(job.addr as *const u8, job.len) };
        let crcs = page_checksums(data);
        let id = self.next_id;
        self.next_id += 1;
        let sqe = opcode::Write::new(
            types::Fd(job.target.file.as_raw_fd()),
            job.addr as *const u8,
            job.len as u32,
        )
        .offset(job.target.offset)
        .build()
        .user_data(id);
        // SAFETY: the entry's buffer stays valid until its completion is reaped (see above),
        // and the file stays open: `job.target.file` is the swap file, which the handler keeps
        // until every write in flight has completed.
        let mut pushed = unsafe { self.ring.submission().push(&sqe) };
        if pushed.is_err() && self.ring.submit().is_ok() {
            // The queue was full of entries not yet passed to the kernel: pass them, which
            // frees their slots (the kernel keeps completions beyond the ring's size).
            // SAFETY: as above.
            pushed = unsafe { self.ring.submission().push(&sqe) };
        }
        if pushed.is_err() {
            return self.fail(&job, io::Error::other("io_uring submission queue full"));
        }
        // The entry is queued: from now on it is in flight, whether this submit succeeds or a
        // later one (in `take_done`) passes it to the kernel. Failing it here instead would let
        // a late write land over newer data in the same slot.
        self.in_flight.push(InFlight {
            id,
            chunk: job.chunk,
            first_page: job.first_page,
            crcs,
            len: job.len,
        });
        self.unsubmitted = self.ring.submit().is_err();
    }

    fn fail(&mut self, job: &WriteJob, e: io::Error) {
        self.failed.push(WriteDone::of(job, Err(e)));
        self.signal.signal();
    }

    pub fn take_done(&mut self, out: &mut Vec<WriteDone>) {
        self.signal.clear();
        if self.unsubmitted {
            self.unsubmitted = self.ring.submit().is_err();
        }
        out.append(&mut self.failed);
        loop {
            for cqe in self.ring.completion() {
                let id = cqe.user_data();
                let Some(i) = self.in_flight.iter().position(|w| w.id == id) else {
                    continue;
                };
                let w = self.in_flight.swap_remove(i);
                let result = transfer_result(cqe.result(), w.len, Transfer::Write).map(|()| w.crcs);
                out.push(WriteDone {
                    chunk: w.chunk,
                    first_page: w.first_page,
                    pages: w.len / crate::swap_file::DIRECT_ALIGN,
                    result,
                });
            }
            // More writes in flight than the completion queue holds: the kernel keeps the
            // completions that did not fit (IORING_SQ_CQ_OVERFLOW) until an `io_uring_enter`
            // with GETEVENTS moves them into the queue, which `submit` makes when the flag is
            // set. Without it, a handler waiting for those writes waited forever (seen as a
            // hung fault with 4 writes per chunk in flight on a ring of 4).
            if !self.ring.submission().cq_overflow() || self.ring.submit().is_err() {
                break;
            }
        }
    }

    pub fn completion_fd(&self) -> RawFd {
        self.signal.as_raw_fd()
    }

    pub fn depth(&self) -> usize {
        self.depth
    }
}

impl Drop for UringWriter {
    fn drop(&mut self) {
        // The handler reaps every write before it drops the engine; should one still be in
        // flight, wait for it, so the kernel never writes from memory that is gone.
        while !self.in_flight.is_empty() {
            if self.ring.submit_and_wait(1).is_err() {
                break;
            }
            let mut sink = Vec::new();
            self.take_done(&mut sink);
        }
    }
}
