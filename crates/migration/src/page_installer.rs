//! [`PageInstaller`]: the destination's installs, made on a thread of their own behind the
//! receiving thread.
//!
//! Installing a `Pages` message is the destination pager's work (mapping pages, or writing
//! them to the swap file); receiving is reading the socket and checking the MAC. Made one
//! after the other on one thread they never overlapped, and the source waited for both. With
//! the installs handed to a thread (at most [`INSTALLS_WAITING`] waiting), the next message
//! is received while the last one is installed. Installs and discards run in the order the
//! messages came, so a page zeroed after it was sent ends zero.
//!
//! Short `Pages` messages (a round of scattered changes sends thousands of them) are handed
//! over together, up to [`BATCH_PAGES`] pages or [`BATCH_MESSAGES`] messages of one region,
//! and installed in one request to the pager: each request is a hand-over to the pager's
//! thread, which cost more than the install of a few pages. A batch goes when it is full, and
//! before a discard, at a round's end and at the finish.

use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

use memvisor_pager::Region;

use crate::migration_error::MigrationError;
use crate::migration_progress::MigrationProgress;

/// Hand-overs received and waiting to be installed, at most.
pub const INSTALLS_WAITING: usize = 4;
/// A batch of short `Pages` messages is handed over once it holds this many pages...
pub const BATCH_PAGES: u64 = 256;
/// ...or this many messages.
pub const BATCH_MESSAGES: usize = 64;

/// A `Pages` message's runs `(first region page, pages)` and their data, in run order.
pub(crate) type ReceivedPages = (Vec<(u64, u32)>, Vec<u8>);

/// One install.
enum Install {
    /// Whole pages of `page_size`: each message's runs `(first region page, pages)` and
    /// their data, in run order.
    Pages {
        region: Arc<Region>,
        page_size: u32,
        messages: Vec<ReceivedPages>,
    },
    /// Bytes `offset..offset + len` became zero (a `Zero` message).
    Discard {
        region: Arc<Region>,
        offset: usize,
        len: usize,
    },
}

/// `Pages` messages of one region not handed over yet.
struct PagesBatch {
    region: Arc<Region>,
    page_size: u32,
    messages: Vec<ReceivedPages>,
    pages: u64,
}

/// The installing thread and the way to it.
pub(crate) struct PageInstaller<'scope> {
    batch: Option<PagesBatch>,
    work: Option<SyncSender<Install>>,
    thread: Option<ScopedJoinHandle<'scope, Result<(), MigrationError>>>,
}

impl<'scope> PageInstaller<'scope> {
    /// Starts the installing thread in `scope`; it runs `thread_start` first and reports what
    /// it placed to `progress`.
    pub(crate) fn start(
        scope: &'scope Scope<'scope, '_>,
        progress: &'scope MigrationProgress,
        thread_start: fn(),
    ) -> Result<Self, MigrationError> {
        let (tx, rx) = sync_channel::<Install>(INSTALLS_WAITING);
        let thread = memvisor_pager::spawn_scoped_started(
            scope,
            "memvisor-migrate-install".into(),
            thread_start,
            move || {
                for install in rx {
                    match install {
                        Install::Pages {
                            region,
                            page_size,
                            messages,
                        } => {
                            crate::memory_receiver::install(
                                &region, messages, page_size, progress,
                            )?;
                        }
                        Install::Discard {
                            region,
                            offset,
                            len,
                        } => region.discard(offset, len)?,
                    }
                }
                Ok(())
            },
        )
        .map_err(|source| MigrationError::Io {
            context: "starting the migration's install thread".into(),
            source,
        })?;
        Ok(Self {
            batch: None,
            work: Some(tx),
            thread: Some(thread),
        })
    }

    /// Adds the pages of a `Pages` message (its runs and their data) to the batch, handing
    /// the batch over when it is full. An earlier install that failed is returned here (the
    /// installer stopped at it).
    pub(crate) fn pages(
        &mut self,
        region: Arc<Region>,
        runs: Vec<(u64, u32)>,
        page_size: u32,
        data: Vec<u8>,
    ) -> Result<(), MigrationError> {
        let pages = (data.len() / (page_size as usize).max(1)) as u64;
        if self
            .batch
            .as_ref()
            .is_some_and(|b| !Arc::ptr_eq(&b.region, &region) || b.page_size != page_size)
        {
            self.flush()?;
        }
        let batch = self.batch.get_or_insert_with(|| PagesBatch {
            region,
            page_size,
            messages: Vec::new(),
            pages: 0,
        });
        batch.messages.push((runs, data));
        batch.pages += pages;
        if batch.pages >= BATCH_PAGES || batch.messages.len() >= BATCH_MESSAGES {
            self.flush()?;
        }
        Ok(())
    }

    /// Hands over the batch of `Pages` messages, if any.
    pub(crate) fn flush(&mut self) -> Result<(), MigrationError> {
        match self.batch.take() {
            Some(b) => self.hand_over(Install::Pages {
                region: b.region,
                page_size: b.page_size,
                messages: b.messages,
            }),
            None => Ok(()),
        }
    }

    /// Hands over the discard of a `Zero` message's bytes (after the batch: in order).
    pub(crate) fn discard(
        &mut self,
        region: Arc<Region>,
        offset: usize,
        len: usize,
    ) -> Result<(), MigrationError> {
        self.flush()?;
        self.hand_over(Install::Discard {
            region,
            offset,
            len,
        })
    }

