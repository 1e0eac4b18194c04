//! [`Scanner`]: reads pages from its sources, hashes them into a [`PageIndex`], confirms every
//! hash match by comparing bytes, and uses the seed's lookahead: after page X matched Y, page
//! X+1 is compared with Y+1 before any hashing or lookup.

use std::ops::Range;
use std::time::Instant;

use crate::class_list::ClassList;
use crate::cpu_time::thread_cpu_time;
use crate::page_fingerprint::PageFingerprint;
use crate::page_index::{IndexSummary, PageIndex, PageLocation};
use crate::page_source::{PageSource, PageState};
use crate::scan_stats::{MatchStats, PassStats, SourceReport};
use crate::{is_zero_page, page_hash, page_prefix, DedupError, PAGE_SIZE};

/// Pages read per call to a source (1 MiB).
pub const DEFAULT_BATCH_PAGES: usize = 256;
/// Pages read around a page the scanner compares with (lookahead then finds them read).
const WINDOW_PAGES: usize = 32;

/// Scanner options.
#[derive(Debug, Clone, Copy)]
pub struct ScannerConfig {
    /// Try X+1 against Y+1 after X matched Y (default on).
    pub lookahead: bool,
    /// Pages per read.
    pub batch_pages: usize,
}

impl Default for ScannerConfig {
    fn default() -> Self {
        Self {
            lookahead: true,
            batch_pages: DEFAULT_BATCH_PAGES,
        }
    }
}

struct Slot {
    source: Box<dyn PageSource + Send>,
    report: SourceReport,
    /// The source failed (its process exited, ...): it is read no more.
    dead: bool,
    /// Its pages have been removed from the index since it died.
    purged: bool,
}

impl Slot {
    /// Drops the source after `error`, keeping the first error as the reason.
    fn fail(&mut self, error: &DedupError) {
        if !self.dead {
            self.dead = true;
            self.report.error = Some(error.to_string());
        }
    }
}

/// A few pages of one source read around a page the scanner compared with.
#[derive(Default)]
struct Window {
    source: u32,
    start: u64,
    pages: usize,
    buf: Vec<u8>,
    states: Vec<PageState>,
}

impl Window {
    fn get(&self, l: PageLocation) -> Option<(&[u8], PageState)> {
        if self.pages == 0 || l.source != self.source || l.address < self.start {
            return None;
        }
        let i = ((l.address - self.start) / PAGE_SIZE as u64) as usize;
        (i < self.pages).then(|| {
            (
                &self.buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE],
                self.states[i],
            )
        })
    }
}

/// The batch being scanned: its source, start and contents.
struct Batch {
    source: u32,
    start: u64,
    buf: Vec<u8>,
    states: Vec<PageState>,
}

impl Batch {
    fn get(&self, l: PageLocation) -> Option<(&[u8], PageState)> {
        if l.source != self.source || l.address < self.start {
            return None;
        }
        let i = ((l.address - self.start) / PAGE_SIZE as u64) as usize;
        (i < self.states.len()).then(|| {
            (
                &self.buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE],
                self.states[i],
            )
        })
    }
}

/// Hashes pages of several sources into one index; see the module documentation.
pub struct Scanner {
    config: ScannerConfig,
    slots: Vec<Slot>,
    index: PageIndex,
    window: Window,
    last_match: Option<(PageLocation, PageLocation)>,
    progress: Option<Box<dyn FnMut(u32, u64) + Send>>,
    fingerprint: Option<Vec<PageFingerprint>>,
    match_stats: MatchStats,
}

impl std::fmt::Debug for Scanner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scanner")
            .field("config", &self.config)
            .field("sources", &self.slots.len())
            .field("indexed", &self.index.len())
            .finish()
    }
}

impl Scanner {
    /// A scanner with no sources.
    pub fn new(config: ScannerConfig) -> Self {
        Self {
            config: ScannerConfig {
                batch_pages: config.batch_pages.max(1),
                ..config
            },
            slots: Vec::new(),
            index: PageIndex::new(),
            window: Window::default(),
            last_match: None,
            progress: None,
            fingerprint: None,
            match_stats: MatchStats::default(),
        }
    }

