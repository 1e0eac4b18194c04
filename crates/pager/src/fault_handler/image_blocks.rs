//! [`ImageBlocks`]: which pages of a region hold an unmodified copy of an image block (the swap
//! mapper's associations), looked up by page (eviction, page-in) and by image range (a write
//! to the image ends the associations it overlaps).

use std::collections::{BTreeSet, HashMap};
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
#[derive(Debug, Default)]
pub(crate) struct ImageBlocks {
    images: Vec<Arc<ImageFile>>,
    by_page: HashMap<usize, ImageBlock>,
    /// Per image: (block offset, region page). Several pages may copy one block.
    by_offset: Vec<BTreeSet<(u64, usize)>>,
}

impl ImageBlocks {
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
    #[cfg_attr(not(any(test, debug_assertions)), allow(dead_code))] // the invariant check's
    pub fn len(&self) -> usize {
        self.by_page.len()
    }

    /// The block region page `page` is a copy of.
    pub fn get(&self, page: usize) -> Option<ImageBlock> {
        self.by_page.get(&page).copied()
    }

    /// Whether any of pages `first..first + n` is associated.
    pub fn any_in(&self, first: usize, n: usize) -> bool {
        !self.by_page.is_empty() && (first..first + n).any(|p| self.by_page.contains_key(&p))
    }

    /// Page `page` is now a copy of `block` (an earlier association of the page ends).
    pub fn insert(&mut self, page: usize, block: ImageBlock) {
        self.remove(page);
        let Some(set) = self.by_offset.get_mut(block.image as usize) else {
            return;
        };
        set.insert((block.offset, page));
        self.by_page.insert(page, block);
    }

    /// Ends page `page`'s association; returns it.
    pub fn remove(&mut self, page: usize) -> Option<ImageBlock> {
        let b = self.by_page.remove(&page)?;
        if let Some(set) = self.by_offset.get_mut(b.image as usize) {
            set.remove(&(b.offset, page));
        }
        Some(b)
    }

    /// Ends the associations of pages `first..first + n`; returns how many there were.
    pub fn remove_range(&mut self, first: usize, n: usize) -> usize {
        if self.by_page.is_empty() {
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
        if total != self.by_page.len() {
            return Err(format!(
                "{} pages associated but {} blocks indexed",
                self.by_page.len(),
                total
            ));
        }
        for (&p, b) in &self.by_page {
            if !self.by_offset[b.image as usize].contains(&(b.offset, p)) {
                return Err(format!("page {p}: block {:#x} not indexed", b.offset));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut t = ImageBlocks::default();
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
    fn a_block_may_have_several_pages_and_a_page_one_block() {
        let (_f, img) = image();
        let mut t = ImageBlocks::default();
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
