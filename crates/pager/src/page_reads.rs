//! [`PageReads`]: single-page reads from swap kept in flight side by side on an io_uring, each
//! into its own buffer slot, so page-ins of scattered faults from different threads (a guest's
//! vCPUs, a server's workers) overlap on the disk instead of queueing behind each other in the
//! fault handler. Completions raise an eventfd the handler polls. No extra threads.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use io_uring::{opcode, types, IoUring};

use crate::event_fd::EventFd;
use crate::memfd::Mapping;
use crate::uring_completion::{transfer_result, Transfer};

/// A finished read: the slot its data is in, and its outcome (`Ok` once all bytes are in).
#[derive(Debug)]
pub(crate) struct PageReadDone {
    pub slot: usize,
    pub result: io::Result<()>,
}

/// Up to `slots` page reads in flight, each into its own page-sized buffer.
pub(crate) struct PageReads {
    ring: IoUring,
    signal: EventFd,
    buffers: Mapping,
    page: usize,
    /// Slots not in use.
    free: Vec<usize>,
    /// Per slot: a read is in flight (the kernel may write its buffer).
    in_flight: Vec<bool>,
}

impl std::fmt::Debug for PageReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageReads")
            .field("slots", &self.in_flight.len())
            .field("free", &self.free.len())
            .finish()
    }
}

impl PageReads {
    /// Room for `slots` reads of `page` bytes; fails where io_uring is unavailable.
    pub fn new(slots: usize, page: usize) -> io::Result<Self> {
        let slots = slots.clamp(1, 64);
        let ring = IoUring::new(slots.next_power_of_two() as u32)?;
        let signal = EventFd::new()?;
        ring.submitter().register_eventfd(signal.as_raw_fd())?;
        Ok(Self {
            ring,
            signal,
            buffers: Mapping::anonymous(slots * page)?,
            page,
            free: (0..slots).rev().collect(),
            in_flight: vec![false; slots],
        })
    }

    /// The descriptor that becomes readable when a read finishes.
    pub fn completion_fd(&self) -> RawFd {
        self.signal.as_raw_fd()
    }

    /// Whether a slot is free.
    pub fn has_free_slot(&self) -> bool {
        !self.free.is_empty()
    }

    /// How many reads are in flight.
    pub fn in_flight(&self) -> usize {
        self.in_flight.iter().filter(|&&b| b).count()
    }

    /// Starts reading one page at `offset` of `fd` into a free slot; returns the slot.
    ///
    /// # Safety
    ///
    /// `fd` must stay open until the read is reaped by [`take_done`](Self::take_done) (or the
    /// reader is dropped, which waits for it).
    pub unsafe fn start(&mut self, fd: RawFd, offset: u64) -> io::Result<usize> {
        let Some(slot) = self.free.pop() else {
            return Err(io::Error::other("no free page-read slot"));
        };
        // SAFETY: the slot's page lies inside `buffers`, which lives as long as the reader;
        // the slot is ours until the read is reaped.
        let buf = unsafe { self.buffers.as_ptr().add(slot * self.page) };
        let sqe = opcode::Read::new(types::Fd(fd), buf, self.page as u32)
            .offset(offset)
            .build()
            .user_data(slot as u64);
        // SAFETY: the buffer outlives the read (see above) and the caller keeps `fd` open.
        if unsafe { self.ring.submission().push(&sqe) }.is_err() {
            self.free.push(slot);
            return Err(io::Error::other("io_uring submission queue full"));
        }
        match self.ring.submit() {
            Ok(n) if n >= 1 => {
                self.in_flight[slot] = true;
                Ok(slot)
            }
            Ok(_) => Err(io::Error::other("io_uring accepted no entry")),
            // The entry stays queued, unseen by the kernel until a later submit passes it on;
            // its slot stays taken for good (never handed out again, so a late read into it
            // harms nothing, and its completion is ignored: the slot is not in flight).
            Err(e) => Err(e),
        }
    }

    /// Takes the finished reads (their slots stay taken until [`release`](Self::release)).
    /// With `wait`, waits until at least one has finished if any is in flight.
    pub fn take_done(&mut self, out: &mut Vec<PageReadDone>, wait: bool) {
        self.signal.clear();
        loop {
            for cqe in self.ring.completion() {
                let slot = cqe.user_data() as usize;
                let Some(flag) = self.in_flight.get_mut(slot).filter(|f| **f) else {
                    continue;
                };
                *flag = false;
                let result = transfer_result(cqe.result(), self.page, Transfer::Read);
                out.push(PageReadDone { slot, result });
            }
            if !out.is_empty() || !wait || self.in_flight() == 0 {
                return;
            }
            if self.ring.submit_and_wait(1).is_err() {
                std::thread::sleep(std::time::Duration::from_micros(10));
            }
        }
    }

    /// The data of finished read `slot`.
    pub fn buffer(&mut self, slot: usize) -> &mut [u8] {
        assert!(slot < self.in_flight.len() && !self.in_flight[slot]);
        // SAFETY: the slot's page lies inside `buffers`; its read has finished, so the kernel
        // no longer writes it, and `&mut self` makes this the only reference.
        unsafe {
            std::slice::from_raw_parts_mut(self.buffers.as_ptr().add(slot * self.page), self.page)
        }
    }

    /// Gives finished read `slot`'s buffer back.
    pub fn release(&mut self, slot: usize) {
        if slot < self.in_flight.len() && !self.in_flight[slot] && !self.free.contains(&slot) {
            self.free.push(slot);
        }
    }
}

impl Drop for PageReads {
    fn drop(&mut self) {
        // Never let the kernel write into a buffer after it is unmapped.
        let mut sink = Vec::new();
        while self.in_flight() > 0 {
            sink.clear();
            self.take_done(&mut sink, true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn reads_in_flight_side_by_side() {
        let page = 4096;
        let mut f = tempfile::tempfile().unwrap();
        for i in 0..8u8 {
            f.write_all(&vec![i; page]).unwrap();
        }
        let mut r = match PageReads::new(4, page) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("io_uring unavailable ({e}): skipped");
                return;
            }
        };
        let mut slots = Vec::new();
        for i in [5u64, 1, 7, 2] {
            // SAFETY: `f` stays open until every read is reaped below.
            let s = unsafe { r.start(f.as_raw_fd(), i * page as u64) }.unwrap();
            slots.push((s, i as u8));
        }
        assert!(!r.has_free_slot());
        // SAFETY: as above.
        let refused = unsafe { r.start(f.as_raw_fd(), 0) };
        assert!(refused.is_err(), "no slot left");
        let mut done = Vec::new();
        while done.len() < 4 {
            r.take_done(&mut done, true);
        }
        for d in &done {
            d.result.as_ref().unwrap();
            let want = slots.iter().find(|(s, _)| *s == d.slot).unwrap().1;
            assert!(r.buffer(d.slot).iter().all(|&b| b == want));
            r.release(d.slot);
        }
        assert_eq!(r.in_flight(), 0);
        // Past the end of the file: a short read is an error.
        // SAFETY: as above.
        let s = unsafe { r.start(f.as_raw_fd(), 8 * page as u64) }.unwrap();
        done.clear();
        r.take_done(&mut done, true);
        assert_eq!(done[0].slot, s);
        assert!(done[0].result.is_err());
    }
}