    /// Adds a source; returns its number (the `source` of its [`PageLocation`]s).
    pub fn add_source(&mut self, source: Box<dyn PageSource + Send>) -> u32 {
        let name = source.name();
        self.slots.push(Slot {
            source,
            report: SourceReport {
                name,
                ..Default::default()
            },
            dead: false,
            purged: false,
        });
        (self.slots.len() - 1) as u32
    }

    /// Calls `f(source, pages_done_in_pass)` after every batch (tests use it to act mid-scan).
    pub fn on_progress(&mut self, f: impl FnMut(u32, u64) + Send + 'static) {
        self.progress = Some(Box::new(f));
    }

    /// Records every page read in the following passes (location, hash, first 8 bytes);
    /// [`take_fingerprint`](Self::take_fingerprint) returns them. Costs a hash of every page,
    /// also those lookahead matched.
    pub fn record_fingerprint(&mut self, yes: bool) {
        self.fingerprint = yes.then(Vec::new);
    }

    /// The pages recorded since the last call (empty unless recording).
    pub fn take_fingerprint(&mut self) -> Vec<PageFingerprint> {
        match self.fingerprint.as_mut() {
            Some(f) => std::mem::take(f),
            None => Vec::new(),
        }
    }

    /// Finds an indexed page whose current bytes equal `bytes` (a page from elsewhere, such as
    /// the host page cache): first `hint` (the page after the previous match: lookahead), then
    /// the hash's classes, each confirmed by comparing bytes. `None` if no page matches.
    pub fn find_match(&mut self, bytes: &[u8], hint: Option<PageLocation>) -> Option<PageLocation> {
        self.match_stats.lookups += 1;
        let empty = Batch {
            source: u32::MAX,
            start: 0,
            buf: Vec::new(),
            states: Vec::new(),
        };
        if let Some(h) = hint.filter(|_| self.config.lookahead) {
            if self.index.class_of(h).is_some()
                && Self::fetch(&mut self.slots, &mut self.window, &empty, h, true)
                    .is_some_and(|(b, st)| b == bytes && st.is_present())
            {
                self.match_stats.matches += 1;
                self.match_stats.lookahead_hits += 1;
                return Some(h);
            }
        }
        let hash = page_hash(bytes);
        let candidates: ClassList = self.index.candidates(hash).collect();
        for class in candidates.iter() {
            for member in self.index.members(class).collect::<Vec<_>>() {
                match Self::fetch(&mut self.slots, &mut self.window, &empty, member, false) {
                    Some((b, st)) if st.is_present() => {
                        if b == bytes {
                            self.match_stats.matches += 1;
                            return Some(member);
                        }
                        self.match_stats.hash_mismatches += 1;
                    }
                    _ => self.match_stats.vanished += 1,
                }
            }
        }
        None
    }

    /// Counters of [`find_match`](Self::find_match).
    pub fn match_stats(&self) -> MatchStats {
        self.match_stats
    }

    /// Forgets the pages read around earlier comparisons (call when the sources' memory may
    /// have changed since).
    pub fn invalidate_window(&mut self) {
        self.window.pages = 0;
    }

    /// The index.
    pub fn index(&self) -> &PageIndex {
        &self.index
    }

    /// Index totals.
    pub fn summary(&self) -> IndexSummary {
        self.index.summary()
    }

    /// Per-source reports (index totals filled in).
    pub fn reports(&self) -> Vec<SourceReport> {
        self.slots
            .iter()
            .enumerate()
            .map(|(i, s)| SourceReport {
                index: self.index.source_summary(i as u32),
                ..s.report.clone()
            })
            .collect()
    }

