//! [`MemoryReceiver`]: the destination end of a live migration. It listens on one TCP
//! address, serves one connection at a time, and installs what an authenticated source sends
//! into this process's guest-memory regions: pages in memory while they fit the region's
//! budget, straight into its swap file after that (*virtualizing* without page-outs), `Zero`
//! runs discarded.
//!
//! An attempt that fails (a wrong key, regions that do not match, a broken connection, a
//! bad MAC, an `Abort` from the source) leaves nothing behind: the regions are cleared again
//! and the receiver listens for the next attempt, so a retry works. It returns once one
//! migration completed (`Finish` answered with `Done`).

use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use memvisor_pager::Region;

use crate::memory_sender::{truncate, unexpected};
use crate::memory_stream::MemoryStream;
use crate::message::Message;
use crate::migration_error::MigrationError;
use crate::migration_key::MigrationKey;
use crate::migration_progress::MigrationProgress;
use crate::page_installer::{PageInstaller, ReceivedPages};
use crate::role::Role;

/// Time a connecting peer has to complete the handshake (a silent one holds the single
/// connection slot no longer).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence from the source once the handshake is done (a source converging sends
/// something every round).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The destination end.
pub struct MemoryReceiver<'a> {
    key: &'a MigrationKey,
    progress: &'a MigrationProgress,
    thread_start: fn(),
}

/// What one accepted connection ended with.
enum Attempt {
    Completed,
    Failed(MigrationError),
}

impl<'a> MemoryReceiver<'a> {
    /// A receiver checking peers with `key`, reporting to `progress`. Threads it starts (the
    /// installs, [`PageInstaller`]) run `thread_start` first: the embedder's preparation of its
    /// threads (the preload library's credential mirror).
    pub fn new(key: &'a MigrationKey, progress: &'a MigrationProgress, thread_start: fn()) -> Self {
        Self {
            key,
            progress,
            thread_start,
        }
    }

    /// Serves `listener` until one migration into `regions()` (asked anew for each attempt:
    /// the process's guest-memory regions, in the source's order) completed.
    pub fn serve(
        &self,
        listener: &TcpListener,
        regions: impl Fn() -> Vec<Arc<Region>>,
    ) -> Result<(), MigrationError> {
        self.progress.set_state("listening");
        loop {
            let (tcp, peer) = listener.accept().map_err(|source| MigrationError::Io {
                context: "accepting a migration connection".into(),
                source,
            })?;
            self.progress.set_peer(peer.to_string());
            self.progress.reset_counters();
            let regions = regions();
            match self.attempt(tcp, &regions) {
                Attempt::Completed => {
                    self.progress.set_state("completed");
                    return Ok(());
                }
                Attempt::Failed(e) => {
                    // Said first: the source already knows (its connection is closed), and
                    // whoever asks next should see why.
                    self.progress
                        .set_error(format!("attempt from {peer} failed: {e}"), false);
                    // Nothing received stays: the guest must not start from half a memory.
                    for r in &regions {
                        let _ = r.discard(0, r.len());
                    }
                    self.progress.set_state("listening");
                }
            }
        }
    }

    fn attempt(&self, tcp: TcpStream, regions: &[Arc<Region>]) -> Attempt {
        let timeouts = tcp
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .and_then(|()| tcp.set_write_timeout(Some(HANDSHAKE_TIMEOUT)));
        if let Err(source) = timeouts {
            return Attempt::Failed(MigrationError::Io {
                context: "setting timeouts on a migration connection".into(),
                source,
            });
        }
        let mut stream = match MemoryStream::handshake(tcp, self.key, Role::Destination) {
            Ok(s) => s,
            Err(e) => return Attempt::Failed(e),
        };
        let idle = stream
            .get_ref()
            .set_read_timeout(Some(IDLE_TIMEOUT))
            .and_then(|()| stream.get_ref().set_write_timeout(Some(IDLE_TIMEOUT)));
        if let Err(source) = idle {
            return Attempt::Failed(MigrationError::Io {
                context: "setting timeouts on a migration connection".into(),
                source,
            });
        }
        match self.receive(&mut stream, regions) {
            Ok(()) => Attempt::Completed,
            Err(e) => {
                if !matches!(e, MigrationError::PeerAborted { .. }) {
                    let _ = stream.send(&Message::Abort {
                        reason: truncate(e.to_string(), crate::message::MAX_ABORT_REASON_LEN),
                    });
                }
                Attempt::Failed(e)
            }
        }
    }

    fn receive(
        &self,
        stream: &mut MemoryStream<TcpStream>,
        regions: &[Arc<Region>],
    ) -> Result<(), MigrationError> {
        let infos = match stream.receive()? {
            Message::Begin { regions } => regions,
            Message::Abort { reason } => return Err(MigrationError::PeerAborted { reason }),
            other => return Err(unexpected("Begin", &other)),
        };
        check_regions(&infos, regions)?;
        for r in regions {
            r.discard(0, r.len())?;
        }
        stream.send(&Message::Ready)?;
        self.progress.set_state("receiving");
        std::thread::scope(|scope| {
            let installer = PageInstaller::start(scope, self.progress, self.thread_start)?;
            self.receive_rounds(stream, regions, installer)
        })
    }

