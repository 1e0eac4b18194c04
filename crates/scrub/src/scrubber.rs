//! [`Scrubber`]: the exclusive host cache (Singleton, Algorithm 1). For a VM, index its guest
//! RAM, then for each page of its disk images in the host page cache: hash it, look for a guest
//! page with the same bytes, and drop the host copy when the guest holds one.
//!
//! Safety of the data: only pages whose bytes equal a guest page *now* (read while the same
//! chunk of 256 image pages is processed, within milliseconds) are candidates; a
//! candidate range is dropped only if `cachestat(2)` reports no dirty or writeback page in it
//! (a dirty page is checked page by page and kept), and `posix_fadvise(DONTNEED)` itself never
//! drops dirty, writeback or mapped pages, so a page dirtied after the check is kept too.
//! Dropping a clean page loses nothing: the next read comes from the image.
//!
//! The seed's replacement heuristic: between passes, a guest page whose hash *and* first 8
//! bytes changed was replaced (the guest evicted the old content), while a page whose first 8
//! bytes stayed is merely modified. Contents the guest evicted are remembered; host-cache pages
//! holding them are kept (and counted as such): the host cache then holds what the guest does
//! not, as an exclusive second-level cache should. Since every drop is confirmed against the
//! guest's current bytes, the heuristic never causes a drop; it explains what is kept.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

use memvisor_dedup::{
    is_exited, page_hash, thread_cpu_time, DedupError, PageLocation, ProcessMemory, Scanner,
    ScannerConfig, PAGE_SIZE,
};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::cached_page_reader::CachedPageReader;
use crate::residency::{drop_range, resident_pages};
use crate::scrub_report::{ImageScrub, VmScrub};
use crate::{ScrubError, Vm};
use memvisor_pager::cachestat;

/// Pages of an image read and looked up at a time.
const CHUNK_PAGES: usize = 256;

/// Pages in the largest page-cache folio (x86-64: a PMD, 2 MiB). Folios are naturally aligned,
/// so none straddles a multiple of this; a run of candidates reaching the end of a chunk that
/// is not such a multiple is carried into the next chunk and dropped with it, otherwise
/// `DONTNEED` (which drops only folios the range covers whole) would keep every 2 MiB folio.
const MAX_FOLIO_PAGES: usize = 512;

/// Scrubber options.
#[derive(Debug, Clone, Copy)]
pub struct ScrubOptions {
    /// Find what would be dropped, drop nothing.
    pub dry_run: bool,
    /// Use lookahead (after host page P matched guest page G, compare P+1 with G+1 first).
    pub lookahead: bool,
}

impl Default for ScrubOptions {
    fn default() -> Self {
        Self {
            dry_run: false,
            lookahead: true,
        }
    }
}

/// What a VM's guest held at the previous scrub.
#[derive(Debug, Default)]
struct GuestHistory {
    pages: FxHashMap<u64, (u64, u64)>,
    evicted: FxHashSet<u64>,
}

type ChunkHook = Box<dyn FnMut(&Path, u64) + Send>;

/// Scrubs VMs' images; keeps each guest's previous fingerprint for the replacement heuristic.
pub struct Scrubber {
    options: ScrubOptions,
    history: FxHashMap<i32, GuestHistory>,
    on_chunk: Option<ChunkHook>,
}

impl std::fmt::Debug for Scrubber {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scrubber")
            .field("options", &self.options)
            .field("guests", &self.history.len())
            .finish()
    }
}

impl Scrubber {
    /// A scrubber with no history.
    pub fn new(options: ScrubOptions) -> Self {
        Self {
            options,
            history: FxHashMap::default(),
            on_chunk: None,
        }
    }

    /// Calls `f(image, offset)` after each chunk of an image is processed (tests use it to
    /// change the image mid-scrub).
    pub fn on_chunk(&mut self, f: impl FnMut(&Path, u64) + Send + 'static) {
        self.on_chunk = Some(Box::new(f));
    }

    /// Forgets VMs not in `live` (they exited).
    pub fn retain(&mut self, live: &[i32]) {
        self.history.retain(|pid, _| live.contains(pid));
    }

    /// Scrubs one VM; failures are recorded in the result (never a panic).
    pub fn scrub_vm(&mut self, vm: &Vm) -> VmScrub {
        let t0 = Instant::now();
        let cpu0 = thread_cpu_time();
        let mut out = VmScrub {
            pid: vm.pid,
            name: vm.name.clone(),
            ..Default::default()
        };
        if let Err(e) = self.scrub_vm_inner(vm, &mut out) {
            out.error = Some(e.to_string());
        }
        out.wall = t0.elapsed();
        out.cpu = thread_cpu_time().saturating_sub(cpu0);
        out
    }