    /// Reads `l`'s current bytes and state: from the batch being scanned, or the window,
    /// reading a new window if needed: `WINDOW_PAGES` pages from `l` when `ahead` (a lookahead
    /// comparison, likely followed by more at the next addresses), else `l` alone. `None` if the
    /// page cannot be read now; if its source failed, the source is marked dead with the error.
    fn fetch<'a>(
        slots: &mut [Slot],
        window: &'a mut Window,
        batch: &'a Batch,
        l: PageLocation,
        ahead: bool,
    ) -> Option<(&'a [u8], PageState)> {
        if let Some(hit) = batch.get(l) {
            return Some(hit);
        }
        if window.get(l).is_none() {
            let slot = slots.get_mut(l.source as usize)?;
            if slot.dead {
                return None;
            }
            let n = if ahead { WINDOW_PAGES } else { 1 };
            window.source = l.source;
            window.start = l.address;
            window.buf.resize(WINDOW_PAGES * PAGE_SIZE, 0);
            window.states.resize(WINDOW_PAGES, PageState::Absent);
            window.pages = n;
            if slot
                .source
                .read(
                    l.address,
                    &mut window.buf[..n * PAGE_SIZE],
                    &mut window.states[..n],
                )
                .is_err()
            {
                // Past the end of a mapping, or the source failed: fall back to the one page.
                window.pages = 1;
                if let Err(e) = slot.source.read(
                    l.address,
                    &mut window.buf[..PAGE_SIZE],
                    &mut window.states[..1],
                ) {
                    // The source itself failed (its process exited while another was being
                    // scanned): it is dropped, and the pass removes its pages from the index.
                    slot.fail(&e);
                    window.pages = 0;
                    return None;
                }
            }
        }
        window.get(l)
    }

    /// One pass over every live source: each source's pass ranges are read, and their pages
    /// indexed (a non-incremental source is re-indexed from scratch). A source that fails (its
    /// process exited, permission denied) is dropped with its error recorded in its report and
    /// its pages removed; the other sources go on.
    pub fn pass(&mut self) -> PassStats {
        let t0 = Instant::now();
        let cpu0 = thread_cpu_time();
        let mut stats = PassStats::default();
        self.window.pages = 0;
        self.last_match = None;
        let mut batch = Batch {
            source: 0,
            start: 0,
            buf: vec![0; self.config.batch_pages * PAGE_SIZE],
            states: vec![PageState::Absent; self.config.batch_pages],
        };
        for s in 0..self.slots.len() {
            if self.slots[s].dead {
                continue;
            }
            let src = s as u32;
            if let Err(e) = self.scan_source(src, &mut batch, &mut stats) {
                self.slots[s].fail(&e);
            }
            self.purge_dead_sources();
        }
        stats.wall = t0.elapsed();
        stats.cpu = thread_cpu_time().saturating_sub(cpu0);
        stats
    }

    /// Removes from the index the pages of sources that died since the last purge (while
    /// being scanned, or when a comparison read their memory).
    fn purge_dead_sources(&mut self) {
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.dead && !slot.purged {
                slot.purged = true;
                self.index.remove_source(i as u32);
                if self.window.source == i as u32 {
                    self.window.pages = 0;
                }
            }
        }
    }

    fn scan_source(
        &mut self,
        src: u32,
        batch: &mut Batch,
        stats: &mut PassStats,
    ) -> Result<(), DedupError> {
        let slot = &mut self.slots[src as usize];
        let ranges = slot.source.pass_ranges()?;
        if slot.source.is_incremental() {
            for r in &ranges {
                self.index.remove_range(src, r.start, r.end);
            }
        } else {
            self.index.remove_source(src);
        }
        if self.window.source == src {
            self.window.pages = 0;
        }
        let report = &mut self.slots[src as usize].report;
        report.pages_read = 0;
        report.zero_pages = 0;
        report.absent_pages = 0;
        report.unreadable_pages = 0;
        let mut done = 0u64;
        for r in ranges {
            self.scan_range(src, r, batch, stats, &mut done)?;
        }
        Ok(())
    }

    fn scan_range(
        &mut self,
        src: u32,
        r: Range<u64>,
        batch: &mut Batch,
        stats: &mut PassStats,
        done: &mut u64,
    ) -> Result<(), DedupError> {
        let mut a = r.start;
        while a < r.end {
            let pages = (((r.end - a) / PAGE_SIZE as u64) as usize).min(self.config.batch_pages);
            batch.source = src;
            batch.start = a;
            batch.buf.resize(pages * PAGE_SIZE, 0);
            batch.states.resize(pages, PageState::Absent);
            self.slots[src as usize]
                .source
                .read(a, &mut batch.buf, &mut batch.states)?;
            if self.window.source == src {
                // The window may hold older bytes of the pages just read.
                self.window.pages = 0;
            }
            for i in 0..pages {
                let l = PageLocation {
                    source: src,
                    address: a + (i * PAGE_SIZE) as u64,
                };
                self.scan_page(l, i, batch, stats);
            }
            a += (pages * PAGE_SIZE) as u64;
            *done += pages as u64;
            if let Some(p) = self.progress.as_mut() {
                p(src, *done);
            }
        }
        Ok(())
    }

    fn scan_page(&mut self, l: PageLocation, i: usize, batch: &Batch, stats: &mut PassStats) {
        let report = &mut self.slots[l.source as usize].report;
        let frame = match batch.states[i] {
            PageState::Present { frame } => frame,
            PageState::Absent => {
                stats.absent_pages += 1;
                report.absent_pages += 1;
                return;
            }
            PageState::Unreadable => {
                stats.unreadable_pages += 1;
                report.unreadable_pages += 1;
                return;
            }
        };
        stats.pages_read += 1;
        report.pages_read += 1;
        let bytes = &batch.buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
        // When recording, hash every page once here and reuse the hash for the lookup.
        let recorded_hash = self.fingerprint.as_mut().map(|f| {
            let hash = page_hash(bytes);
            f.push(PageFingerprint {
                location: l,
                hash,
                prefix: page_prefix(bytes),
            });
            hash
        });
        if is_zero_page(bytes) {
            stats.zero_pages += 1;
            report.zero_pages += 1;
            self.last_match = None;
            return;
        }
        // Lookahead: X matched Y; try X+1 against Y+1 first.
        if self.config.lookahead {
            if let Some((x, y)) = self.last_match {
                if x.source == l.source && x.address + PAGE_SIZE as u64 == l.address {
                    let next = PageLocation {
                        source: y.source,
                        address: y.address + PAGE_SIZE as u64,
                    };
                    if let Some(class) = self.index.class_of(next) {
                        let same =
                            Self::fetch(&mut self.slots, &mut self.window, batch, next, true)
                                .filter(|(b, st)| st.is_present() && *b == bytes)
                                .map(|(_, st)| st);
                        if let Some(st) = same {
                            self.index.join(class, l);
                            stats.lookahead_hits += 1;
                            stats.new_duplicates += 1;
                            if shares_frame(frame, st) {
                                stats.already_shared += 1;
                            }
                            self.last_match = Some((l, next));
                            return;
                        }
                        stats.lookahead_misses += 1;
                    }
                }
            }
        }
        let hash = recorded_hash.unwrap_or_else(|| page_hash(bytes));
        stats.pages_hashed += 1;
        let candidates: ClassList = self.index.candidates(hash).collect();
        for class in candidates.iter() {
            let rep = self.index.representative(class);
            let compared = match Self::fetch(&mut self.slots, &mut self.window, batch, rep, false) {
                Some((b, st)) if st.is_present() && b == bytes => Comparison::Same(st),
                Some((_, st)) if st.is_present() => Comparison::Different,
                // The page could not be read: its process exited, or it was unmapped or
                // swapped out since it was indexed. Not a mismatch: nothing was compared.
                _ => Comparison::Vanished,
            };
            match compared {
                Comparison::Vanished => stats.vanished_matches += 1,
                Comparison::Different => stats.hash_mismatches += 1,
                Comparison::Same(st) => {
                    self.index.join(class, l);
                    stats.new_duplicates += 1;
                    if shares_frame(frame, st) {
                        stats.already_shared += 1;
                    }
                    self.last_match = Some((l, rep));
                    return;
                }
            }
        }
        self.index.insert_new(hash, l);
        self.last_match = None;
    }
}

/// The outcome of comparing a page with an indexed one.
enum Comparison {
    /// Equal bytes; the indexed page's state.
    Same(PageState),
    /// Both read, bytes differ.
    Different,
    /// The indexed page could not be read.
    Vanished,
}

fn shares_frame(frame: Option<u64>, other: PageState) -> bool {
    matches!((frame, other), (Some(a), PageState::Present { frame: Some(b) }) if a == b)
}
