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
//! The ring is read through [`ProgramMemory`], never dereferenced: a context destroyed behind
//! the reader's back (a raw `io_destroy`) then fails the read with `EFAULT` instead of
//! faulting.

use crate::completion_ring::{Completion, CompletionRing};
use crate::io_rings_error::{reading, value_at, IoRingsError, IoRingsResult};
use crate::own_memory::OwnMemory;
use crate::plain_data::PlainData;
use crate::program_memory::{address_after, ProgramMemory};

/// `AIO_RING_MAGIC`.
pub const AIO_RING_MAGIC: u32 = 0xa10a_10a1;
/// Bytes of the header (`sizeof(struct aio_ring)`).
const HEADER: usize = 32;
/// Most events read at one look (the rest at the next).
const MOST_PER_LOOK: u32 = 4096;

/// One completion (`struct io_event`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoEvent {
    /// The control block's `aio_data`.
    pub data: u64,
    /// The control block's address.
    pub obj: u64,
    /// Its result: bytes, or a negative errno.
    pub res: i64,
    /// Secondary result.
    pub res2: i64,
}

/// The ring header (`struct aio_ring` without its events).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AioRingHeader {
    /// The context's kernel id.
    pub id: u32,
    /// Event slots.
    pub nr: u32,
    /// The first event the program has not consumed.
    pub head: u32,
    /// The slot the kernel writes next.
    pub tail: u32,
    /// [`AIO_RING_MAGIC`].
    pub magic: u32,
    /// Compatible features.
    pub compat_features: u32,
    /// Incompatible features (none known).
    pub incompat_features: u32,
    /// Bytes of this header (32).
    pub header_length: u32,
}

// SAFETY: `repr(C)` integers, 32 bytes without padding.
unsafe impl PlainData for IoEvent {}
// SAFETY: `repr(C)` integers, 32 bytes without padding.
unsafe impl PlainData for AioRingHeader {}

/// A context's completion ring in `M` and how far it has been read.
#[derive(Debug)]
pub struct AioRing<M = OwnMemory> {
    memory: M,
    address: usize,
    nr: u32,
    /// Index of the first event not read yet.
    seen: u32,
}

impl AioRing<OwnMemory> {
    /// The ring of context `ctx` of this process as a [`CompletionRing`], or `None` if it is
    /// not one.
    pub fn boxed(ctx: usize) -> Option<Box<dyn CompletionRing>> {
        AioRing::at(OwnMemory, ctx)
            .ok()
            .map(|r| Box::new(r) as Box<dyn CompletionRing>)
    }
}

impl<M: ProgramMemory> AioRing<M> {
    /// The ring of context `ctx` (its address in `memory`), read from its current tail on
    /// (completions before this call are not reported). `Err` if `ctx` does not look like a
    /// ring this code understands.
    pub fn at(memory: M, ctx: usize) -> IoRingsResult<Self> {
        let h = header(&memory, ctx)?;
        Ok(Self {
            memory,
            address: ctx,
            nr: h.nr,
            seen: h.tail,
        })
    }

    /// Appends the events completed since the last look to `out` (at most 4096 at a look;
    /// the rest at the next). `Err`: the ring cannot be read any more (unmapped) or no longer
    /// looks like the same one.
    pub fn events(&mut self, out: &mut Vec<IoEvent>) -> IoRingsResult<()> {
        let h = header(&self.memory, self.address)?;
        if h.nr != self.nr {
            return Err(IoRingsError::NotRecognized {
                what: "aio ring",
                address: self.address,
                why: "its size changed",
            });
        }
        let nr = u64::from(self.nr);
        let posted = (u64::from(h.tail) + nr - u64::from(self.seen)) % nr;
        let mut left = posted.min(u64::from(MOST_PER_LOOK)) as u32;
        while left > 0 {
            // Up to the ring's end, then from its start.
            let n = left.min(self.nr - self.seen);
            let start = out.len();
            out.resize(start + n as usize, IoEvent::default());
            let at = address_after(self.address, u64::from(self.seen), size_of::<IoEvent>())
                .and_then(|a| a.checked_add(HEADER));
            let read = reading("aio ring events", at, |at| {
                self.memory.read(at, &mut out[start..])
            });
            if let Err(e) = read {
                out.truncate(start);
                return Err(e);
            }
            self.seen = (self.seen + n) % self.nr;
            left -= n;
        }
        Ok(())
    }
}

