//! [`ImageFile`]: a disk image the program reads guest memory from, as the swap mapper (seed
//! 004, VSwapper) sees it: memvisor's own read-only descriptor of it, its identity (device and
//! inode), and the write epoch that keeps an association from being made with data a
//! concurrent write is replacing.
//!
//! A guest page that holds an unmodified copy of an image block is *associated* with it: its
//! eviction writes nothing, and its page-in reads the block again through this descriptor.
//! Whoever writes to the image (the preload library interposes the program's writes) calls
//! [`ImageFile::begin_write`] before the write reaches the file and [`ImageFile::end_write`]
//! after; an association whose read overlapped any write is refused
//! ([`ImageFile::read_epoch`]), because the page may hold either the old or the new bytes.
//! It also carries the image's host-cache state ([`crate::host_cache`]): what the guest now
//! holds leaves the host cache in `exclusive` mode, and comes back when memvisor evicts it;
//! with a limit ([`crate::image_cache_limit`]), a CAR model of the image's accesses decides
//! what the host cache keeps.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::host_cache::{HostCache, HostCacheStats, ImageHostCache};

/// Identity of an open file (an image, a memfd): its device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FileKey {
    /// `st_dev`.
    pub dev: u64,
    /// `st_ino`.
    pub ino: u64,
}

/// An image file under the swap mapper.
#[derive(Debug)]
pub struct ImageFile {
    key: FileKey,
    /// Where it was opened from, for messages (`/proc/self/fd/N`'s target at open time).
    path: PathBuf,
    /// memvisor's own read-only descriptor (a new open file description: no shared offset,
    /// no `O_DIRECT` inherited from the program's).
    file: File,
    /// Writes to the image in flight (between `begin_write` and `end_write`).
    writes_in_flight: AtomicU64,
    /// Bumped at the end of every write.
    write_epoch: AtomicU64,
    /// What memvisor does with the image's host page cache.
    host_cache: ImageHostCache,
}

/// A snapshot of an image's write state taken before a read ([`ImageFile::read_epoch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadEpoch(u64);

impl ImageFile {
    /// The image the program's descriptor `fd` has open: opened again read-only through
    /// `/proc/self/fd/<fd>`. Fails unless `fd` is a regular file this process may read.
    pub fn open_fd(fd: RawFd) -> io::Result<Self> {
        let link = format!("/proc/self/fd/{fd}");
        let path = std::fs::read_link(&link)?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(&link)?;
        Self::from_file(file, path)
    }

