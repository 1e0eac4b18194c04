//! [`ImageFirst`]: eviction that takes chunks a disk image holds before chunks of the
//! program's own memory, while they are as cold (seed 004, VSwapper, on the host's side).
//!
//! With the swap mapper, a guest page read from its disk image is associated with the image
//! block: evicting it writes nothing, and a refault reads the block back. The host kernel
//! treats such pages as file pages and reclaims them before it swaps anonymous memory (its
//! file and anonymous lists, balanced by refaults); VSwapper's mapped pages get that
//! treatment. memvisor ranks chunks with one policy, so it asks the policy (through
//! [`EvictionPolicy::evict_sparing`](memvisor_policy::EvictionPolicy::evict_sparing)) to pass
//! over chunks of the guest's own memory and take a chunk the image holds (no page of it
//! changed since the image filled it), where its own rule finds them alike (CLOCK:
//! unreferenced). A guest streaming its disk through its page cache then keeps its own memory,
//! which it wrote at boot and may not touch for a long time, instead of writing it to swap
//! and reading it back.
//!
//! Sparing is wrong when the image chunks are the ones in use: a guest re-reading a file that
//! would fit beside its cold memory but not with it. The guard: while more than one in
//! [`NEAR_SHARE`] image chunks evicted comes back within the budget (a refault distance up to
//! the budget: more memory, or the cold chunks gone, would have kept it), eviction is in plain
//! policy order. A stream's chunks mostly come back from far (in the page-cache case about one
//! in ten came back within the budget); a working set squeezed by cold memory comes back near,
//! every time.
//!
//! Only regions that hold image blocks spare anything, and only with a policy that breaks ties
//! by cost (CLOCK, the default; the others ignore it). A search looks at no more than
//! [`MAX_LOOKS`] chunks of the program's own memory: after that the next cold chunk goes,
//! whatever it is (plain CLOCK's kind of choice), so an eviction's cost is bounded however
//! large the region. A search that found no image chunk to take is tried again only after 1,
//! 2, 4, ... plain evictions, up to one in every sixteenth of the resident chunks.

use super::chunk_table::ChunkTable;
use super::image_blocks::ImageBlocks;
use super::page_out::harvest_written;
use super::region_memory::RegionMemory;
use super::FaultHandler;
use crate::page_bitmap::PageBitmap;
use crate::pagemap::Pagemap;
use crate::region_stats::add;

/// Sparing stays off while more than one in `NEAR_SHARE` image chunks evicted comes back
/// within the budget.
pub(super) const NEAR_SHARE: u32 = 2;

/// The counters are halved whenever `WINDOW` image chunks have been counted, so the guard
/// follows the recent past (the last `WINDOW` to `WINDOW / 2` evictions of image chunks).
const WINDOW: u32 = 1024;

/// Most chunks of the program's own memory one eviction looks at before it takes a cold chunk
/// whatever it is. Each look scans the chunk's entries in the image associations (256 for a
/// 1 MiB chunk) and, for a chunk that holds image blocks, makes one `PAGEMAP_SCAN` call; a run
/// of cold own chunks longer than this (over 256 MiB of 1 MiB chunks) loses one chunk to plain
/// order per revolution of the hand.
pub(super) const MAX_LOOKS: usize = 256;

/// Whether eviction spares the program's own chunks, and what it learned from its victims.
#[derive(Debug)]
pub(super) struct ImageFirst {
    /// Per chunk: it was an image chunk when it was last evicted, and has not come back since.
    evicted_image: PageBitmap,
    /// Image chunks evicted (halved every [`WINDOW`]).
    image_evictions: u32,
    /// Of those, the ones read back at a refault distance within the budget.
    near_refaults: u32,
    /// Plain evictions left before sparing is tried again.
    backoff: usize,
    /// Sparing evictions in a row that found no image chunk.
    failures: u32,
    /// The last victim chosen and whether it was an image chunk, until it leaves memory.
    pending: Option<(usize, bool)>,
    /// Off without dirty tracking (the swap mapper needs it).
    enabled: bool,
}

impl ImageFirst {
    /// A guard for `chunks` chunks; `enabled` false keeps eviction in plain policy order.
    pub fn new(chunks: usize, enabled: bool) -> Self {
        Self {
            evicted_image: PageBitmap::new(chunks),
            image_evictions: 0,
            near_refaults: 0,
            backoff: 0,
            failures: 0,
            pending: None,
            enabled,
        }
    }

