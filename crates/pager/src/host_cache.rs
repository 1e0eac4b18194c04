//! The host page cache of a disk image under memvisor's control (issue 12, seed 001 chapter
//! 5): [`HostCache`] says what memvisor does with it, [`ImageHostCache`] does it for one image.
//!
//! * `default`: nothing; the kernel caches the image as for any file.
//! * `exclusive` (the *exact exclusive host cache*): a block a guest now holds is dropped from
//!   the host cache right after the read that put it in guest RAM (the program's interposed
//!   read, or a page-in of an associated page from the image), and let back in (*demoted*)
//!   when memvisor evicts the guest page the image holds (the swap mapper): the host cache
//!   then holds what guest RAM does not, as the second level of an exclusive hierarchy does.
//!
//! A drop never touches a dirty or writeback page: the range is checked with `cachestat(2)`
//! first and split down to single pages around unclean ones, which are kept (and counted);
//! `posix_fadvise(DONTNEED)` on a clean range would also keep a page dirtied after the check
//! (the kernel drops clean, unmapped pages only), but it starts writeback of dirty pages,
//! which the check spares the guest's `cache=writeback` data. Only whole pages are dropped,
//! and the kernel drops only page-cache folios a range covers whole: a range that leaves
//! clean pages behind (a large folio straddles its end) is remembered (`StraddledDrops`), and
//! merged with the next adjacent range the guest reads, so sequential small reads drop their
//! folios once covered. Where `cachestat(2)` is refused (Linux before 6.5, or a file the
//! process can neither write nor owns) nothing is dropped, with one message per image.
//!
//! Either mode can also hold the image's cache to a limit ([`crate::image_cache_limit`]): its
//! CAR model sees every access that goes through the host cache. In `exclusive` mode under a
//! limit, a block read into guest RAM is not dropped at once: the model holds it as one the
//! guest holds too ([`crate::guest_held_blocks`]), which goes first when room is needed as long
//! as CAR's blocks take at most three quarters of the limit. When the guest lets it go
//! (memvisor evicts its page, or the guest reads over, discards or changes the page) while it
//! is still cached, it stays as a block only the host holds, which the guest's own page cache
//! evictions would otherwise have sent back to the disk. Without a limit, the reads into guest
//! RAM leave the cache at once.

use std::io;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::image_cache_limit::{CacheLimit, CacheLimitStats};
use crate::page_cache_calls::{cachestat, drop_clean, fadvise, page, DropOutcome};
use crate::straddled_drops::StraddledDrops;

/// What memvisor does with the host page cache of the images a program reads into guest RAM.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum HostCache {
    /// Leave it to the kernel.
    #[default]
    Default,
    /// Drop blocks the guest holds after each read into guest RAM (under a limit: when the
    /// room is needed, keeping the blocks the guest lets go); let a block back in when
    /// memvisor evicts the guest page the image holds.
    Exclusive,
}

impl HostCache {
    /// Every accepted value (`memvisor run --host-cache`).
    pub const NAMES: [&'static str; 2] = ["default", "exclusive"];

    /// The value's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Default => "default",
            Self::Exclusive => "exclusive",
        }
    }

    fn from_u8(v: u8) -> Self {
        if v == 1 {
            Self::Exclusive
        } else {
            Self::Default
        }
    }
}

impl FromStr for HostCache {
    type Err = String;

    /// `default` or `exclusive`: the one place a `--host-cache` value is checked.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "default" => Ok(Self::Default),
            "exclusive" => Ok(Self::Exclusive),
            other => Err(format!(
                "unknown host cache mode '{other}' (expected default or exclusive)"
            )),
        }
    }
}

