//! [`SwapFile`]: a region's private, sparse swap file, one fixed slot per chunk, stored page
//! by page.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::crc32c::crc32c;
use crate::fault_injector::FaultInjector;
use crate::page_bitmap::PageBitmap;
use crate::pager_error::PagerError;

/// Alignment required of buffers, offsets and lengths for `O_DIRECT` (a page covers every
/// logical block size in use).
pub const DIRECT_ALIGN: usize = 4096;

/// Why a read from swap failed.
#[derive(Debug)]
pub enum ReadError {
    /// The read itself failed (or was short).
    Io(io::Error),
    /// A page read does not match the checksum recorded when it was written.
    Checksum {
        /// The page (index within its chunk).
        page: usize,
        /// Recorded CRC32C.
        expected: u32,
        /// CRC32C of the data read.
        actual: u32,
    },
}

/// What [`SwapFile::write_pages`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The data was written and its checksum recorded.
    Written,
    /// The data was all zeros: nothing written, the slot punched, recorded as zero.
    Zero,
}

/// A sparse file whose slot `i` (at offset `i * chunk_size`) holds chunk `i` of a region, page by
/// page.
///
/// Created `0600` in the swap directory without a name (`O_TMPFILE`; where the filesystem
/// lacks it, created exclusively without following links and unlinked at once), so it vanishes
/// when the file is closed or the process dies, and no other user can open it or plant a link
/// where it is created. Reads and writes are runs of whole pages inside one chunk, with `O_DIRECT`
/// when the filesystem allows it (buffered otherwise; see [`is_direct`](Self::is_direct));
/// buffers must be [`DIRECT_ALIGN`]-aligned. Each page is stored or not on its own: a stored
/// page's CRC32C is kept in memory and verified when it is read; a page that is not stored reads
/// as zeros (a read zero-fills it, whatever the file holds there).
#[derive(Debug)]
pub struct SwapFile {
    file: Arc<File>,
    path: PathBuf,
    chunk_size: usize,
    pages_per_chunk: usize,
    direct: bool,
    /// Per page of the region: its slot holds its data (with checksum `page_crcs[page]`).
    stored: PageBitmap,
    /// Per page: the CRC32C of its stored data (meaningless where it is not stored).
    page_crcs: Vec<u32>,
    /// Per chunk: bumped whenever its stored content changes, so a copy read earlier (a
    /// prefetch) can tell it is stale.
    versions: Vec<u32>,
    injector: Option<Arc<FaultInjector>>,
}

/// One write of a run of pages prepared by [`SwapFile::prepare_write`], to be carried out on any
/// thread.
#[derive(Debug, Clone)]
pub(crate) struct ChunkWrite {
    /// Byte offset in the swap file.
    pub offset: u64,
    /// The swap file (shared with its owner, who reads other chunks meanwhile).
    pub file: Arc<File>,
    injector: Option<Arc<FaultInjector>>,
}

impl ChunkWrite {
    /// The injected failure for this write, if the test armed one.
    pub fn injected_failure(&self) -> io::Result<()> {
        match &self.injector {
            Some(inj) => inj.before_write(),
            None => Ok(()),
        }
    }

    /// Writes `data` (whole pages) and returns the CRC32C of each of its pages.
    pub fn write(&self, data: &[u8]) -> io::Result<Vec<u32>> {
        self.injected_failure()?;
        let crcs = page_checksums(data);
        self.file.write_all_at(data, self.offset)?;
        Ok(crcs)
    }
}

/// The CRC32C of every [`DIRECT_ALIGN`]-sized page of `data`.
pub(crate) fn page_checksums(data: &[u8]) -> Vec<u32> {
    data.chunks(DIRECT_ALIGN).map(crc32c).collect()
}

static SWAP_SEQ: AtomicU64 = AtomicU64::new(0);

