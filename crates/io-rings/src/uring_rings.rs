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
//! `koverflow`, `cqes`), and at byte 192 the ring's setup flags. Everything is read through
//! [`ProgramMemory`], never dereferenced, and checked against
//! the kernel's own values (the masks and sizes in the shared ring): a structure that does not
//! look like this is refused, and the ring's requests pass through unseen.

use crate::completion_ring::{Completion, CompletionRing};
use crate::io_rings_error::{reading, value_at, IoRingsError, IoRingsResult};
use crate::own_memory::OwnMemory;
use crate::plain_data::PlainData;
use crate::program_memory::{address_after, ProgramMemory};
use crate::uring_request::Sqe;

/// `IORING_SETUP_SQE128` and `IORING_SETUP_CQE32`: entries of other sizes than the library
/// reads.
const WIDE_ENTRIES: u32 = (1 << 10) | (1 << 11);
/// Largest ring the kernel makes (`IORING_MAX_CQ_ENTRIES`).
const MOST_ENTRIES: u32 = 1 << 16;

/// The start of liburing's `struct io_uring`, as described above (pointers as integers).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LiburingHead {
    /// Submission queue: the kernel's head.
    pub sq_khead: u64,
    /// The kernel's tail.
    pub sq_ktail: u64,
    /// The kernel's index mask.
    pub sq_kring_mask: u64,
    /// The kernel's entry count.
    pub sq_kring_entries: u64,
    /// The kernel's flags.
    pub sq_kflags: u64,
    /// The kernel's dropped count.
    pub sq_kdropped: u64,
    /// The index array.
    pub sq_array: u64,
    /// The entries.
    pub sq_sqes: u64,
    /// The first entry handed out and not yet published.
    pub sqe_head: u32,
    /// The next entry liburing hands out.
    pub sqe_tail: u32,
    /// Not read.
    pub sq_rest: [u64; 4],
    /// Completion queue: the kernel's head.
    pub cq_khead: u64,
    /// The kernel's tail.
    pub cq_ktail: u64,
    /// The kernel's index mask.
    pub cq_kring_mask: u64,
    /// The kernel's entry count.
    pub cq_kring_entries: u64,
    /// The kernel's flags.
    pub cq_kflags: u64,
    /// The kernel's overflow count.
    pub cq_koverflow: u64,
    /// The completions.
    pub cq_cqes: u64,
    /// Not read.
    pub cq_rest: [u64; 4],
    /// `IORING_SETUP_*`.
    pub flags: u32,
    /// liburing's next field (the ring's descriptor), not read.
    pub ring_fd: u32,
}

/// `struct io_uring_cqe` (16 bytes).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Cqe {
    /// The entry's `user_data`.
    pub user_data: u64,
    /// Its result: bytes, or a negative errno.
    pub res: i32,
    /// `IORING_CQE_F_*`.
    pub flags: u32,
}

// SAFETY: `repr(C)` integers, 200 bytes without padding.
unsafe impl PlainData for LiburingHead {}
// SAFETY: `repr(C)` integers, 16 bytes without padding.
unsafe impl PlainData for Cqe {}

/// One of the ring's queues' size, read from the kernel's shared ring and checked.
fn queue_size(
    memory: &impl ProgramMemory,
    ring: usize,
    kring_mask: u64,
    kring_entries: u64,
) -> IoRingsResult<u32> {
    let mask: u32 = value_at(memory, "io_uring queue mask", kring_mask as usize)?;
    let entries: u32 = value_at(memory, "io_uring queue size", kring_entries as usize)?;
    if entries.is_power_of_two() && entries <= MOST_ENTRIES && mask == entries - 1 {
        Ok(entries)
    } else {
        Err(refused(ring, "queue sizes"))
    }
}

/// The error for liburing's structure at `ring` failing the check `why`.
fn refused(ring: usize, why: &'static str) -> IoRingsError {
    IoRingsError::NotRecognized {
        what: "liburing ring",
        address: ring,
        why,
    }
}

