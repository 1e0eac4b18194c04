//! [`UringRings`]: a liburing ring (`struct io_uring`, what `io_uring_submit` is given) as the
//! library reads it: the submission queue entries added since the last submission, and a
//! completion reader ([`UringCompletions`]) over its completion queue.
//!
//! liburing keeps its own `struct io_uring` in the program's memory. Its first fields have had
//! the same layout in every liburing 2.x (2.0 to 2.15): the submission queue's pointers into the
//! kernel's shared ring (`khead`, `ktail`, `kring_mask`, `kring_entries`, `kflags`,
//! `kdropped`, `array`, `sqes`), then `sqe_head` and `sqe_tail` (the entries liburing has
//! handed out but not yet published to the kernel lie between them), 104 bytes in all; then
//! the completion queue's pointers (`khead`, `ktail`, `kring_mask`, `kring_entries`, `kflags`,
//! `koverflow`, `cqes`), and at byte 192 the ring's setup flags. Everything is read with
//! [`read_own`], never dereferenced, and checked against
//! the kernel's own values (the masks and sizes in the shared ring): a structure that does not
//! look like this is refused, and the ring's requests pass through unseen.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::aio_in_flight::{Completion, CompletionRing};
use crate::own_memory::{read_own, PlainData};
use crate::uring_request::Sqe;

/// `IORING_SETUP_SQE128` and `IORING_SETUP_CQE32`: entries of other sizes than the library
/// reads.
const WIDE_ENTRIES: u32 = (1 << 10) | (1 << 11);
/// Largest ring the kernel makes (`IORING_MAX_CQ_ENTRIES`).
const MOST_ENTRIES: u32 = 1 << 16;

/// The start of liburing's `struct io_uring`, as described above.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct LiburingHead {
    sq_khead: u64,
    sq_ktail: u64,
    sq_kring_mask: u64,
    sq_kring_entries: u64,
    sq_kflags: u64,
    sq_kdropped: u64,
    sq_array: u64,
    sq_sqes: u64,
    sqe_head: u32,
    sqe_tail: u32,
    sq_rest: [u64; 4],
    cq_khead: u64,
    cq_ktail: u64,
    cq_kring_mask: u64,
    cq_kring_entries: u64,
    cq_kflags: u64,
    cq_koverflow: u64,
    cq_cqes: u64,
    cq_rest: [u64; 4],
    flags: u32,
}

/// `struct io_uring_cqe` (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
struct Cqe {
    user_data: u64,
    res: i32,
    flags: u32,
}

// SAFETY: `repr(C)` integers.
unsafe impl PlainData for LiburingHead {}
// SAFETY: `repr(C)` integers.
unsafe impl PlainData for Cqe {}
// SAFETY: `repr(C)` integers.
unsafe impl PlainData for Sqe {}

/// One of the ring's queues' size, read from the kernel's shared ring and checked.
fn queue_size(kring_mask: u64, kring_entries: u64) -> io::Result<u32> {
    let mut v = [0u32; 1];
    read_own(kring_mask as usize, &mut v)?;
    let mask = v[0];
    read_own(kring_entries as usize, &mut v)?;
    let entries = v[0];
    if entries.is_power_of_two() && entries <= MOST_ENTRIES && mask == entries - 1 {
        Ok(entries)
    } else {
        Err(refused("queue sizes"))
    }
}

fn refused(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("not a liburing ring this library reads ({what})"),
    )
}

/// A liburing ring, checked once.
#[derive(Debug, Clone, Copy)]
pub struct UringRings {
    address: usize,
    sq_entries: u32,
    sqes: usize,
    cq_tail: usize,
}

impl UringRings {
    /// The ring liburing keeps at `ring` (the program's `struct io_uring *`).
    pub fn at(ring: usize) -> io::Result<Self> {
        let h = head(ring)?;
        if h.flags & WIDE_ENTRIES != 0 {
            return Err(refused("128-byte submission or 32-byte completion entries"));
        }
        let sq_entries = queue_size(h.sq_kring_mask, h.sq_kring_entries)?;
        queue_size(h.cq_kring_mask, h.cq_kring_entries)?;
        if h.sqe_tail.wrapping_sub(h.sqe_head) > sq_entries || h.sq_sqes == 0 {
            return Err(refused("submission queue"));
        }
        Ok(Self {
            address: ring,
            sq_entries,
            sqes: h.sq_sqes as usize,
            cq_tail: h.cq_ktail as usize,
        })
    }