    /// The image at `path` (tests and tools), opened read-only.
    pub fn open_path(path: &Path) -> io::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(path)?;
        Self::from_file(file, path.to_path_buf())
    }

    fn from_file(file: File, path: PathBuf) -> io::Result<Self> {
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a regular file", path.display()),
            ));
        }
        Ok(Self {
            key: FileKey {
                dev: meta.dev(),
                ino: meta.ino(),
            },
            path,
            file,
            writes_in_flight: AtomicU64::new(0),
            write_epoch: AtomicU64::new(0),
            host_cache: ImageHostCache::default(),
        })
    }

    /// Device and inode.
    pub fn key(&self) -> FileKey {
        self.key
    }

    /// The path it was opened from (for messages; the file may have been renamed since).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// memvisor's descriptor of the image.
    pub fn raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Reads `buf.len()` bytes at `offset` in full; a short read (end of file) is an error.
    pub fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    /// Taken before a read from the image: `None` if a write is in flight (the read may see
    /// part of it: make no association).
    pub fn read_epoch(&self) -> Option<ReadEpoch> {
        if self.writes_in_flight.load(Ordering::SeqCst) > 0 {
            return None;
        }
        Some(ReadEpoch(self.write_epoch.load(Ordering::SeqCst)))
    }

    /// Whether no write started since `epoch` was taken (so data read since then is what the
    /// image holds now, and stays so until the next `begin_write`, which must first end the
    /// associations it overlaps).
    pub fn unchanged_since(&self, epoch: ReadEpoch) -> bool {
        self.writes_in_flight.load(Ordering::SeqCst) == 0
            && self.write_epoch.load(Ordering::SeqCst) == epoch.0
    }

    /// Sets what memvisor does with the image's host page cache (default: nothing).
    pub fn set_host_cache(&self, mode: HostCache) {
        self.host_cache.set_mode(mode);
    }

    /// What memvisor does with the image's host page cache.
    pub fn host_cache(&self) -> HostCache {
        self.host_cache.mode()
    }

    /// The program read `read` bytes of the image into guest RAM, of which the guest now holds
    /// bytes `[offset, offset + len)`: in `exclusive` mode their whole pages leave the host
    /// cache (dirty and writeback pages stay), at once or, under a limit, when the room is
    /// needed. See [`crate::host_cache`].
    /// `read_nanos`: how long the read took (0: untimed).
    pub fn guest_holds(&self, offset: u64, len: u64, read: u64, read_nanos: u64) {
        self.host_cache.note_guest_read(read);
        self.host_cache
            .guest_holds(self.raw_fd(), &self.path, offset, len, read_nanos);
    }

    /// memvisor evicted the guest's copy of bytes `[offset, offset + len)`, which the image
    /// holds: in `exclusive` mode they are let back into the host cache (demotion), with
    /// `POSIX_FADV_WILLNEED` unless `cached` (just read).
    pub fn guest_released(&self, offset: u64, len: u64, cached: bool) {
        self.host_cache
            .guest_released(self.raw_fd(), &self.path, offset, len, cached);
    }

    /// The guest let bytes `[offset, offset + len)` go from its RAM (the page was read over,
    /// discarded or changed): an `exclusive` host cache under a limit keeps them, if still
    /// cached, as blocks only the host holds.
    pub fn guest_dropped(&self, offset: u64, len: u64) {
        self.host_cache.guest_dropped(offset, len);
    }

    /// The program read bytes `[offset, offset + len)` of the image into other memory than
    /// guest RAM (in `read_nanos`), or wrote them (0): with a cache limit, its model takes
    /// them in.
    pub fn accessed(&self, offset: u64, len: u64, read_nanos: u64) {
        self.host_cache
            .accessed(self.raw_fd(), &self.path, offset, len, read_nanos);
    }

    /// The program read `len` bytes of the image through its descriptor `program_fd`: under
    /// a cache limit, that descriptor reads ahead only while a sequential stream runs.
    pub fn advise_readahead(&self, program_fd: i32, len: u64) {
        self.host_cache
            .advise_readahead(program_fd, &self.path, len);
    }

    /// Sets (`Some`) or lifts (`None`) the limit on the image's host page cache
    /// ([`crate::image_cache_limit`]).
    pub fn set_cache_limit(&self, limit: Option<u64>) {
        let len = self.file.metadata().map(|m| m.len()).unwrap_or(0);
        self.host_cache
            .set_limit(self.raw_fd(), &self.path, limit, len);
    }

    /// The limit on the image's host page cache, if set.
    pub fn cache_limit(&self) -> Option<u64> {
        self.host_cache.limit()
    }

    /// The image's host-cache counters, and its bytes in the host page cache now.
    pub fn host_cache_stats(&self) -> HostCacheStats {
        self.host_cache.stats(self.raw_fd())
    }

    /// A write to the image is about to start.
    pub fn begin_write(&self) {
        self.writes_in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// The write started by [`begin_write`](Self::begin_write) returned.
    pub fn end_write(&self) {
        self.write_epoch.fetch_add(1, Ordering::SeqCst);
        self.writes_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn an_epoch_taken_before_a_write_is_stale_after_it() {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&[7u8; 8192]).unwrap();
        let img = ImageFile::open_path(f.path()).unwrap();
        let e = img.read_epoch().unwrap();
        assert!(img.unchanged_since(e));
        img.begin_write();
        assert!(img.read_epoch().is_none());
        assert!(!img.unchanged_since(e));
        img.end_write();
        assert!(!img.unchanged_since(e));
        assert!(img.unchanged_since(img.read_epoch().unwrap()));
        let mut b = [0u8; 4096];
        img.read_exact_at(&mut b, 4096).unwrap();
        assert_eq!(b, [7u8; 4096]);
        assert!(img.read_exact_at(&mut b, 6000).is_err(), "short read");
    }

    #[test]
    fn a_directory_is_not_an_image() {
        let d = tempfile::tempdir().unwrap();
        let e = ImageFile::open_path(d.path()).unwrap_err();
        assert!(
            e.to_string().contains("not a regular file") || e.raw_os_error().is_some(),
            "{e}"
        );
    }
}
