//! What a scrub did: [`VmScrub`] per VM, [`ImageScrub`] per disk image.

use std::path::PathBuf;
use std::time::Duration;

/// What one scrub did to one image.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageScrub {
    /// The image.
    pub path: PathBuf,
    /// Its size when opened.
    pub size: u64,
    /// Pages cached before (`cachestat`).
    pub cached_before: u64,
    /// Pages cached after.
    pub cached_after: u64,
    /// Resident pages hashed and looked up.
    pub hashed: u64,
    /// Of those, found in the guest.
    pub in_guest: u64,
    /// Pages dropped (verified with `mincore` afterwards); in a dry run, pages that would be.
    pub dropped: u64,
    /// Pages in the guest but dirty or under writeback: kept.
    pub kept_dirty: u64,
    /// Pages in the guest the kernel did not drop: part of a large folio not wholly in the
    /// guest (the page cache drops whole folios only), mapped, or dirtied meanwhile.
    pub kept_busy: u64,
    /// Pages whose content the guest evicted (replacement heuristic): kept.
    pub kept_evicted_by_guest: u64,
    /// Other pages not in the guest: kept.
    pub kept_not_in_guest: u64,
    /// Lookups answered by lookahead.
    pub lookahead_hits: u64,
    /// The file shrank while being scrubbed (to this size).
    pub truncated_to: Option<u64>,
    /// Why the image was skipped or scrubbed only in part.
    pub error: Option<String>,
}

/// What one scrub did for one VM.
#[derive(Debug, Clone, Default)]
pub struct VmScrub {
    /// The VMM's pid.
    pub pid: i32,
    /// The VM's name.
    pub name: String,
    /// Guest pages read (present in memory).
    pub guest_pages: u64,
    /// Of those, all-zero.
    pub guest_zero_pages: u64,
    /// Guest pages replaced since the previous scrub (hash and first 8 bytes changed).
    pub guest_replaced: u64,
    /// Guest pages modified since the previous scrub (hash changed, first 8 bytes did not).
    pub guest_modified: u64,
    /// Per image.
    pub images: Vec<ImageScrub>,
    /// Why the VM was skipped (it exited, permission denied, no RAM found).
    pub error: Option<String>,
    /// Wall time.
    pub wall: Duration,
    /// CPU time of the scrubbing thread.
    pub cpu: Duration,
}

impl VmScrub {
    /// Pages dropped over all images.
    pub fn dropped(&self) -> u64 {
        self.images.iter().map(|i| i.dropped).sum()
    }

    /// Pages cached before, over all images.
    pub fn cached_before(&self) -> u64 {
        self.images.iter().map(|i| i.cached_before).sum()
    }
}