    /// Whether the next eviction should spare the program's own chunks, in a region where
    /// `associated` pages are image blocks now.
    pub fn sparing(&self, associated: usize) -> bool {
        self.enabled
            && associated > 0
            && self.backoff == 0
            && self.near_refaults.saturating_mul(NEAR_SHARE) <= self.image_evictions
    }

    /// Chunk `c` was chosen as a victim; it was of the program's own memory (`costly`) or an
    /// image chunk; the choice spared the program's chunks (`spared`); `resident` chunks are
    /// left in the policy. The guard counts it once it has left memory ([`left`](Self::left)).
    pub fn chose(&mut self, c: usize, costly: bool, spared: bool, resident: usize) {
        if self.backoff > 0 {
            self.backoff -= 1;
        } else if spared && costly {
            // No image chunk was cold: look again after 1, 2, 4, ... plain evictions, up to
            // one for every 16 resident chunks.
            self.failures = (self.failures + 1).min(usize::BITS - 1);
            self.backoff = (1usize << (self.failures - 1)).min((resident / 16).max(1));
        } else if spared {
            self.failures = 0;
        }
        self.pending = Some((c, !costly));
    }

    /// Chunk `c` left memory (its page-out succeeded or started). A victim given back (the
    /// chunk being paged in) or kept as overrun never gets here and is not counted.
    pub fn left(&mut self, c: usize) {
        let image = match self.pending.take() {
            Some((v, image)) if v == c => image,
            _ => false,
        };
        self.evicted_image.set_range(c, 1, image);
        if image {
            self.image_evictions += 1;
            if self.image_evictions >= WINDOW {
                self.image_evictions /= 2;
                self.near_refaults /= 2;
            }
        }
    }

    /// Chunk `c` was read back; `near`: at a refault distance within the budget.
    pub fn refaulted(&mut self, c: usize, near: bool) {
        if self.evicted_image.get(c) {
            self.evicted_image.set_range(c, 1, false);
            if near {
                self.near_refaults = self.near_refaults.saturating_add(1);
            }
        }
    }

    /// Chunk `c`'s content was discarded: its next page-in is no refault.
    pub fn forget(&mut self, c: usize) {
        self.evicted_image.set_range(c, 1, false);
    }
}

impl FaultHandler {
    /// The policy's next victim: with [`ImageFirst`] sparing, an image chunk where the policy
    /// finds one as cold as any chunk of the program's own memory. Chunk `busy` (being paged
    /// in, given back if chosen) counts as the program's own.
    pub(super) fn next_victim(&mut self, busy: Option<usize>) -> Option<u64> {
        let sparing = self.image_first.sparing(self.images.len());
        let victim = if sparing {
            let (chunks, memory, images) = (&mut self.chunks, &self.memory, &self.images);
            let pagemap = self.pagemap.as_ref();
            let mut spared = 0usize;
            let mut first_spared = None;
            let v = self.policy.evict_sparing(&mut |u| {
                let c = u as usize;
                if spared >= MAX_LOOKS {
                    // Looked long enough: this cold chunk goes, whatever it is.
                    return false;
                }
                let costly = Some(c) == busy
                    || !image_chunk_after_harvest(chunks, images, pagemap, memory, c);
                if costly {
                    spared += 1;
                    first_spared.get_or_insert(u);
                }
                costly
            });
            // A search that found no image chunk takes the first chunk it passed over: that
            // one was not spared after all.
            let taken_back = v.is_some() && v == first_spared;
            add(
                &self.stats().own_chunks_spared,
                spared as u64 - u64::from(taken_back),
            );
            v
        } else {
            self.policy.evict()
        }?;
        let costly = !is_image_chunk(&self.chunks, &self.images, victim as usize);
        self.image_first
            .chose(victim as usize, costly, sparing, self.policy.len());
        Some(victim)
    }
}

