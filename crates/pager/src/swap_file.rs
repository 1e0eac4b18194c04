//! [`SwapFile`]: a region's private, sparse swap file, one fixed slot per chunk.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::crc32c::crc32c;
use crate::fault_injector::FaultInjector;
use crate::pager_error::PagerError;

/// Alignment required of buffers, offsets and lengths for `O_DIRECT` (a page covers every
/// logical block size in use).
pub const DIRECT_ALIGN: usize = 4096;

/// Why a chunk read failed.
#[derive(Debug)]
pub enum ReadError {
    /// The read itself failed (or was short).
    Io(io::Error),
    /// The data read does not match the checksum recorded when it was written.
    Checksum {
        /// Recorded CRC32C.
        expected: u32,
        /// CRC32C of the data read.
        actual: u32,
    },
}

/// What [`SwapFile::write_chunk`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The data was written and its checksum recorded.
    Written,
    /// The data was all zeros: nothing written, the slot punched, recorded as zero.
    Zero,
}

/// A sparse file whose slot `i` (at offset `i * chunk_size`) holds chunk `i` of a region.
///
/// Created `0600` in the swap directory without a name (`O_TMPFILE`; where the filesystem
/// lacks it, created exclusively without following links and unlinked at once), so it vanishes
/// when the file is closed or the process dies, and no other user can open it or plant a link
/// where it is created. Reads and writes are whole chunks with `O_DIRECT` when the
/// filesystem allows it (buffered otherwise; see [`is_direct`](Self::is_direct)); buffers must be
/// [`DIRECT_ALIGN`]-aligned. Each stored chunk's CRC32C is kept in memory and verified on read;
/// all-zero chunks are never written.
#[derive(Debug)]
pub struct SwapFile {
    file: Arc<File>,
    path: PathBuf,
    chunk_size: usize,
    direct: bool,
    /// `Some(crc)` for stored chunks, `None` for chunks that read as zero.
    crcs: Vec<Option<u32>>,
    /// With [`keep_page_checksums`](Self::keep_page_checksums): the CRC32C of every page of
    /// every chunk, valid for the chunks that are stored.
    page_crcs: Option<Vec<u32>>,
    injector: Option<Arc<FaultInjector>>,
}

