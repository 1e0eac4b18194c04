//! [`DirtyProbe`]: a few pages of a disk image made dirty in the host page cache (rewritten with
//! the bytes they already hold, so the guest still reads valid data), and the check that a
//! scrub never drops a page that was dirty when it started.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use memvisor_scrub::cachestat;

use crate::bench_error::BenchError;

const PAGE: u64 = 4096;

/// Pages `first..first + count` of an image, dirtied on request and watched.
#[derive(Debug)]
pub struct DirtyProbe {
    path: PathBuf,
    file: File,
    first: u64,
    count: u64,
}

impl DirtyProbe {
    /// Opens `path` read-write (cachestat needs write access) for pages `first..first + count`.
    pub fn open(path: &Path, first: u64, count: u64) -> Result<Self, BenchError> {
        let file = File::options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| BenchError::io("open image for the dirty-page probe", path, e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            first,
            count,
        })
    }

    /// Rewrites every probe page with its own bytes, without syncing: the pages are now dirty
    /// in the host page cache and their content is unchanged.
    pub fn dirty(&self) -> Result<(), BenchError> {
        let mut buf = vec![0u8; PAGE as usize];
        for page in self.first..self.first + self.count {
            let off = page * PAGE;
            self.file
                .read_exact_at(&mut buf, off)
                .map_err(|e| BenchError::io("read probe page", &self.path, e))?;
            self.file
                .write_all_at(&buf, off)
                .map_err(|e| BenchError::io("rewrite probe page", &self.path, e))?;
        }
        Ok(())
    }

    /// The probe pages that are dirty (or under writeback) in the page cache now.
    pub fn dirty_pages(&self) -> Result<Vec<u64>, BenchError> {
        let mut dirty = Vec::new();
        for page in self.first..self.first + self.count {
            let st = cachestat(self.file.as_fd(), page * PAGE, PAGE)
                .map_err(|e| BenchError::io("cachestat probe page", &self.path, e))?;
            if st.unclean() > 0 {
                dirty.push(page);
            }
        }
        Ok(dirty)
    }

    /// How many of `pages` are no longer in the page cache.
    pub fn gone(&self, pages: &[u64]) -> Result<u64, BenchError> {
        let mut gone = 0;
        for &page in pages {
            let st = cachestat(self.file.as_fd(), page * PAGE, PAGE)
                .map_err(|e| BenchError::io("cachestat probe page", &self.path, e))?;
            if st.nr_cache == 0 {
                gone += 1;
            }
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_scrub::drop_range;

    #[test]
    fn dirtied_pages_are_seen_dirty_keep_their_bytes_and_go_once_clean() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("img");
        let data: Vec<u8> = (0..16 * PAGE).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        File::open(&path).unwrap().sync_all().unwrap();
        let probe = DirtyProbe::open(&path, 2, 3).unwrap();
        assert!(probe.dirty_pages().unwrap().is_empty());
        probe.dirty().unwrap();
        assert_eq!(probe.dirty_pages().unwrap(), vec![2, 3, 4]);
        assert_eq!(std::fs::read(&path).unwrap(), data);
        // (Not checked here: that DONTNEED keeps them. It starts their writeback and drops
        // those clean by then, and on an idle disk the writeback once finished first in CI.)
        // Once written back they are clean, and dropped.
        File::open(&path).unwrap().sync_all().unwrap();
        assert!(probe.dirty_pages().unwrap().is_empty());
        drop_range(&File::open(&path).unwrap(), 0, 16 * PAGE).unwrap();
        assert_eq!(probe.gone(&[2, 3, 4]).unwrap(), 3);
    }
}
