//! Drivers shared by the cargo-fuzz targets `io_request`, `aio_ring` and `uring_ring`
//! (`fuzz/fuzz_targets/`, which include this file) and their stable stand-in
//! (`tests/fuzz_smoke.rs`): input bytes become a control block and an entry, or a script in
//! which the test plays the kernel and liburing on made-up memory ([`ByteMemory`]) while the
//! readers look. Nothing may panic; as long as the script has not corrupted the structures, a
//! shadow model says exactly what each look must report.

// Each fuzz target uses one of the drivers.
#![allow(dead_code)]

use std::collections::VecDeque;

use memvisor_io_rings::{
    bytes_of_mut, AioRequest, AioRing, AioRingHeader, ByteMemory, CompletionRing, Cqe, IoEvent,
    Iocb, LiburingHead, ProgramMemory, Sqe, UringRings, AIO_RING_MAGIC,
};

/// Input bytes read in order; zeros once they run out.
pub struct Script<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Script<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, at: 0 }
    }

    pub fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    pub fn fill(&mut self, out: &mut [u8]) {
        for b in out {
            *b = self.u8();
        }
    }

    pub fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    pub fn u32(&mut self) -> u32 {
        let mut b = [0u8; 4];
        self.fill(&mut b);
        u32::from_le_bytes(b)
    }

    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        self.fill(&mut b);
        u64::from_le_bytes(b)
    }
}

/// Where made-up iovec arrays live.
const IOVECS: usize = 0x10_0000;

/// What any request must look like: a read has its buffers (one, or as many as the iovecs
/// asked for) and an offset or the file position, a write a range that does not end before it
/// starts.
fn check_request(r: &AioRequest, vectored: bool, count: u64) {
    match r {
        AioRequest::Read {
            buffers, offset, ..
        } => {
            assert!(*offset >= -1, "read at {offset}");
            assert_eq!(buffers.len() as u64, if vectored { count } else { 1 });
        }
        AioRequest::Write { from, to, .. } => assert!(from <= to, "write {from}..{to}"),
        AioRequest::Other => {}
    }
}

/// The first 64 bytes as a Linux AIO control block and as an io_uring entry, the rest as
/// memory at which their iovecs may be (an odd priority points a request there).
pub fn requests(data: &[u8]) {
    let (head, rest) = data.split_at(data.len().min(64));
    let memory = ByteMemory::new(IOVECS, rest.len());
    memory.write_bytes(IOVECS, rest).unwrap();
    let iovecs = |at: usize, n: usize| memory.iovecs(at, n);

    let mut block = [Iocb::default()];
    bytes_of_mut(&mut block)[..head.len()].copy_from_slice(head);
    let mut block = block[0];
    if block.aio_reqprio & 1 != 0 {
        block.aio_buf = IOVECS as u64 + u64::from(block.aio_key % 64);
    }
    let vectored = matches!(block.aio_lio_opcode, 7 | 8);
    let r = AioRequest::parse(&block, iovecs);
    check_request(&r, vectored, block.aio_nbytes);
    if let AioRequest::Read { offset, .. } = r {
        assert!(offset >= 0, "an AIO read at the file position");
    }

    let mut entry = [Sqe::default()];
    bytes_of_mut(&mut entry)[..head.len()].copy_from_slice(head);
    let mut entry = entry[0];
    if entry.ioprio & 1 != 0 {
        entry.addr = IOVECS as u64 + u64::from(entry.rw_flags % 64);
    }
    let vectored = matches!(entry.opcode, 1 | 2);
    let r = entry.request(iovecs);
    check_request(&r, vectored, u64::from(entry.len));
}

const RING: usize = 0x7000_0000;
const HEADER: usize = size_of::<AioRingHeader>();

/// A Linux AIO ring of 1 to 16 events at made-up memory, then a script: the kernel posts
/// events, the reader looks, bytes are overwritten.
pub fn aio_ring(data: &[u8]) {
    let mut s = Script::new(data);
    let nr = 1 + u32::from(s.u8() % 16);
    let mut tail = u32::from(s.u8()) % nr;
    let size = HEADER + nr as usize * size_of::<IoEvent>();
    let memory = ByteMemory::new(RING, size);
    let header = AioRingHeader {
        nr,
        head: tail,
        tail,
        magic: AIO_RING_MAGIC,
        header_length: HEADER as u32,
        ..AioRingHeader::default()
    };
    memory.write(RING, &[header]).unwrap();
    let mut exact = true;
    if s.u8() & 1 == 1 {
        let mut junk = [0u8; HEADER];
        s.fill(&mut junk);
        memory.write_bytes(RING, &junk).unwrap();
        exact = false;
    }
    let Ok(mut ring) = AioRing::at(&memory, RING) else {
        assert!(!exact, "a good ring refused");
        return;
    };
    let mut pending = VecDeque::new();
    let mut next = 1u64;
    while !s.done() {
        match s.u8() % 4 {
            0 | 1 => {
                for _ in 0..s.u8() % 8 {
                    let at = RING + HEADER + tail as usize * size_of::<IoEvent>();
                    let e = IoEvent {
                        obj: next,
                        res: 512,
                        ..IoEvent::default()
                    };
                    memory.write(at, &[e]).unwrap();
                    tail = (tail + 1) % nr;
                    memory.write(RING + 12, &[tail]).unwrap();
                    pending.push_back(next);
                    next += 1;
                }
            }
            2 => {
                let mut out = Vec::new();
                let r = ring.completions(&mut out);
                assert!(out.len() < nr as usize, "more events than the ring holds");
                if exact {
                    r.expect("a good ring fails to read");
                    // More than the ring holds between two looks cannot be told apart.
                    if pending.len() < nr as usize {
                        let keys: Vec<u64> = out.iter().map(|c| c.key).collect();
                        assert_eq!(keys, Vec::from(pending.clone()));
                    }
                    pending.clear();
                }
            }
            _ => {
                let at = RING + s.u8() as usize % size;
                let v = s.u64().to_le_bytes();
                let n = v.len().min(RING + size - at);
                memory.write_bytes(at, &v[..n]).unwrap();
                exact = false;
            }
        }
    }
}

