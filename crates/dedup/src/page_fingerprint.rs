//! [`PageFingerprint`]: one page as a pass saw it.

#[cfg(doc)]
use crate::page_hash;
use crate::page_index::PageLocation;

/// One page as a pass saw it: where, its content hash, and its first 8 bytes (the seed's
/// replacement heuristic compares both with the previous pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageFingerprint {
    /// Where the page is.
    pub location: PageLocation,
    /// Its content hash ([`page_hash`]; all-zero pages included).
    pub hash: u64,
    /// Its first 8 bytes.
    pub prefix: u64,
}