    /// Receives the rounds after `Ready` until `Finish`, handing pages and discards to
    /// `installer`; answers `Finish` with `Done` once everything is installed.
    fn receive_rounds(
        &self,
        stream: &mut MemoryStream<TcpStream>,
        regions: &[Arc<Region>],
        mut installer: PageInstaller<'_>,
    ) -> Result<(), MigrationError> {
        let (mut pages, mut bytes) = (0u64, 0u64);
        loop {
            let message = stream.receive()?;
            self.progress
                .set_wire_bytes(stream.bytes_sent() + stream.bytes_received());
            match message {
                Message::Pages {
                    region,
                    page_size,
                    runs,
                    data,
                    ..
                } => {
                    let r = region_at(regions, region)?;
                    let n = check_runs(r, &runs, page_size)?;
                    installer.pages(r.clone(), runs, page_size, data)?;
                    pages += n;
                    bytes += n * page_size as u64;
                    self.progress.add_pages(n);
                }
                Message::Zero {
                    region,
                    first_page,
                    pages: n,
                } => {
                    let r = region_at(regions, region)?;
                    let pg = memvisor_pager::page_size() as u64;
                    let (offset, len) = page_range(r, first_page, n, pg)?;
                    installer.discard(r.clone(), offset, len)?;
                    pages += n;
                    self.progress.add_zero_pages(n);
                }
                Message::RoundEnd { .. } => {
                    installer.flush()?;
                    self.progress.round_done();
                }
                Message::Finish => {
                    // Done acknowledges pages installed, not only received.
                    installer.finish()?;
                    stream.send(&Message::Done { pages, bytes })?;
                    self.progress
                        .set_wire_bytes(stream.bytes_sent() + stream.bytes_received());
                    return Ok(());
                }
                Message::Abort { reason } => return Err(MigrationError::PeerAborted { reason }),
                other => return Err(unexpected("Pages, Zero, RoundEnd or Finish", &other)),
            }
        }
    }
}

/// Refuses a source whose regions differ from ours in number, size or page size.
fn check_regions(
    theirs: &[crate::region_info::RegionInfo],
    ours: &[Arc<Region>],
) -> Result<(), MigrationError> {
    let mismatch = |reason: String| Err(MigrationError::RegionMismatch { reason });
    if theirs.len() != ours.len() {
        return mismatch(format!(
            "the source has {} guest-memory regions, this destination {}",
            theirs.len(),
            ours.len()
        ));
    }
    let pg = memvisor_pager::page_size() as u32;
    for (i, (t, o)) in theirs.iter().zip(ours).enumerate() {
        if t.bytes != o.len() as u64 || t.page_size != pg {
            return mismatch(format!(
                "region {i}: the source's {} is {} bytes in {}-byte pages, this destination's \
                 {} is {} bytes in {pg}-byte pages",
                t.name,
                t.bytes,
                t.page_size,
                o.name(),
                o.len()
            ));
        }
    }
    Ok(())
}

fn region_at(regions: &[Arc<Region>], index: u32) -> Result<&Arc<Region>, MigrationError> {
    regions
        .get(index as usize)
        .ok_or_else(|| MigrationError::RegionMismatch {
            reason: format!(
                "a message names region {index}, but there are {}",
                regions.len()
            ),
        })
}

/// The byte range of `n` pages from `first` in `r`, refused if outside it.
fn page_range(r: &Region, first: u64, n: u64, page: u64) -> Result<(usize, usize), MigrationError> {
    let pages = r.len() as u64 / page;
    if first.checked_add(n).is_none_or(|end| end > pages) {
        return Err(MigrationError::RegionMismatch {
            reason: format!(
                "pages {first}..{} are beyond region {} ({pages} pages)",
                first.saturating_add(n),
                r.name()
            ),
        });
    }
    Ok(((first * page) as usize, (n * page) as usize))
}

/// Checks that `runs` of `page_size`-byte pages fit region `r` and its page size; how many
/// pages they hold.
fn check_runs(r: &Region, runs: &[(u64, u32)], page_size: u32) -> Result<u64, MigrationError> {
    let pg = memvisor_pager::page_size();
    if page_size as usize != pg {
        return Err(MigrationError::RegionMismatch {
            reason: format!("{page_size}-byte pages received, this region has {pg}-byte pages"),
        });
    }
    let mut total = 0;
    for &(first, pages) in runs {
        page_range(r, first, u64::from(pages), pg as u64)?;
        total += u64::from(pages);
    }
    Ok(total)
}

/// Installs each message's data (`(runs, data)`: the runs' whole pages of `page_size`, in run
/// order) as the runs' pages of `r`, split at chunk boundaries, in one request to the pager;
/// how many pages.
pub(crate) fn install(
    r: &Region,
    messages: Vec<ReceivedPages>,
    page_size: u32,
    progress: &MigrationProgress,
) -> Result<u64, MigrationError> {
    let pg = page_size as usize;
    let ppc = (r.chunk_size() / pg) as u64;
    let mut pieces = Vec::with_capacity(messages.len());
    let mut total = 0;
    for (runs, data) in messages {
        let n = check_runs(r, &runs, page_size)?;
        if n * pg as u64 != data.len() as u64 {
            return Err(MigrationError::RegionMismatch {
                reason: format!(
                    "{} bytes of page data for {n} pages of {pg} bytes",
                    data.len()
                ),
            });
        }
        total += n;
        if let [(first, pages)] = runs[..] {
            if first % ppc + u64::from(pages) <= ppc {
                // The usual case of round 0, one run in one chunk: the message's buffer goes
                // to the pager as it is.
                pieces.push((first as usize, data));
                continue;
            }
        }
        let mut rest: &[u8] = &data;
        for (first, pages) in runs {
            let (run, later) = rest.split_at(pages as usize * pg);
            rest = later;
            let mut at = first;
            let mut run = run;
            while !run.is_empty() {
                let in_chunk = (ppc - at % ppc).min(run.len() as u64 / pg as u64);
                let (now, after) = run.split_at(in_chunk as usize * pg);
                pieces.push((at as usize, now.to_vec()));
                at += in_chunk;
                run = after;
            }
        }
    }
    let placed = r.install_runs(pieces)?;
    progress.add_placed(placed.in_memory as u64, placed.to_swap as u64);
    Ok(total)
}
