//! [`MemorySender`]: the source end of a live migration (seed 003, section 3). It moves the
//! guest-memory regions of this process to a destination pager, never faulting a page in:
//!
//! 1. connect and authenticate ([`MemoryStream::handshake`]), announce the regions (`Begin`)
//!    and wait for `Ready` (the destination has the same regions and has cleared them);
//! 2. start tracking changes, then round 0: every chunk that holds data, resident chunks first,
//!    read where it is (memory, swap, disk image) and sent as `Pages` (zero pages are not
//!    sent: the destination starts from zeros);
//! 3. while the guest runs, further rounds send what changed (`Pages`, or `Zero` for pages
//!    that became zero), until [`SenderSignals::finish`] (the VMM has paused the guest at
//!    `pre-switchover`); the state says `converged` once a round's changes would go in less
//!    than the downtime limit at the measured rate. A round under way when the guest pauses
//!    stops there: the pages it had still to send go in the last round, with those changed
//!    since (a page in both goes once);
//! 4. the last round, `Finish`, and the destination's `Done` acknowledging exactly the pages
//!    sent.
//!
//! Post-copy ([`SenderOptions::post_copy`]; by default when the last round would take longer
//! than [`AUTO_POST_COPY_ABOVE`](memvisor_control::AUTO_POST_COPY_ABOVE) at the measured
//! rate) replaces the last round: the pages changed since they were sent are only named
//! (`Remote`), so the pause does not grow with them; after `Done`
//! (state `post-copy`) the VMM switches over and the destination's guest runs while this
//! sender pushes those pages ([`PushPlan`]), the ones its faults wait for (`Want`) first, and
//! ends with `Finish` and `Done` again. If the connection fails during the push, the sender
//! reconnects (state `post-copy-paused`, a try every [`RECONNECT_PAUSE`] until it gets through
//! or is cancelled), resumes the migration by its number (`Resume`), checks that the pages the
//! destination still lists as remote are ones it named, and pushes those. Any other failure
//! after the switch-over cannot be undone: the destination's accesses to the pages that did
//! not arrive keep waiting, this guest stays paused, and nothing is written anywhere twice.
//!
//! On any error, or [`SenderSignals::cancel`], the source sends `Abort` (if it still can) and
//! stops tracking; its guest memory is untouched either way.

use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use memvisor_control::PostCopy;
use memvisor_pager::{MigrationPages, Region};

use crate::memory_receiver::{region_at, HANDSHAKE_TIMEOUT};
use crate::memory_stream::MemoryStream;
use crate::message::Message;
use crate::migration_error::MigrationError;
use crate::migration_key::MigrationKey;
use crate::migration_progress::MigrationProgress;
use crate::page_runs::{first_uncovered, pages_in, union_runs};
use crate::push_plan::PushPlan;
use crate::rate_limiter::RateLimiter;
use crate::read_ahead::ReadAhead;
use crate::readiness::wait_readable;
use crate::region_info::RegionInfo;
use crate::role::Role;
use crate::socket_options::{set_cork, watch_peer};

/// Time to connect to the destination.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for any read or write on the connection (the destination answers `Ready`
/// after clearing its regions, `Done` after installing the last round).
pub const IO_TIMEOUT: Duration = Duration::from_secs(60);
/// Round 0 must send this much for its rate to count.
const MIN_MEASURED_BYTES: u64 = 8 << 20;
/// The rate assumed when round 0 sent too little to measure one, bytes per second.
const ASSUMED_RATE: f64 = 64.0 * (1 << 20) as f64;
/// A read request of a later round asks for at most this many pages...
const BATCH_PAGES: usize = 256;
/// ...in at most this many runs.
const BATCH_RUNS: usize = 64;
/// Pause between rounds once converged, waiting for the finish signal.
const CONVERGED_PAUSE: Duration = Duration::from_millis(20);
/// Post-copy: pause before each try to reconnect after the connection failed.
pub const RECONNECT_PAUSE: Duration = Duration::from_millis(500);