impl std::fmt::Display for HostCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Counters of one image's host cache (cumulative bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCacheStats {
    /// The mode.
    pub mode: HostCache,
    /// Bytes the program read from the image into guest RAM (interposed reads).
    pub guest_read_bytes: u64,
    /// Bytes dropped from the host cache because the guest holds them.
    pub dropped_bytes: u64,
    /// Bytes the guest holds that stayed because they were dirty or under writeback.
    pub kept_unclean_bytes: u64,
    /// Bytes let back into the host cache when memvisor evicted the guest's copy.
    pub demoted_bytes: u64,
    /// Failed drops or demotions (`cachestat`/`posix_fadvise` errors).
    pub errors: u64,
    /// Bytes of the image in the host page cache now (`cachestat(2)`; `None` if refused).
    pub cached_bytes: Option<u64>,
    /// The cache limit's counters and model.
    pub limit: CacheLimitStats,
}

/// One image's host-cache state: mode, counters, and ranges left for merging.
#[derive(Debug, Default)]
pub struct ImageHostCache {
    mode: AtomicU8,
    guest_read_bytes: AtomicU64,
    dropped_bytes: AtomicU64,
    kept_unclean_bytes: AtomicU64,
    demoted_bytes: AtomicU64,
    errors: AtomicU64,
    /// A message was printed (one per image).
    warned: AtomicBool,
    /// Page-aligned ranges the guest holds whose drop left clean pages (a folio straddling
    /// an end).
    pending: Mutex<StraddledDrops>,
    /// The limit on the image's host cache, if set.
    limit: CacheLimit,
}

impl ImageHostCache {
    /// The mode.
    pub fn mode(&self) -> HostCache {
        HostCache::from_u8(self.mode.load(Ordering::Acquire))
    }

    /// Sets the mode.
    pub fn set_mode(&self, mode: HostCache) {
        self.mode.store(mode as u8, Ordering::Release);
    }

