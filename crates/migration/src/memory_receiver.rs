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
//!
//! Post-copy: `Remote` messages after the last round name pages whose content follows after
//! the switch-over; they are marked remote in the pager (accesses wait), `Finish` is answered
//! with `Done` at once, and [`receive_pushed`] takes the pushed pages. A failure from then on
//! is final: the guest may run on this memory, so nothing is cleared and no retry is served.

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
use crate::post_copy_receiver::receive_pushed;
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
    /// Post-copy, after `Done` answered the pause: the guest may run on what arrived.
    FailedAfterSwitchOver(MigrationError),
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
                Attempt::FailedAfterSwitchOver(e) => {
                    // Nothing is cleared: the guest may run on this memory already.
                    let e = MigrationError::Io {
                        context: format!(
                            "post-copy from {peer} failed after the switch-over ({} pages did \
                             not arrive; accesses to them wait)",
                            regions.iter().map(|r| r.remote_pages()).sum::<usize>()
                        ),
                        source: std::io::Error::other(e.to_string()),
                    };
                    self.progress.set_error(e.to_string(), true);
                    return Err(e);
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
        let abort = |stream: &mut MemoryStream<TcpStream>, e: &MigrationError| {
            if !matches!(e, MigrationError::PeerAborted { .. }) {
                let _ = stream.send(&Message::Abort {
                    reason: truncate(e.to_string(), crate::message::MAX_ABORT_REASON_LEN),
                });
            }
        };
        match self.receive(&mut stream, regions) {
            Ok(Received::Completed) => Attempt::Completed,
            Ok(Received::SwitchedOver { counts }) => {
                match receive_pushed(&mut stream, regions, self.progress, counts) {
                    Ok(()) => Attempt::Completed,
                    Err(e) => {
                        abort(&mut stream, &e);
                        Attempt::FailedAfterSwitchOver(e)
                    }
                }
            }
            Err(e) => {
                abort(&mut stream, &e);
                Attempt::Failed(e)
            }
        }
    }

    fn receive(
        &self,
        stream: &mut MemoryStream<TcpStream>,
        regions: &[Arc<Region>],
    ) -> Result<Received, MigrationError> {
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
    /// `installer`; answers `Finish` with `Done` once everything is installed. `Remote`
    /// messages (post-copy) may follow the last round: the installs are finished first, then
    /// the pages marked remote, and nothing but more `Remote` or `Finish` may follow.
    fn receive_rounds(
        &self,
        stream: &mut MemoryStream<TcpStream>,
        regions: &[Arc<Region>],
        installer: PageInstaller<'_>,
    ) -> Result<Received, MigrationError> {
        let (mut pages, mut bytes) = (0u64, 0u64);
        let mut installer = Some(installer);
        let mut remote = 0u64;
        loop {
            let message = stream.receive()?;
            self.progress
                .set_wire_bytes(stream.bytes_sent() + stream.bytes_received());
            match message {
                Message::Pages { .. } | Message::Zero { .. } | Message::RoundEnd { .. }
                    if installer.is_none() =>
                {
                    return Err(unexpected("Remote or Finish", &message));
                }
                Message::Pages {
                    region,
                    page_size,
                    runs,
                    data,
                    ..
                } => {
                    let r = region_at(regions, region)?;
                    let n = check_runs(r, &runs, page_size)?;
                    installing(&mut installer)?.pages(r.clone(), runs, page_size, data)?;
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
                    installing(&mut installer)?.discard(r.clone(), offset, len)?;
                    pages += n;
                    self.progress.add_zero_pages(n);
                }
                Message::RoundEnd { .. } => {
                    installing(&mut installer)?.flush()?;
                    self.progress.round_done();
                }
                Message::Remote { region, runs } => {
                    let r = region_at(regions, region)?;
                    let n = check_runs(r, &runs, memvisor_pager::page_size() as u32)?;
                    // Every page sent before must be in place first: a later install of an
                    // earlier round's copy would end the page's remote state with old data.
                    if let Some(i) = installer.take() {
                        i.finish()?;
                    }
                    r.mark_remote(chunk_pieces(r, &runs))?;
                    remote += n;
                    self.progress.set_remote_pages(remote);
                }
                Message::Finish => {
                    // Done acknowledges pages installed, not only received.
                    if let Some(i) = installer.take() {
                        i.finish()?;
                    }
                    stream.send(&Message::Done { pages, bytes })?;
                    self.progress
                        .set_wire_bytes(stream.bytes_sent() + stream.bytes_received());
                    return Ok(if remote == 0 {
                        Received::Completed
                    } else {
                        Received::SwitchedOver {
                            counts: (pages, bytes),
                        }
                    });
                }
                Message::Abort { reason } => return Err(MigrationError::PeerAborted { reason }),
                other => return Err(unexpected("Pages, Zero, RoundEnd or Finish", &other)),
            }
        }
    }
}