/// How a source migration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SenderOptions {
    /// Bytes per second at most (`None`: as fast as the connection goes).
    pub max_bandwidth: Option<u64>,
    /// Converged once one round's changes would go in this long.
    pub downtime_limit: Duration,
    /// When the last round names the changed pages instead of sending them, and they follow
    /// after the switch-over (see the module documentation).
    pub post_copy: PostCopy,
}

/// What other threads tell a running sender.
#[derive(Debug, Default)]
pub struct SenderSignals {
    finish: AtomicBool,
    cancel: AtomicBool,
    /// Wakes a sender pausing between rounds.
    wake: Mutex<()>,
    woken: Condvar,
}

impl SenderSignals {
    /// The guest is paused: send the last round and finish.
    pub fn finish(&self) {
        self.finish.store(true, Ordering::Release);
        self.wake_sender();
    }

    /// Stop; the destination discards what it got.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Release);
        self.wake_sender();
    }

    fn wake_sender(&self) {
        // Taking the lock orders the store before a pausing sender's check.
        drop(self.wake.lock().unwrap_or_else(|e| e.into_inner()));
        self.woken.notify_all();
    }

    /// Sleeps up to `pause`, less if `finish` or `cancel` is signalled (or was already).
    fn pause(&self, pause: Duration) {
        let guard = self.wake.lock().unwrap_or_else(|e| e.into_inner());
        let _ = self
            .woken
            .wait_timeout_while(guard, pause, |_| !self.finishing() && !self.cancelled());
    }

    fn finishing(&self) -> bool {
        self.finish.load(Ordering::Acquire)
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Acquire)
    }
}

/// The source end over one connection.
pub struct MemorySender<'a> {
    regions: &'a [Arc<Region>],
    stream: MemoryStream<TcpStream>,
    /// The destination's address and the key, to reconnect (post-copy).
    to: SocketAddr,
    key: &'a MigrationKey,
    /// This migration's random number, in `Begin` and any `Resume`.
    migration: u64,
    options: SenderOptions,
    signals: &'a SenderSignals,
    progress: &'a MigrationProgress,
    limiter: RateLimiter,
    /// Pages sent in all (data and zero), what the destination must acknowledge.
    pages_sent: u64,
    /// Page bytes sent in all.
    bytes_sent: u64,
    /// `pages_sent` and `bytes_sent` when the connection began (a `Done` counts the pages of
    /// its connection).
    sent_before_connection: (u64, u64),
    /// Run first by the threads the sender starts (round 0's read-ahead).
    thread_start: fn(),
}

impl<'a> MemorySender<'a> {
    /// Runs a whole source migration of `regions` to `to` on the calling thread. Threads it
    /// starts for the migration (round 0's reads ahead) run `thread_start` first: the
    /// embedder's preparation of its threads (the preload library's credential mirror).
    pub fn run(
        regions: &'a [Arc<Region>],
        to: SocketAddr,
        key: &'a MigrationKey,
        options: SenderOptions,
        signals: &'a SenderSignals,
        progress: &'a MigrationProgress,
        thread_start: fn(),
    ) -> Result<(), MigrationError> {
        progress.set_peer(to.to_string());
        progress.set_state("connecting");
        let result = Self::connect(regions, to, key, options, signals, progress, thread_start)
            .and_then(|mut sender| {
                let r = sender.migrate();
                if let Err(e) = &r {
                    // Tell the destination why (it may already be gone).
                    let reason = if signals.cancelled() {
                        "cancelled by the source".to_string()
                    } else {
                        e.to_string()
                    };
                    let _ = sender.stream.send(&Message::Abort {
                        reason: truncate(reason, crate::message::MAX_ABORT_REASON_LEN),
                    });
                }
                r
            });
        for r in regions {
            let _ = r.stop_change_tracking();
        }
        match &result {
            Ok(()) => progress.set_state("completed"),
            Err(_) if signals.cancelled() => progress.set_state("cancelled"),
            Err(e) => progress.set_error(e.to_string(), true),
        }
        result
    }

