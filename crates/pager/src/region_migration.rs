//! A [`Region`]'s live-migration calls: what the source pager reads and tracks, what the
//! destination pager installs. Each is carried out by the region's fault handler between two
//! faults (see `fault_handler/migration.rs`), so it sees a consistent chunk table and swap
//! map; the caller (a migration thread) blocks meanwhile, the program's threads do not.

use std::sync::{Arc, Mutex};

use crate::migration_pages::{InstallOutcome, MigrationPages};
use crate::pager_error::PagerError;
use crate::region::Region;
use crate::region_command::{MigrationRequest, RegionCommand};

impl Region {
    /// Source: starts tracking which pages change (every write, however it is made: the
    /// program, the kernel on its behalf, or the pager itself; and every discard). Needs
    /// write tracking ([`dirty_tracking`](Self::dirty_tracking)).
    pub fn start_change_tracking(&self) -> Result<(), PagerError> {
        self.migration(MigrationRequest::TrackChanges(true))
    }

    /// Source: stops tracking changes (and frees the migration buffer).
    pub fn stop_change_tracking(&self) -> Result<(), PagerError> {
        self.migration(MigrationRequest::TrackChanges(false))
    }

    /// Source: the chunks holding data, in the order to send them: resident chunks in the
    /// policy's rank, most valuable first (read by draining the policy and admitting the
    /// chunks again, as a policy change does), then chunks only in swap or in the disk image.
    /// Chunks never written are not listed: they are zero.
    pub fn migration_order(&self) -> Result<Vec<usize>, PagerError> {
        let out = Arc::new(Mutex::new(Vec::new()));
        self.migration(MigrationRequest::Order(out.clone()))?;
        Ok(take(&out))
    }

    /// Source: reads `pages` pages from region page `first_page` on (inside one chunk) where
    /// they are, without paging them in: from memory, from swap or from their disk-image block,
    /// checksums verified. A poisoned page (its data lost) is an error.
    pub fn read_for_migration(
        &self,
        first_page: usize,
        pages: usize,
    ) -> Result<MigrationPages, PagerError> {
        let mut read = self.read_runs_for_migration(vec![(first_page, pages)])?;
        Ok(read.pop().unwrap_or_default())
    }

    /// Source: [`read_for_migration`](Self::read_for_migration) of each run `(first region
    /// page, count)`, in one visit to the fault handler (a round of scattered changes reads
    /// many short runs; each visit is a hand-over between threads). The reads come back in the
    /// order of `runs`; any failed read fails them all.
    pub fn read_runs_for_migration(
        &self,
        runs: Vec<(usize, usize)>,
    ) -> Result<Vec<MigrationPages>, PagerError> {
        let out = Arc::new(Mutex::new(Vec::new()));
        self.migration(MigrationRequest::Read {
            runs,
            out: out.clone(),
        })?;
        Ok(take(&out))
    }

    /// Source: the runs of pages `(first region page, count)` that changed since the last
    /// call (or since tracking started), each inside one chunk.
    pub fn take_changed_pages(&self) -> Result<Vec<(usize, usize)>, PagerError> {
        let out = Arc::new(Mutex::new(Vec::new()));
        self.migration(MigrationRequest::TakeChanged(out.clone()))?;
        Ok(take(&out))
    }

    /// Destination: `data` (whole pages) becomes region pages `first_page..` (inside one
    /// chunk): in memory while the resident pages fit the budget (or where the page is resident
    /// already), straight into the swap file after that.
    pub fn install_pages(
        &self,
        first_page: usize,
        data: Vec<u8>,
    ) -> Result<InstallOutcome, PagerError> {
        self.install_runs(vec![(first_page, data)])
    }

    /// Destination: [`install_pages`](Self::install_pages) of each run `(first region page,
    /// data)` in order, in one visit to the fault handler (a round of scattered changes
    /// brings many short runs; each visit is a hand-over between threads). Where the pages
    /// went, summed; the first failed install fails the call, and the runs after it are not
    /// installed.
    pub fn install_runs(&self, runs: Vec<(usize, Vec<u8>)>) -> Result<InstallOutcome, PagerError> {
        self.install(runs, false)
    }

    /// Destination, post-copy: marks each run `(first region page, count)` (inside one chunk)
    /// *remote*: its content is still at the source. The pages are neither mapped nor read
    /// from here on; a fault on one waits (and is listed in
    /// [`take_wanted_pages`](Self::take_wanted_pages)) until
    /// [`install_remote_runs`](Self::install_remote_runs) brings its content or the page is
    /// discarded.
    pub fn mark_remote(&self, runs: Vec<(usize, usize)>) -> Result<(), PagerError> {
        self.migration(MigrationRequest::MarkRemote(runs))
    }

    /// Destination, post-copy: [`install_runs`](Self::install_runs) of the pages of `runs` that
    /// are still remote (the others were discarded by the program since, and may hold new
    /// data); waiting faults on them are served.
    pub fn install_remote_runs(
        &self,
        runs: Vec<(usize, Vec<u8>)>,
    ) -> Result<InstallOutcome, PagerError> {
        self.install(runs, true)
    }

    /// Destination, post-copy: the pages still remote, as runs `(first region page, count)`,
    /// each inside one chunk, ascending (what a resumed post-copy asks the source for).
    pub fn remote_page_runs(&self) -> Result<Vec<(usize, usize)>, PagerError> {
        let out = Arc::new(Mutex::new(Vec::new()));
        self.migration(MigrationRequest::RemoteRuns(out.clone()))?;
        Ok(take(&out))
    }

    /// Destination, post-copy: how many pages are still remote.
    pub fn remote_pages(&self) -> usize {
        self.shared.remote.left()
    }

    /// Destination, post-copy: the region pages that faults have waited for since the last
    /// call, in the order the faults came. [`remote_wants_fd`](Self::remote_wants_fd) is
    /// readable while some are listed.
    pub fn take_wanted_pages(&self) -> Vec<usize> {
        self.shared.remote.take_wanted()
    }

    /// A descriptor to `poll` for `POLLIN`: readable while
    /// [`take_wanted_pages`](Self::take_wanted_pages) has pages to give.
    pub fn remote_wants_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.shared.remote)
    }

    /// Destination, post-copy: faults that found their page remote and waited for it.
    pub fn remote_faults(&self) -> u64 {
        self.shared.remote.waited_faults()
    }

    fn install(
        &self,
        runs: Vec<(usize, Vec<u8>)>,
        only_remote: bool,
    ) -> Result<InstallOutcome, PagerError> {
        let out = Arc::new(Mutex::new(InstallOutcome::default()));
        self.migration(MigrationRequest::Install {
            runs,
            only_remote,
            out: out.clone(),
        })?;
        Ok(take(&out))
    }

    fn migration(&self, request: MigrationRequest) -> Result<(), PagerError> {
        self.submit(RegionCommand::Migration(request))
    }
}

fn take<T: Default>(slot: &Arc<Mutex<T>>) -> T {
    slot.lock()
        .map(|mut s| std::mem::take(&mut *s))
        .unwrap_or_default()
}
