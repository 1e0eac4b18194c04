//! The program's file I/O as the swap mapper and the false-read preventer (VSwapper, seed
//! 004) see it: reads of a regular file straight into a fixed region (QEMU's guest RAM: its
//! worker threads `pread`/`preadv` disk images into guest memory), writes and other changes to
//! a file such reads came from, and hole punches in the guest-RAM memfd (virtio-balloon, free
//! page reporting).
//!
//! * A read into guest RAM ([`read`]): before it, the pages it covers whole are made resident
//!   zero pages (no swap read for data about to be overwritten); after a complete read, those
//!   pages are associated with their image blocks (a page-out then writes nothing, a page-in
//!   reads the block again). A short or failed read makes no association. The file is an
//!   *image* from then on, known by device and inode, read again through memvisor's own
//!   descriptor.
//! * A change to an image ([`write`]: `pwrite`, `pwritev`, `fallocate` that punches or
//!   shifts, `ftruncate`, `copy_file_range` into it): before it reaches the file, every page
//!   associated with a block it touches keeps its content on its own (read back into memory
//!   if it was out); reads that overlap the change make no association.
//! * A punch in the guest-RAM memfd ([`discard_guest_ram`]): the pages are discarded through
//!   the pager (dropped from memory and swap, zero when touched again), never punched behind
//!   its back.
//!
//! * The image's host page cache ([`memvisor_pager::host_cache`], `memvisor run
//!   --host-cache`): after a read into guest RAM, in `exclusive` mode the whole pages of the
//!   bytes that landed in guest RAM leave the host page cache (dirty and writeback pages
//!   stay; under a limit, when the room is needed); the pager lets them back in when it
//!   evicts the guest pages the image holds.
//!   Reads into other memory leave the cache alone. Works with `--swap-mapper off` too (then
//!   nothing is associated, and nothing is let back in).
//! * A limit on the image's host cache ([`memvisor_pager::image_cache_limit`], `memvisor run
//!   --image-cache`, the control socket's `set_image_cache`): once the file is an image, its
//!   reads (into guest RAM or not, timed) and its positional writes ([`accessed`]) go through
//!   its CAR model, whose victims leave the host cache. `O_DIRECT` I/O outside guest RAM is
//!   not told; `O_DIRECT` reads into guest RAM still are (nothing is cached to drop).
//!
//! `aio=native` (`io_submit`) and `aio=io_uring` (`io_uring_submit`) requests take the same
//! steps, split at submission and completion ([`start_read`], [`PendingRead::finish`],
//! [`start_change`]; see [`crate::aio_entry_points`] and [`crate::uring_entry_points`]).
//!
//! Not seen: plain `write`/`writev` at the file position. A write that changes an associated
//! block without being seen is caught by the block's checksum at its next page-in (SIGBUS,
//! never wrong data).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use libc::c_int;
use memvisor_pager::{FileKey, ImageFile};

use crate::managed_process::{self as mp, ACTIVE, EXCLUSIVE_HOST_CACHE, SWAP_MAPPER};
use crate::raw_calls::{errno, set_errno};
use crate::shim_guard::{is_pager_thread, ShimGuard};

/// Files read into guest RAM so far.
static IMAGES: Mutex<Vec<Arc<ImageFile>>> = Mutex::new(Vec::new());
/// Whether `IMAGES` holds any (lock-free check for every write of the program).
static ANY_IMAGE: AtomicBool = AtomicBool::new(false);
/// The cache limit of images found from now on (0: none).
static DEFAULT_CACHE_LIMIT: AtomicU64 = AtomicU64::new(0);
/// Whether any image has (or will get) a cache limit: the program's other reads and its
/// writes of images are then told to the limits' models.
static ANY_CACHE_LIMIT: AtomicBool = AtomicBool::new(false);

/// Sets the cache limit given to each image found from now on (`memvisor run --image-cache`).
pub fn set_default_cache_limit(limit: Option<u64>) {
    DEFAULT_CACHE_LIMIT.store(limit.unwrap_or(0), Ordering::Release);
    if limit.is_some() {
        ANY_CACHE_LIMIT.store(true, Ordering::Release);
    }
}