    fn connect(
        regions: &'a [Arc<Region>],
        to: SocketAddr,
        key: &'a MigrationKey,
        options: SenderOptions,
        signals: &'a SenderSignals,
        progress: &'a MigrationProgress,
        thread_start: fn(),
    ) -> Result<Self, MigrationError> {
        let mut migration = [0u8; 8];
        getrandom::fill(&mut migration)
            .map_err(|error| MigrationError::Random(error.to_string()))?;
        progress.set_migration(u64::from_le_bytes(migration));
        Ok(Self {
            regions,
            stream: open_stream(to, key)?,
            to,
            key,
            migration: u64::from_le_bytes(migration),
            options,
            signals,
            progress,
            limiter: RateLimiter::new(options.max_bandwidth),
            pages_sent: 0,
            bytes_sent: 0,
            sent_before_connection: (0, 0),
            thread_start,
        })
    }

    fn migrate(&mut self) -> Result<(), MigrationError> {
        let infos = self
            .regions
            .iter()
            .map(|r| RegionInfo {
                name: r.name().to_string(),
                bytes: r.len() as u64,
                page_size: memvisor_pager::page_size() as u32,
            })
            .collect();
        self.stream.send(&Message::Begin {
            migration: self.migration,
            regions: infos,
        })?;
        match self.stream.receive()? {
            Message::Ready => {}
            Message::Abort { reason } => return Err(MigrationError::PeerAborted { reason }),
            other => return Err(unexpected("Ready", &other)),
        }
        for r in self.regions {
            r.start_change_tracking()?;
        }
        self.progress.set_state("sending");
        let started = Instant::now();
        self.round_zero()?;
        let rate = convergence_rate(
            self.bytes_sent,
            started.elapsed(),
            self.options.max_bandwidth,
        );
        let mut round = 1;
        // Per region, the pages a round had still to send when the guest paused.
        let mut unsent = vec![Vec::new(); self.regions.len()];
        // Post-copy: per region, the pages named remote at the pause.
        let mut remote = Vec::new();
        loop {
            self.check_cancel()?;
            let finishing = self.signals.finishing();
            // Whether this round takes the pages changed since the last one itself.
            let mut take = true;
            if finishing {
                self.progress.set_state("finishing");
                if self.options.post_copy != PostCopy::Never {
                    // The last round's pages, whose number decides.
                    let last = self.last_round_pages(&mut unsent)?;
                    let pages = pages_in(&last);
                    let sending = Duration::from_secs_f64(sending_seconds(pages, rate));
                    if self.options.post_copy.applies(pages, sending) {
                        remote = self.send_remote(last)?;
                        break;
                    }
                    unsent = last;
                    take = false;
                }
            }
            let (changed, cut_short) = self.send_changes(round, &mut unsent, finishing, take)?;
            round += 1;
            if finishing {
                break;
            }
            if cut_short {
                // The guest paused during that round: the last one follows at once.
                continue;
            }
            if sending_seconds(changed, rate) <= self.options.downtime_limit.as_secs_f64() {
                if self.progress.state() == "sending" {
                    self.progress.set_state("converged");
                }
                self.signals.pause(CONVERGED_PAUSE);
            }
        }
        self.finish_and_wait_done()?;
        if remote.iter().all(|runs| runs.is_empty()) {
            return Ok(());
        }
        self.progress.set_state("post-copy");
        self.push_resuming(remote)
    }

    /// Post-copy, after the switch-over: pushes the pages `named` remote at the pause; if the
    /// connection fails, reconnects and pushes what the destination still lacks, as often as
    /// it takes.
    fn push_resuming(&mut self, named: Vec<Vec<(usize, usize)>>) -> Result<(), MigrationError> {
        let mut plan = named.clone();
        loop {
            let error = match self.push_remote(plan) {
                Ok(()) => return Ok(()),
                Err(e) if e.is_connection_failure() && !self.signals.cancelled() => e,
                Err(e) => return Err(e),
            };
            plan = self.resume(&named, error)?;
            self.progress.set_state("post-copy");
        }
    }

