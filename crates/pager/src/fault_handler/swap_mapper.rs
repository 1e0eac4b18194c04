//! The swap mapper and the false-read preventer (seed 004, VSwapper), as the fault handler
//! carries them out between faults.
//!
//! * **False-read preventer** ([`prepare_overwrite`](FaultHandler::prepare_overwrite)): before
//!   the program reads a file into a range of the region, every page the read covers whole and
//!   that is not in memory is mapped as a zero page and marked written, instead of being read
//!   from swap (or the image) only to be overwritten.
//! * **Swap mapper** ([`associate`](FaultHandler::associate)): after a complete read of an
//!   image into the region, every page the read covered whole is associated with its image
//!   block (bookkeeping only: no write-protection, no read). At its first eviction the page is
//!   compared with its block, read again through memvisor's own descriptor
//!   ([`image_fates`](FaultHandler::image_fates)), and dropped without a write if equal, its
//!   checksum kept; its page-in reads the block again ([`read_image_pages`]) and checks that
//!   checksum: a mismatch (someone changed the image behind memvisor's back) poisons the page,
//!   never silent wrong data. Paged in, it is mapped write-protected like every page, so later
//!   evictions go by dirty tracking. An association ends when the page is found changed at an
//!   eviction, when the range is discarded or read over, and before an interposed write to the
//!   image block reaches the file ([`image_written`](FaultHandler::image_written)): the page's
//!   content is kept first (in memory, marked written).
//!
//! [`read_image_pages`]: FaultHandler::read_image_pages

use std::io;
use std::sync::Arc;

use super::access_pattern::PageInSpan;
use super::image_blocks::ImageBlock;
use super::page_in::{PageInDone, PageInError};
use super::{ChunkState, FaultHandler, Fill};
use crate::crc32c::crc32c;
use crate::image_file::{FileKey, ImageFile, ReadEpoch};
use crate::region_config::ResolveMode;
use crate::region_stats::{add, sub};

/// What a page-out does with a resident page as far as the swap mapper is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ImageFate {
    /// Not associated with an image block.
    NotImage,
    /// The image holds its content: dropped without a write.
    Held,
    /// It was associated but differs from its block now: written like any changed page.
    Released,
}

/// A failed read of associated pages from their image.
#[derive(Debug)]
pub(super) struct ImageReadError {
    /// First page of the run that failed (index in the chunk) and how many pages it had.
    pub run: (usize, usize),
    /// The image.
    pub image: Arc<ImageFile>,
    /// Byte offset of the failed read in the image.
    pub file_offset: u64,
    /// What went wrong (a short read, an I/O error, or `InvalidData` for a checksum mismatch).
    pub source: io::Error,
}

impl FaultHandler {
    /// Region page index of page `p` of chunk `c`.
    pub(super) fn region_page(&self, c: usize, p: usize) -> usize {
        c * self.chunks.pages_per_chunk() + p
    }

    /// The chunk and the page in it of region page `rp`.
    fn chunk_page(&self, rp: usize) -> (usize, usize) {
        let ppc = self.chunks.pages_per_chunk();
        (rp / ppc, rp % ppc)
    }

    /// Whether page `p` of chunk `c` is associated with an image block.
    pub(super) fn is_image_page(&self, c: usize, p: usize) -> bool {
        self.images.any_in(self.region_page(c, p), 1)
    }

    /// Whether any of pages `first..first + n` of chunk `c` is associated.
    pub(super) fn any_image_pages(&self, c: usize, first: usize, n: usize) -> bool {
        self.images.any_in(self.region_page(c, first), n)
    }

    /// The pages of `[offset, offset + len)` (region bytes) that the range covers whole.
    fn covered_pages(&self, offset: usize, len: usize) -> std::ops::Range<usize> {
        let pg = self.memory.page;
        let len = len.min(self.memory.len.saturating_sub(offset));
        crate::memfd::covered_pages(offset, len, pg)
    }

    /// False-read preventer: the pages `[offset, offset + len)` covers whole and that are not
    /// in memory become resident zero pages, marked written (a read is about to overwrite
    /// them). Their associations end.
    pub(super) fn prepare_overwrite(&mut self, offset: usize, len: usize) {
        let pages = self.covered_pages(offset, len);
        let ppc = self.chunks.pages_per_chunk();
        let mut rp = pages.start;
        while rp < pages.end {
            let (c, first) = self.chunk_page(rp);
            let n = (ppc - first).min(pages.end - rp);
            self.overwrite_in_chunk(c, first, n);
            rp += n;
        }
    }