/// Sets (`Some`) or lifts (`None`) the cache limit of the image whose path is `image` as the
/// status shows it, or of every image and those found later (`None`); the limit was checked
/// by the control server (whose threads are inside the library for good).
pub fn set_cache_limit(image: Option<&str>, limit: Option<u64>) -> Result<(), String> {
    let list: Vec<Arc<ImageFile>> = images().clone();
    match image {
        None => {
            set_default_cache_limit(limit);
            for i in &list {
                i.set_cache_limit(limit);
            }
        }
        Some(path) => {
            let Some(i) = list.iter().find(|i| i.path().to_str() == Some(path)) else {
                let known: Vec<String> = list
                    .iter()
                    .map(|i| i.path().display().to_string())
                    .collect();
                return Err(format!(
                    "no image '{path}' in this process (images: {})",
                    if known.is_empty() {
                        "none yet".to_string()
                    } else {
                        known.join(", ")
                    }
                ));
            };
            if limit.is_some() {
                ANY_CACHE_LIMIT.store(true, Ordering::Release);
            }
            i.set_cache_limit(limit);
        }
    }
    Ok(())
}

/// Whether `fd` was opened with `O_DIRECT` (its I/O bypasses the host cache).
fn is_direct(fd: c_int) -> bool {
    // SAFETY: F_GETFL reads the descriptor's flags; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_DIRECT != 0
}

/// The program read (in `read_nanos`) or wrote (0) `n` bytes (the call's result) of `fd` at
/// `offset` through the host cache, other than a read into guest RAM: if `fd` is an image
/// under a cache limit, the limit's model is told.
pub fn accessed(fd: c_int, offset: i64, n: isize, read_nanos: u64) {
    if !ANY_CACHE_LIMIT.load(Ordering::Acquire)
        || offset < 0
        || n <= 0
        || !ACTIVE.load(Ordering::Acquire)
        || is_pager_thread()
    {
        return;
    }
    let Some(_guard) = ShimGuard::enter() else {
        return;
    };
    let saved = errno();
    if let Some(image) = known_image(fd) {
        if image.cache_limit().is_some() && !is_direct(fd) {
            image.accessed(offset as u64, n as u64, read_nanos);
            if read_nanos > 0 {
                image.advise_readahead(fd, n as u64);
            }
        }
    }
    set_errno(saved);
}

/// Device and inode of the file `fd` refers to, and whether it is a regular file.
fn file_key(fd: c_int) -> Option<(FileKey, bool)> {
    // SAFETY: an all-zero `struct stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `struct stat` into `st`.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    let key = FileKey {
        dev: st.st_dev,
        ino: st.st_ino,
    };
    Some((key, st.st_mode & libc::S_IFMT == libc::S_IFREG))
}

/// Device and inode of `fd` if it is a regular file.
fn regular_file_key(fd: c_int) -> Option<FileKey> {
    file_key(fd).and_then(|(key, regular)| regular.then_some(key))
}

fn images() -> std::sync::MutexGuard<'static, Vec<Arc<ImageFile>>> {
    IMAGES.lock().unwrap_or_else(|e| e.into_inner())
}

/// The image `fd` reads, opened on first use; `None` if it is not a regular file.
fn image_for_read(fd: c_int) -> Option<Arc<ImageFile>> {
    let key = regular_file_key(fd)?;
    let mut list = images();
    if let Some(i) = list.iter().find(|i| i.key() == key) {
        return Some(i.clone());
    }
    let image = Arc::new(ImageFile::open_fd(fd).ok()?);
    if image.key() != key {
        return None; // the descriptor changed meanwhile
    }
    if EXCLUSIVE_HOST_CACHE.load(Ordering::Acquire) {
        image.set_host_cache(memvisor_pager::HostCache::Exclusive);
    }
    let limit = DEFAULT_CACHE_LIMIT.load(Ordering::Acquire);
    if limit > 0 {
        image.set_cache_limit(Some(limit));
    }
    list.push(image.clone());
    ANY_IMAGE.store(true, Ordering::Release);
    Some(image)
}

/// The image `fd` refers to, if it is one already.
fn known_image(fd: c_int) -> Option<Arc<ImageFile>> {
    if !ANY_IMAGE.load(Ordering::Acquire) {
        return None;
    }
    let key = regular_file_key(fd)?;
    images().iter().find(|i| i.key() == key).cloned()
}