    /// Post-copy, the connection failed with `error`: tries to reconnect every
    /// [`RECONNECT_PAUSE`] until the destination resumes the migration (or the sender is
    /// cancelled, or a try fails other than by the connection). Returns the pages the
    /// destination still lacks, per region.
    fn resume(
        &mut self,
        named: &[Vec<(usize, usize)>],
        mut error: MigrationError,
    ) -> Result<Vec<Vec<(usize, usize)>>, MigrationError> {
        loop {
            self.progress.set_error(
                format!(
                    "post-copy connection lost after the switch-over ({error}); reconnecting to \
                     {}",
                    self.to
                ),
                false,
            );
            self.progress.set_state("post-copy-paused");
            self.signals.pause(RECONNECT_PAUSE);
            self.check_cancel()?;
            match self.reconnect(named) {
                Ok(left) => return Ok(left),
                Err(e) if e.is_connection_failure() => error = e,
                Err(e) => return Err(e),
            }
        }
    }

    /// One try to resume post-copy over a new connection: `Resume`, then the destination's
    /// pages still remote (`Remote` messages up to `Ready`), each checked to be among those
    /// `named` at the pause.
    fn reconnect(
        &mut self,
        named: &[Vec<(usize, usize)>],
    ) -> Result<Vec<Vec<(usize, usize)>>, MigrationError> {
        let stream = open_stream(self.to, self.key)?;
        self.sync_wire_bytes();
        self.progress.new_connection();
        self.stream = stream;
        self.sent_before_connection = (self.pages_sent, self.bytes_sent);
        self.stream.send(&Message::Resume {
            migration: self.migration,
        })?;
        let mut left = vec![Vec::new(); self.regions.len()];
        let named_pages = pages_in(named);
        let mut listed = 0u64;
        loop {
            match self.stream.receive()? {
                Message::Remote { region, runs } => {
                    // More pages than were named cannot all be named: refused before they are
                    // kept (the list's memory stays bounded by what this source named).
                    listed += runs.iter().map(|r| u64::from(r.1)).sum::<u64>();
                    if listed > named_pages {
                        let (first, n) = runs[0];
                        return Err(MigrationError::RemoteMismatch {
                            region,
                            first,
                            end: first.saturating_add(u64::from(n)),
                        });
                    }
                    region_at(self.regions, region)?;
                    left[region as usize]
                        .extend(runs.iter().map(|&(f, n)| (f as usize, n as usize)));
                }
                Message::Ready => break,
                Message::Abort { reason } => return Err(MigrationError::PeerAborted { reason }),
                other => return Err(unexpected("Remote or Ready", &other)),
            }
        }
        for (ri, (named, left)) in named.iter().zip(&left).enumerate() {
            if let Some((first, n)) = first_uncovered(named, left) {
                return Err(MigrationError::RemoteMismatch {
                    region: ri as u32,
                    first: first as u64,
                    end: first as u64 + n as u64,
                });
            }
        }
        self.progress.set_remote_pages(pages_in(&left));
        self.sync_wire_bytes();
        Ok(left)
    }

    /// Sends `Finish` and waits for the destination's `Done`, which must acknowledge every
    /// page sent. `Want`s that come first (post-copy: faults on pages just sent) are dropped.
    fn finish_and_wait_done(&mut self) -> Result<(), MigrationError> {
        self.stream.send(&Message::Finish)?;
        self.sync_wire_bytes();
        loop {
            return match self.stream.receive()? {
                Message::Done { pages, bytes } if (pages, bytes) == self.sent_on_connection() => {
                    self.sync_wire_bytes();
                    Ok(())
                }
                Message::Done { pages, bytes } => Err(MigrationError::Incomplete {
                    sent_pages: self.sent_on_connection().0,
                    sent_bytes: self.sent_on_connection().1,
                    acknowledged_pages: pages,
                    acknowledged_bytes: bytes,
                }),
                Message::Want { .. } => continue,
                Message::Abort { reason } => Err(MigrationError::PeerAborted { reason }),
                other => Err(unexpected("Done", &other)),
            };
        }
    }