    /// [`prepare_overwrite`](Self::prepare_overwrite) of pages `first..first + n` of chunk `c`.
    fn overwrite_in_chunk(&mut self, c: usize, first: usize, n: usize) {
        self.wait_for_write(c);
        let missing = |h: &Self| {
            h.chunks.runs_in(c, first, n, |p| {
                !h.chunks.is_page_resident(c, p)
                    && !h.chunks.is_page_poisoned(c, p)
                    && !h.chunks.is_page_reading(c, p)
                    // Remote: it waits for its content (the read's copy faults and waits too).
                    && !h.chunks.is_page_remote(c, p)
            })
        };
        let incoming: usize = missing(self).iter().map(|r| r.1).sum();
        if incoming > 0 {
            self.make_room(incoming);
            self.wait_for_write(c);
            let runs = missing(self);
            let pg = self.memory.page;
            let start = self.chunk_range(c).0;
            let mut done = PageInDone::default();
            for &(f, k) in &runs {
                // What a read would have brought in (from swap or an image) only to be
                // overwritten.
                let avoided = (f..f + k)
                    .filter(|&p| self.io.stored_in(c, p, 1) > 0 || self.is_image_page(c, p))
                    .count();
                let (s, l) = (start + f * pg, k * pg);
                let mapped = match self.page_in_options.resolve {
                    ResolveMode::AliasContinue => match self.memory.memfd.allocate(s, l) {
                        Ok(()) => self.fill_wake_counted(s, l, Fill::Continue, true),
                        Err(e) => Err((0, e)),
                    },
                    ResolveMode::Copy => self.fill_wake_counted(s, l, Fill::Zero, true),
                };
                if let Err((bytes, e)) = mapped {
                    // The pages mapped before the failure are in memory (zeros the read will
                    // overwrite): counted as such. The rest is left to the faults of the read
                    // itself, which page them in as usual.
                    if bytes >= pg {
                        done.push_mapped((f, bytes / pg));
                    }
                    if let ResolveMode::AliasContinue = self.page_in_options.resolve {
                        // Allocated in the memfd but not mapped: not resident, so not there.
                        let rest = (f + bytes / pg, k - bytes / pg);
                        let (rs, rl) = (start + rest.0 * pg, rest.1 * pg);
                        if rl > 0 {
                            if let Err(e) = self.memory.memfd.punch_hole(rs, rl) {
                                self.memory_error("punch (false-read preventer)", rs, rl, e);
                            }
                        }
                    }
                    self.memory_error("map zero pages (false-read preventer)", s, l, e);
                    break;
                }
                done.push_mapped((f, k));
                add(
                    &self.stats().false_read_bytes_avoided,
                    (avoided * pg) as u64,
                );
            }
            for &(f, k) in done.mapped_runs() {
                // Different from any swap copy once the read lands.
                self.chunks.set_written(c, f, k, true);
            }
            self.finish_page_in(c, first, PageInSpan::Chunk { read_ahead: false }, done);
        }
        // The read replaces what the resident pages hold: their associations end (a page left
        // out, its mapping failed, keeps its own).
        for p in first..first + n {
            if self.chunks.is_page_resident(c, p) {
                self.end_image_pages(c, p, 1);
            }
        }
    }