/// Whether the program's I/O is looked at: the library manages this process, the mapper is on,
/// and this is not one of the pager's own threads.
fn watching() -> bool {
    ACTIVE.load(Ordering::Acquire) && SWAP_MAPPER.load(Ordering::Acquire) && !is_pager_thread()
}

/// Whether the program's reads are looked at: as [`watching`], or the host cache is
/// exclusive or limited.
pub fn watching_reads() -> bool {
    ACTIVE.load(Ordering::Acquire)
        && (SWAP_MAPPER.load(Ordering::Acquire)
            || EXCLUSIVE_HOST_CACHE.load(Ordering::Acquire)
            || ANY_CACHE_LIMIT.load(Ordering::Acquire))
        && !is_pager_thread()
}

/// Every image read into guest RAM so far, and its host page cache (for the status).
pub fn image_statuses() -> Vec<memvisor_control::ImageStatus> {
    let list: Vec<Arc<ImageFile>> = images().clone();
    list.iter()
        .map(|i| {
            let s = i.host_cache_stats();
            let model = s.limit.model.clone().unwrap_or_default();
            memvisor_control::ImageStatus {
                path: i.path().display().to_string(),
                host_cache: s.mode.name().to_string(),
                guest_read_bytes: s.guest_read_bytes,
                cached_bytes: s.cached_bytes.unwrap_or(0),
                host_cache_dropped_bytes: s.dropped_bytes,
                host_cache_kept_dirty_bytes: s.kept_unclean_bytes,
                host_cache_demoted_bytes: s.demoted_bytes,
                host_cache_errors: s.errors,
                cache_limit_bytes: s.limit.model.as_ref().map(|m| m.limit_bytes),
                cache_model_bytes: model.resident_bytes,
                cache_guest_held_bytes: model.guest_held_bytes,
                cache_guest_released_bytes: model.guest_released_bytes,
                cache_hits: model.hits,
                cache_misses: model.misses,
                cache_evicted_dropped_bytes: s.limit.evicted_dropped_bytes,
                cache_reconciled_bytes: s.limit.reconciled_bytes,
                cache_folio_dropped_bytes: s.limit.folio_dropped_bytes,
                cache_kept_dirty_bytes: s.limit.kept_unclean_bytes,
                cache_miss_read_nanos: s.limit.miss_read_nanos,
                cache_timed_misses: s.limit.timed_misses,
                cache_refaults: memvisor_control::RefaultStatus {
                    unit_bytes: model.block_bytes,
                    sub_buckets: model.sub_buckets,
                    refaults: model.refaults,
                    beyond: model.beyond,
                    evicted_bytes: model.evicted_bytes,
                },
            }
        })
        .collect()
}

/// The file ranges `(offset, length)` of the bytes a read at `offset` that returned `n` bytes
/// put into guest RAM (`pieces`, in read order), adjacent ones merged.
fn guest_ranges(pieces: &[Piece], offset: u64, n: usize) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for p in pieces {
        let end = (p.at + p.len).min(n);
        if end <= p.at {
            continue;
        }
        let (o, l) = (offset + p.at as u64, (end - p.at) as u64);
        match out.last_mut() {
            Some((lo, ll)) if *lo + *ll == o => *ll += l,
            _ => out.push((o, l)),
        }
    }
    out
}

/// Part of a read's buffers inside fixed region `slot`: `len` bytes at address `addr`, at
/// byte `at` of the read.
struct Piece {
    slot: usize,
    addr: usize,
    len: usize,
    at: usize,
}

/// Bytes of `fd` from `offset` to its end (`fstat`), or `None` if unknown.
fn bytes_before_end(fd: c_int, offset: u64) -> Option<u64> {
    // SAFETY: an all-zero `struct stat` is a valid value to be overwritten.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes one `struct stat` into `st`.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return None;
    }
    Some((st.st_size.max(0) as u64).saturating_sub(offset))
}

