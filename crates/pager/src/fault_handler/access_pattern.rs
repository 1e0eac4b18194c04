//! [`AccessPattern`]: decides, per missing fault, how much a page-in reads, from the recent
//! missing faults of the faulting thread (or of the region, where the kernel gives no thread
//! id). Faults that follow each other through addresses (each within one chunk of the last,
//! forwards or backwards) form a stream. A forward stream reads a window from the faulting page
//! on that grows as the kernel's readahead window does: [`FIRST_WINDOW`] pages at the second
//! fault in line, twice as many at each further one, until it spans a chunk; from then on each
//! page-in reads the whole chunk and the next chunk ahead. A backward stream reads whole chunks
//! once it has as many faults in line as a forward window needs to span a chunk, single pages
//! before. Any other fault is scattered: the page-in reads the faulting page alone. One fault
//! out of line ends a stream that has had fewer than three faults in line, as a miss collapses
//! the kernel's window; two in line start one again. A longer stream is kept (up to
//! [`AccessPattern::STREAMS_PER_THREAD`] per thread) and continues when its thread comes back
//! to it: a guest's vCPU that streams through its page cache also faults on its kernel's own
//! memory in between, and each of those faults used to end the stream (memvisor without the
//! swap mapper re-read a guest's 512 MiB page cache in 57 KiB windows instead of whole chunks:
//! `docs/benchmarks.md`, "Streams kept across faults elsewhere").
//!
//! The window matters for objects of a few pages read at random places (redis's 16 KiB values):
//! their second page's fault is in line with the first, and reading the whole chunk plus the
//! next there made every `GET` read 2 MiB.

use crate::page_in_unit::PageInUnit;

/// Pages read at the second fault in line of a forward stream (16 KiB with 4 KiB pages).
pub(crate) const FIRST_WINDOW: usize = 4;

/// How much of the faulting chunk a page-in brings in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PageInSpan {
    /// The faulting page only.
    Page,
    /// The missing pages among `pages` pages from the faulting page on (within its chunk).
    Window { pages: usize },
    /// Every page of the chunk that is not resident; `read_ahead`: also start reading the next
    /// chunk.
    Chunk { read_ahead: bool },
}

/// The last missing fault of one thread.
#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    thread: u32,
    /// Region page index of the last fault.
    last_page: usize,
    /// Faults in line in a row, up to [`AccessPattern::MAX_RUN`].
    run: u8,
    /// When this stream last faulted (in faults seen), to replace the oldest.
    seen: u64,
    used: bool,
}

/// Recent missing faults of a region, per thread.
#[derive(Debug)]
pub(crate) struct AccessPattern {
    unit: PageInUnit,
    streams: [Stream; Self::STREAMS],
    pages_per_chunk: usize,
    faults: u64,
}

impl AccessPattern {
    /// Threads followed at once (a guest's vCPUs, a server's workers); the least recently
    /// faulting one is forgotten for a new one.
    const STREAMS: usize = 8;
    const MAX_RUN: u8 = 16;
    /// Faults in line from which a stream is kept when its thread faults elsewhere.
    const ESTABLISHED: u8 = 2;
    /// Streams one thread may hold at once (a copy's source and destination, a page cache and
    /// the kernel's own memory).
    const STREAMS_PER_THREAD: usize = 4;

    /// For a region of chunks of `pages_per_chunk` pages; a fixed `unit` overrides the
    /// decision (a chunk span still reads ahead on a forward stream).
    pub fn new(pages_per_chunk: usize, unit: PageInUnit) -> Self {
        Self {
            unit,
            streams: [Stream::default(); Self::STREAMS],
            pages_per_chunk: pages_per_chunk.max(1),
            faults: 0,
        }
    }

    /// Records a missing fault of thread `thread` (0 if unknown) on region page `page`, and
    /// says what its page-in should read.
    pub fn on_missing_fault(&mut self, thread: u32, page: usize) -> PageInSpan {
        let span = self.follow(thread, page);
        match (self.unit, span) {
            (PageInUnit::Adaptive, span) => span,
            (PageInUnit::Page, _) => PageInSpan::Page,
            (PageInUnit::Chunk, PageInSpan::Page) => PageInSpan::Chunk { read_ahead: false },
            // A window is a forward stream's: whole chunks read ahead at once.
            (PageInUnit::Chunk, PageInSpan::Window { .. }) => {
                PageInSpan::Chunk { read_ahead: true }
            }
            (PageInUnit::Chunk, span) => span,
        }
    }