    /// The guest paused: per region, every page changed since it was sent, with those a round
    /// cut short had still to send (`unsent`, which it empties): the last round's pages.
    fn last_round_pages(
        &mut self,
        unsent: &mut [Vec<(usize, usize)>],
    ) -> Result<Vec<Vec<(usize, usize)>>, MigrationError> {
        let mut pages = Vec::with_capacity(self.regions.len());
        for (ri, region) in self.regions.iter().enumerate() {
            let taken = region.take_changed_pages()?;
            let pages_per_chunk = region.chunk_size() / memvisor_pager::page_size();
            pages.push(union_runs(
                &std::mem::take(&mut unsent[ri]),
                &taken,
                pages_per_chunk,
            ));
        }
        Ok(pages)
    }

    /// Post-copy, the guest paused: names the last round's pages (`last`, per region) as
    /// `Remote` instead of sending them. Returns them.
    fn send_remote(
        &mut self,
        last: Vec<Vec<(usize, usize)>>,
    ) -> Result<Vec<Vec<(usize, usize)>>, MigrationError> {
        for (ri, runs) in last.iter().enumerate() {
            for message in Message::remote(ri as u32, runs) {
                self.stream.queue(&message)?;
            }
        }
        let named = pages_in(&last);
        self.progress.set_last_round_changed(named);
        self.progress.set_remote_pages(named);
        self.progress.set_post_copy_pages(named);
        Ok(last)
    }

    /// Post-copy, after the switch-over: sends the pages named remote, wanted ones first, each
    /// once (zero ones as `Zero`), then `Finish`; the destination's `Done` acknowledges the
    /// pages sent in all.
    fn push_remote(&mut self, remote: Vec<Vec<(usize, usize)>>) -> Result<(), MigrationError> {
        let page_size = memvisor_pager::page_size();
        let region_pages: Vec<usize> = self.regions.iter().map(|r| r.len() / page_size).collect();
        let pages_per_chunk: Vec<usize> = self
            .regions
            .iter()
            .map(|r| r.chunk_size() / page_size)
            .collect();
        let mut plan = PushPlan::new(remote, &region_pages, &pages_per_chunk);
        let fd = std::os::fd::AsRawFd::as_raw_fd(self.stream.get_ref());
        loop {
            self.check_cancel()?;
            // Wants that arrived meanwhile go first (never waiting for one).
            while self.stream.has_buffered_input()
                || wait_readable(&[fd], Duration::ZERO)
                    .map_err(|source| MigrationError::Io {
                        context: "polling the migration connection".into(),
                        source,
                    })?
                    .contains(&true)
            {
                match self.stream.receive()? {
                    Message::Want { region, pages } => {
                        self.progress.add_wanted_pages(pages.len() as u64);
                        for p in pages {
                            plan.want(region as usize, p as usize);
                        }
                    }
                    Message::Abort { reason } => {
                        return Err(MigrationError::PeerAborted { reason })
                    }
                    other => return Err(unexpected("Want", &other)),
                }
            }
            let Some((ri, runs)) = plan.next_batch(BATCH_PAGES, BATCH_RUNS) else {
                break;
            };
            let read = self.regions[ri].read_runs_for_migration(runs)?;
            self.send_reads(ri, read, true)?;
            self.stream.flush()?;
            self.progress.set_remote_pages(plan.left() as u64);
        }
        self.finish_and_wait_done()
    }

    /// Pages and page bytes sent over the current connection.
    fn sent_on_connection(&self) -> (u64, u64) {
        (
            self.pages_sent - self.sent_before_connection.0,
            self.bytes_sent - self.sent_before_connection.1,
        )
    }

    fn check_cancel(&self) -> Result<(), MigrationError> {
        if self.signals.cancelled() {
            return Err(MigrationError::Cancelled);
        }
        Ok(())
    }

    /// Round 0: every chunk holding data, in each region's order, read ahead of sending
    /// ([`ReadAhead`]).
    fn round_zero(&mut self) -> Result<(), MigrationError> {
        let before = self.pages_sent;
        let mut plan = Vec::new();
        for (ri, region) in self.regions.iter().enumerate() {
            let ppc = region.chunk_size() / memvisor_pager::page_size();
            let pages = region.len() / memvisor_pager::page_size();
            for c in region.migration_order()? {
                let first = c * ppc;
                plan.push((ri, vec![(first, ppc.min(pages - first))]));
            }
        }
        let mut reads = ReadAhead::start(self.regions.to_vec(), plan, self.thread_start)?;
        while let Some(read) = reads.next() {
            self.check_cancel()?;
            let (ri, read) = read?;
            self.send_reads(ri, read, false)?;
        }
        drop(reads);
        self.end_round(0, self.pages_sent - before)
    }