    fn scrub_vm_inner(&mut self, vm: &Vm, out: &mut VmScrub) -> Result<(), ScrubError> {
        let guest_err = |source| ScrubError::Guest {
            pid: vm.pid,
            source,
        };
        if vm.ram.is_empty() {
            return Err(ScrubError::InvalidArgument(format!(
                "VM pid {}: no guest RAM mapping found",
                vm.pid
            )));
        }
        let mut scanner = Scanner::new(ScannerConfig {
            lookahead: self.options.lookahead,
            ..Default::default()
        });
        scanner.record_fingerprint(true);
        let memory = ProcessMemory::open(vm.pid)
            .map_err(guest_err)?
            .only(vm.ram.clone());
        scanner.add_source(Box::new(memory));
        let pass = scanner.pass();
        if let Some(e) = scanner.reports().into_iter().find_map(|r| r.error) {
            return Err(ScrubError::InvalidArgument(format!(
                "VM pid {}: {e}",
                vm.pid
            )));
        }
        out.guest_pages = pass.pages_read;
        out.guest_zero_pages = pass.zero_pages;

        // Replacement heuristic: compare with the previous pass.
        let history = self.history.entry(vm.pid).or_default();
        let mut now = FxHashMap::default();
        for f in scanner.take_fingerprint() {
            if let Some(&(old_hash, old_prefix)) = history.pages.get(&f.location.address) {
                if old_hash != f.hash {
                    if old_prefix != f.prefix {
                        out.guest_replaced += 1;
                        history.evicted.insert(old_hash);
                    } else {
                        out.guest_modified += 1;
                    }
                }
            }
            now.insert(f.location.address, (f.hash, f.prefix));
        }
        // Contents back in the guest are no longer evicted.
        for (hash, _) in now.values() {
            history.evicted.remove(hash);
        }
        // Bound the memory of evictions to the guest's size.
        if history.evicted.len() > now.len().max(1024) {
            history.evicted.clear();
        }
        history.pages = now;
        let evicted = std::mem::take(&mut history.evicted);

        for path in &vm.images {
            let mut img = ImageScrub {
                path: path.clone(),
                ..Default::default()
            };
            if let Err(e) = self.scrub_image(&mut scanner, path, &evicted, &mut img) {
                img.error = Some(e.to_string());
            }
            out.images.push(img);
        }
        if let Some(h) = self.history.get_mut(&vm.pid) {
            h.evicted = evicted;
        }
        if is_exited(vm.pid) {
            // Lookups into its memory failed from then on, so nothing more was dropped.
            self.history.remove(&vm.pid);
            return Err(ScrubError::Guest {
                pid: vm.pid,
                source: DedupError::ProcessGone {
                    pid: vm.pid,
                    what: format!(
                        "exited during the scrub; {} pages dropped before, none after",
                        out.dropped()
                    ),
                },
            });
        }
        Ok(())
    }