/// Opens a new, nameless swap file in `dir`: `O_TMPFILE` where the filesystem has it, so no
/// name ever exists that another user could plant a link at or open; elsewhere a new file at
/// `path` (`O_CREAT|O_EXCL|O_NOFOLLOW`, so a planted name or symlink is refused, never
/// followed) unlinked at once. `O_DIRECT` where the filesystem allows it; returns whether it is.
fn create_unnamed(dir: &Path, path: &Path) -> Result<(File, bool), PagerError> {
    let failed = |op: &'static str, source: io::Error| PagerError::SwapFile {
        path: path.to_path_buf(),
        op,
        source,
    };
    match open_swap(dir, true) {
        Ok(opened) => Ok(opened),
        // EOPNOTSUPP: the filesystem has no O_TMPFILE; EISDIR: the kernel predates it.
        Err(e) if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::EISDIR)) => {
            let opened = open_swap(path, false).map_err(|e| failed("create", e))?;
            std::fs::remove_file(path).map_err(|e| failed("unlink", e))?;
            Ok(opened)
        }
        Err(e) => Err(failed("create", e)),
    }
}

/// Opens a new file read-write, `0600`: nameless in directory `at` (`tmpfile`), else at path
/// `at`, exclusively and without following a final symlink. With `O_DIRECT` unless the
/// filesystem refuses it (`EINVAL`); returns whether it is direct.
fn open_swap(at: &Path, tmpfile: bool) -> io::Result<(File, bool)> {
    let open = |direct: bool| {
        let direct = if direct { libc::O_DIRECT } else { 0 };
        let mut o = OpenOptions::new();
        o.read(true).write(true).mode(0o600);
        if tmpfile {
            o.custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC | direct);
        } else {
            o.create_new(true)
                .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | direct);
        }
        o.open(at)
    };
    match open(true) {
        Ok(f) => Ok((f, true)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => open(false).map(|f| (f, false)),
        Err(e) => Err(e),
    }
}

