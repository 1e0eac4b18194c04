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
//! with `Done` at once, and [`receive_pushed`] takes the pushed pages. From then on the guest
//! may run on this memory: nothing is ever cleared again. If the connection fails (broken,
//! timed out, frames that do not verify), the receiver waits in state `post-copy-paused` for
//! the source to resume the push over a new connection (`Resume` with the migration's number:
//! nothing else is accepted), answers with its pages still remote, and takes the rest of the
//! push. Any other failure after the switch-over (the source aborting, a pager error) is
//! final: the pages that did not arrive stay remote, and accesses to them keep waiting.

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
/// How long a destination answers resumes of a post-copy migration that completed here (see
/// [`MemoryReceiver::answer_late_resumes`]): a source whose last `Done` was lost notices
/// within its I/O timeout and reconnects within half a second.
pub const LATE_RESUME_GRACE: Duration =
    Duration::from_secs(2 * crate::memory_sender::IO_TIMEOUT.as_secs());

/// How a served migration ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    /// Post-copy: the migration's number. Its source may not have seen the last `Done` (see
    /// [`MemoryReceiver::answer_late_resumes`]).
    pub post_copy: Option<u64>,
}

/// The destination end.
pub struct MemoryReceiver<'a> {
    key: &'a MigrationKey,
    progress: &'a MigrationProgress,
    thread_start: fn(),
}