    /// The address of liburing's structure.
    pub fn address(&self) -> usize {
        self.address
    }

    /// The address of the kernel's completion queue tail: it names this ring's completions
    /// (a structure set up again at the same address has another).
    pub fn completion_queue(&self) -> usize {
        self.cq_tail
    }

    /// The entries liburing has handed out since its last submission (the ones the next
    /// submission publishes), in order. `Err` also if the structure no longer points to the
    /// entries it pointed to when checked (set up again): check it again.
    pub fn unsubmitted(&self) -> io::Result<Vec<Sqe>> {
        let h = head(self.address)?;
        let n = h.sqe_tail.wrapping_sub(h.sqe_head);
        if n > self.sq_entries
            || h.sq_sqes as usize != self.sqes
            || h.cq_ktail as usize != self.cq_tail
        {
            return Err(refused("submission queue"));
        }
        let mut out = vec![Sqe::default(); n as usize];
        let mask = self.sq_entries - 1;
        let mut done = 0u32;
        while done < n {
            let at = h.sqe_head.wrapping_add(done) & mask;
            let run = (n - done).min(self.sq_entries - at);
            let slot = &mut out[done as usize..(done + run) as usize];
            read_own(self.sqes + at as usize * size_of::<Sqe>(), slot)?;
            done += run;
        }
        Ok(out)
    }

    /// A reader of the completions posted from now on.
    pub fn completions(&self) -> io::Result<UringCompletions> {
        let h = head(self.address)?;
        let entries = queue_size(h.cq_kring_mask, h.cq_kring_entries)?;
        let mut tail = [0u32; 1];
        read_own(h.cq_ktail as usize, &mut tail)?;
        Ok(UringCompletions {
            ktail: h.cq_ktail as usize,
            cqes: h.cq_cqes as usize,
            entries,
            seen: tail[0],
        })
    }
}

/// liburing's structure at `ring`.
fn head(ring: usize) -> io::Result<LiburingHead> {
    let mut h = [LiburingHead::default()];
    read_own(ring, &mut h)?;
    Ok(h[0])
}

/// A ring's completion queue: the kernel posts each completion at `cqes[tail & mask]`, then
/// advances `tail` (a free-running counter); the program consumes by advancing `head`.
#[derive(Debug)]
pub struct UringCompletions {
    ktail: usize,
    cqes: usize,
    entries: u32,
    /// Completions counted so far (the tail at the last look).
    seen: u32,
}

impl CompletionRing for UringCompletions {
    fn completions(&mut self, out: &mut Vec<Completion>) -> io::Result<()> {
        let mut tail = [0u32; 1];
        read_own(self.ktail, &mut tail)?;
        if tail[0].wrapping_sub(self.seen) > self.entries {
            // Overwritten before they were read: those requests stay held (their pins cost
            // memory over the budget, never data) until the ring goes.
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "memvisor-preload: io_uring completions were overwritten before the library \
                     read them; their requests stay pinned until the ring is torn down"
                );
            }
            self.seen = tail[0].wrapping_sub(self.entries);
        }
        let mask = self.entries - 1;
        let mut cqes = Vec::new();
        while self.seen != tail[0] {
            let at = self.seen & mask;
            let run = tail[0].wrapping_sub(self.seen).min(self.entries - at);
            cqes.clear();
            cqes.resize(run as usize, Cqe::default());
            read_own(self.cqes + at as usize * size_of::<Cqe>(), &mut cqes)?;
            out.extend(cqes.iter().map(|c| Completion {
                key: c.user_data,
                res: i64::from(c.res),
            }));
            self.seen = self.seen.wrapping_add(run);
        }
        Ok(())
    }
}