    fn scrub_image(
        &mut self,
        scanner: &mut Scanner,
        path: &Path,
        evicted: &FxHashSet<u64>,
        img: &mut ImageScrub,
    ) -> Result<(), ScrubError> {
        // Non-blocking: the path comes from a process that may be another user's, and a FIFO
        // put in its place must not hang the scrubber; only a regular file is scrubbed.
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| ScrubError::file(path, "opening", e))?;
        let meta = file
            .metadata()
            .map_err(|e| ScrubError::file(path, "stat", e))?;
        if !meta.is_file() {
            return Err(ScrubError::file(
                path,
                "opening",
                std::io::Error::other("not a regular file"),
            ));
        }
        let size = meta.len();
        img.size = size;
        // cachestat(2) is what tells dirty pages apart: without it, nothing is dropped.
        img.cached_before = cachestat(file.as_fd(), 0, 0)
            .map_err(|e| {
                let what = if e.raw_os_error() == Some(libc::EPERM) {
                    "cachestat (the kernel allows it only with write access to the file or \
                     ownership; without it dirty pages cannot be told apart, so nothing is dropped)"
                } else {
                    "cachestat"
                };
                ScrubError::file(path, what, e)
            })?
            .nr_cache;
        let mut resident =
            resident_pages(&file, size).map_err(|e| ScrubError::file(path, "mincore", e))?;
        // Cached pages are read through a mapping without read-ahead: a plain read reaching a
        // folio the kernel marked for read-ahead would pull further image pages into the host
        // cache (charged to memvisor, not to the VM).
        let reader = CachedPageReader::new(&file, size)
            .map_err(|e| ScrubError::file(path, "mapping the image", e))?;
        let mut candidates: Vec<u64> = Vec::new();
        let mut buf = vec![0u8; CHUNK_PAGES * PAGE_SIZE];
        let mut page = 0usize;
        let mut hint: Option<PageLocation> = None;
        let mut carry: Vec<u64> = Vec::new();
        'chunks: while page < resident.len() {
            let end = (page + CHUNK_PAGES).min(resident.len());
            // Guest pages read for an earlier chunk may have changed since: read them again.
            scanner.invalidate_window();
            let mut i = page;
            let mut chunk_candidates: Vec<u64> = std::mem::take(&mut carry);
            // A file that shrank: scrub what is left, and say so.
            let now_len = file.metadata().map(|m| m.len()).unwrap_or(size);
            if now_len < size && img.truncated_to.is_none() {
                img.truncated_to = Some(now_len);
            }
            // Residency again, right before reading: pages evicted since the first check
            // would otherwise be faulted back into the cache by the read.
            let now = reader
                .resident((page * PAGE_SIZE) as u64, ((end - page) * PAGE_SIZE) as u64)
                .map_err(|e| ScrubError::file(path, "mincore", e))?;
            for (k, r) in now.into_iter().enumerate() {
                resident[page + k] &= r;
            }
            while i < end {
                if !resident[i] {
                    i += 1;
                    hint = None;
                    continue;
                }
                let mut j = i;
                while j < end && resident[j] {
                    j += 1;
                }
                // Read resident pages [i, j) (the last page of the file may be partial).
                let off = (i * PAGE_SIZE) as u64;
                let want = ((j - i) * PAGE_SIZE).min(size.saturating_sub(off) as usize);
                let got = read_full(&reader, &mut buf[..want], off)
                    .map_err(|e| ScrubError::file(path, format!("reading at offset {off}"), e))?;
                let whole_pages = got.div_ceil(PAGE_SIZE);
                buf[got..whole_pages * PAGE_SIZE].fill(0);
                for k in 0..whole_pages {
                    let bytes = &buf[k * PAGE_SIZE..(k + 1) * PAGE_SIZE];
                    img.hashed += 1;
                    let before = scanner.match_stats().lookahead_hits;
                    match scanner.find_match(bytes, hint) {
                        Some(g) => {
                            img.in_guest += 1;
                            img.lookahead_hits += scanner.match_stats().lookahead_hits - before;
                            chunk_candidates.push((i + k) as u64);
                            hint = Some(PageLocation {
                                source: g.source,
                                address: g.address + PAGE_SIZE as u64,
                            });
                        }
                        None => {
                            hint = None;
                            if evicted.contains(&page_hash(bytes)) {
                                img.kept_evicted_by_guest += 1;
                            } else {
                                img.kept_not_in_guest += 1;
                            }
                        }
                    }
                }
                if got < want {
                    // The file shrank under us: scrub what was read, stop there.
                    let now = file.metadata().map(|m| m.len()).unwrap_or(off + got as u64);
                    img.truncated_to = Some(now);
                    unmap(&reader, path)?;
                    self.drop_candidates(&file, path, &chunk_candidates, img)?;
                    candidates.extend(chunk_candidates);
                    break 'chunks;
                }
                i = j;
            }
            if end < resident.len() {
                carry = trailing_run_in_folio(&mut chunk_candidates, end as u64);
            }
            unmap(&reader, path)?;
            self.drop_candidates(&file, path, &chunk_candidates, img)?;
            candidates.extend(chunk_candidates);
            if let Some(f) = self.on_chunk.as_mut() {
                f(path, (end * PAGE_SIZE) as u64);
            }
            page = end;
        }
        // Verify: count candidates that really left the cache.
        if !self.options.dry_run && !candidates.is_empty() {
            let after =
                resident_pages(&file, size).map_err(|e| ScrubError::file(path, "mincore", e))?;
            let gone = candidates
                .iter()
                .filter(|&&p| !after.get(p as usize).copied().unwrap_or(false))
                .count() as u64;
            img.dropped = gone;
            img.kept_busy = (candidates.len() as u64)
                .saturating_sub(gone)
                .saturating_sub(img.kept_dirty);
        } else if self.options.dry_run {
            img.dropped = (candidates.len() as u64).saturating_sub(img.kept_dirty);
        }
        img.cached_after = cachestat(file.as_fd(), 0, 0)
            .map_err(|e| ScrubError::file(path, "cachestat", e))?
            .nr_cache;
        Ok(())
    }

    /// Drops candidate pages (sorted page numbers) in runs, keeping dirty or writeback pages.
    fn drop_candidates(
        &self,
        file: &File,
        path: &Path,
        pages: &[u64],
        img: &mut ImageScrub,
    ) -> Result<(), ScrubError> {
        let ps = PAGE_SIZE as u64;
        let mut i = 0;
        while i < pages.len() {
            let mut j = i + 1;
            while j < pages.len() && pages[j] == pages[j - 1] + 1 {
                j += 1;
            }
            let (first, n) = (pages[i], (j - i) as u64);
            let cs = cachestat(file.as_fd(), first * ps, n * ps)
                .map_err(|e| ScrubError::file(path, format!("cachestat at {}", first * ps), e))?;
            if cs.unclean() == 0 {
                self.drop(file, path, first, n)?;
            } else {
                // Page by page: keep the dirty ones, drop runs of clean ones.
                let mut run: Option<(u64, u64)> = None;
                for p in first..first + n {
                    let one = cachestat(file.as_fd(), p * ps, ps).map_err(|e| {
                        ScrubError::file(path, format!("cachestat at {}", p * ps), e)
                    })?;
                    if one.unclean() > 0 {
                        img.kept_dirty += 1;
                        if let Some((s, k)) = run.take() {
                            self.drop(file, path, s, k)?;
                        }
                    } else {
                        run = match run {
                            Some((s, k)) => Some((s, k + 1)),
                            None => Some((p, 1)),
                        };
                    }
                }
                if let Some((s, k)) = run {
                    self.drop(file, path, s, k)?;
                }
            }
            i = j;
        }
        Ok(())
    }

    fn drop(&self, file: &File, path: &Path, first: u64, pages: u64) -> Result<(), ScrubError> {
        if self.options.dry_run {
            return Ok(());
        }
        let ps = PAGE_SIZE as u64;
        drop_range(file, first * ps, pages * ps).map_err(|e| {
            ScrubError::file(
                path,
                format!("posix_fadvise(DONTNEED) at {}+{}", first * ps, pages * ps),
                e,
            )
        })
    }
}