/// A positional read of `fd` at `offset` into the buffers `iov` (`(address, length)`), with
/// `preadv2` flags `flags` (0 for the other calls), done by `real` (which returns what the
/// system call returns and sets `errno`).
///
/// The false-read preventer maps as zeros only the pages the read will overwrite: those its
/// buffers cover whole before the file's end. A read with `RWF_NOWAIT` may fail with `EAGAIN`
/// having read nothing, so it is passed through without it. (A read that fails with an I/O
/// error after all leaves those pages zero: what a failed disk transfer leaves in a buffer is
/// undefined, and QEMU reports the error to the guest.)
pub fn read(
    fd: c_int,
    iov: &[(usize, usize)],
    offset: i64,
    flags: c_int,
    real: impl FnOnce() -> isize,
) -> isize {
    if !read_into_guest_possible(offset, flags) {
        return other_read(fd, offset, real);
    }
    let Some(guard) = ShimGuard::enter() else {
        return real();
    };
    match start_read(fd, iov, offset) {
        ReadStart::OtherMemory => {
            drop(guard);
            other_read(fd, offset, real)
        }
        ReadStart::NotAnImage => real(),
        ReadStart::GuestRam(pending) => {
            let started = std::time::Instant::now();
            let n = real();
            let nanos = started.elapsed().as_nanos() as u64;
            let saved = errno();
            pending.finish(n, nanos);
            // Nothing without a limit.
            if n > 0 {
                pending.image.advise_readahead(fd, n as u64);
            }
            set_errno(saved);
            n
        }
    }
}

/// Whether a read at `offset` with `preadv2` flags `flags` may be one into guest RAM that the
/// library acts on (the process has fixed regions and its reads are looked at).
pub fn read_into_guest_possible(offset: i64, flags: c_int) -> bool {
    offset >= 0 && flags & libc::RWF_NOWAIT == 0 && mp::has_fixed() && watching_reads()
}

/// What [`start_read`] found a read to be.
pub enum ReadStart {
    /// None of its buffers is guest RAM.
    OtherMemory,
    /// Into guest RAM, but from something other than a regular file.
    NotAnImage,
    /// Into guest RAM from an image: the false-read preventer has run; the read's result goes
    /// to [`PendingRead::finish`].
    GuestRam(PendingRead),
}

/// A read of an image into guest RAM that was started ([`start_read`]) and whose result is
/// not known yet.
pub struct PendingRead {
    image: Arc<ImageFile>,
    /// The parts of its buffers in guest RAM.
    pieces: Vec<Piece>,
    /// File offset of its first byte.
    offset: u64,
    /// Bytes it asks for.
    total: usize,
    /// The image's write state before it started (`None`: the mapper is off, or a write was
    /// in flight).
    epoch: Option<memvisor_pager::ReadEpoch>,
}

/// Starts a read of `fd` at `offset` (at least 0) into the buffers `iov`: finds the parts in
/// guest RAM and, with the swap mapper on, maps as zeros the pages the read will overwrite
/// whole (up to the file's end) that are not in memory. Called inside the library (a
/// [`ShimGuard`] held), before the read is issued.
pub fn start_read(fd: c_int, iov: &[(usize, usize)], offset: i64) -> ReadStart {
    let mut pieces = Vec::new();
    let mut total = 0usize;
    for &(base, len) in iov {
        let (over, n) = mp::managed_overlaps(base, len);
        for &(s, l, owner) in &over[..n] {
            if let Some(slot) = owner {
                pieces.push(Piece {
                    slot,
                    addr: s,
                    len: l,
                    at: total + (s - base),
                });
            }
        }
        total = total.saturating_add(len);
    }
    if pieces.is_empty() {
        return ReadStart::OtherMemory;
    }
    let Some(image) = image_for_read(fd) else {
        return ReadStart::NotAnImage;
    };
    let mapper = SWAP_MAPPER.load(Ordering::Acquire);
    let epoch = image.read_epoch().filter(|_| mapper);
    // Bytes the read can fill (up to the file's end), asked for once when first needed.
    let mut room: Option<Option<u64>> = None;
    for p in pieces.iter().filter(|_| mapper) {
        let _ = mp::with_fixed(p.slot, |r, start| {
            // Nothing a read could be spared: the pager's residency hint, or else the kernel.
            if r.covered_pages_resident(p.addr - start, p.len) || all_in_memory(p.addr, p.len) {
                return Ok(());
            }
            let room = *room.get_or_insert_with(|| bytes_before_end(fd, offset as u64));
            // Only what the read will overwrite: not past the file's end (a short read).
            let len = room.map_or(0, |b| (p.len as u64).min(b.saturating_sub(p.at as u64)));
            if len == 0 {
                return Ok(());
            }
            // A failure leaves the pages to the read's own faults: nothing is lost.
            r.prepare_overwrite(p.addr - start, len as usize)
        });
    }
    ReadStart::GuestRam(PendingRead {
        image,
        pieces,
        offset: offset as u64,
        total,
        epoch,
    })
}