    /// Swap mapper: after a complete read of `len` bytes at byte `file_offset` of `image` into
    /// region bytes `[offset, offset + len)`, associates each page the read covered whole with
    /// its block. A page is associated only if it is in memory (its chunk not being written)
    /// and no write to the image started since `epoch`. Nothing is checked or write-protected
    /// here (that cost every read a TLB shootdown of the program's threads, about 20% of a
    /// TCG guest's disk-read time): whether the page still equals its block is checked at its
    /// first eviction, against the image; from its first page-in on it is mapped
    /// write-protected like every page, and dirty tracking tells. Needs dirty tracking.
    pub(super) fn associate(
        &mut self,
        offset: usize,
        len: usize,
        image: &Arc<ImageFile>,
        file_offset: u64,
        epoch: ReadEpoch,
    ) {
        let pages = self.covered_pages(offset, len);
        if pages.is_empty() {
            return;
        }
        if self.pagemap.is_none() || !image.unchanged_since(epoch) {
            add(&self.stats().image_associations_refused, pages.len() as u64);
            return;
        }
        let pg = self.memory.page;
        let ppc = self.chunks.pages_per_chunk();
        let index = self.images.image_index(image);
        let mut dropped = Vec::new();
        let mut rp = pages.start;
        while rp < pages.end {
            let (c, first) = self.chunk_page(rp);
            let n = (ppc - first).min(pages.end - rp);
            let block_of = |p: usize| file_offset + ((c * ppc + p) * pg - offset) as u64;
            if !self.chunks.is(c, ChunkState::In) {
                // Being written (entries dropped, written state harvested): leave it.
                add(&self.stats().image_associations_refused, n as u64);
                rp += n;
                continue;
            }
            let runs = self
                .chunks
                .runs_in(c, first, n, |p| self.chunks.holds_page(c, p));
            for (f, k) in runs {
                for p in f..f + k {
                    let rp = self.region_page(c, p);
                    let block = ImageBlock {
                        image: index,
                        offset: block_of(p),
                        crc: 0,
                        checked: false,
                    };
                    match self.images.get(rp) {
                        None => add(&self.stats().image_pages, 1),
                        // The read replaced another block: the guest let that one go.
                        Some(old) if (old.image, old.offset) != (index, block.offset) => {
                            dropped.push(old)
                        }
                        Some(_) => {}
                    }
                    self.images.insert(rp, block);
                }
            }
            rp += n;
        }
        self.guest_dropped(dropped);
    }

    /// The guest let `blocks` go (the pages that held them were read over, discarded or
    /// changed): told to their images' host caches, adjacent blocks of one image together.
    /// Kept per block, not per page: if the guest read the same block into another page
    /// before this association ended, the block counts as let go while the guest still
    /// holds it (the host cache keeps it a little longer than it needed to).
    fn guest_dropped(&self, mut blocks: Vec<ImageBlock>) {
        if blocks.is_empty() {
            return;
        }
        let pg = self.memory.page as u64;
        blocks.sort_unstable_by_key(|b| (b.image, b.offset));
        let mut run: Option<(ImageBlock, u64)> = None;
        for b in blocks {
            match &mut run {
                Some((b0, len)) if b0.image == b.image && b0.offset + *len == b.offset => {
                    *len += pg
                }
                _ => {
                    if let Some((b0, len)) = run.replace((b, pg)) {
                        self.tell_dropped(b0, len);
                    }
                }
            }
        }
        if let Some((b0, len)) = run {
            self.tell_dropped(b0, len);
        }
    }

    fn tell_dropped(&self, b0: ImageBlock, len: u64) {
        if let Some(i) = self.images.image(b0.image) {
            i.guest_dropped(b0.offset, len);
        }
    }

    /// Before a write to bytes `[from, to)` of the image `key` reaches the file: ends the
    /// associations of the blocks it overlaps, keeping each page's content. A resident page
    /// stays, marked written; a page out of memory is read back from the image first (it
    /// still holds the old block), verified, and marked written.
    pub(super) fn image_written(&mut self, key: FileKey, from: u64, to: u64) {
        let Some(index) = self.images.find(key) else {
            return;
        };
        let pg = self.memory.page;
        for rp in self.images.pages_overlapping(index, from, to, pg as u64) {
            let (c, p) = self.chunk_page(rp);
            self.wait_for_write(c);
            if !self.chunks.is_page_resident(c, p) {
                // Bring the old block in before it changes (page-in reads it and checks it),
                // and keep it: a write completing meanwhile must not evict the chunk again
                // before the association ends (the page would then be nowhere).
                let outer = self.pinned_chunk.replace(c);
                self.page_in(c, p, PageInSpan::Page);
                self.wait_for_write(c);
                self.pinned_chunk = outer;
            }
            if self.images.remove(rp).is_some() {
                sub(&self.stats().image_pages, 1);
                add(&self.stats().image_associations_ended_by_image, 1);
            }
            if self.chunks.is_page_resident(c, p) {
                self.chunks.set_written(c, p, 1, true);
            }
        }
    }

