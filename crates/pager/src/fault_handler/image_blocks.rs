//! [`ImageBlocks`]: which pages of a region hold an unmodified copy of an image block (the swap
//! mapper's associations), looked up by page (eviction, page-in) and by image range (a write
//! to the image ends the associations it overlaps).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::image_file::{FileKey, ImageFile};

/// The image block a page is a copy of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ImageBlock {
    /// Index into [`ImageBlocks`]' images.
    pub image: u32,
    /// Byte offset of the block in the image.
    pub offset: u64,
    /// CRC32C of the page, set at its first eviction (once it was found equal to the block):
    /// a re-read must match it.
    pub crc: u32,
    /// Whether the page was compared with its block (at its first eviction) and `crc` set.
    pub checked: bool,
}

/// The associations of one region.
///
/// By page, a table of 16 bytes per page of the region, allocated zeroed at the first
/// association (a fresh mapping: only the pages of it that hold associations take memory, 1
/// MiB per 256 MiB of associated guest memory at most). A hash map of the same associations
/// took about 4 MiB for a 256 MiB guest whose page cache held its disk, memory the host's
/// page cache of the image lost (`docs/benchmarks.md`, issue 12).
#[derive(Debug)]
pub(crate) struct ImageBlocks {
    images: Vec<Arc<ImageFile>>,
    /// Pages in the region.
    region_pages: usize,
    /// Per region page: the block's offset, then `(image + 1) << 32 | crc` with bit 63 set
    /// once checked; all zero without an association. Empty until the first association.
    by_page: Vec<[u64; 2]>,
    /// Per group of [`GROUP_PAGES`] region pages: how many of them are associated, so that
    /// asking about a chunk (eviction's search for image chunks looks at up to 256 chunks per
    /// eviction) reads a few counts, not every page's entry. Empty until the first association.
    per_group: Vec<u16>,
    /// Associated pages.
    associated: usize,
    /// Per image: (block offset, region page). Several pages may copy one block.
    by_offset: Vec<BTreeSet<(u64, usize)>>,
}

/// `ImageBlocks::by_page`'s second word: the checked bit.
const CHECKED: u64 = 1 << 63;

/// Pages per group counted in `ImageBlocks::per_group`.
const GROUP_PAGES: usize = 64;

impl ImageBlock {
    fn pack(&self) -> [u64; 2] {
        let image = (u64::from(self.image) + 1) << 32;
        let checked = if self.checked { CHECKED } else { 0 };
        [self.offset, image | checked | u64::from(self.crc)]
    }

    fn unpack(slot: [u64; 2]) -> Option<Self> {
        let image = ((slot[1] & !CHECKED) >> 32) as u32;
        (image != 0).then(|| Self {
            image: image - 1,
            offset: slot[0],
            crc: slot[1] as u32,
            checked: slot[1] & CHECKED != 0,
        })
    }
}

impl ImageBlocks {
    /// No associations in a region of `region_pages` pages.
    pub fn new(region_pages: usize) -> Self {
        Self {
            images: Vec::new(),
            region_pages,
            by_page: Vec::new(),
            per_group: Vec::new(),
            associated: 0,
            by_offset: Vec::new(),
        }
    }

    /// The index of `image`, adding it on first use.
    pub fn image_index(&mut self, image: &Arc<ImageFile>) -> u32 {
        if let Some(i) = self.images.iter().position(|i| i.key() == image.key()) {
            return i as u32;
        }
        self.images.push(image.clone());
        self.by_offset.push(BTreeSet::new());
        (self.images.len() - 1) as u32
    }

    /// The image with index `i`.
    pub fn image(&self, i: u32) -> Option<&Arc<ImageFile>> {
        self.images.get(i as usize)
    }

    /// The index of the image with identity `key`, if it has ever been used.
    pub fn find(&self, key: FileKey) -> Option<u32> {
        self.images
            .iter()
            .position(|i| i.key() == key)
            .map(|i| i as u32)
    }

    /// How many pages are associated.
    pub fn len(&self) -> usize {
        self.associated
    }

    /// The block region page `page` is a copy of.
    pub fn get(&self, page: usize) -> Option<ImageBlock> {
        ImageBlock::unpack(*self.by_page.get(page)?)
    }

    /// Whether any of pages `first..first + n` is associated.
    pub fn any_in(&self, first: usize, n: usize) -> bool {
        if self.associated == 0 {
            return false;
        }
        let end = (first + n).min(self.by_page.len());
        let mut p = first;
        while p < end {
            let group_end = ((p / GROUP_PAGES + 1) * GROUP_PAGES).min(end);
            let whole = p % GROUP_PAGES == 0 && group_end - p == GROUP_PAGES;
            let found = if whole {
                self.per_group[p / GROUP_PAGES] > 0
            } else {
                (p..group_end).any(|q| self.get(q).is_some())
            };
            if found {
                return true;
            }
            p = group_end;
        }
        false
    }