/// liburing's structure at `ring`.
fn head(memory: &impl ProgramMemory, ring: usize) -> IoRingsResult<LiburingHead> {
    value_at(memory, "liburing's struct io_uring", ring)
}

/// A liburing ring in `M`, checked once.
#[derive(Debug, Clone, Copy)]
pub struct UringRings<M = OwnMemory> {
    memory: M,
    address: usize,
    sq_entries: u32,
    sqes: usize,
    cq_tail: usize,
    cq_entries: u32,
    cqes: usize,
}

impl<M: ProgramMemory + Copy> UringRings<M> {
    /// The ring liburing keeps at `ring` in `memory` (the program's `struct io_uring *`).
    pub fn at(memory: M, ring: usize) -> IoRingsResult<Self> {
        let h = head(&memory, ring)?;
        if h.flags & WIDE_ENTRIES != 0 {
            return Err(refused(
                ring,
                "128-byte submission or 32-byte completion entries",
            ));
        }
        let sq_entries = queue_size(&memory, ring, h.sq_kring_mask, h.sq_kring_entries)?;
        let cq_entries = queue_size(&memory, ring, h.cq_kring_mask, h.cq_kring_entries)?;
        if h.sqe_tail.wrapping_sub(h.sqe_head) > sq_entries || h.sq_sqes == 0 {
            return Err(refused(ring, "submission queue"));
        }
        Ok(Self {
            memory,
            address: ring,
            sq_entries,
            sqes: h.sq_sqes as usize,
            cq_tail: h.cq_ktail as usize,
            cq_entries,
            cqes: h.cq_cqes as usize,
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
    pub fn unsubmitted(&self) -> IoRingsResult<Vec<Sqe>> {
        let h = head(&self.memory, self.address)?;
        let n = h.sqe_tail.wrapping_sub(h.sqe_head);
        if h.sq_sqes as usize != self.sqes
            || h.cq_ktail as usize != self.cq_tail
            || h.cq_cqes as usize != self.cqes
        {
            return Err(refused(self.address, "set up again since it was checked"));
        }
        if n > self.sq_entries {
            return Err(refused(
                self.address,
                "more entries handed out than its submission queue holds",
            ));
        }
        let mut out = vec![Sqe::default(); n as usize];
        let mask = self.sq_entries - 1;
        let mut done = 0u32;
        while done < n {
            let at = h.sqe_head.wrapping_add(done) & mask;
            let run = (n - done).min(self.sq_entries - at);
            let slot = &mut out[done as usize..(done + run) as usize];
            let from = address_after(self.sqes, u64::from(at), size_of::<Sqe>());
            reading("io_uring submission entries", from, |from| {
                self.memory.read(from, slot)
            })?;
            done += run;
        }
        Ok(out)
    }

    /// A reader of the completions posted from now on (the completion queue as checked).
    pub fn completions(&self) -> IoRingsResult<UringCompletions<M>> {
        let tail: u32 = value_at(&self.memory, "io_uring completion tail", self.cq_tail)?;
        Ok(UringCompletions {
            memory: self.memory,
            ktail: self.cq_tail,
            cqes: self.cqes,
            entries: self.cq_entries,
            seen: tail,
            overwritten: 0,
        })
    }
}

/// A ring's completion queue: the kernel posts each completion at `cqes[tail & mask]`, then
/// advances `tail` (a free-running counter); the program consumes by advancing `head`.
#[derive(Debug)]
pub struct UringCompletions<M = OwnMemory> {
    memory: M,
    ktail: usize,
    cqes: usize,
    entries: u32,
    /// Completions counted so far (the tail at the last look).
    seen: u32,
    /// Completions overwritten before they were read.
    overwritten: u64,
}

impl<M: ProgramMemory + Send> CompletionRing for UringCompletions<M> {
    /// A completion's key is its entry's `user_data`. Completions overwritten before this look
    /// are skipped and counted ([`lost`](CompletionRing::lost)).
    fn completions(&mut self, out: &mut Vec<Completion>) -> IoRingsResult<()> {
        let tail: u32 = value_at(&self.memory, "io_uring completion tail", self.ktail)?;
        let posted = tail.wrapping_sub(self.seen);
        if posted > self.entries {
            self.overwritten += u64::from(posted - self.entries);
            self.seen = tail.wrapping_sub(self.entries);
        }
        let mask = self.entries - 1;
        let mut cqes = Vec::new();
        while self.seen != tail {
            let at = self.seen & mask;
            let run = tail.wrapping_sub(self.seen).min(self.entries - at);
            cqes.clear();
            cqes.resize(run as usize, Cqe::default());
            let from = address_after(self.cqes, u64::from(at), size_of::<Cqe>());
            reading("io_uring completions", from, |from| {
                self.memory.read(from, &mut cqes)
            })?;
            out.extend(cqes.iter().map(|c| Completion {
                key: c.user_data,
                res: i64::from(c.res),
            }));
            self.seen = self.seen.wrapping_add(run);
        }
        Ok(())
    }

    fn lost(&self) -> u64 {
        self.overwritten
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::byte_memory::ByteMemory;

    const BASE: usize = 0x5000_0000;
    const SQ_MASK: usize = BASE + 0x100;
    const SQ_ENTRIES: usize = BASE + 0x104;
    const CQ_MASK: usize = BASE + 0x108;
    const CQ_ENTRIES: usize = BASE + 0x10c;
    const CQ_TAIL: usize = BASE + 0x110;
    const SQES: usize = BASE + 0x200;
    const CQES: usize = BASE + 0x1000;

    /// liburing's structure and the kernel's queues, made up: 4 submission entries, 8
    /// completions, the completion tail at `cq_tail`.
    fn made_up_ring(cq_tail: u32) -> ByteMemory {
        let m = ByteMemory::new(BASE, 0x2000);
        let h = LiburingHead {
            sq_kring_mask: SQ_MASK as u64,
            sq_kring_entries: SQ_ENTRIES as u64,
            sq_sqes: SQES as u64,
            cq_kring_mask: CQ_MASK as u64,
            cq_kring_entries: CQ_ENTRIES as u64,
            cq_ktail: CQ_TAIL as u64,
            cq_cqes: CQES as u64,
            ..LiburingHead::default()
        };
        m.write(BASE, &[h]).unwrap();
        m.write(SQ_MASK, &[3u32, 4, 7, 8, cq_tail]).unwrap();
        m
    }

    /// Plays liburing: hands out entries with `user_data` `keys` (the slots after the last
    /// handed out).
    fn hand_out(m: &ByteMemory, keys: &[u64]) {
        let mut h: LiburingHead = m.value(BASE).unwrap();
        for &k in keys {
            let at = SQES + (h.sqe_tail & 3) as usize * size_of::<Sqe>();
            m.write(
                at,
                &[Sqe {
                    opcode: 22,
                    user_data: k,
                    ..Sqe::default()
                }],
            )
            .unwrap();
            h.sqe_tail = h.sqe_tail.wrapping_add(1);
        }
        m.write(BASE, &[h]).unwrap();
    }

    /// Plays liburing's submission: the entries handed out are published.
    fn submit(m: &ByteMemory) {
        let mut h: LiburingHead = m.value(BASE).unwrap();
        h.sqe_head = h.sqe_tail;
        m.write(BASE, &[h]).unwrap();
    }

    /// Plays the kernel: posts completions for `keys`.
    fn post(m: &ByteMemory, keys: &[u64]) {
        let mut tail: u32 = m.value(CQ_TAIL).unwrap();
        for &k in keys {
            let at = CQES + (tail & 7) as usize * size_of::<Cqe>();
            m.write(
                at,
                &[Cqe {
                    user_data: k,
                    res: 4096,
                    flags: 0,
                }],
            )
            .unwrap();
            tail = tail.wrapping_add(1);
        }
        m.write(CQ_TAIL, &[tail]).unwrap();
    }

    fn keys(c: &mut UringCompletions<&ByteMemory>) -> Vec<u64> {
        let mut out = Vec::new();
        c.completions(&mut out).unwrap();
        out.iter().map(|c| c.key).collect()
    }

    #[test]
    fn unsubmitted_entries_and_completions_are_read_across_the_queues_ends() {
        // Counters near their wrap: liburing's and the kernel's are free-running u32s.
        let m = made_up_ring(u32::MAX - 2);
        let mut h: LiburingHead = m.value(BASE).unwrap();
        h.sqe_head = u32::MAX - 1;
        h.sqe_tail = u32::MAX - 1;
        m.write(BASE, &[h]).unwrap();
        let ring = UringRings::at(&m, BASE).unwrap();
        let mut completions = ring.completions().unwrap();
        assert!(ring.unsubmitted().unwrap().is_empty());
        hand_out(&m, &[1, 2, 3]);
        let entries: Vec<u64> = ring
            .unsubmitted()
            .unwrap()
            .iter()
            .map(|e| e.user_data)
            .collect();
        assert_eq!(entries, [1, 2, 3]);
        submit(&m);
        assert!(ring.unsubmitted().unwrap().is_empty());
        post(&m, &[2, 1]);
        assert_eq!(keys(&mut completions), [2, 1]);
        post(&m, &[3, 4, 5, 6, 7]);
        assert_eq!(keys(&mut completions), [3, 4, 5, 6, 7]);
        assert_eq!(keys(&mut completions), Vec::<u64>::new());
        assert_eq!(completions.lost(), 0);
        // More than the queue holds between two looks: the oldest are gone.
        post(&m, &(10..20).collect::<Vec<_>>());
        assert_eq!(keys(&mut completions), (12..20).collect::<Vec<_>>());
        assert_eq!(completions.lost(), 2);
    }

    #[test]
    fn structures_that_do_not_look_like_liburings_are_refused() {
        let m = made_up_ring(0);
        // Queue sizes that are not a power of two, or do not match the mask.
        m.write(SQ_MASK, &[3u32, 5]).unwrap();
        let e = UringRings::at(&m, BASE).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("no liburing ring this library reads at {BASE:#x} (queue sizes)")
        );
        m.write(SQ_MASK, &[1u32, 4]).unwrap();
        assert!(UringRings::at(&m, BASE).is_err());
        m.write(SQ_MASK, &[3u32, 4]).unwrap();
        assert!(UringRings::at(&m, BASE).is_ok());
        // Wide entries; more handed out than the queue holds; a queue nowhere.
        let good: LiburingHead = m.value(BASE).unwrap();
        for bad in [
            LiburingHead {
                flags: 1 << 10,
                ..good
            },
            LiburingHead {
                sqe_tail: 5,
                ..good
            },
            LiburingHead {
                cq_kring_entries: usize::MAX as u64,
                ..good
            },
        ] {
            m.write(BASE, &[bad]).unwrap();
            assert!(UringRings::at(&m, BASE).is_err(), "{bad:?}");
        }
        // Set up again elsewhere after the check: the entries are not read from the old queue.
        m.write(BASE, &[good]).unwrap();
        let ring = UringRings::at(&m, BASE).unwrap();
        m.write(
            BASE,
            &[LiburingHead {
                sq_sqes: good.sq_sqes + 0x100,
                ..good
            }],
        )
        .unwrap();
        let e = ring.unsubmitted().unwrap_err();
        assert!(e.to_string().contains("set up again"), "{e}");
        m.write(
            BASE,
            &[LiburingHead {
                sqe_tail: good.sqe_head + 5,
                ..good
            }],
        )
        .unwrap();
        let e = ring.unsubmitted().unwrap_err();
        assert!(e.to_string().contains("more entries handed out"), "{e}");
        let e = UringRings::at(&m, usize::MAX - 8).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        assert!(e.to_string().contains("struct io_uring"), "{e}");
    }
}