/// The installer of the rounds, which `Remote` ends (the caller refuses round messages
/// after it first).
fn installing<'a, 'scope>(
    installer: &'a mut Option<PageInstaller<'scope>>,
) -> Result<&'a mut PageInstaller<'scope>, MigrationError> {
    installer.as_mut().ok_or(MigrationError::Unexpected {
        expected: "Remote or Finish",
        got: "Pages, Zero or RoundEnd",
    })
}

/// How the rounds ended.
enum Received {
    /// Everything arrived.
    Completed,
    /// Post-copy: the pause was acknowledged with pages still remote; the push follows.
    SwitchedOver {
        /// Pages and page bytes received so far.
        counts: (u64, u64),
    },
}

/// `runs` (checked to fit `r`) cut at `r`'s chunk boundaries, as (region page, count).
pub(crate) fn chunk_pieces(r: &Region, runs: &[(u64, u32)]) -> Vec<(usize, usize)> {
    let ppc = r.chunk_size() / memvisor_pager::page_size();
    let mut pieces = Vec::with_capacity(runs.len());
    for &(first, pages) in runs {
        let (mut at, end) = (first as usize, first as usize + pages as usize);
        while at < end {
            let n = (ppc - at % ppc).min(end - at);
            pieces.push((at, n));
            at += n;
        }
    }
    pieces
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

pub(crate) fn region_at(
    regions: &[Arc<Region>],
    index: u32,
) -> Result<&Arc<Region>, MigrationError> {
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
pub(crate) fn page_range(
    r: &Region,
    first: u64,
    n: u64,
    page: u64,
) -> Result<(usize, usize), MigrationError> {
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
pub(crate) fn check_runs(
    r: &Region,
    runs: &[(u64, u32)],
    page_size: u32,
) -> Result<u64, MigrationError> {
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
    let mut pieces = Vec::with_capacity(messages.len());
    let mut total = 0;
    for (runs, data) in messages {
        let (n, chunked) = chunk_data(r, &runs, data, page_size)?;
        total += n;
        pieces.extend(chunked);
    }
    let placed = r.install_runs(pieces)?;
    progress.add_placed(placed.in_memory as u64, placed.to_swap as u64);
    Ok(total)
}

/// Whole pages for the pager: (first region page, their bytes), inside one chunk.
pub(crate) type ChunkData = (usize, Vec<u8>);

/// One message's pages (`runs` and their `data`, whole pages of `page_size`), checked to fit
/// `r`, cut at `r`'s chunk boundaries as (region page, data) for the pager; and how many pages.
/// One run inside one chunk (round 0's usual case) keeps the message's buffer as it is.
pub(crate) fn chunk_data(
    r: &Region,
    runs: &[(u64, u32)],
    data: Vec<u8>,
    page_size: u32,
) -> Result<(u64, Vec<ChunkData>), MigrationError> {
    let pg = page_size as usize;
    let n = check_runs(r, runs, page_size)?;
    if n * pg as u64 != data.len() as u64 {
        return Err(MigrationError::RegionMismatch {
            reason: format!(
                "{} bytes of page data for {n} pages of {pg} bytes",
                data.len()
            ),
        });
    }
    let pieces = chunk_pieces(r, runs);
    if let [(first, _)] = pieces[..] {
        return Ok((n, vec![(first, data)]));
    }
    let mut rest: &[u8] = &data;
    let mut out = Vec::with_capacity(pieces.len());
    for (first, count) in pieces {
        let (now, later) = rest.split_at(count * pg);
        out.push((first, now.to_vec()));
        rest = later;
    }
    Ok((n, out))
}