    /// Waits until everything handed over is installed; the first failure if one failed.
    pub(crate) fn finish(mut self) -> Result<(), MigrationError> {
        let flushed = self.flush();
        self.stop().and(flushed)
    }

    fn hand_over(&mut self, install: Install) -> Result<(), MigrationError> {
        let sent = match &self.work {
            Some(work) => work.send(install).is_ok(),
            None => false,
        };
        if sent {
            Ok(())
        } else {
            // The thread stopped: at a failed install.
            self.stop().and(Err(MigrationError::Io {
                context: "handing pages to the migration's install thread".into(),
                source: std::io::Error::other("the install thread has stopped"),
            }))
        }
    }

    /// Closes the way in and waits for the thread: its result.
    fn stop(&mut self) -> Result<(), MigrationError> {
        drop(self.work.take());
        match self.thread.take() {
            Some(thread) => thread.join().unwrap_or_else(|_| {
                Err(MigrationError::Io {
                    context: "installing received pages".into(),
                    source: std::io::Error::other("the install thread panicked"),
                })
            }),
            None => Ok(()),
        }
    }
}

impl Drop for PageInstaller<'_> {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::role::Role;
    use memvisor_pager::{page_size, RegionConfig};

    fn no_start() {}

    fn region(dir: &tempfile::TempDir) -> Option<Arc<Region>> {
        if let Err(e) = Region::check_supported() {
            eprintln!("SKIPPED: userfaultfd unavailable: {e}");
            return None;
        }
        let chunk = 4 * page_size();
        let config = RegionConfig::new(16 * chunk, 16 * chunk, dir.path()).chunk_size(chunk);
        Some(Arc::new(Region::new(config).unwrap()))
    }

    fn page(r: &Region, index: usize) -> Vec<u8> {
        let pg = page_size();
        let mut out = vec![0u8; pg];
        // SAFETY: page `index` is inside the live region; nothing writes it meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(r.as_ptr().add(index * pg), out.as_mut_ptr(), pg) };
        out
    }

    #[test]
    fn installs_and_discards_in_order_then_reports_a_failed_install() {
        let dir = tempfile::tempdir().unwrap();
        let Some(r) = region(&dir) else { return };
        let pg = page_size();
        let progress = MigrationProgress::new(Role::Destination, "receiving");
        std::thread::scope(|scope| {
            let mut installer = PageInstaller::start(scope, &progress, no_start).unwrap();
            for i in 0..8u8 {
                let data = vec![i + 1; 2 * pg];
                installer
                    .pages(r.clone(), vec![(u64::from(i) * 2, 2)], pg as u32, data)
                    .unwrap();
            }
            // Pages 2..4 became zero after they were sent: zero at the end.
            installer.discard(r.clone(), 2 * pg, 2 * pg).unwrap();
            installer.finish().unwrap();
        });
        for i in 0..16 {
            let expected = if i / 2 == 1 { 0 } else { i as u8 / 2 + 1 };
            assert!(page(&r, i).iter().all(|&b| b == expected), "page {i}");
        }
        // An install that fails (a page size the region does not have) stops the installer;
        // the failure comes back at a later hand-over or at the finish, never lost.
        std::thread::scope(|scope| {
            let mut installer = PageInstaller::start(scope, &progress, no_start).unwrap();
            installer
                .pages(r.clone(), vec![(0, 1)], 2 * pg as u32, vec![9; 2 * pg])
                .unwrap();
            let mut failed = None;
            for _ in 0..2 * INSTALLS_WAITING + 2 {
                if let Err(e) = installer.pages(r.clone(), vec![(4, 1)], pg as u32, vec![7; pg]) {
                    failed = Some(e);
                    break;
                }
            }
            let error = match failed {
                Some(e) => e,
                None => installer.finish().unwrap_err(),
            };
            assert!(
                error.to_string().contains("-byte pages received"),
                "{error}"
            );
        });
        assert!(
            page(&r, 0).iter().all(|&b| b == 1),
            "the failed install left page 0"
        );
        assert!(
            page(&r, 4).iter().all(|&b| b == 3),
            "nothing handed over after the failure was installed"
        );
    }

    #[test]
    fn a_message_of_several_runs_lands_on_each_run_across_chunk_ends() {
        let dir = tempfile::tempdir().unwrap();
        let Some(r) = region(&dir) else { return };
        let pg = page_size();
        let progress = MigrationProgress::new(Role::Destination, "receiving");
        // Chunks of 4 pages: run (3, 3) crosses from chunk 0 into chunk 1.
        let runs: Vec<(u64, u32)> = vec![(1, 1), (3, 3), (9, 2), (15, 1)];
        let mut data = Vec::new();
        for (n, &(first, pages)) in runs.iter().enumerate() {
            for p in 0..u64::from(pages) {
                data.extend(std::iter::repeat_n((10 * n as u64 + first + p) as u8, pg));
            }
        }
        std::thread::scope(|scope| {
            let mut installer = PageInstaller::start(scope, &progress, no_start).unwrap();
            installer
                .pages(r.clone(), runs.clone(), pg as u32, data)
                .unwrap();
            installer.finish().unwrap();
        });
        for i in 0..16u64 {
            let expected = runs
                .iter()
                .enumerate()
                .find(|(_, &(first, pages))| (first..first + u64::from(pages)).contains(&i))
                .map_or(0, |(n, _)| (10 * n as u64 + i) as u8);
            assert!(
                page(&r, i as usize).iter().all(|&b| b == expected),
                "page {i}"
            );
        }
    }
}