    /// Page `page` is now a copy of `block` (an earlier association of the page ends). A
    /// page outside the region or an unknown image is left without one.
    pub fn insert(&mut self, page: usize, block: ImageBlock) {
        self.remove(page);
        if page >= self.region_pages {
            return;
        }
        let Some(set) = self.by_offset.get_mut(block.image as usize) else {
            return;
        };
        if self.by_page.is_empty() {
            // Zeroed: a fresh mapping, its pages untouched until written.
            self.by_page = vec![[0; 2]; self.region_pages];
            self.per_group = vec![0; self.region_pages.div_ceil(GROUP_PAGES)];
        }
        set.insert((block.offset, page));
        self.by_page[page] = block.pack();
        self.per_group[page / GROUP_PAGES] += 1;
        self.associated += 1;
    }

    /// Ends page `page`'s association; returns it.
    pub fn remove(&mut self, page: usize) -> Option<ImageBlock> {
        let slot = self.by_page.get_mut(page)?;
        let b = ImageBlock::unpack(*slot)?;
        *slot = [0; 2];
        self.per_group[page / GROUP_PAGES] -= 1;
        self.associated -= 1;
        if let Some(set) = self.by_offset.get_mut(b.image as usize) {
            set.remove(&(b.offset, page));
        }
        Some(b)
    }

    /// Ends the associations of pages `first..first + n`; returns how many there were.
    pub fn remove_range(&mut self, first: usize, n: usize) -> usize {
        if self.associated == 0 {
            return 0;
        }
        (first..first + n)
            .filter(|&p| self.remove(p).is_some())
            .count()
    }

    /// The pages associated with blocks of image `image` that overlap bytes `[from, to)` of
    /// it (blocks are `page_size` bytes), in block order.
    pub fn pages_overlapping(&self, image: u32, from: u64, to: u64, page_size: u64) -> Vec<usize> {
        let Some(set) = self.by_offset.get(image as usize) else {
            return Vec::new();
        };
        if from >= to {
            return Vec::new();
        }
        set.range((from.saturating_sub(page_size - 1), 0)..(to, 0))
            .filter(|&&(off, _)| off + page_size > from)
            .map(|&(_, p)| p)
            .collect()
    }