impl<M: ProgramMemory + Send> CompletionRing for AioRing<M> {
    /// A completion's key is its control block's address (the event's `obj`).
    fn completions(&mut self, out: &mut Vec<Completion>) -> IoRingsResult<()> {
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
fn header(memory: &impl ProgramMemory, ctx: usize) -> IoRingsResult<AioRingHeader> {
    let h: AioRingHeader = value_at(memory, "aio ring header", ctx)?;
    let sane = h.magic == AIO_RING_MAGIC
        && h.header_length as usize == HEADER
        && h.incompat_features == 0
        && h.nr > 0
        && h.tail < h.nr
        && h.head < h.nr;
    if sane {
        Ok(h)
    } else {
        Err(IoRingsError::NotRecognized {
            what: "aio ring",
            address: ctx,
            why: "magic, header length, features or indices",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::byte_memory::ByteMemory;
    use std::io;

    /// A context of the real kernel: its ring is found, a completed request shows up once,
    /// and a destroyed context's ring fails to read instead of faulting.
    #[test]
    fn a_real_context_reports_each_completion_once() {
        let mut ctx: libc::c_ulong = 0;
        // SAFETY: io_setup writes the new context id into `ctx`.
        let r = unsafe { libc::syscall(libc::SYS_io_setup, 8 as libc::c_long, &mut ctx) };
        assert_eq!(r, 0, "io_setup: {}", io::Error::last_os_error());
        let mut ring = AioRing::at(OwnMemory, ctx as usize).expect("ring");
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
            let n = unsafe {
                libc::syscall(
                    libc::SYS_io_submit,
                    ctx,
                    1 as libc::c_long,
                    list.as_mut_ptr(),
                )
            };
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
        // SAFETY: destroys this test's own context, with no request in flight.
        assert_eq!(unsafe { libc::syscall(libc::SYS_io_destroy, ctx) }, 0);
        assert!(ring.completions(&mut completions).is_err());
        // SAFETY: `fd` is this test's own descriptor.
        unsafe { libc::close(fd) };
    }

    #[test]
    fn memory_that_is_not_a_ring_is_refused() {
        let page = vec![0u8; 4096];
        let at = page.as_ptr() as usize;
        let e = AioRing::at(OwnMemory, at).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "no aio ring this library reads at {at:#x} (magic, header length, features or \
                 indices)"
            )
        );
        let e = AioRing::at(OwnMemory, 16).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("cannot read aio ring header at 0x10: "),
            "{e}"
        );
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
    }

    const BASE: usize = 0x7000_0000;

    fn made_up_ring(nr: u32, tail: u32) -> ByteMemory {
        let m = ByteMemory::new(BASE, HEADER + nr as usize * size_of::<IoEvent>());
        let h = AioRingHeader {
            nr,
            tail,
            magic: AIO_RING_MAGIC,
            header_length: HEADER as u32,
            ..AioRingHeader::default()
        };
        m.write(BASE, &[h]).unwrap();
        m
    }

    /// Plays the kernel: writes the event for `obj` in slot `tail` and advances the tail.
    fn complete(m: &ByteMemory, nr: u32, obj: u64) {
        let mut h: AioRingHeader = m.value(BASE).unwrap();
        let at = BASE + HEADER + h.tail as usize * size_of::<IoEvent>();
        let e = IoEvent {
            obj,
            res: 512,
            ..IoEvent::default()
        };
        m.write(at, &[e]).unwrap();
        h.tail = (h.tail + 1) % nr;
        m.write(BASE, &[h]).unwrap();
    }

    #[test]
    fn events_are_read_across_the_rings_end_each_once() {
        let m = made_up_ring(4, 2);
        let mut ring = AioRing::at(&m, BASE).unwrap();
        let mut keys = Vec::new();
        for obj in 1..=11u64 {
            complete(&m, 4, obj);
            if obj % 3 == 0 {
                let mut out = Vec::new();
                ring.completions(&mut out).unwrap();
                keys.extend(out.iter().map(|c| c.key));
            }
        }
        let mut out = Vec::new();
        ring.completions(&mut out).unwrap();
        keys.extend(out.iter().map(|c| c.key));
        assert_eq!(keys, (1..=11).collect::<Vec<_>>());
    }

    #[test]
    fn a_ring_that_changes_or_goes_is_an_error() {
        let m = made_up_ring(4, 0);
        let mut ring = AioRing::at(&m, BASE).unwrap();
        let mut h: AioRingHeader = m.value(BASE).unwrap();
        h.nr = 8;
        m.write(BASE, &[h]).unwrap();
        let e = ring.completions(&mut Vec::new()).unwrap_err();
        assert!(e.to_string().contains("its size changed"), "{e}");
        h.nr = 4;
        h.magic = 0;
        m.write(BASE, &[h]).unwrap();
        assert!(ring.completions(&mut Vec::new()).is_err());
        // A header at the end of the address space: its events are nowhere.
        let top = usize::MAX - HEADER;
        let m = ByteMemory::new(top, HEADER);
        let h = AioRingHeader {
            nr: 2,
            magic: AIO_RING_MAGIC,
            header_length: HEADER as u32,
            ..AioRingHeader::default()
        };
        m.write(top, &[h]).unwrap();
        let mut ring = AioRing::at(&m, top).unwrap();
        m.write(top, &[AioRingHeader { tail: 1, ..h }]).unwrap();
        let e = ring.completions(&mut Vec::new()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        assert!(
            e.to_string().starts_with("cannot read aio ring events"),
            "{e}"
        );
    }
}