const URING: usize = 0x5000_0000;
const SQ_MASK: usize = URING + 0x100;
const CQ_MASK: usize = URING + 0x108;
const CQ_TAIL: usize = URING + 0x110;
const SQES: usize = URING + 0x200;
const CQES: usize = URING + 0x400;
const URING_SIZE: usize = 0x600;

/// liburing's structure and the kernel's queues (1 to 8 entries, 1 to 16 completions) at
/// made-up memory, then a script: liburing hands out entries and submits, the kernel posts
/// completions, the reader reads the unsubmitted entries and looks for completions, bytes
/// are overwritten.
pub fn uring_ring(data: &[u8]) {
    let mut s = Script::new(data);
    let sq = 1u32 << (s.u8() % 4);
    let cq = 1u32 << (s.u8() % 5);
    let memory = ByteMemory::new(URING, URING_SIZE);
    let mut head = LiburingHead {
        sq_kring_mask: SQ_MASK as u64,
        sq_kring_entries: SQ_MASK as u64 + 4,
        sq_sqes: SQES as u64,
        cq_kring_mask: CQ_MASK as u64,
        cq_kring_entries: CQ_MASK as u64 + 4,
        cq_ktail: CQ_TAIL as u64,
        cq_cqes: CQES as u64,
        ..LiburingHead::default()
    };
    head.sqe_head = s.u32();
    head.sqe_tail = head.sqe_head;
    let mut cq_tail = s.u32();
    memory.write(URING, &[head]).unwrap();
    memory.write(SQ_MASK, &[sq - 1, sq]).unwrap();
    memory.write(CQ_MASK, &[cq - 1, cq, cq_tail]).unwrap();
    let mut exact = true;
    if s.u8() & 1 == 1 {
        let at = URING + s.u8() as usize;
        let v = s.u64().to_le_bytes();
        memory.write_bytes(at, &v).unwrap();
        exact = false;
    }
    let Ok(ring) = UringRings::at(&memory, URING) else {
        assert!(!exact, "a good ring refused");
        return;
    };
    let Ok(mut completions) = ring.completions() else {
        assert!(!exact, "a good completion queue refused");
        return;
    };
    let mut handed = Vec::new();
    let mut posted = VecDeque::new();
    let mut key = 1u64;
    while !s.done() {
        match s.u8() % 6 {
            0 => {
                let room = sq - head.sqe_tail.wrapping_sub(head.sqe_head);
                for _ in 0..(u32::from(s.u8()) % 4).min(room) {
                    let mut entry = [Sqe::default()];
                    s.fill(&mut bytes_of_mut(&mut entry)[..32]);
                    entry[0].user_data = key;
                    let at = SQES + (head.sqe_tail & (sq - 1)) as usize * size_of::<Sqe>();
                    memory.write(at, &entry).unwrap();
                    head.sqe_tail = head.sqe_tail.wrapping_add(1);
                    handed.push(key);
                    key += 1;
                }
                memory.write(URING + 68, &[head.sqe_tail]).unwrap();
            }
            1 => {
                let r = ring.unsubmitted();
                if let Ok(entries) = &r {
                    for e in entries {
                        let _ = e.request(|at, n| memory.iovecs(at, n));
                    }
                }
                if exact {
                    let keys: Vec<u64> = r
                        .expect("a good ring's entries")
                        .iter()
                        .map(|e| e.user_data)
                        .collect();
                    assert_eq!(keys, handed);
                }
            }
            2 => {
                head.sqe_head = head.sqe_tail;
                memory.write(URING + 64, &[head.sqe_head]).unwrap();
                handed.clear();
            }
            3 => {
                for _ in 0..s.u8() % 24 {
                    let at = CQES + (cq_tail & (cq - 1)) as usize * size_of::<Cqe>();
                    let c = Cqe {
                        user_data: key,
                        res: 4096,
                        flags: 0,
                    };
                    memory.write(at, &[c]).unwrap();
                    cq_tail = cq_tail.wrapping_add(1);
                    posted.push_back(key);
                    key += 1;
                }
                memory.write(CQ_TAIL, &[cq_tail]).unwrap();
            }
            4 => {
                let before = completions.lost();
                let mut out = Vec::new();
                let r = completions.completions(&mut out);
                if exact {
                    r.expect("a good completion queue fails to read");
                    let keys: Vec<u64> = out.iter().map(|c| c.key).collect();
                    let lost = posted.len().saturating_sub(cq as usize);
                    assert_eq!(keys, Vec::from(posted.split_off(lost)));
                    assert_eq!(completions.lost() - before, lost as u64);
                    posted.clear();
                }
            }
            _ => {
                let at = URING + s.u32() as usize % URING_SIZE;
                let v = s.u64().to_le_bytes();
                let n = v.len().min(URING + URING_SIZE - at);
                memory.write_bytes(at, &v[..n]).unwrap();
                exact = false;
            }
        }
    }
}