/// What one accepted connection ended with.
enum Attempt {
    Completed {
        /// Post-copy: the migration's number.
        post_copy: Option<u64>,
    },
    /// Nothing of this connection stays.
    Failed(MigrationError),
    /// Post-copy, after `Done` answered the pause: the guest may run on what arrived.
    FailedAfterSwitchOver {
        error: MigrationError,
        /// The migration's number, which a resuming source names.
        migration: u64,
    },
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
    ) -> Result<Served, MigrationError> {
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
                Attempt::Completed { post_copy } => {
                    self.progress.set_state("completed");
                    return Ok(Served { post_copy });
                }
                Attempt::FailedAfterSwitchOver { error, migration } => {
                    return self.await_resume(listener, &regions, migration, error);
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

    /// Post-copy, after the switch-over, the push failed with `error`: if the connection
    /// failed, waits for the source to resume migration `migration` (as often as it fails
    /// again the same way); returns once the push completed, or with the first failure that
    /// is not the connection's. Nothing is cleared either way.
    fn await_resume(
        &self,
        listener: &TcpListener,
        regions: &[Arc<Region>],
        migration: u64,
        mut error: MigrationError,
    ) -> Result<Served, MigrationError> {
        let left = || regions.iter().map(|r| r.remote_pages()).sum::<usize>();
        loop {
            if !error.is_connection_failure() {
                let e = MigrationError::Io {
                    context: format!(
                        "post-copy failed after the switch-over ({} pages did not arrive; \
                         accesses to them wait)",
                        left()
                    ),
                    source: std::io::Error::other(error.to_string()),
                };
                self.progress.set_error(e.to_string(), true);
                return Err(e);
            }
            self.progress.set_error(
                format!(
                    "post-copy connection lost after the switch-over ({error}); {} pages still \
                     at the source, accesses to them wait until it resumes",
                    left()
                ),
                false,
            );
            self.progress.set_state("post-copy-paused");
            loop {
                let (tcp, peer) = listener.accept().map_err(|source| MigrationError::Io {
                    context: "accepting a migration connection to resume post-copy".into(),
                    source,
                })?;
                match self.resume_attempt(tcp, regions, migration) {
                    Attempt::Completed { post_copy } => {
                        self.progress.set_peer(peer.to_string());
                        self.progress.set_state("completed");
                        return Ok(Served { post_copy });
                    }
                    Attempt::Failed(e) => self
                        .progress
                        .set_error(format!("connection from {peer} refused: {e}"), false),
                    Attempt::FailedAfterSwitchOver { error: e, .. } => {
                        self.progress.set_peer(peer.to_string());
                        error = e;
                        break;
                    }
                }
            }
        }
    }

    /// After post-copy migration `migration` completed here: for `grace`, answers its source
    /// if it resumes (its last `Done` may have been lost with the connection, and it would
    /// otherwise try to reconnect forever): no page is remote any more, and the `Finish` that
    /// follows is answered with `Done`. Other connections are refused. The state stays
    /// `completed`.
    pub fn answer_late_resumes(&self, listener: &TcpListener, migration: u64, grace: Duration) {
        let until = std::time::Instant::now() + grace;
        let fd = std::os::fd::AsRawFd::as_raw_fd(listener);
        loop {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            match crate::readiness::wait_readable(&[fd], left) {
                Ok(ready) if ready.contains(&true) => {}
                Ok(_) => continue,
                Err(_) => return,
            }
            let Ok((tcp, _)) = listener.accept() else {
                continue;
            };
            let Ok(mut stream) = self.open(tcp) else {
                continue;
            };
            let answered = expect_resume(&mut stream, migration).and_then(|()| {
                // Nothing is remote any more: the push completed (`Finish` found no page
                // left), so the list is empty.
                stream.send(&Message::Ready)?;
                match stream.receive()? {
                    Message::Finish => stream.send(&Message::Done { pages: 0, bytes: 0 }),
                    other => Err(unexpected("Finish", &other)),
                }
            });
            if let Err(e) = answered {
                abort(&mut stream, &e);
            }
        }
    }

    /// One connection while post-copy migration `migration` waits to resume: only its
    /// `Resume` is accepted; then the pages still remote here are listed (`Remote`, `Ready`)
    /// and the rest of the push received.
    fn resume_attempt(&self, tcp: TcpStream, regions: &[Arc<Region>], migration: u64) -> Attempt {
        let mut stream = match self.open(tcp) {
            Ok(s) => s,
            Err(e) => return Attempt::Failed(e),
        };
        if let Err(e) = expect_resume(&mut stream, migration) {
            abort(&mut stream, &e);
            return Attempt::Failed(e);
        }
        self.progress.new_connection();
        self.progress.set_state("post-copy");
        let pushed = list_remote(&mut stream, regions)
            .and_then(|()| receive_pushed(&mut stream, regions, self.progress, (0, 0)));
        self.ended(&mut stream, pushed, migration)
    }

    /// How a post-copy push ended: a connection failure is not answered (the source resumes
    /// on a new connection), any other failure with `Abort`.
    fn ended(
        &self,
        stream: &mut MemoryStream<TcpStream>,
        pushed: Result<(), MigrationError>,
        migration: u64,
    ) -> Attempt {
        match pushed {
            Ok(()) => Attempt::Completed {
                post_copy: Some(migration),
            },
            Err(error) => {
                if !error.is_connection_failure() {
                    abort(stream, &error);
                }
                Attempt::FailedAfterSwitchOver { error, migration }
            }
        }
    }

    /// Authenticates a connection and sets its timeouts.
    fn open(&self, tcp: TcpStream) -> Result<MemoryStream<TcpStream>, MigrationError> {
        let timeouts = |tcp: &TcpStream, t: Duration| {
            tcp.set_read_timeout(Some(t))
                .and_then(|()| tcp.set_write_timeout(Some(t)))
                .map_err(|source| MigrationError::Io {
                    context: "setting timeouts on a migration connection".into(),
                    source,
                })
        };
        crate::socket_options::watch_peer(&tcp);
        // One deadline for the whole handshake: connections are served one at a time, and a
        // peer trickling its hello must not hold the listener.
        let stream =
            MemoryStream::handshake_within(tcp, self.key, Role::Destination, HANDSHAKE_TIMEOUT)?;
        timeouts(stream.get_ref(), IDLE_TIMEOUT)?;
        Ok(stream)
    }

    fn attempt(&self, tcp: TcpStream, regions: &[Arc<Region>]) -> Attempt {
        let mut stream = match self.open(tcp) {
            Ok(s) => s,
            Err(e) => return Attempt::Failed(e),
        };
        match self.receive(&mut stream, regions) {
            Ok(Received::Completed) => Attempt::Completed { post_copy: None },
            Ok(Received::SwitchedOver { counts, migration }) => {
                let pushed = receive_pushed(&mut stream, regions, self.progress, counts);
                self.ended(&mut stream, pushed, migration)
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
        let (migration, infos) = match stream.receive()? {
            Message::Begin { migration, regions } => {
                self.progress.set_migration(migration);
                (migration, regions)
            }
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
            self.receive_rounds(stream, regions, installer, migration)
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
        migration: u64,
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
                            migration,
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
        /// The migration's number (from `Begin`).
        migration: u64,
    },
}

/// The first message of a connection while post-copy migration `migration` waits to resume
/// (or has just completed): its `Resume`, or why the connection is refused.
fn expect_resume(
    stream: &mut MemoryStream<TcpStream>,
    migration: u64,
) -> Result<(), MigrationError> {
    let refused = |got: String| MigrationError::AwaitingResume { migration, got };
    match stream.receive()? {
        Message::Resume { migration: m } if m == migration => Ok(()),
        Message::Resume { migration: m } => Err(refused(format!("Resume of migration {m:#018x}"))),
        Message::Abort { reason } => Err(MigrationError::PeerAborted { reason }),
        other => Err(refused(other.name().to_string())),
    }
}

/// Tells the peer why this end gives up (unless the peer gave up first).
fn abort(stream: &mut MemoryStream<TcpStream>, e: &MigrationError) {
    if !matches!(e, MigrationError::PeerAborted { .. }) {
        let _ = stream.send(&Message::Abort {
            reason: truncate(e.to_string(), crate::message::MAX_ABORT_REASON_LEN),
        });
    }
}

/// Post-copy, resumed: sends the pages still remote in each region (`Remote`), then `Ready`.
fn list_remote(
    stream: &mut MemoryStream<TcpStream>,
    regions: &[Arc<Region>],
) -> Result<(), MigrationError> {
    for (ri, r) in regions.iter().enumerate() {
        for message in Message::remote(ri as u32, &r.remote_page_runs()?) {
            stream.queue(&message)?;
        }
    }
    stream.send(&Message::Ready)
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
