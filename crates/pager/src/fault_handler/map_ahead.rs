//! Map-ahead: a thread streaming forward through the region finds the chunks ahead of it
//! already mapped, instead of faulting on each and waiting for its page-in.
//!
//! Readahead (`ChunkPrefetcher`) only reads the next chunk's swap copy into a buffer: the
//! faulting thread still waits, at the next chunk, for the fault's round trip, the checksums,
//! the mapping copy, and (for pages the swap mapper associated with an image block) the image
//! read. A TCG guest re-reading its page cache from the image spent about a quarter of that
//! pass waiting so, while the handler thread was idle half the time. After a streaming
//! chunk page-in, the handler now brings in the next chunks itself, one at a time and only
//! while no fault waits (a fault is always served first), up to the configured depth (2 chunks
//! by default) past the one the thread faulted on. A chunk mapped ahead is a page-in like any
//! other (room made first, every page verified), then marked referenced; the stream's next
//! fault, past the mapped chunks, stays in line
//! ([`AccessPattern::on_mapped_ahead`](super::access_pattern::AccessPattern)).

use super::access_pattern::PageInSpan;
use super::{ChunkState, FaultHandler};
use crate::region_stats::add;

/// Chunks still to map ahead of one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Ahead {
    /// The streaming thread.
    thread: u32,
    /// Next chunk to bring in.
    chunk: usize,
    /// Chunks left to bring in after it.
    left: usize,
    /// The stream's last page (its fault's, or the last one mapped ahead of it).
    stream_page: usize,
}

/// The map-ahead plan of a region: at most one stream's (the last to fault in line).
#[derive(Debug, Default)]
pub(crate) struct MapAhead {
    /// Chunks brought in past a streaming fault's (0: off).
    depth: usize,
    next: Option<Ahead>,
}

impl MapAhead {
    /// The chunks mapped ahead are at most this fraction (its inverse) of the budget.
    const BUDGET_SHARE: usize = 8;

    /// Up to `depth` chunks past each streaming fault's (0: off).
    pub fn new(depth: usize) -> Self {
        Self { depth, next: None }
    }

    /// Whether chunks wait to be mapped ahead.
    pub fn is_pending(&self) -> bool {
        self.next.is_some()
    }
}

impl FaultHandler {
    /// After thread `thread`'s missing fault on region page `page` brought its chunk in as
    /// `span`: a forward stream's chunk page-in plans the chunks after it.
    pub(super) fn plan_map_ahead(&mut self, thread: u32, page: usize, span: PageInSpan) {
        let depth = self.map_ahead.depth;
        let ppc = self.chunks.pages_per_chunk();
        self.map_ahead.next = (depth > 0
            && self.room_to_map_ahead()
            && span == PageInSpan::Chunk { read_ahead: true })
        .then(|| Ahead {
            thread,
            chunk: page / ppc + 1,
            left: depth - 1,
            stream_page: page,
        });
    }

    /// Whether the chunks mapped ahead fit in an eighth of the budget: they take room from the
    /// rest of it, and under a budget of a few chunks would evict the chunk the thread is in.
    fn room_to_map_ahead(&self) -> bool {
        self.map_ahead.depth * self.chunks.pages_per_chunk() * MapAhead::BUDGET_SHARE
            <= self.budget_pages
    }

    /// Brings in the next planned chunk, if it is wholly out of memory (else the plan ends: the
    /// thread is there already, or something else brought it in) and the budget, which a
    /// command may have changed since the plan, still has room. Called only while no fault
    /// waits.
    pub(super) fn map_ahead_step(&mut self) {
        let Some(a) = self.map_ahead.next.take() else {
            return;
        };
        if !self.room_to_map_ahead()
            || a.chunk >= self.chunks.len()
            || !self.chunks.is(a.chunk, ChunkState::Out)
            || self.chunks.resident_pages(a.chunk) > 0
        {
            return;
        }
        let ppc = self.chunks.pages_per_chunk();
        self.page_in(a.chunk, 0, PageInSpan::Chunk { read_ahead: true });
        if !self.chunks.is(a.chunk, ChunkState::In) {
            // The page-in failed (its pages poisoned) or brought nothing: stop here.
            return;
        }
        // About to be used: not a victim before the chunks the stream is done with (an
        // unreferenced new chunk was, in a guest re-reading its page cache from the image
        // beside its own memory: 656 and 725 MiB read from the image for 512 against 558 and
        // 563 MiB with this, `docs/benchmarks.md`).
        if self.policy.contains(a.chunk as u64) {
            self.policy.mark_referenced(a.chunk as u64);
        }
        add(&self.stats().chunks_mapped_ahead, 1);
        let last = (a.chunk + 1) * ppc - 1;
        self.pattern.on_mapped_ahead(a.thread, a.stream_page, last);
        if a.left > 0 {
            self.map_ahead.next = Some(Ahead {
                chunk: a.chunk + 1,
                left: a.left - 1,
                stream_page: last,
                ..a
            });
        }
    }
}