impl PendingRead {
    /// The read returned `n` (bytes, or negative: failed) after `read_nanos` (0: untimed): a
    /// complete read associates the pages it covered whole with their blocks (with the mapper
    /// on, and no write to the image since it started), and the bytes that landed in guest RAM
    /// are told to the image's host cache. A caller that needs `errno` afterwards saves it
    /// first.
    pub fn finish(&self, n: isize, read_nanos: u64) {
        if n >= 0 && n as usize == self.total {
            if let Some(epoch) = self.epoch {
                for p in &self.pieces {
                    let _ = mp::with_fixed(p.slot, |r, start| {
                        r.associate(
                            p.addr - start,
                            p.len,
                            &self.image,
                            self.offset + p.at as u64,
                            epoch,
                        )
                    });
                }
            }
        }
        if n > 0 {
            // The guest holds these blocks now: an exclusive host cache drops them (under a
            // limit, when the room is needed).
            // The read's time goes with its first range (the model counts a miss cost once).
            for (i, (o, l)) in guest_ranges(&self.pieces, self.offset, n as usize)
                .into_iter()
                .enumerate()
            {
                self.image
                    .guest_holds(o, l, l, if i == 0 { read_nanos } else { 0 });
            }
        }
    }
}

/// A read of `fd` at `offset` into other memory than guest RAM, done by `real`: told to the
/// image's cache limit if there is one.
fn other_read(fd: c_int, offset: i64, real: impl FnOnce() -> isize) -> isize {
    if !ANY_CACHE_LIMIT.load(Ordering::Acquire) {
        return real(); // no clock read on every read of a process without limits
    }
    let started = std::time::Instant::now();
    let n = real();
    accessed(fd, offset, n, started.elapsed().as_nanos() as u64);
    n
}

/// Whether every page `[addr, addr + len)` covers whole is in memory (`mincore`: the region's
/// memfd holds exactly its resident pages), so the false-read preventer has nothing to do and
/// the handler need not be asked.
fn all_in_memory(addr: usize, len: usize) -> bool {
    let page = memvisor_pager::page_size();
    let (first, end) = (addr.next_multiple_of(page), (addr + len) / page * page);
    if end <= first {
        return true;
    }
    let mut vec = vec![0u8; (end - first) / page];
    // SAFETY: `[first, end)` is page-aligned and lies in a fixed region's mapping; mincore
    // writes one byte per page into `vec`, which is that long.
    let r = unsafe { libc::mincore(first as *mut libc::c_void, end - first, vec.as_mut_ptr()) };
    r == 0 && vec.iter().all(|&v| v & 1 != 0)
}

/// A change to bytes `[from, to)` of the file `fd` (`to` = `u64::MAX`: to its end), done by
/// `real`. If `fd` is an image, the pages associated with the blocks it touches keep their
/// content first, and reads overlapping it make no association.
pub fn write<R>(fd: c_int, from: u64, to: u64, real: impl FnOnce() -> R) -> R {
    if !watching() || from >= to {
        return real();
    }
    let Some(_guard) = ShimGuard::enter() else {
        return real();
    };
    let Some(image) = start_change(fd, from, to) else {
        return real();
    };
    let r = real();
    let saved = errno();
    image.end_write();
    set_errno(saved);
    r
}

/// Starts a change to bytes `[from, to)` of `fd` (inside the library, before the change is
/// issued): if `fd` is a known image, its write is begun and the pages associated with the
/// blocks it touches keep their content on their own; the image is returned, and its
/// [`ImageFile::end_write`] must follow once the change returned. `None`: not an image, or
/// the mapper is off.
pub fn start_change(fd: c_int, from: u64, to: u64) -> Option<Arc<ImageFile>> {
    if !watching() || from >= to {
        return None;
    }
    let image = known_image(fd)?;
    image.begin_write();
    let key = image.key();
    mp::for_each_fixed(|r| {
        if let Err(e) = r.image_written(key, from, to) {
            eprintln!("memvisor-preload: {e}");
        }
    });
    Some(image)
}