/// One chunk write prepared by [`SwapFile::prepare_write`], to be carried out on any thread.
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

    /// Writes `data` and returns its CRC32C.
    pub fn write(&self, data: &[u8]) -> io::Result<u32> {
        self.injected_failure()?;
        let crc = crc32c(data);
        self.file.write_all_at(data, self.offset)?;
        Ok(crc)
    }
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
        Ok(Self {
            file: Arc::new(file),
            path,
            chunk_size,
            direct,
            crcs: vec![None; chunks],
            page_crcs: None,
            injector,
        })
    }

    /// Also keep a checksum per page, so one page of a stored chunk can be read and verified
    /// on its own ([`read_page`](Self::read_page)); costs 4 bytes per page of the region.
    /// Must be called before anything is stored.
    pub fn keep_page_checksums(&mut self) {
        let pages = self.crcs.len() * (self.chunk_size / DIRECT_ALIGN);
        self.page_crcs = Some(vec![0; pages]);
    }

    /// Records the page checksums of `data`, the content about to be written as chunk
    /// `chunk` (they count once the write is recorded; until then the chunk reads as zero).
    /// No-op without page checksums.
    pub(crate) fn set_page_checksums(&mut self, chunk: usize, data: &[u8]) {
        let per_chunk = self.chunk_size / DIRECT_ALIGN;
        if let Some(p) = self.page_crcs.as_mut() {
            let first = chunk * per_chunk;
            for (i, page) in data.chunks(DIRECT_ALIGN).enumerate().take(per_chunk) {
                if let Some(slot) = p.get_mut(first + i) {
                    *slot = crc32c(page);
                }
            }
        }
    }

    /// Reads page `page` (index within the chunk) of stored chunk `chunk` into `buf` (one
    /// page, aligned) and verifies it against its own checksum. `Ok(false)` if the chunk is not
    /// stored or page checksums are not kept: read the whole chunk instead.
    pub fn read_page(&self, chunk: usize, page: usize, buf: &mut [u8]) -> Result<bool, ReadError> {
        let per_chunk = self.chunk_size / DIRECT_ALIGN;
        let Some(p) = self.page_crcs.as_ref() else {
            return Ok(false);
        };
        if page >= per_chunk || buf.len() != DIRECT_ALIGN {
            return Err(ReadError::Io(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "page {page} of chunk {chunk} / length {} out of range",
                    buf.len()
                ),
            )));
        }
        let offset = self
            .check(chunk, DIRECT_ALIGN, buf.as_ptr())
            .map_err(ReadError::Io)?;
        if self.crcs[chunk].is_none() {
            return Ok(false);
        }
        let expected = p[chunk * per_chunk + page];
        if let Some(inj) = &self.injector {
            inj.before_read().map_err(ReadError::Io)?;
        }
        self.file
            .read_exact_at(buf, offset + (page * DIRECT_ALIGN) as u64)
            .map_err(ReadError::Io)?;
        self.verify(expected, buf)?;
        Ok(true)
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

    /// Whether chunk `chunk` holds stored data (else it reads as zero).
    pub fn is_stored(&self, chunk: usize) -> bool {
        self.crcs.get(chunk).is_some_and(|c| c.is_some())
    }

    /// The CRC32C recorded for chunk `chunk`, if it is stored.
    pub fn stored_crc(&self, chunk: usize) -> Option<u32> {
        self.crcs.get(chunk).copied().flatten()
    }

    /// Bytes of disk the file occupies (`st_blocks * 512`).
    pub fn allocated_bytes(&self) -> io::Result<u64> {
        Ok(std::os::unix::fs::MetadataExt::blocks(&self.file.metadata()?) * 512)
    }

    fn check(&self, chunk: usize, len: usize, ptr: *const u8) -> io::Result<u64> {
        if chunk >= self.crcs.len() || len == 0 || len > self.chunk_size {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("chunk {chunk} / length {len} out of range"),
            ));
        }
        if self.direct && (ptr as usize % DIRECT_ALIGN != 0 || len % DIRECT_ALIGN != 0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "O_DIRECT buffer not page-aligned",
            ));
        }
        Ok(chunk as u64 * self.chunk_size as u64)
    }

    /// Stores `data` (at most one chunk) as chunk `chunk`. All-zero data is not written: the slot
    /// is punched and recorded as zero. On error the chunk's previous content in the file is
    /// forgotten (it reads as zero), so keep the data elsewhere.
    pub fn write_chunk(&mut self, chunk: usize, data: &[u8]) -> io::Result<WriteOutcome> {
        if is_zero(data) {
            self.check(chunk, data.len(), data.as_ptr())?;
            self.punch(chunk)?;
            return Ok(WriteOutcome::Zero);
        }
        let w = self.prepare_write(chunk, data)?;
        self.set_page_checksums(chunk, data);
        let crc = w.write(data)?;
        self.record_written(chunk, crc);
        Ok(WriteOutcome::Written)
    }

    /// Starts a write of `data` as chunk `chunk` that another thread (or the kernel, through
    /// io_uring) carries out: checks the arguments and forgets the chunk's previous content
    /// (it is being overwritten). Once the write has succeeded, [`record_written`] the
    /// checksum; until then, and for good if it fails, the chunk reads as zero.
    ///
    /// [`record_written`]: Self::record_written
    pub(crate) fn prepare_write(&mut self, chunk: usize, data: &[u8]) -> io::Result<ChunkWrite> {
        let offset = self.check(chunk, data.len(), data.as_ptr())?;
        self.crcs[chunk] = None;
        Ok(ChunkWrite {
            offset,
            file: self.file.clone(),
            injector: self.injector.clone(),
        })
    }

    /// Records that chunk `chunk` now holds data with checksum `crc` (after a prepared write
    /// succeeded).
    pub(crate) fn record_written(&mut self, chunk: usize, crc: u32) {
        if let Some(c) = self.crcs.get_mut(chunk) {
            *c = Some(crc);
        }
    }

    /// Reads chunk `chunk` into `buf` (its stored length). Returns `Ok(false)`, leaving `buf`
    /// untouched, if the chunk is not stored (it is all zeros); `Ok(true)` once the data is in
    /// `buf` and matches its checksum.
    pub fn read_chunk(&mut self, chunk: usize, buf: &mut [u8]) -> Result<bool, ReadError> {
        let offset = self
            .check(chunk, buf.len(), buf.as_ptr())
            .map_err(ReadError::Io)?;
        let Some(expected) = self.crcs[chunk] else {
            return Ok(false);
        };
        if let Some(inj) = &self.injector {
            inj.before_read().map_err(ReadError::Io)?;
        }
        self.file
            .read_exact_at(buf, offset)
            .map_err(ReadError::Io)?;
        self.verify(expected, buf)?;
        Ok(true)
    }

    /// Where to read stored chunk `chunk` into `buf` by other means (an io_uring): the file's
    /// descriptor and the offset, after the checks [`read_chunk`](Self::read_chunk) makes.
    /// `Ok(None)` if the chunk is not stored. Pass what was read to
    /// [`accept_read`](Self::accept_read).
    pub(crate) fn read_target(&self, chunk: usize, buf: &[u8]) -> io::Result<Option<(RawFd, u64)>> {
        let offset = self.check(chunk, buf.len(), buf.as_ptr())?;
        if self.crcs[chunk].is_none() {
            return Ok(None);
        }
        Ok(Some((self.file.as_raw_fd(), offset)))
    }

    /// Where stored chunk `chunk` lives, for a read on another thread: the file, the offset
    /// and the checksum it must match. `None` if the chunk is not stored.
    pub(crate) fn read_source(&self, chunk: usize) -> Option<(Arc<File>, u64, u32)> {
        let crc = self.stored_crc(chunk)?;
        Some((
            self.file.clone(),
            chunk as u64 * self.chunk_size as u64,
            crc,
        ))
    }

    /// Accepts `buf` as chunk `chunk`'s content read elsewhere (by a prefetch) exactly as
    /// [`read_chunk`](Self::read_chunk) accepts what it reads: the same injected failures
    /// apply, and the data must match the stored checksum.
    pub(crate) fn accept_read(&self, chunk: usize, buf: &mut [u8]) -> Result<(), ReadError> {
        let Some(expected) = self.stored_crc(chunk) else {
            return Err(ReadError::Io(io::Error::other("chunk is not stored")));
        };
        if let Some(inj) = &self.injector {
            inj.before_read().map_err(ReadError::Io)?;
        }
        self.verify(expected, buf)
    }

    fn verify(&self, expected: u32, buf: &mut [u8]) -> Result<(), ReadError> {
        if let Some(inj) = &self.injector {
            inj.after_read(buf);
        }
        let actual = crc32c(buf);
        if actual != expected {
            return Err(ReadError::Checksum { expected, actual });
        }
        Ok(())
    }

    /// Frees chunk `chunk`'s blocks and records it as zero.
    pub fn punch(&mut self, chunk: usize) -> io::Result<()> {
        if chunk >= self.crcs.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("chunk {chunk} out of range"),
            ));
        }
        if self.crcs[chunk].take().is_none() {
            return Ok(());
        }
        // SAFETY: fallocate on a valid descriptor has no memory-safety preconditions.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                (chunk * self.chunk_size) as libc::off_t,
                self.chunk_size as libc::off_t,
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
        assert_eq!(s.write_chunk(1, w).unwrap(), WriteOutcome::Written);
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
        assert_eq!(s.write_chunk(2, w).unwrap(), WriteOutcome::Written);
        assert!(s.read_chunk(2, r).unwrap());
        assert_eq!(r, w);
        assert!(!s.read_chunk(1, r).unwrap());

        inj.corrupt_reads(1);
        assert!(matches!(
            s.read_chunk(2, r),
            Err(ReadError::Checksum { .. })
        ));
        inj.fail_reads(libc::EIO, 1);
        assert!(matches!(s.read_chunk(2, r), Err(ReadError::Io(_))));
        assert!(s.read_chunk(2, r).unwrap());

        inj.fail_writes(libc::ENOSPC, 1);
        let e = s.write_chunk(3, w).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert!(!s.is_stored(3));

        w.fill(0);
        assert_eq!(s.write_chunk(2, w).unwrap(), WriteOutcome::Zero);
        assert!(!s.is_stored(2));
        assert_eq!(s.allocated_bytes().unwrap(), 0);
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