impl SwapFile {
    /// Creates the swap file for `chunks` chunks of `chunk_size` bytes in `dir`; `tag` goes into
    /// the (short-lived) file name.
    pub fn create(
        dir: &Path,
        tag: &str,
        chunk_size: usize,
        chunks: usize,
        injector: Option<Arc<FaultInjector>>,
    ) -> Result<Self, PagerError> {
        if chunk_size == 0 || chunk_size % DIRECT_ALIGN != 0 {
            return Err(PagerError::Config(format!(
                "swap chunk size {chunk_size} is not a multiple of {DIRECT_ALIGN}"
            )));
        }
        let name = format!(
            "memvisor-swap-{}-{}-{}",
            std::process::id(),
            tag,
            SWAP_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let (file, direct) = create_unnamed(dir, &path)?;
        let len = (chunk_size as u64).saturating_mul(chunks as u64);
        if let Err(source) = file.set_len(len) {
            return Err(PagerError::SwapFile {
                path,
                op: "set length",
                source,
            });
        }
        let pages_per_chunk = chunk_size / DIRECT_ALIGN;
        let pages = chunks.saturating_mul(pages_per_chunk);
        Ok(Self {
            file: Arc::new(file),
            path,
            chunk_size,
            pages_per_chunk,
            direct,
            stored: PageBitmap::new(pages),
            page_crcs: vec![0; pages],
            versions: vec![0; chunks],
            injector,
        })
    }

    /// The name the file is known by in messages (it has none in the directory).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes an unprivileged writer may still use on the file's filesystem (`fstatvfs`
    /// `f_bavail`): how much more can be paged out.
    pub fn free_bytes(&self) -> io::Result<u64> {
        // SAFETY: statvfs is plain data; all zeros is a valid value for the kernel to overwrite.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: the descriptor is open for the duration of the call; `st` is valid and
        // writable.
        if unsafe { libc::fstatvfs(self.file.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
    }

    /// Whether I/O bypasses the page cache (`O_DIRECT`).
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// Pages per chunk ([`DIRECT_ALIGN`]-sized).
    pub fn pages_per_chunk(&self) -> usize {
        self.pages_per_chunk
    }

    /// Whether any page of chunk `chunk` is stored (else the whole chunk reads as zero).
    pub fn is_stored(&self, chunk: usize) -> bool {
        self.stored_pages(chunk) > 0
    }

    /// How many pages of chunk `chunk` are stored.
    pub fn stored_pages(&self, chunk: usize) -> usize {
        self.stored_pages_in(chunk, 0, self.pages_per_chunk)
    }

    /// How many of pages `first..first + n` of chunk `chunk` are stored.
    pub fn stored_pages_in(&self, chunk: usize, first: usize, n: usize) -> usize {
        if chunk >= self.versions.len() || first >= self.pages_per_chunk {
            return 0;
        }
        let n = n.min(self.pages_per_chunk - first);
        self.stored
            .count_range(chunk * self.pages_per_chunk + first, n)
    }

    /// Whether page `page` of chunk `chunk` is stored.
    pub fn is_page_stored(&self, chunk: usize, page: usize) -> bool {
        page < self.pages_per_chunk && self.stored.get(chunk * self.pages_per_chunk + page)
    }

    /// The CRC32C of page `page` of chunk `chunk`, if it is stored.
    pub fn page_crc(&self, chunk: usize, page: usize) -> Option<u32> {
        self.is_page_stored(chunk, page)
            .then(|| self.page_crcs[chunk * self.pages_per_chunk + page])
    }

    /// A number that changes whenever chunk `chunk`'s stored content changes.
    pub fn version(&self, chunk: usize) -> u32 {
        self.versions.get(chunk).copied().unwrap_or(0)
    }

    /// Bytes of disk the file occupies (`st_blocks * 512`).
    pub fn allocated_bytes(&self) -> io::Result<u64> {
        Ok(std::os::unix::fs::MetadataExt::blocks(&self.file.metadata()?) * 512)
    }

    /// Checks a run of `len` bytes from page `first` of chunk `chunk` in a buffer at `ptr`;
    /// returns its offset in the file.
    fn check(&self, chunk: usize, first: usize, len: usize, ptr: *const u8) -> io::Result<u64> {
        let pages = len / DIRECT_ALIGN;
        if chunk >= self.versions.len()
            || len == 0
            || len % DIRECT_ALIGN != 0
            || first
                .checked_add(pages)
                .is_none_or(|e| e > self.pages_per_chunk)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("chunk {chunk}, page {first}, length {len}: out of range"),
            ));
        }
        if self.direct && ptr as usize % DIRECT_ALIGN != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "O_DIRECT buffer not page-aligned",
            ));
        }
        Ok(chunk as u64 * self.chunk_size as u64 + (first * DIRECT_ALIGN) as u64)
    }

    fn bump(&mut self, chunk: usize) {
        if let Some(v) = self.versions.get_mut(chunk) {
            *v = v.wrapping_add(1);
        }
    }

    /// Reads pages `first..` of chunk `chunk` into `buf` (whole pages, at most to the chunk's
    /// end). Returns `Ok(0)`, leaving `buf` untouched, if none of them is stored; otherwise how
    /// many are, once every stored page matches its checksum and every other page of `buf` is
    /// zeroed.
    pub fn read_pages(
        &self,
        chunk: usize,
        first: usize,
        buf: &mut [u8],
    ) -> Result<usize, ReadError> {
        let offset = self
            .check(chunk, first, buf.len(), buf.as_ptr())
            .map_err(ReadError::Io)?;
        let stored = self.stored_pages_in(chunk, first, buf.len() / DIRECT_ALIGN);
        if stored == 0 {
            return Ok(0);
        }
        if let Some(inj) = &self.injector {
            inj.before_read().map_err(ReadError::Io)?;
        }
        self.file
            .read_exact_at(buf, offset)
            .map_err(ReadError::Io)?;
        self.verify(chunk, first, buf)?;
        Ok(stored)
    }

    /// Where to read pages `first..` of chunk `chunk` into `buf` by other means (an io_uring):
    /// the file's descriptor and the offset, after the checks [`read_pages`](Self::read_pages)
    /// makes. `Ok(None)` if none of them is stored. Pass what was read to
    /// [`accept_read`](Self::accept_read).
    pub(crate) fn read_target(
        &self,
        chunk: usize,
        first: usize,
        buf: &[u8],
    ) -> io::Result<Option<(RawFd, u64)>> {
        let offset = self.check(chunk, first, buf.len(), buf.as_ptr())?;
        let stored = self.stored_pages_in(chunk, first, buf.len() / DIRECT_ALIGN);
        Ok((stored > 0).then(|| (self.file.as_raw_fd(), offset)))
    }

    /// Where stored page `page` of chunk `chunk` is in the file, for a read by other means
    /// (check it with [`accept_read`](Self::accept_read)); `None` if it is not stored.
    pub(crate) fn page_source(&self, chunk: usize, page: usize) -> Option<(RawFd, u64)> {
        self.is_page_stored(chunk, page).then(|| {
            (
                self.file.as_raw_fd(),
                chunk as u64 * self.chunk_size as u64 + (page * DIRECT_ALIGN) as u64,
            )
        })
    }

    /// Where chunk `chunk` lives, for a read of the whole chunk on another thread: the file,
    /// the offset and the chunk's [`version`](Self::version) now. `None` if no page of it is
    /// stored.
    pub(crate) fn read_source(&self, chunk: usize) -> Option<(Arc<File>, u64, u32)> {
        if !self.is_stored(chunk) {
            return None;
        }
        Some((
            self.file.clone(),
            chunk as u64 * self.chunk_size as u64,
            self.version(chunk),
        ))
    }

    /// Accepts `buf` as pages `first..` of chunk `chunk` read elsewhere (by an io_uring or a
    /// prefetch) exactly as [`read_pages`](Self::read_pages) accepts what it reads: the same
    /// injected failures apply, stored pages must match their checksums, the others are zeroed.
    pub(crate) fn accept_read(
        &self,
        chunk: usize,
        first: usize,
        buf: &mut [u8],
    ) -> Result<(), ReadError> {
        self.check(chunk, first, buf.len(), buf.as_ptr())
            .map_err(ReadError::Io)?;
        if let Some(inj) = &self.injector {
            inj.before_read().map_err(ReadError::Io)?;
        }
        self.verify(chunk, first, buf)
    }

    /// Checks every stored page of `buf` (pages `first..` of chunk `chunk`) against its
    /// checksum and zeroes the pages that are not stored.
    fn verify(&self, chunk: usize, first: usize, buf: &mut [u8]) -> Result<(), ReadError> {
        let base = chunk * self.pages_per_chunk + first;
        if let Some(inj) = &self.injector {
            // Injected corruption lands in stored data (the first stored page read).
            let pages = buf.len() / DIRECT_ALIGN;
            if let Some(i) = (0..pages).find(|&i| self.stored.get(base + i)) {
                inj.after_read(&mut buf[i * DIRECT_ALIGN..(i + 1) * DIRECT_ALIGN]);
            }
        }
        for (i, page) in buf.chunks_mut(DIRECT_ALIGN).enumerate() {
            if !self.stored.get(base + i) {
                page.fill(0);
                continue;
            }
            let expected = self.page_crcs[base + i];
            let actual = crc32c(page);
            if actual != expected {
                return Err(ReadError::Checksum {
                    page: first + i,
                    expected,
                    actual,
                });
            }
        }
        Ok(())
    }

    /// Stores `data` (whole pages) as pages `first..` of chunk `chunk`. All-zero data is not
    /// written: those pages are punched and recorded as zero. On error the pages' previous
    /// content in the file is forgotten (they read as zero), so keep the data elsewhere.
    pub fn write_pages(
        &mut self,
        chunk: usize,
        first: usize,
        data: &[u8],
    ) -> io::Result<WriteOutcome> {
        if is_zero(data) {
            self.check(chunk, first, data.len(), data.as_ptr())?;
            self.punch_pages(chunk, first, data.len() / DIRECT_ALIGN)?;
            return Ok(WriteOutcome::Zero);
        }
        let w = self.prepare_write(chunk, first, data)?;
        let crcs = w.write(data)?;
        self.record_written(chunk, first, &crcs);
        Ok(WriteOutcome::Written)
    }

    /// Starts a write of `data` as pages `first..` of chunk `chunk` that another thread (or the
    /// kernel, through io_uring) carries out: checks the arguments and forgets those pages'
    /// previous content (it is being overwritten). Once the write has succeeded,
    /// [`record_written`] its page checksums; until then, and for good if it fails, the pages
    /// read as zero.
    ///
    /// [`record_written`]: Self::record_written
    pub(crate) fn prepare_write(
        &mut self,
        chunk: usize,
        first: usize,
        data: &[u8],
    ) -> io::Result<ChunkWrite> {
        let offset = self.check(chunk, first, data.len(), data.as_ptr())?;
        self.stored.set_range(
            chunk * self.pages_per_chunk + first,
            data.len() / DIRECT_ALIGN,
            false,
        );
        self.bump(chunk);
        Ok(ChunkWrite {
            offset,
            file: self.file.clone(),
            injector: self.injector.clone(),
        })
    }

    /// Records that pages `first..first + crcs.len()` of chunk `chunk` now hold data with these
    /// checksums (after a prepared write succeeded).
    pub(crate) fn record_written(&mut self, chunk: usize, first: usize, crcs: &[u32]) {
        if chunk >= self.versions.len() || first + crcs.len() > self.pages_per_chunk {
            return;
        }
        let base = chunk * self.pages_per_chunk + first;
        self.page_crcs[base..base + crcs.len()].copy_from_slice(crcs);
        self.stored.set_range(base, crcs.len(), true);
        self.bump(chunk);
    }

    /// Frees chunk `chunk`'s blocks and records all its pages as zero.
    pub fn punch(&mut self, chunk: usize) -> io::Result<()> {
        self.punch_pages(chunk, 0, self.pages_per_chunk)
    }

    /// Frees the blocks of pages `first..first + n` of chunk `chunk` and records them as zero.
    pub fn punch_pages(&mut self, chunk: usize, first: usize, n: usize) -> io::Result<()> {
        if chunk >= self.versions.len() || first.saturating_add(n) > self.pages_per_chunk {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("chunk {chunk}, pages {first}+{n}: out of range"),
            ));
        }
        let base = chunk * self.pages_per_chunk + first;
        if self.stored.count_range(base, n) == 0 {
            return Ok(());
        }
        self.stored.set_range(base, n, false);
        self.bump(chunk);
        // SAFETY: fallocate on a valid descriptor has no memory-safety preconditions.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (chunk * self.chunk_size + first * DIRECT_ALIGN) as libc::off_t,
                (n * DIRECT_ALIGN) as libc::off_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Whether every byte of `data` is zero.