    /// Page-in: fills, in `buf` (pages `first..` of chunk `c`, `buf.len()` bytes), every page
    /// that `want` selects and that is associated with an image block, from the image
    /// (adjacent blocks in one read), each checked against its checksum. Returns how many
    /// bytes were read. `for_guest`: the pages go into guest memory (a page-in, not a
    /// migration's read), so the guest holds the blocks again: an `exclusive` host cache
    /// drops them, or holds them as the guest's under a limit ([`ImageFile::guest_holds`]).
    pub(super) fn read_image_pages(
        &self,
        c: usize,
        first: usize,
        buf: &mut [u8],
        want: impl Fn(usize) -> bool,
        for_guest: bool,
    ) -> Result<usize, ImageReadError> {
        let pg = self.memory.page;
        let n = buf.len() / pg;
        if !self.any_image_pages(c, first, n) {
            return Ok(0);
        }
        let runs = self.block_runs(c, (first..first + n).filter(|&p| want(p)));
        let mut bytes = 0;
        for (f, k, b0) in runs {
            let Some(image) = self.images.image(b0.image).cloned() else {
                continue;
            };
            let dst = &mut buf[(f - first) * pg..(f - first + k) * pg];
            let fail = |source: io::Error, at: u64| ImageReadError {
                run: (f, k),
                image: image.clone(),
                file_offset: at,
                source,
            };
            image
                .read_exact_at(dst, b0.offset)
                .map_err(|e| fail(e, b0.offset))?;
            for p in f..f + k {
                let rp = self.region_page(c, p);
                let Some(b) = self.images.get(rp) else {
                    continue;
                };
                let actual = crc32c(&dst[(p - f) * pg..(p - f + 1) * pg]);
                // A page out of memory was checked at its eviction (its checksum is set).
                debug_assert!(b.checked, "page {rp} left memory unchecked");
                if b.checked && actual != b.crc {
                    return Err(fail(
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "image block changed outside memvisor: checksum {:#010x}, \
                                 expected {:#010x}",
                                actual, b.crc
                            ),
                        ),
                        b.offset,
                    ));
                }
            }
            if for_guest {
                image.guest_holds(b0.offset, (k * pg) as u64, 0, 0);
            }
            bytes += k * pg;
        }
        add(&self.stats().image_read_bytes, bytes as u64);
        Ok(bytes)
    }

    /// A page-in from the image failed for run `run` of chunk `c`: the run's associations end
    /// (its pages are poisoned by the caller).
    pub(super) fn drop_failed_images(&mut self, c: usize, (first, n): (usize, usize)) {
        let ended = self.images.remove_range(self.region_page(c, first), n);
        sub(&self.stats().image_pages, ended as u64);
    }

    /// The associated pages among `pages` (ascending page indexes in chunk `c`) in runs of
    /// adjacent pages whose blocks are adjacent in one image, each read in one call:
    /// `(first page, count, first page's block)`.
    fn block_runs(
        &self,
        c: usize,
        pages: impl IntoIterator<Item = usize>,
    ) -> Vec<(usize, usize, ImageBlock)> {
        let pg = self.memory.page;
        let mut runs: Vec<(usize, usize, ImageBlock)> = Vec::new();
        for p in pages {
            let Some(b) = self.images.get(self.region_page(c, p)) else {
                continue;
            };
            match runs.last_mut() {
                Some((f, k, b0))
                    if *f + *k == p
                        && b0.image == b.image
                        && b0.offset + (*k * pg) as u64 == b.offset =>
                {
                    *k += 1
                }
                _ => runs.push((p, 1, b)),
            }
        }
        runs
    }

    /// Page-out of chunk `c` (its registered entries dropped, written state harvested): what
    /// becomes of each of its resident associated pages. At its first eviction an associated
    /// page is compared with its block, read from the image (nothing tracked its writes since
    /// the read; adjacent blocks in one read), and held by the image if equal, its checksum
    /// kept. Later, paged in from the image and mapped write-protected, it is held if dirty
    /// tracking saw no write and the checksum still matches. A page that differs is released:
    /// its association ends and it must be written (a difference dirty tracking should have
    /// seen is counted).
    pub(super) fn image_fates(&mut self, c: usize) -> Vec<ImageFate> {
        let n = self.chunks.pages_in(c);
        let mut fates = vec![ImageFate::NotImage; n];
        if !self.any_image_pages(c, 0, n) {
            return fates;
        }
        let pg = self.memory.page;
        let start = self.chunk_range(c).0;
        // Pages not compared with their block yet, and pages held by the image as checked.
        let mut unchecked = Vec::new();
        let mut held_checked = Vec::new();
        for (p, fate) in fates.iter_mut().enumerate() {
            if !self.chunks.is_page_resident(c, p) {
                continue;
            }
            let Some(b) = self.images.get(self.region_page(c, p)) else {
                continue;
            };
            if b.checked {
                // SAFETY: the alias mapping covers the region; page `p` of chunk `c` is
                // resident and its registered entries are dropped (nobody writes it now).
                let data = unsafe {
                    std::slice::from_raw_parts(self.memory.alias.as_ptr().add(start + p * pg), pg)
                };
                let written = self.chunks.is_page_written(c, p);
                let held = !written && crc32c(data) == b.crc;
                if !written && !held {
                    add(&self.stats().dirty_tracking_misses, 1);
                }
                *fate = if held {
                    held_checked.push(p);
                    ImageFate::Held
                } else {
                    ImageFate::Released
                };
                continue;
            }
            unchecked.push(p);
        }
        // The guest's copies leave memory: the image's host cache may take the blocks back
        // (demotion; `exclusive` only).
        for (_, k, b0) in self.block_runs(c, held_checked) {
            if let Some(i) = self.images.image(b0.image) {
                i.guest_released(b0.offset, (k * pg) as u64, false);
            }
        }
        let mut block = Vec::new();
        for (f, k, b0) in self.block_runs(c, unchecked) {
            block.resize(k * pg, 0);
            let image = self.images.image(b0.image).cloned();
            let read = image
                .as_ref()
                .is_some_and(|i| i.read_exact_at(&mut block, b0.offset).is_ok());
            for p in f..f + k {
                // SAFETY: as above.
                let data = unsafe {
                    std::slice::from_raw_parts(self.memory.alias.as_ptr().add(start + p * pg), pg)
                };
                let held = read && block[(p - f) * pg..(p - f + 1) * pg] == *data;
                if held {
                    // The read made it differ from swap: without the mapper this was a write.
                    add(&self.stats().swap_write_bytes_avoided, pg as u64);
                    let rp = self.region_page(c, p);
                    if let Some(b) = self.images.get(rp) {
                        self.images.insert(
                            rp,
                            ImageBlock {
                                crc: crc32c(data),
                                checked: true,
                                ..b
                            },
                        );
                    }
                    fates[p] = ImageFate::Held;
                } else {
                    fates[p] = ImageFate::Released;
                }
            }
            // Held pages leave memory, and the check just read their blocks into the host
            // cache: demoted without another read.
            if let Some(i) = &image {
                let held = (f..f + k).filter(|&p| fates[p] == ImageFate::Held);
                for (hf, hk) in runs_of(held) {
                    i.guest_released(b0.offset + ((hf - f) * pg) as u64, (hk * pg) as u64, true);
                }
            }
        }
        let mut dropped = Vec::new();
        for (p, fate) in fates.iter().enumerate() {
            if *fate == ImageFate::Released {
                dropped.extend(self.images.remove(self.region_page(c, p)));
                sub(&self.stats().image_pages, 1);
                add(&self.stats().image_associations_ended_by_guest, 1);
                // Differs from any swap copy: written, even if this page-out fails.
                self.chunks.set_written(c, p, 1, true);
            }
        }
        // The guest changed those pages: it let their blocks go.
        self.guest_dropped(dropped);
        fates
    }

    /// Ends the associations of pages `first..first + n` of chunk `c` (a discard, a read
    /// about to overwrite them). A resident page among them is marked written: what it holds
    /// is not what swap holds for it (a stale copy, or nothing).
    pub(super) fn end_image_pages(&mut self, c: usize, first: usize, n: usize) {
        let mut dropped = Vec::new();
        for p in first..first + n {
            if let Some(b) = self.images.remove(self.region_page(c, p)) {
                dropped.push(b);
                sub(&self.stats().image_pages, 1);
                if self.chunks.is_page_resident(c, p) {
                    self.chunks.set_written(c, p, 1, true);
                }
            }
        }
        self.guest_dropped(dropped);
    }
}

impl PageInError {
    /// The run of pages an image read failed for.
    pub(super) fn image(e: ImageReadError) -> ((usize, usize), Self) {
        (e.run, PageInError::Image(e))
    }
}

/// Runs of consecutive numbers in an ascending sequence: `(first, count)`.
fn runs_of(items: impl IntoIterator<Item = usize>) -> Vec<(usize, usize)> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for p in items {
        match runs.last_mut() {
            Some((f, k)) if *f + *k == p => *k += 1,
            _ => runs.push((p, 1)),
        }
    }
    runs
}
