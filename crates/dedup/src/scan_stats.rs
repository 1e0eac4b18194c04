//! What a scan reports: [`PassStats`] per pass, [`SourceReport`] per source, and
//! [`MatchStats`] for lookups of foreign pages.

use std::time::Duration;

use crate::page_index::SourceSummary;

/// Counters of one pass over every source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassStats {
    /// Pages read (present in memory).
    pub pages_read: u64,
    /// Of those, all-zero pages (counted, not indexed).
    pub zero_pages: u64,
    /// Pages hashed (read, non-zero, not matched by lookahead).
    pub pages_hashed: u64,
    /// Pages matched by lookahead (no hash, no lookup).
    pub lookahead_hits: u64,
    /// Lookahead comparisons that failed (a hash and lookup followed).
    pub lookahead_misses: u64,
    /// Pages found equal to an indexed page in this pass (new duplicates).
    pub new_duplicates: u64,
    /// Of those, pages that already share a physical frame with the page they match (KSM merged
    /// them, or they map the same file page).
    pub already_shared: u64,
    /// Hash matches whose bytes differed (a collision, or content changed since indexing).
    pub hash_mismatches: u64,
    /// Hash matches that could not be compared: the indexed page is gone (its process exited,
    /// and is then dropped with its error in its report, or the page was unmapped or swapped
    /// out since).
    pub vanished_matches: u64,
    /// Pages not in memory (not read).
    pub absent_pages: u64,
    /// Pages that could not be read.
    pub unreadable_pages: u64,
    /// Wall time of the pass.
    pub wall: Duration,
    /// CPU time of the scanning thread during the pass.
    pub cpu: Duration,
}

/// What the scanner knows about one source.
#[derive(Debug, Clone, Default)]
pub struct SourceReport {
    /// The source's name.
    pub name: String,
    /// Pages read in the last pass.
    pub pages_read: u64,
    /// All-zero pages in the last pass (of an incremental source: among the pages re-read).
    pub zero_pages: u64,
    /// Pages not in memory in the last pass.
    pub absent_pages: u64,
    /// Unreadable pages in the last pass.
    pub unreadable_pages: u64,
    /// Index totals for this source.
    pub index: SourceSummary,
    /// Why the source was dropped (it exited, permission denied, ...); its pages are no longer
    /// in the index.
    pub error: Option<String>,
}

/// Counters of [`Scanner::find_match`](crate::Scanner::find_match).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MatchStats {
    /// Lookups.
    pub lookups: u64,
    /// Matches found (bytes equal).
    pub matches: u64,
    /// Matches found by the hint (lookahead), without hashing.
    pub lookahead_hits: u64,
    /// Hash hits whose bytes differed.
    pub hash_mismatches: u64,
    /// Hash hits on indexed pages that could no longer be read (process exited, page gone).
    pub vanished: u64,
}