    /// Debug check: both indexes agree.
    #[cfg(any(test, debug_assertions))]
    pub fn check(&self) -> Result<(), String> {
        let total: usize = self.by_offset.iter().map(|m| m.len()).sum();
        let pages = (0..self.by_page.len())
            .filter_map(|p| Some((p, self.get(p)?)))
            .collect::<Vec<_>>();
        if total != self.associated || pages.len() != self.associated {
            return Err(format!(
                "{} pages associated ({} counted) but {} blocks indexed",
                pages.len(),
                self.associated,
                total
            ));
        }
        for (p, b) in &pages {
            if !self.by_offset[b.image as usize].contains(&(b.offset, *p)) {
                return Err(format!("page {p}: block {:#x} not indexed", b.offset));
            }
        }
        let mut actual_per_group = vec![0usize; self.per_group.len()];
        for (p, _) in &pages {
            actual_per_group[p / GROUP_PAGES] += 1;
        }
        for (g, (&count, &actual)) in self.per_group.iter().zip(&actual_per_group).enumerate() {
            if usize::from(count) != actual {
                return Err(format!(
                    "pages {}..: {count} associated counted, {actual} found",
                    g * GROUP_PAGES
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_rng::TestRng;

    fn image() -> (tempfile::NamedTempFile, Arc<ImageFile>) {
        let f = tempfile::NamedTempFile::new().unwrap();
        let i = Arc::new(ImageFile::open_path(f.path()).unwrap());
        (f, i)
    }

    fn block(image: u32, offset: u64) -> ImageBlock {
        ImageBlock {
            image,
            offset,
            crc: 0,
            checked: false,
        }
    }

    #[test]
    fn lookups_by_page_and_by_range_agree() {
        let (_f, img) = image();
        let mut t = ImageBlocks::new(64);
        let i = t.image_index(&img);
        assert_eq!(t.image_index(&img), i, "same image, same index");
        assert_eq!(t.find(img.key()), Some(i));
        for p in 0..8 {
            t.insert(10 + p, block(i, 4096 * p as u64 + 512));
        }
        t.check().unwrap();
        assert_eq!(t.len(), 8);
        // Bytes [4096 + 512, 4096 + 513) touch only the block at 4096 + 512.
        assert_eq!(t.pages_overlapping(i, 4608, 4609, 4096), vec![11]);
        // Bytes [0, 600) touch the block at 512 only; [4607, 4608) the block at 512.
        assert_eq!(t.pages_overlapping(i, 0, 600, 4096), vec![10]);
        assert_eq!(t.pages_overlapping(i, 4607, 4608, 4096), vec![10]);
        assert_eq!(t.pages_overlapping(i, 4607, 4609, 4096), vec![10, 11]);
        assert!(t.pages_overlapping(i, 0, 512, 4096).is_empty());
        assert!(t.pages_overlapping(i, 9, 9, 4096).is_empty());
        assert_eq!(t.pages_overlapping(i, 0, u64::MAX, 4096).len(), 8);
        assert!(t.any_in(17, 1) && !t.any_in(18, 5));
        assert_eq!(t.remove_range(9, 3), 2);
        assert_eq!(t.len(), 6);
        t.check().unwrap();
    }

    #[test]
    fn a_page_keeps_every_field_of_its_block() {
        let (_f, img) = image();
        let (_g, other) = image();
        let mut t = ImageBlocks::new(4);
        assert_eq!(t.get(0), None, "nothing before the first association");
        let i = t.image_index(&img);
        let j = t.image_index(&other);
        let b = ImageBlock {
            image: j,
            offset: u64::MAX - 4095,
            crc: u32::MAX,
            checked: true,
        };
        t.insert(3, b);
        t.insert(0, block(i, 0));
        assert_eq!(t.get(3), Some(b));
        assert_eq!(t.get(0), Some(block(i, 0)));
        assert_eq!((t.get(1), t.get(4)), (None, None));
        // Outside the region, or an image never indexed: no association.
        t.insert(4, block(i, 0));
        t.insert(1, block(7, 0));
        assert_eq!((t.get(1), t.get(4), t.len()), (None, None, 2));
        t.check().unwrap();
    }

    #[test]
    fn any_in_at_group_edges() {
        let (_f, img) = image();
        // Three groups and a partial fourth (pages 192..200).
        let mut t = ImageBlocks::new(200);
        let i = t.image_index(&img);
        assert!(!t.any_in(0, 200), "no association yet");
        t.insert(64 + 5, block(i, 0));
        assert!(!t.any_in(64, 5), "the group holds one, but not in 64..69");
        assert!(t.any_in(64, 6));
        assert!(t.any_in(0, 128) && !t.any_in(0, 64) && !t.any_in(128, 64));
        assert!(!t.any_in(70, 58), "the rest of the group");
        assert!(!t.any_in(69, 0), "an empty range");
        t.insert(199, block(i, 4096));
        assert!(t.any_in(192, 8) && t.any_in(192, 64) && t.any_in(199, 1));
        assert!(!t.any_in(192, 7));
        assert!(!t.any_in(200, 64) && !t.any_in(5000, 1), "past the region");
        t.remove(199);
        assert!(!t.any_in(192, 64));
        t.check().unwrap();
    }

    #[test]
    fn any_in_agrees_with_a_scan_of_every_page() {
        let (_f, img) = image();
        // Not a multiple of the group: the last group (960..1000) is partial.
        let pages = 1000;
        let mut t = ImageBlocks::new(pages);
        let i = t.image_index(&img);
        let mut shadow = vec![false; pages];
        let mut held: Vec<usize> = Vec::new();
        let mut rng = TestRng::new(0x9e37_79b9_7f4a_7c15);
        let mut next = |m: usize| rng.below(m);
        let (mut empty_whole, mut held_whole) = (0, 0);
        for step in 0..50_000 {
            // 20 to 40 associations over 9 groups: whole groups are often empty, often not.
            if held.len() < 20 || (held.len() < 40 && next(2) == 0) {
                let p = next(pages);
                // Only in even groups and the partial last one: odd groups stay empty.
                let p = if (p / GROUP_PAGES) % 2 == 1 && p < 960 {
                    p - GROUP_PAGES
                } else {
                    p
                };
                if !shadow[p] {
                    held.push(p);
                }
                t.insert(p, block(i, 4096 * p as u64));
                shadow[p] = true;
            } else {
                let p = held.swap_remove(next(held.len()));
                assert!(t.remove(p).is_some());
                shadow[p] = false;
            }
            let (first, n) = match step % 5 {
                0 => (next(pages / 256 + 1) * 256, 256),
                1 => (next(pages / 64 + 1) * 64, 64),
                2 => (next(pages / 64 + 1) * 64, next(64)),
                3 => (next(pages + 100), next(300)),
                _ => (next(pages), next(300) + 1),
            };
            let expected = (first..(first + n).min(pages)).any(|q| shadow[q]);
            if n == GROUP_PAGES && first % GROUP_PAGES == 0 && first + n <= pages {
                if expected {
                    held_whole += 1;
                } else {
                    empty_whole += 1;
                }
            }
            assert_eq!(
                t.any_in(first, n),
                expected,
                "step {step}: pages {first}+{n}"
            );
        }
        assert!(
            empty_whole > 1000 && held_whole > 1000,
            "{empty_whole} / {held_whole}"
        );
        t.check().unwrap();
    }

    #[test]
    fn a_block_may_have_several_pages_and_a_page_one_block() {
        let (_f, img) = image();
        let mut t = ImageBlocks::new(64);
        let i = t.image_index(&img);
        t.insert(1, block(i, 0));
        t.insert(2, block(i, 0));
        assert_eq!(t.pages_overlapping(i, 0, 1, 4096), vec![1, 2]);
        t.insert(2, block(i, 8192));
        assert_eq!(t.pages_overlapping(i, 0, 1, 4096), vec![1]);
        assert_eq!(t.get(2).unwrap().offset, 8192);
        assert_eq!(t.len(), 2);
        t.remove(1);
        t.check().unwrap();
        assert_eq!(t.remove(2).unwrap().offset, 8192);
        assert_eq!(t.remove(2), None);
        t.check().unwrap();
    }
}
