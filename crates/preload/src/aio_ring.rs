//! [`AioRing`]: a Linux AIO context's completion ring, read from userspace.
//!
//! `io_setup(2)` maps the ring into the process, and the context id is its address (the
//! kernel's `struct aio_ring`: a 32-byte header, then `nr` events of 32 bytes). The kernel
//! writes an event, then advances `tail`; the program consumes events by advancing `head`
//! (QEMU reads them this way, never calling `io_getevents`). An event slot is written again
//! only after the program consumed it, so the events between the last tail seen and the
//! current one are the completions since, provided the ring did not go round in between
//! (more than `nr` completions between two looks).
//!
//! The ring is read with [`read_own`], never dereferenced: a context destroyed behind the
//! library's back (a raw `io_destroy`) then fails the read with `EFAULT` instead of faulting.

use std::io;

use crate::aio_in_flight::{Completion, CompletionRing};
use crate::own_memory::{read_own, PlainData};

/// `AIO_RING_MAGIC`.
const MAGIC: u32 = 0xa10a_10a1;
/// Bytes of the header (`sizeof(struct aio_ring)`).
const HEADER: usize = 32;
/// Most events read at one look (the rest at the next).
const MOST_PER_LOOK: u32 = 4096;

/// One completion (`struct io_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct IoEvent {
    /// The control block's `aio_data`.
    pub data: u64,
    /// The control block's address.
    pub obj: u64,
    /// Its result: bytes, or a negative errno.
    pub res: i64,
    /// Secondary result.
    pub res2: i64,
}

// SAFETY: `repr(C)` integers.
unsafe impl PlainData for IoEvent {}
// SAFETY: `repr(C)` integers.
unsafe impl PlainData for RingHeader {}

/// The ring header's fields the library uses.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct RingHeader {
    id: u32,
    nr: u32,
    head: u32,
    tail: u32,
    magic: u32,
    compat_features: u32,
    incompat_features: u32,
    header_length: u32,
}

/// A context's completion ring and how far the library has read it.
#[derive(Debug)]
pub struct AioRing {
    address: usize,
    nr: u32,
    /// Index of the first event not read yet.
    seen: u32,
}

impl AioRing {
    /// The ring of context `ctx`, read from its current tail on (completions before this call
    /// are not reported). `Err` if `ctx` does not look like a ring this code understands.
    pub fn at(ctx: usize) -> io::Result<Self> {
        let h = header(ctx)?;
        Ok(Self {
            address: ctx,
            nr: h.nr,
            seen: h.tail,
        })
    }

    /// The ring of context `ctx` as a [`CompletionRing`], or `None` if it is not one.
    pub fn boxed(ctx: usize) -> Option<Box<dyn CompletionRing>> {
        Self::at(ctx)
            .ok()
            .map(|r| Box::new(r) as Box<dyn CompletionRing>)
    }

    /// Appends the events completed since the last look to `out`. `Err`: the ring cannot be
    /// read any more (unmapped) or no longer looks like one.
    fn events(&mut self, out: &mut Vec<IoEvent>) -> io::Result<()> {
        let h = header(self.address)?;
        if h.nr != self.nr {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "aio ring changed",
            ));
        }
        let mut left = h.tail.wrapping_sub(self.seen).wrapping_add(self.nr) % self.nr;
        left = left.min(MOST_PER_LOOK);
        while left > 0 {
            // Up to the ring's end, then from its start.
            let n = left.min(self.nr - self.seen);
            let start = out.len();
            out.resize(start + n as usize, IoEvent::default());
            let at = self.address + HEADER + self.seen as usize * size_of::<IoEvent>();
            if let Err(e) = read_own(at, &mut out[start..]) {
                out.truncate(start);
                return Err(e);
            }
            self.seen = (self.seen + n) % self.nr;
            left -= n;
        }
        Ok(())
    }
}

impl CompletionRing for AioRing {
    /// A completion's key is its control block's address (the event's `obj`).
    fn completions(&mut self, out: &mut Vec<Completion>) -> io::Result<()> {
        let mut events = Vec::new();
        let r = self.events(&mut events);
        out.extend(events.iter().map(|e| Completion {
            key: e.obj,
            res: e.res,
        }));
        r
    }
}

/// The header at `ctx`, checked.
fn header(ctx: usize) -> io::Result<RingHeader> {
    let mut h = [RingHeader::default()];
    read_own(ctx, &mut h)?;
    let h = h[0];
    let sane = h.magic == MAGIC
        && h.header_length as usize == HEADER
        && h.incompat_features == 0
        && h.nr > 0
        && h.tail < h.nr
        && h.head < h.nr;
    if sane {
        Ok(h)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("no aio ring at {ctx:#x}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context of the real kernel: its ring is found, a completed request shows up once,
    /// and a destroyed context's ring fails to read instead of faulting.
    #[test]
    fn a_real_context_reports_each_completion_once() {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, 8 as libc::c_long, &mut ctx) };
        assert_eq!(r, 0, "io_setup: {}", io::Error::last_os_error());
        let mut ring = AioRing::at(ctx as usize).expect("ring");
        let mut events = Vec::new();
        ring.events(&mut events).unwrap();
        assert!(events.is_empty());
        // SAFETY: memfd_create takes a NUL-terminated name and flags.
        let fd = unsafe { libc::memfd_create(c"aio-ring-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        let data = [7u8; 512];
        for round in 0..3u64 {
            let mut cb = crate::aio_request::Iocb {
                aio_data: round,
                aio_lio_opcode: 1,
                aio_fildes: fd as u32,
                aio_buf: data.as_ptr() as u64,
                aio_nbytes: data.len() as u64,
                aio_offset: (round * 512) as i64,
                ..Default::default()
            };
            let mut list = [&mut cb as *mut crate::aio_request::Iocb as *mut libc::c_void];
            // SAFETY: one valid control block whose buffer lives past its completion (waited
            // for below).
            let n = unsafe { crate::raw_calls::io_submit(ctx, 1, list.as_mut_ptr()) };
            assert_eq!(n, 1, "io_submit: {}", io::Error::last_os_error());
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while events.len() as u64 == round {
                ring.events(&mut events).unwrap();
                assert!(std::time::Instant::now() < deadline, "no completion");
            }
            assert_eq!(events.len() as u64, round + 1);
            let e = events[round as usize];
            assert_eq!((e.data, e.obj, e.res), (round, &cb as *const _ as u64, 512));
        }
        let mut completions = Vec::new();
        ring.completions(&mut completions).unwrap();
        assert!(completions.is_empty(), "a completion reported twice");
        assert_eq!(crate::raw_calls::io_destroy(ctx), 0);
        assert!(ring.completions(&mut completions).is_err());
        // SAFETY: `fd` is this test's own descriptor.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn memory_that_is_not_a_ring_is_refused() {
        let page = vec![0u8; 4096];
        assert!(AioRing::at(page.as_ptr() as usize).is_err());
        assert!(AioRing::at(16).is_err());
    }
}