    /// The handler brought in memory ahead of thread `thread`'s forward stream, whose last
    /// fault was on region page `from`, up to region page `to`: the stream's next fault past
    /// there is in line (it never faults on what was mapped). Nothing if that stream is gone.
    pub fn on_mapped_ahead(&mut self, thread: u32, from: usize, to: usize) {
        if let Some(s) = self
            .streams
            .iter_mut()
            .find(|s| s.used && s.thread == thread && s.last_page == from && to > from)
        {
            s.last_page = to;
        }
    }

    fn follow(&mut self, thread: u32, page: usize) -> PageInSpan {
        self.faults += 1;
        let now = self.faults;
        let ppc = self.pages_per_chunk;
        let in_line = |s: &Stream| s.last_page.abs_diff(page) <= ppc && s.last_page != page;
        // The thread's latest stream, and the latest of its streams this fault continues.
        let of_thread = |s: &Stream| s.used && s.thread == thread;
        let latest = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| of_thread(s))
            .max_by_key(|(_, s)| s.seen)
            .map(|(i, _)| i);
        let continued = self
            .streams
            .iter()
            .enumerate()
            .filter(|(_, s)| of_thread(s) && in_line(s))
            .max_by_key(|(_, s)| s.seen)
            .map(|(i, _)| i);
        let slot = match (continued, latest) {
            (Some(i), _) => i,
            // Out of line with a stream not established yet: it ends here and starts over.
            (None, Some(i)) if self.streams[i].run < Self::ESTABLISHED => i,
            // A new thread, or one whose established streams are kept for when it comes back
            // to them (a guest's vCPU streaming through its page cache faults on its kernel's
            // own memory in between): a slot of its own, the least recently used.
            _ => {
                // Its own least recent slot once it holds its share, else the region's.
                let own = self.streams.iter().filter(|s| of_thread(s)).count();
                let i = self
                    .streams
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| own < Self::STREAMS_PER_THREAD || of_thread(s))
                    .min_by_key(|(_, s)| (s.used, s.seen))
                    .map_or(0, |(i, _)| i);
                self.streams[i] = Stream {
                    thread,
                    last_page: page,
                    run: 0,
                    seen: now,
                    used: true,
                };
                return PageInSpan::Page;
            }
        };
        let s = &mut self.streams[slot];
        let forward = page > s.last_page && page - s.last_page <= self.pages_per_chunk;
        let backward = page < s.last_page && s.last_page - page <= self.pages_per_chunk;
        s.run = if forward || backward {
            s.run.saturating_add(1).min(Self::MAX_RUN)
        } else {
            0
        };
        s.last_page = page;
        s.seen = now;
        let window = FIRST_WINDOW
            .checked_shl(u32::from(s.run.saturating_sub(1)))
            .unwrap_or(usize::MAX);
        if s.run == 0 {
            PageInSpan::Page
        } else if forward && window < self.pages_per_chunk {
            PageInSpan::Window { pages: window }
        } else if forward {
            PageInSpan::Chunk { read_ahead: true }
        } else if window >= self.pages_per_chunk {
            PageInSpan::Chunk { read_ahead: false }
        } else {
            // Backward, but not yet as many faults in line as a forward window needs to span a
            // chunk: one fault a little behind the last is common in scattered access (with 1 MiB
            // chunks, redis at 1,500 GETs/s read a whole chunk that way about 6 times a second,
            // each read holding the fault loop 2 to 3 ms, a cause of its p99 latency).
            PageInSpan::Page
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PPC: usize = 256;

    #[test]
    fn a_sequential_scan_grows_its_window_to_whole_chunks() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        assert_eq!(a.on_missing_fault(7, 0), PageInSpan::Page);
        // Each fault lands just past what the previous one read.
        let mut next = 1;
        for window in [4, 8, 16, 32, 64, 128] {
            assert_eq!(
                a.on_missing_fault(7, next),
                PageInSpan::Window { pages: window },
                "at page {next}"
            );
            next += window;
        }
        assert_eq!(
            a.on_missing_fault(7, next),
            PageInSpan::Chunk { read_ahead: true }
        );
        for c in 1..10 {
            assert_eq!(
                a.on_missing_fault(7, c * PPC),
                PageInSpan::Chunk { read_ahead: true },
                "chunk {c}"
            );
        }
    }

    #[test]
    fn an_object_of_a_few_pages_reads_a_small_window() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        // A 16 KiB value at a random place, then another far away.
        assert_eq!(a.on_missing_fault(3, 5000), PageInSpan::Page);
        assert_eq!(
            a.on_missing_fault(3, 5001),
            PageInSpan::Window {
                pages: FIRST_WINDOW
            }
        );
        assert_eq!(a.on_missing_fault(3, 90_000), PageInSpan::Page);
        // With small chunks the window reaches the chunk sooner.
        let mut s = AccessPattern::new(16, PageInUnit::Adaptive);
        s.on_missing_fault(0, 0);
        assert_eq!(s.on_missing_fault(0, 1), PageInSpan::Window { pages: 4 });
        assert_eq!(s.on_missing_fault(0, 5), PageInSpan::Window { pages: 8 });
        assert_eq!(
            s.on_missing_fault(0, 13),
            PageInSpan::Chunk { read_ahead: true }
        );
    }

    #[test]
    fn a_backward_scan_reads_chunks_without_read_ahead_once_it_is_long_enough() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        a.on_missing_fault(0, 100 * PPC);
        // FIRST_WINDOW << 6 spans a chunk of 256 pages: the 7th fault in line.
        for i in 1..7 {
            assert_eq!(
                a.on_missing_fault(0, (100 - i) * PPC),
                PageInSpan::Page,
                "backward fault {i}"
            );
        }
        for i in 7..10 {
            assert_eq!(
                a.on_missing_fault(0, (100 - i) * PPC),
                PageInSpan::Chunk { read_ahead: false },
                "backward fault {i}"
            );
        }
        // One fault a little behind the last, as scattered access has: one page.
        let mut b = AccessPattern::new(PPC, PageInUnit::Adaptive);
        b.on_missing_fault(0, 5000);
        assert_eq!(b.on_missing_fault(0, 4990), PageInSpan::Page);
    }

    #[test]
    fn scattered_faults_read_single_pages_and_a_jump_collapses_the_stream() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        let mut x: u64 = 12345;
        let mut single = 0;
        for _ in 0..1000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let page = ((x >> 20) % (1 << 18)) as usize;
            if a.on_missing_fault(1, page) == PageInSpan::Page {
                single += 1;
            }
        }
        // Random pages over 1 GiB are within a chunk of each other about 0.2% of the time.
        assert!(
            single >= 990,
            "{single} of 1000 random faults read one page"
        );
        a.on_missing_fault(1, 5000);
        assert_ne!(a.on_missing_fault(1, 5001), PageInSpan::Page);
        assert_eq!(a.on_missing_fault(1, 90_000), PageInSpan::Page, "a jump");
        assert_eq!(a.on_missing_fault(1, 3), PageInSpan::Page);
    }

    #[test]
    fn threads_are_followed_separately() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        // Two threads scanning far apart, interleaved: each stream stays in line.
        a.on_missing_fault(1, 0);
        a.on_missing_fault(2, 1 << 17);
        for i in 1..20 {
            assert_ne!(a.on_missing_fault(1, i * PPC), PageInSpan::Page);
            assert_ne!(a.on_missing_fault(2, (1 << 17) + i * PPC), PageInSpan::Page);
        }
        // Without thread ids the same interleaving looks scattered.
        let mut b = AccessPattern::new(PPC, PageInUnit::Adaptive);
        b.on_missing_fault(0, 0);
        b.on_missing_fault(0, 1 << 17);
        assert_eq!(b.on_missing_fault(0, PPC), PageInSpan::Page);
    }

    #[test]
    fn an_established_stream_survives_its_threads_faults_elsewhere() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        // A guest's vCPU streams through its page cache, chunk by chunk...
        a.on_missing_fault(1, 0);
        for c in 1..8 {
            a.on_missing_fault(1, c * PPC);
        }
        // ...and faults on its kernel's own memory in between, twice in a row.
        assert_eq!(a.on_missing_fault(1, 200_000), PageInSpan::Page);
        assert_eq!(a.on_missing_fault(1, 150_000), PageInSpan::Page);
        // Back in the stream: still whole chunks read ahead.
        for c in 8..12 {
            assert_eq!(
                a.on_missing_fault(1, c * PPC),
                PageInSpan::Chunk { read_ahead: true },
                "chunk {c}"
            );
        }
        // The faults elsewhere stream too, beside it, once in line.
        assert_eq!(
            a.on_missing_fault(1, 150_001),
            PageInSpan::Window {
                pages: FIRST_WINDOW
            }
        );
        assert_eq!(
            a.on_missing_fault(1, 12 * PPC),
            PageInSpan::Chunk { read_ahead: true }
        );
        // A stream of one fault in line is not kept: a jump still collapses it.
        let mut b = AccessPattern::new(PPC, PageInUnit::Adaptive);
        b.on_missing_fault(1, 5000);
        b.on_missing_fault(1, 5001);
        assert_eq!(b.on_missing_fault(1, 90_000), PageInSpan::Page);
        assert_eq!(b.on_missing_fault(1, 5005), PageInSpan::Page);
    }

    #[test]
    fn one_thread_holds_at_most_its_share_of_streams() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        let stream = |a: &mut AccessPattern, t: u32, base: usize| {
            for c in 0..8 {
                a.on_missing_fault(t, base + c * PPC);
            }
        };
        stream(&mut a, 2, 0);
        // Thread 1 establishes more streams than its share, far apart.
        for k in 1..=AccessPattern::STREAMS_PER_THREAD + 2 {
            stream(&mut a, 1, k * 100 * PPC);
        }
        // Thread 2's stream was not displaced by them.
        assert_eq!(
            a.on_missing_fault(2, 8 * PPC),
            PageInSpan::Chunk { read_ahead: true }
        );
        // Thread 1's latest streams are followed, its first ones forgotten.
        let last = AccessPattern::STREAMS_PER_THREAD + 2;
        assert_eq!(
            a.on_missing_fault(1, last * 100 * PPC + 8 * PPC),
            PageInSpan::Chunk { read_ahead: true }
        );
        assert_eq!(a.on_missing_fault(1, 100 * PPC + 8 * PPC), PageInSpan::Page);
    }

    #[test]
    fn chunks_mapped_ahead_keep_the_stream_in_line() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        a.on_missing_fault(2, 0);
        for c in 1..8 {
            a.on_missing_fault(2, c * PPC);
        }
        // Chunks 8 and 9 were mapped ahead of the fault on chunk 7: the next fault is on 10.
        a.on_mapped_ahead(2, 7 * PPC, 10 * PPC - 1);
        assert_eq!(
            a.on_missing_fault(2, 10 * PPC + 3),
            PageInSpan::Chunk { read_ahead: true }
        );
        // Not that stream's last fault (it moved on), or another thread: nothing changes.
        a.on_mapped_ahead(2, 7 * PPC, 20 * PPC - 1);
        a.on_mapped_ahead(3, 10 * PPC + 3, 20 * PPC - 1);
        assert_eq!(a.on_missing_fault(2, 20 * PPC), PageInSpan::Page);
    }

    #[test]
    fn a_fixed_unit_overrides_the_decision() {
        let mut c = AccessPattern::new(PPC, PageInUnit::Chunk);
        assert_eq!(
            c.on_missing_fault(1, 0),
            PageInSpan::Chunk { read_ahead: false }
        );
        for i in 1..8 {
            assert_eq!(
                c.on_missing_fault(1, i * PPC),
                PageInSpan::Chunk { read_ahead: true },
                "fault {i}"
            );
        }
        let mut p = AccessPattern::new(PPC, PageInUnit::Page);
        p.on_missing_fault(1, 0);
        assert_eq!(p.on_missing_fault(1, 1), PageInSpan::Page);
    }

    #[test]
    fn the_oldest_thread_is_forgotten_for_a_new_one() {
        let mut a = AccessPattern::new(PPC, PageInUnit::Adaptive);
        for t in 0..AccessPattern::STREAMS as u32 + 1 {
            a.on_missing_fault(t + 1, t as usize * 4 * PPC);
        }
        // Thread 1 was the oldest: it starts over.
        assert_eq!(a.on_missing_fault(1, 1), PageInSpan::Page);
        // Thread 9 is followed.
        let nine = AccessPattern::STREAMS * 4 * PPC;
        assert_ne!(a.on_missing_fault(9, nine + 1), PageInSpan::Page);
    }
}