/// [`is_image_chunk`] with the written bits of chunk `c` brought up to date first, where
/// that can change the answer. The written bits are harvested at samples and page-outs:
/// writes since then are only in the page tables. A chunk without image pages, or with a
/// written page no image holds, is the program's own without a look at the page tables. A
/// failed scan leaves the chunk as it looked (its page-out harvests again before it writes).
fn image_chunk_after_harvest(
    chunks: &mut ChunkTable,
    images: &ImageBlocks,
    pagemap: Option<&Pagemap>,
    memory: &RegionMemory,
    c: usize,
) -> bool {
    if !is_image_chunk(chunks, images, c) {
        return false;
    }
    if let Some(p) = pagemap {
        let _ = harvest_written(chunks, p, memory, c, 0, chunks.pages_in(c));
    }
    is_image_chunk(chunks, images, c)
}

/// Whether chunk `c` is an image chunk, whose page-out writes nothing as far as its written
/// bits tell: a page of it is associated with an image block, and every resident written page
/// is one whose block has not been compared with it yet (the read that filled it set its
/// written bit; its first eviction compares it and drops it if equal). A written page whose
/// block was checked was changed by the program since: its page-out writes it.
fn is_image_chunk(chunks: &ChunkTable, images: &ImageBlocks, c: usize) -> bool {
    let first = c * chunks.pages_per_chunk();
    let n = chunks.pages_in(c);
    images.any_in(first, n)
        && (0..n).all(|p| {
            !chunks.is_page_written(c, p) || images.get(first + p).is_some_and(|b| !b.checked)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spares_until_most_image_victims_come_back_near() {
        let mut g = ImageFirst::new(64, true);
        assert!(g.sparing(1));
        for c in 0..16 {
            g.chose(c, false, true, 32);
            g.left(c);
        }
        // Half of them back within the budget: still sparing.
        for c in 0..8 {
            g.refaulted(c, true);
        }
        assert!(g.sparing(1));
        // A far refault and a refault of a chunk evicted written do not count.
        g.refaulted(8, false);
        g.chose(40, true, false, 32);
        g.left(40);
        g.refaulted(40, true);
        // Nor does a victim that never left (given back, or kept as overrun).
        g.chose(41, false, true, 32);
        g.chose(42, false, true, 32);
        g.left(42);
        g.refaulted(41, true);
        // A chunk counts once per eviction.
        g.refaulted(0, true);
        assert!(g.sparing(1));
        g.refaulted(9, true);
        assert!(!g.sparing(1), "9 near refaults in 16 image evictions");
        // More image evictions without refaults bring it back.
        for c in 10..14 {
            g.chose(c, false, false, 32);
            g.left(c);
        }
        assert!(g.sparing(1));
    }

    #[test]
    fn a_search_that_found_no_image_chunk_backs_off_more_each_time() {
        let mut g = ImageFirst::new(64, true);
        let mut plain_runs = Vec::new();
        for _ in 0..5 {
            g.chose(3, true, true, 64);
            let mut plain = 0;
            while !g.sparing(1) {
                g.chose(5, true, false, 64);
                plain += 1;
            }
            plain_runs.push(plain);
        }
        // 1, 2, 4, then capped at one in 16 of the 64 resident chunks.
        assert_eq!(plain_runs, [1, 2, 4, 4, 4]);
        // A search that found an image chunk starts the count again.
        g.chose(7, false, true, 64);
        g.chose(3, true, true, 64);
        assert!(!g.sparing(1));
        g.chose(5, true, false, 64);
        assert!(g.sparing(1));
        // A costly victim of a plain eviction does not back off.
        g.chose(6, true, false, 64);
        assert!(g.sparing(1));
    }

    #[test]
    fn disabled_never_spares_and_discards_forget() {
        let g = ImageFirst::new(8, false);
        assert!(!g.sparing(1));
        // Nor in a region without image blocks.
        assert!(!ImageFirst::new(8, true).sparing(0));
        let mut g = ImageFirst::new(8, true);
        g.chose(2, false, true, 4);
        g.left(2);
        g.forget(2);
        g.refaulted(2, true);
        assert_eq!(g.near_refaults, 0);
    }

    #[test]
    fn counters_follow_the_recent_past() {
        let mut g = ImageFirst::new(4, true);
        for i in 0..WINDOW {
            g.chose((i % 4) as usize, false, true, 4);
            g.left((i % 4) as usize);
            if i % 4 == 3 {
                // Three in four come back near.
                for c in 0..3 {
                    g.refaulted(c, true);
                }
            }
        }
        assert!(!g.sparing(1));
        assert!(g.image_evictions < WINDOW);
    }
}