    /// Counts `bytes` read by the program into guest RAM.
    pub fn note_guest_read(&self, bytes: u64) {
        self.guest_read_bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn warn_once(&self, path: &std::path::Path, what: &str, e: &io::Error) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if !self.warned.swap(true, Ordering::AcqRel) {
            eprintln!(
                "memvisor: host cache of {}: {what}: {e} (the blocks stay cached; said once per image)",
                path.display()
            );
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, StraddledDrops> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The guest now holds bytes `[off, off + len)` of the image (`fd`, `path` for messages):
    /// in `exclusive` mode, drops the whole pages of the range from the host cache, keeping
    /// dirty and writeback pages; under a limit, the model holds them as the guest's instead
    /// and drops them when the room is needed.
    pub fn guest_holds(
        &self,
        fd: RawFd,
        path: &std::path::Path,
        off: u64,
        len: u64,
        read_nanos: u64,
    ) {
        if self.mode() != HostCache::Exclusive {
            // The read went through the host cache.
            self.accessed(fd, path, off, len, read_nanos);
            return;
        }
        // Under a limit: kept until the room is needed or the guest lets the blocks go.
        match self.limit.guest_read(fd, off, len, read_nanos) {
            Ok(true) => return,
            Ok(false) => {} // no limit: dropped now
            Err((what, e)) => return self.warn_once(path, what, &e),
        }
        let pg = page();
        let (s, e) = (off.next_multiple_of(pg), off.saturating_add(len) / pg * pg);
        if e <= s {
            return;
        }
        let mut pending = self.pending();
        // Merge with the ranges it overlaps or touches: together they may cover a folio.
        let (s, e) = pending.merge(s, e).unwrap_or((s, e));
        match self.drop_clean(fd, s, e - s) {
            Ok(0) => {}
            Ok(_) => pending.keep(s, e),
            Err((what, err)) => self.warn_once(path, what, &err),
        }
    }

    /// Drops the clean pages of `[s, s + len)` (page-aligned); returns how many clean pages
    /// stayed cached (folios straddling the ends).
    fn drop_clean(&self, fd: RawFd, s: u64, len: u64) -> Result<u64, (&'static str, io::Error)> {
        let mut out = DropOutcome::default();
        drop_clean(fd, s, len, &mut out)?;
        let pg = page();
        self.dropped_bytes
            .fetch_add(out.dropped_pages * pg, Ordering::Relaxed);
        let unclean: u64 = out.unclean.iter().map(|r| r.1).sum();
        self.kept_unclean_bytes
            .fetch_add(unclean, Ordering::Relaxed);
        Ok(out.left_clean_pages)
    }

    /// memvisor evicted the guest's copy of bytes `[off, off + len)` (the image holds it): in
    /// `exclusive` mode the block is let back into the host cache, by `POSIX_FADV_WILLNEED`
    /// unless `cached` (the eviction's own check just read it).
    pub fn guest_released(
        &self,
        fd: RawFd,
        path: &std::path::Path,
        off: u64,
        len: u64,
        cached: bool,
    ) {
        if self.mode() != HostCache::Exclusive || len == 0 {
            return;
        }
        // No longer held by the guest: never dropped by a later merge (up to the end of its
        // last page; kept ranges start on a page).
        let end = off.saturating_add(len);
        let end = end.checked_next_multiple_of(page()).unwrap_or(end);
        self.pending().forget(off, end);
        // Under a limit, the blocks still cached from the guest's read are now blocks only
        // the host holds, without a read; the rest is let back in.
        let rest: Vec<(u64, u64)> = self
            .limit
            .guest_released(off, len)
            .unwrap_or_else(|| vec![(off, len)])
            .into_iter()
            // Clipped to the range (a model block may be larger than a page).
            .map(|(o, l)| {
                (
                    o.max(off),
                    (o + l).min(off + len).saturating_sub(o.max(off)),
                )
            })
            .collect();
        let held = len - rest.iter().map(|r| r.1).sum::<u64>();
        self.demoted_bytes.fetch_add(held, Ordering::Relaxed);
        for (o, l) in rest {
            if !cached {
                if let Err(e) = fadvise(fd, o, l, libc::POSIX_FADV_WILLNEED) {
                    self.warn_once(path, "posix_fadvise(WILLNEED)", &e);
                    return;
                }
            }
            self.demoted_bytes.fetch_add(l, Ordering::Relaxed);
            // Back in the host cache: the limit's model takes it in (and may evict for it).
            self.accessed(fd, path, o, l, 0);
        }
    }

    /// The guest let bytes `[off, off + len)` of the image go from its RAM (the page that held
    /// them was read over, discarded, or found changed): in `exclusive` mode under a limit,
    /// the blocks still cached since the guest's read stay, as blocks only the host holds.
    /// Nothing else (without a limit they left the host cache at the read).
    pub fn guest_dropped(&self, off: u64, len: u64) {
        if self.mode() == HostCache::Exclusive && len > 0 {
            // The blocks not held were dropped already (or never cached): nothing to do.
            let _ = self.limit.guest_released(off, len);
        }
    }

    /// The program read or wrote bytes `[off, off + len)` of the image through the host cache
    /// (other than a read into guest RAM in `exclusive` mode): the cache limit's model, if a
    /// limit is set, takes them in and its victims leave the host cache. `read_nanos`: the
    /// read's duration (0: a write or untimed).
    pub fn accessed(&self, fd: RawFd, path: &std::path::Path, off: u64, len: u64, read_nanos: u64) {
        if let Err((what, e)) = self.limit.accessed(fd, off, len, read_nanos) {
            self.warn_once(path, what, &e);
        }
    }

    /// The program read `len` bytes of the image through its own descriptor `program_fd`:
    /// under a limit, that descriptor reads ahead only while a stream runs
    /// ([`CacheLimit::advise_readahead`]).
    pub fn advise_readahead(&self, program_fd: RawFd, path: &std::path::Path, len: u64) {
        if let Err((what, e)) = self.limit.advise_readahead(program_fd, len) {
            self.warn_once(path, what, &e);
        }
    }

    /// Sets (`Some`) or lifts (`None`) the limit on the image's host cache; `file_len` sizes
    /// the model's blocks. A smaller limit drops the excess at once.
    pub fn set_limit(&self, fd: RawFd, path: &std::path::Path, limit: Option<u64>, file_len: u64) {
        if let Err((what, e)) = self.limit.set(fd, limit, file_len) {
            self.warn_once(path, what, &e);
        }
    }

    /// The limit on the image's host cache, if set.
    pub fn limit(&self) -> Option<u64> {
        self.limit.limit()
    }

    /// The counters, and what the host caches of the image now (`fd`).
    pub fn stats(&self, fd: RawFd) -> HostCacheStats {
        HostCacheStats {
            mode: self.mode(),
            guest_read_bytes: self.guest_read_bytes.load(Ordering::Relaxed),
            dropped_bytes: self.dropped_bytes.load(Ordering::Relaxed),
            kept_unclean_bytes: self.kept_unclean_bytes.load(Ordering::Relaxed),
            demoted_bytes: self.demoted_bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            cached_bytes: cachestat(fd, 0, 0).ok().map(|c| c.nr_cache * page()),
            limit: self.limit.stats(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;

    fn file(pages: usize) -> std::fs::File {
        let mut f = tempfile::tempfile_in("/var/tmp").unwrap();
        let data: Vec<u8> = (0..pages * 4096)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        f
    }

    fn cached(f: &std::fs::File, off: u64, len: u64) -> CacheStat {
        cachestat(f.as_raw_fd(), off, len).unwrap()
    }

    use crate::cachestat::CacheStat;

    #[test]
    fn modes_parse_in_one_place() {
        for n in HostCache::NAMES {
            assert_eq!(n.parse::<HostCache>().unwrap().name(), n);
        }
        let e = "on".parse::<HostCache>().unwrap_err();
        assert!(e.contains("'on'") && e.contains("exclusive"), "{e}");
    }

    #[test]
    fn exclusive_drops_clean_whole_pages_and_keeps_dirty_ones() {
        let f = file(64);
        let fd = f.as_raw_fd();
        let p = std::path::Path::new("test");
        // Page-sized folios (a dirty page dirties its whole folio, and DONTNEED drops whole
        // folios only): uncached, then pages 8..12 written (dirty, not synced), then the
        // others read one by one without readahead.
        fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED).unwrap();
        f.write_all_at(&[0xEE; 4 * 4096], 8 * 4096).unwrap();
        fadvise(fd, 0, 0, libc::POSIX_FADV_RANDOM).unwrap();
        let mut b = [0u8; 4096];
        for p in (0..64).filter(|p| !(8..12).contains(p)) {
            f.read_exact_at(&mut b, p * 4096).unwrap();
        }
        assert_eq!(cached(&f, 0, 0).nr_cache, 64);
        assert_eq!(cached(&f, 8 * 4096, 4 * 4096).nr_dirty, 4);
        let hc = ImageHostCache::default();
        // Default mode: nothing happens.
        hc.guest_holds(fd, p, 0, 64 * 4096, 0);
        assert_eq!(cached(&f, 0, 0).nr_cache, 64);
        hc.set_mode(HostCache::Exclusive);
        // Bytes 100 .. 32 pages + 100: partial pages at both ends stay.
        hc.guest_holds(fd, p, 100, 32 * 4096, 0);
        let s = hc.stats(fd);
        assert_eq!(cached(&f, 0, 4096).nr_cache, 1, "partial first page kept");
        assert_eq!(
            cached(&f, 32 * 4096, 4096).nr_cache,
            1,
            "partial last page kept"
        );
        let mid = cached(&f, 4096, 31 * 4096);
        assert_eq!((mid.nr_cache, mid.nr_dirty), (4, 4), "{mid:?} {s:?}");
        assert_eq!(s.dropped_bytes, 27 * 4096, "{s:?}");
        assert_eq!(s.kept_unclean_bytes, 4 * 4096, "{s:?}");
        // The dirty pages still hold what was written.
        f.read_exact_at(&mut b, 9 * 4096).unwrap();
        assert_eq!(b, [0xEE; 4096]);
        // Demotion: let back in.
        hc.guest_released(fd, p, 4096, 4 * 4096, false);
        let t = std::time::Instant::now();
        while cached(&f, 4096, 4 * 4096).nr_cache < 4 && t.elapsed().as_secs() < 5 {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(cached(&f, 4096, 4 * 4096).nr_cache, 4);
        assert_eq!(hc.stats(fd).demoted_bytes, 4 * 4096);
    }
}