    /// One later round: what changed since the last one, and the pages in `unsent` (which it
    /// empties). Unless it is the `last`, it stops early once the guest has paused (finish
    /// signalled), leaving in `unsent` the pages it had still to send: the last round, which
    /// follows at once, sends them with the pages changed since, each page once (a page
    /// changed again since is not sent twice). Without `take`, it sends only `unsent` (the
    /// last round's pages, taken already). Returns how many pages it took on and whether it
    /// stopped early.
    fn send_changes(
        &mut self,
        round: u32,
        unsent: &mut [Vec<(usize, usize)>],
        last: bool,
        take: bool,
    ) -> Result<(u64, bool), MigrationError> {
        let before = self.pages_sent;
        let mut changed = 0;
        // A round of scattered changes is thousands of short frames: corked, the kernel sends
        // them in full segments (on loopback each segment also runs the receiving side's
        // network stack on this thread) and the receiver wakes per segment, not per frame.
        set_cork(self.stream.get_ref(), true);
        let sent = self
            .send_changed_runs(&mut changed, unsent, last, take)
            .and_then(|cut_short| {
                self.progress.set_last_round_changed(changed);
                self.end_round(round, self.pages_sent - before)?;
                Ok(cut_short)
            });
        // Uncorking sends what is left at once (corked data would wait up to 200 ms), also
        // before an `Abort` after a failure.
        set_cork(self.stream.get_ref(), false);
        sent.map(|cut_short| (changed, cut_short))
    }

    /// Sends every page changed since the last round and those in `unsent`, counting them in
    /// `changed`; see [`send_changes`](Self::send_changes). Returns whether it stopped early.
    fn send_changed_runs(
        &mut self,
        changed: &mut u64,
        unsent: &mut [Vec<(usize, usize)>],
        last: bool,
        take: bool,
    ) -> Result<bool, MigrationError> {
        for (ri, region) in self.regions.iter().enumerate() {
            let taken = if take {
                region.take_changed_pages()?
            } else {
                Vec::new()
            };
            let runs = if unsent[ri].is_empty() {
                taken
            } else {
                let pages_per_chunk = region.chunk_size() / memvisor_pager::page_size();
                union_runs(&std::mem::take(&mut unsent[ri]), &taken, pages_per_chunk)
            };
            // Scattered changes are many short runs: read in batches, each in one hand-over,
            // ahead of sending.
            // The read-ahead is given this region alone: its index there is 0.
            let plan = read_batches(&runs)
                .map(|batch| (0, batch.to_vec()))
                .collect();
            let mut reads = ReadAhead::start(vec![region.clone()], plan, self.thread_start)?;
            // Runs of `runs` sent so far (a read holds one `MigrationPages` per run).
            let mut done = 0;
            loop {
                self.check_cancel()?;
                if !last && self.signals.finishing() {
                    // Reads made ahead are dropped; later regions keep their changes in
                    // tracking for the last round.
                    unsent[ri] = runs[done..].to_vec();
                    return Ok(true);
                }
                let Some(read) = reads.next() else {
                    break;
                };
                let (_, read) = read?;
                *changed += read.iter().map(|pages| pages.len() as u64).sum::<u64>();
                let batch_runs = read.len();
                self.send_reads(ri, read, true)?;
                done += batch_runs;
            }
        }
        Ok(false)
    }

    fn end_round(&mut self, round: u32, pages: u64) -> Result<(), MigrationError> {
        self.stream.send(&Message::RoundEnd { round, pages })?;
        self.progress.round_done();
        self.sync_wire_bytes();
        Ok(())
    }