pub fn is_zero(data: &[u8]) -> bool {
    let (head, body, tail) = {
        // SAFETY: every bit pattern is a valid u64, and align_to only reinterprets the aligned
        // middle part of the slice.
        unsafe { data.align_to::<u64>() }
    };
    head.iter().all(|&b| b == 0) && body.iter().all(|&w| w == 0) && tail.iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memfd::Mapping;

    const CS: usize = 64 * 1024;

    fn buf(len: usize) -> Mapping {
        Mapping::anonymous(len).unwrap()
    }

    fn slice(m: &mut Mapping, len: usize) -> &mut [u8] {
        assert!(len <= m.len());
        // SAFETY: test-only; the mapping is at least `len` bytes, exclusively borrowed.
        unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), len) }
    }

    /// A symlink planted at the name a swap file would have is neither followed nor a reason
    /// to fail, on a filesystem with `O_TMPFILE` and on the fallback path alike.
    #[test]
    fn planted_symlinks_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"DATA").unwrap();
        let swaps = dir.path().join("swaps");
        std::fs::create_dir(&swaps).unwrap();
        for seq in 0..64 {
            let name = format!("memvisor-swap-{}-planted-{seq}", std::process::id());
            std::os::unix::fs::symlink(&victim, swaps.join(name)).unwrap();
        }
        let mut s = SwapFile::create(&swaps, "planted", CS, 4, None).unwrap();
        let mut w = buf(CS);
        let w = slice(&mut w, CS);
        w.fill(7);
        assert_eq!(s.write_pages(1, 0, w).unwrap(), WriteOutcome::Written);
        assert_eq!(std::fs::read(&victim).unwrap(), b"DATA");
        // The fallback (named, exclusive, no-follow) refuses a planted name rather than
        // following it.
        let planted = swaps.join(format!("memvisor-swap-{}-planted-0", std::process::id()));
        let err = open_swap(&planted, false).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EEXIST), "{err}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"DATA");
    }

    #[test]
    fn round_trip_zero_and_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let inj = Arc::new(FaultInjector::new());
        let mut s = SwapFile::create(dir.path(), "t", CS, 4, Some(inj.clone())).unwrap();
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "unlinked"
        );
        let mut w = buf(CS);
        let mut r = buf(CS);
        let w = slice(&mut w, CS);
        let r = slice(&mut r, CS);
        w.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        assert_eq!(s.write_pages(2, 0, w).unwrap(), WriteOutcome::Written);
        assert_eq!(s.read_pages(2, 0, r).unwrap(), CS / DIRECT_ALIGN);
        assert_eq!(r, w);
        assert_eq!(s.read_pages(1, 0, r).unwrap(), 0);

        inj.corrupt_reads(1);
        assert!(matches!(
            s.read_pages(2, 0, r),
            Err(ReadError::Checksum { .. })
        ));
        inj.fail_reads(libc::EIO, 1);
        assert!(matches!(s.read_pages(2, 0, r), Err(ReadError::Io(_))));
        assert_eq!(s.read_pages(2, 0, r).unwrap(), CS / DIRECT_ALIGN);

        inj.fail_writes(libc::ENOSPC, 1);
        let e = s.write_pages(3, 0, w).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert!(!s.is_stored(3));

        w.fill(0);
        assert_eq!(s.write_pages(2, 0, w).unwrap(), WriteOutcome::Zero);
        assert!(!s.is_stored(2));
        assert_eq!(s.allocated_bytes().unwrap(), 0);
    }

    /// Pages of one chunk are stored, read, verified and punched on their own; a run read over
    /// stored and unstored pages returns zeros for the unstored ones, whatever the file holds
    /// there; the version changes with every change of the chunk's stored content.
    #[test]
    fn pages_are_stored_on_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let inj = Arc::new(FaultInjector::new());
        let mut s = SwapFile::create(dir.path(), "p", CS, 2, Some(inj.clone())).unwrap();
        let ppc = CS / DIRECT_ALIGN;
        assert_eq!(s.pages_per_chunk(), ppc);
        let mut w = buf(CS);
        let w = slice(&mut w, CS);
        w.iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = (i / DIRECT_ALIGN) as u8 + 1);
        // The whole chunk, then pages 3 and 4 forgotten (an interrupted rewrite) and page 5
        // punched: the file still holds their old bytes.
        assert_eq!(s.write_pages(1, 0, w).unwrap(), WriteOutcome::Written);
        let v0 = s.version(1);
        let p = DIRECT_ALIGN;
        drop(s.prepare_write(1, 3, &w[3 * p..5 * p]).unwrap());
        s.punch_pages(1, 5, 1).unwrap();
        assert_ne!(s.version(1), v0);
        assert_eq!(s.stored_pages(1), ppc - 3);
        assert!(s.is_page_stored(1, 2) && !s.is_page_stored(1, 3) && !s.is_page_stored(1, 5));
        assert_eq!(s.page_crc(1, 2), Some(crc32c(&w[2 * p..3 * p])));
        assert_eq!(s.page_crc(1, 3), None);
        let mut r = buf(8 * p);
        let r = slice(&mut r, 8 * p);
        r.fill(0xee);
        assert_eq!(s.read_pages(1, 1, &mut r[..7 * p]).unwrap(), 4);
        for (i, page) in r[..7 * p].chunks(p).enumerate() {
            let want = if (2..5).contains(&i) { 0 } else { i as u8 + 2 };
            assert!(page.iter().all(|&b| b == want), "page {}", i + 1);
        }
        // Only pages that are not stored: nothing read, buffer untouched.
        r.fill(0xee);
        assert_eq!(s.read_pages(1, 3, &mut r[..3 * p]).unwrap(), 0);
        assert!(r.iter().all(|&b| b == 0xee));
        // A corrupt page names itself.
        inj.corrupt_reads(1);
        match s.read_pages(1, 6, &mut r[..p]) {
            Err(ReadError::Checksum { page: 6, .. }) => {}
            other => panic!("{other:?}"),
        }
        // A run past the chunk's end is refused.
        assert!(s.read_pages(1, ppc - 1, &mut r[..2 * p]).is_err());
        assert!(s.punch_pages(1, ppc, 1).is_err());
        // Page 3 written again on its own.
        let w3 = &w[3 * p..4 * p];
        let target = s.prepare_write(1, 3, w3).unwrap();
        let crcs = target.write(w3).unwrap();
        s.record_written(1, 3, &crcs);
        assert_eq!(s.read_pages(1, 3, &mut r[..p]).unwrap(), 1);
        assert_eq!(&r[..p], w3);
        s.punch(1).unwrap();
        assert!(!s.is_stored(1));
    }

    #[test]
    fn is_zero_checks_every_byte() {
        let mut v = vec![0u8; 1001];
        assert!(is_zero(&v));
        v[1000] = 1;
        assert!(!is_zero(&v));
        v[1000] = 0;
        v[3] = 1;
        assert!(!is_zero(&v[1..]));
    }
}