/// Unmaps what the reader mapped, so that the pages can be dropped.
fn unmap(reader: &CachedPageReader, path: &Path) -> Result<(), ScrubError> {
    reader
        .unmap_pages()
        .map_err(|e| ScrubError::file(path, "madvise(DONTNEED) of the image mapping", e))
}

/// Splits off the candidates (sorted pages) that may share a folio with pages at or after
/// `end`: the tail of a run reaching `end - 1`, from the last multiple of [`MAX_FOLIO_PAGES`]
/// on. Nothing when `end` is such a multiple.
fn trailing_run_in_folio(candidates: &mut Vec<u64>, end: u64) -> Vec<u64> {
    let boundary = end / MAX_FOLIO_PAGES as u64 * MAX_FOLIO_PAGES as u64;
    if boundary == end || candidates.last() != Some(&(end - 1)) {
        return Vec::new();
    }
    let mut from = candidates.len() - 1;
    while from > 0
        && candidates[from - 1] + 1 == candidates[from]
        && candidates[from - 1] >= boundary
    {
        from -= 1;
    }
    candidates.split_off(from)
}

/// Reads into `buf` at `off` until full or end of file; returns the bytes read.
fn read_full(reader: &CachedPageReader, buf: &mut [u8], off: u64) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read_at(&mut buf[got..], off + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_reaching_a_chunk_end_inside_a_folio_is_carried() {
        // Chunk [256, 512) of a larger image: the run 300..512 reaches the end, which is a
        // 2 MiB boundary: nothing carried.
        let mut c: Vec<u64> = (300..512).collect();
        assert!(trailing_run_in_folio(&mut c, 512).is_empty());
        assert_eq!(c.len(), 212);
        // Chunk [0, 256): 10..20 and 200..256; the second reaches 256, inside folio [0, 512).
        let mut c: Vec<u64> = (10..20).chain(200..256).collect();
        let carry = trailing_run_in_folio(&mut c, 256);
        assert_eq!(carry, (200..256).collect::<Vec<u64>>());
        assert_eq!(c, (10..20).collect::<Vec<u64>>());
        // A long run reaching a chunk end: carried from the last 2 MiB boundary on only.
        let mut c: Vec<u64> = (400..1024).collect();
        let carry = trailing_run_in_folio(&mut c, 1024);
        assert!(carry.is_empty(), "1024 is a multiple of 512");
        let mut c: Vec<u64> = (400..768).collect();
        let carry = trailing_run_in_folio(&mut c, 768);
        assert_eq!(carry, (512..768).collect::<Vec<u64>>());
        assert_eq!(c, (400..512).collect::<Vec<u64>>());
        // A run not reaching the end: nothing.
        let mut c: Vec<u64> = vec![1, 2, 3];
        assert!(trailing_run_in_folio(&mut c, 256).is_empty());
        let mut c: Vec<u64> = Vec::new();
        assert!(trailing_run_in_folio(&mut c, 256).is_empty());
    }
}