/// The bytes `[from, to)` an `fallocate` of `mode` changes (`None`: it allocates only).
pub fn fallocate_changes(mode: c_int, off: i64, len: i64) -> Option<(u64, u64)> {
    const KEEP_SIZE: c_int = 0x01;
    const PUNCH_HOLE: c_int = 0x02;
    const ZERO_RANGE: c_int = 0x10;
    const UNSHARE_RANGE: c_int = 0x40;
    const WRITE_ZEROES: c_int = 0x80;
    let (off, len) = (off.max(0) as u64, len.max(0) as u64);
    if mode & !(KEEP_SIZE | UNSHARE_RANGE) == 0 {
        return None;
    }
    if mode & !(KEEP_SIZE | PUNCH_HOLE | ZERO_RANGE | WRITE_ZEROES) == 0 {
        return Some((off, off.saturating_add(len)));
    }
    // Collapse, insert, or unknown: everything from `off` on may move.
    Some((off, u64::MAX))
}

/// `fallocate(fd, mode, off, len)` where `fd` may be the guest-RAM memfd of a fixed region: a
/// hole punched in it (virtio-balloon, free page reporting) is a discard of those pages
/// through the pager. `None`: `fd` is no region's memfd (the caller goes on).
pub fn discard_guest_ram(fd: c_int, mode: c_int, off: i64, len: i64) -> Option<c_int> {
    const PUNCH_HOLE: c_int = 0x02;
    if mode & PUNCH_HOLE == 0
        || !ACTIVE.load(Ordering::Acquire)
        || !mp::has_fixed()
        || is_pager_thread()
    {
        // The pager punches its own memfds (eviction): never a discard.
        return None;
    }
    let _guard = ShimGuard::enter()?;
    let (key, _) = file_key(fd)?;
    let page = memvisor_pager::page_size() as i64;
    let answer = mp::with_fixed_memfd(key, |r| {
        if off < 0
            || len <= 0
            || off
                .checked_add(len)
                .is_none_or(|e| e as u64 > r.len() as u64)
        {
            return Err(libc::EINVAL);
        }
        // Whole pages are discarded; the bytes of a partly covered page at either end are
        // zeroed through the mapping (so the pager sees the write).
        let first = (off + page - 1) / page * page;
        let end = (off + len) / page * page;
        if end > first {
            r.discard(first as usize, (end - first) as usize)
                .map_err(|e| {
                    eprintln!("memvisor-preload: {e}");
                    libc::EIO
                })?;
        }
        for (s, e) in [(off, first.min(off + len)), (end.max(first), off + len)] {
            if e > s {
                // SAFETY: `[s, e)` lies inside the live region (checked above); a punched
                // range's bytes are the program's to change.
                unsafe { std::ptr::write_bytes(r.as_ptr().add(s as usize), 0, (e - s) as usize) };
            }
        }
        Ok(())
    });
    answer.map(|r| match r {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_ranges_are_clipped_to_the_read_and_merged() {
        let piece = |at, len| Piece {
            slot: 0,
            addr: 0,
            len,
            at,
        };
        // Two adjacent iovecs in guest RAM, a gap (memory outside), one more.
        let pieces = [piece(0, 4096), piece(4096, 8192), piece(16384, 4096)];
        assert_eq!(
            guest_ranges(&pieces, 1 << 20, 20480),
            vec![((1 << 20), 12288), ((1 << 20) + 16384, 4096)]
        );
        // A short read: only what arrived.
        assert_eq!(guest_ranges(&pieces, 0, 6000), vec![(0, 6000)]);
        assert!(guest_ranges(&pieces, 0, 0).is_empty());
    }

    #[test]
    fn fallocate_modes_that_change_bytes() {
        assert_eq!(fallocate_changes(0, 0, 4096), None);
        assert_eq!(fallocate_changes(0x01, 0, 4096), None);
        assert_eq!(fallocate_changes(0x03, 4096, 8192), Some((4096, 12288)));
        assert_eq!(fallocate_changes(0x10, 0, 4096), Some((0, 4096)));
        assert_eq!(fallocate_changes(0x08, 4096, 4096), Some((4096, u64::MAX)));
        assert_eq!(fallocate_changes(0x20, 0, 4096), Some((0, u64::MAX)));
        assert_eq!(fallocate_changes(0x400, 0, 4096), Some((0, u64::MAX)));
    }
}