    /// Sends the non-zero pages of `reads` (of region `ri`, in ascending page order) as one
    /// `Pages` message of several runs and, with `zeros`, the zero ones as `Zero`. A round of
    /// scattered changes reads 64 short runs at a time: one message for them all is one MAC
    /// over a longer input (BLAKE3 hashes 1 KiB chunks side by side), one frame to write and
    /// receive, and one entry for the destination's installer, where a message per run cost
    /// each of these again. The usual case of round 0, one read with data on every page, sends
    /// the read's buffer as it is.
    fn send_reads(
        &mut self,
        ri: usize,
        mut reads: Vec<MigrationPages>,
        zeros: bool,
    ) -> Result<(), MigrationError> {
        let nonzero: Vec<Vec<(usize, usize)>> = reads.iter().map(|r| r.nonzero_runs()).collect();
        if let ([read], [only]) = (&mut reads[..], &nonzero[..]) {
            if only[..] == [(0, read.len())] {
                let runs = vec![(read.first_page as u64, read.len() as u32)];
                let data = std::mem::take(&mut read.data);
                return self.send_pages(ri, runs, data);
            }
        }
        // One allocation of the final size: a buffer grown page by page would be copied and
        // its fresh memory faulted in again at every doubling.
        let bytes =
            nonzero.iter().flatten().map(|&(_, k)| k).sum::<usize>() * memvisor_pager::page_size();
        let mut runs: Vec<(u64, u32)> = Vec::new();
        let mut data = Vec::with_capacity(bytes);
        let mut zero_runs = Vec::new();
        for (read, nonzero) in reads.iter().zip(nonzero) {
            for (f, k) in nonzero {
                let first = (read.first_page + f) as u64;
                // Runs must ascend within a message: out of order, the next one starts.
                if runs
                    .last()
                    .is_some_and(|&(last, n)| first < last + u64::from(n))
                {
                    self.send_pages(ri, std::mem::take(&mut runs), std::mem::take(&mut data))?;
                }
                runs.push((first, k as u32));
                data.extend_from_slice(read.bytes(f, k));
            }
            if zeros {
                zero_runs.extend(
                    read.zero_runs()
                        .into_iter()
                        .map(|(f, k)| (read.first_page + f, k)),
                );
            }
        }
        if !runs.is_empty() {
            self.send_pages(ri, runs, data)?;
        }
        for (first, k) in zero_runs {
            self.stream.queue(&Message::Zero {
                region: ri as u32,
                first_page: first as u64,
                pages: k as u64,
            })?;
            self.pages_sent += k as u64;
            self.progress.add_zero_pages(k as u64);
        }
        self.sync_wire_bytes();
        Ok(())
    }

    /// Queues one `Pages` message of `runs` whose pages' bytes are `data`.
    fn send_pages(
        &mut self,
        ri: usize,
        runs: Vec<(u64, u32)>,
        data: Vec<u8>,
    ) -> Result<(), MigrationError> {
        let page_size = memvisor_pager::page_size();
        let pages = (data.len() / page_size) as u64;
        self.limiter.pace(data.len() as u64);
        self.stream
            .queue(&Message::page_runs(ri as u32, page_size as u32, runs, data))?;
        self.pages_sent += pages;
        self.bytes_sent += pages * page_size as u64;
        self.progress.add_pages(pages);
        self.sync_wire_bytes();
        Ok(())
    }

    fn sync_wire_bytes(&self) {
        self.progress
            .set_wire_bytes(self.stream.bytes_sent() + self.stream.bytes_received());
    }
}

/// Seconds to send `pages` pages at `rate` bytes per second.
fn sending_seconds(pages: u64, rate: f64) -> f64 {
    (pages * memvisor_pager::page_size() as u64) as f64 / rate.max(1.0)
}

/// Connects to the destination `to`, sets the connection's timeouts and authenticates it
/// with `key`.
fn open_stream(
    to: SocketAddr,
    key: &MigrationKey,
) -> Result<MemoryStream<TcpStream>, MigrationError> {
    let io = |context: String| move |source| MigrationError::Io { context, source };
    let tcp = TcpStream::connect_timeout(&to, CONNECT_TIMEOUT)
        .map_err(io(format!("connecting to the destination {to}")))?;
    let _ = tcp.set_nodelay(true);
    watch_peer(&tcp);
    let stream = MemoryStream::handshake_within(tcp, key, Role::Source, HANDSHAKE_TIMEOUT)?;
    let tcp = stream.get_ref();
    tcp.set_read_timeout(Some(IO_TIMEOUT))
        .and_then(|()| tcp.set_write_timeout(Some(IO_TIMEOUT)))
        .map_err(io(format!("setting timeouts on the connection to {to}")))?;
    Ok(stream)
}

/// The runs of one read request: consecutive runs of `runs` up to [`BATCH_PAGES`] pages or
/// [`BATCH_RUNS`] runs together (a longer run alone).
fn read_batches(runs: &[(usize, usize)]) -> impl Iterator<Item = &[(usize, usize)]> {
    let mut rest = runs;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut pages = 0;
        let mut end = 0;
        while end < rest.len()
            && end < BATCH_RUNS
            && (end == 0 || pages + rest[end].1 <= BATCH_PAGES)
        {
            pages += rest[end].1;
            end += 1;
        }
        let (batch, tail) = rest.split_at(end);
        rest = tail;
        Some(batch)
    })
}

/// The rate (bytes per second) that decides convergence: what round 0 sustained (`bytes` in
/// `elapsed`), or [`ASSUMED_RATE`] when round 0 sent too little to measure one (a guest of
/// mostly zero pages), never above the bandwidth limit.
fn convergence_rate(bytes: u64, elapsed: Duration, max_bandwidth: Option<u64>) -> f64 {
    let rate = if bytes >= MIN_MEASURED_BYTES {
        bytes as f64 / elapsed.as_secs_f64().max(1e-3)
    } else {
        ASSUMED_RATE
    };
    match max_bandwidth {
        Some(b) => rate.min(b as f64),
        None => rate,
    }
}

/// The error for a message other than the one expected.
pub(crate) fn unexpected(expected: &'static str, got: &Message) -> MigrationError {
    MigrationError::Unexpected {
        expected,
        got: got.name(),
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
pub(crate) fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut at = max;
        while !s.is_char_boundary(at) {
            at -= 1;
        }
        s.truncate(at);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_batches_cover_every_run_in_order_within_the_limits() {
        let runs: Vec<(usize, usize)> = (0..200).map(|i| (i * 10, 1 + i % 7)).collect();
        let batches: Vec<&[(usize, usize)]> = read_batches(&runs).collect();
        assert_eq!(batches.concat(), runs);
        for b in &batches {
            assert!(!b.is_empty() && b.len() <= BATCH_RUNS);
            assert!(b.iter().map(|r| r.1).sum::<usize>() <= BATCH_PAGES);
        }
        assert_eq!(
            batches[0].len(),
            BATCH_RUNS,
            "short runs fill a batch by count"
        );
        // Long runs: each alone (one over the limit too), never split or dropped.
        let long = [(0, 200), (256, 100), (512, 256), (768, 300)];
        let batches: Vec<&[(usize, usize)]> = read_batches(&long).collect();
        assert_eq!(
            batches,
            vec![&long[0..1], &long[1..2], &long[2..3], &long[3..4]]
        );
        assert_eq!(read_batches(&[]).count(), 0);
    }

    #[test]
    fn convergence_rate_is_measured_assumed_or_capped() {
        let s = Duration::from_secs(1);
        assert_eq!(convergence_rate(100 << 20, s, None), (100 << 20) as f64);
        // Nothing (or a few pages) sent: no measurement, a modest assumed rate, not zero.
        assert_eq!(convergence_rate(0, s, None), ASSUMED_RATE);
        assert_eq!(
            convergence_rate(8192, Duration::from_millis(1), None),
            ASSUMED_RATE
        );
        // The bandwidth limit caps both.
        assert_eq!(
            convergence_rate(100 << 20, s, Some(1 << 20)),
            (1 << 20) as f64
        );
        assert_eq!(convergence_rate(0, s, Some(1 << 20)), (1 << 20) as f64);
        // A round 0 that took no measurable time does not divide by zero.
        assert!(convergence_rate(16 << 20, Duration::ZERO, None).is_finite());
    }
}
