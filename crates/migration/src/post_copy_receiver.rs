//! The destination's post-copy phase ([`receive_pushed`]): after the pause the source named
//! the pages it had not sent again (`Remote`, marked in the pager so that accesses wait), the
//! VMM switched over, and the guest runs here. The source now pushes those pages; this end
//! installs each one that is still remote (a page the guest discarded since is its own) and
//! sends the source the pages that faults wait for (`Want`) as they come, serving both from
//! one thread with `poll`.
//!
//! Nothing received here can be given back: the guest already runs on this memory. A failure
//! leaves the pages that did not arrive remote (accesses to them keep waiting) and is
//! reported, never answered by clearing the regions.

use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use memvisor_pager::Region;

use crate::memory_receiver::{chunk_data, chunk_pieces, page_range, region_at, IDLE_TIMEOUT};
use crate::memory_sender::unexpected;
use crate::memory_stream::MemoryStream;
use crate::message::{Message, MAX_WANT_PAGES};
use crate::migration_error::MigrationError;
use crate::migration_progress::MigrationProgress;
use crate::readiness::wait_readable;

/// Receives the post-copy push until `Finish`, answered with `Done` counting every page of the
/// migration (`pages` and `bytes` so far, then the pushed ones).
pub(crate) fn receive_pushed(
    stream: &mut MemoryStream<TcpStream>,
    regions: &[Arc<Region>],
    progress: &MigrationProgress,
    (mut pages, mut bytes): (u64, u64),
) -> Result<(), MigrationError> {
    progress.set_state("post-copy");
    let pg = memvisor_pager::page_size();
    let mut fds = vec![stream.get_ref().as_raw_fd()];
    fds.extend(regions.iter().map(|r| r.remote_wants_fd()));
    loop {
        send_wants(stream, regions, progress)?;
        if !stream.has_buffered_input() {
            let ready = wait_readable(&fds, IDLE_TIMEOUT).map_err(|source| MigrationError::Io {
                context: "polling the migration connection and the wanted pages".into(),
                source,
            })?;
            if !ready.contains(&true) {
                return Err(MigrationError::Io {
                    context: "waiting for the source's pages after the switch-over".into(),
                    source: std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("nothing came for {} s", IDLE_TIMEOUT.as_secs()),
                    ),
                });
            }
            if !ready[0] {
                continue;
            }
        }
        match stream.receive()? {
            Message::Pages {
                region,
                page_size,
                runs,
                data,
                ..
            } => {
                let r = region_at(regions, region)?;
                let (n, pieces) = chunk_data(r, &runs, data, page_size)?;
                let placed = r.install_remote_runs(pieces)?;
                progress.add_placed(placed.in_memory as u64, placed.to_swap as u64);
                progress.add_pages(n);
                pages += n;
                bytes += n * pg as u64;
            }
            Message::Zero {
                region,
                first_page,
                pages: n,
            } => {
                let r = region_at(regions, region)?;
                page_range(r, first_page, n, pg as u64)?;
                let runs = [(first_page, n as u32)];
                if n > u64::from(u32::MAX) {
                    return Err(MigrationError::RegionMismatch {
                        reason: format!("a Zero message of {n} pages"),
                    });
                }
                for (first, count) in chunk_pieces(r, &runs) {
                    r.install_remote_runs(vec![(first, vec![0; count * pg])])?;
                }
                progress.add_zero_pages(n);
                pages += n;
            }
            Message::Finish => {
                let left: usize = regions.iter().map(|r| r.remote_pages()).sum();
                if left > 0 {
                    return Err(MigrationError::RemoteLeft { left });
                }
                stream.send(&Message::Done { pages, bytes })?;
                progress.set_remote_pages(0);
                progress.set_wire_bytes(stream.bytes_sent() + stream.bytes_received());
                return Ok(());
            }
            Message::Abort { reason } => return Err(MigrationError::PeerAborted { reason }),
            other => return Err(unexpected("Pages, Zero or Finish", &other)),
        }
        progress.set_remote_pages(regions.iter().map(|r| r.remote_pages() as u64).sum());
        progress.set_wire_bytes(stream.bytes_sent() + stream.bytes_received());
    }
}

/// Sends a `Want` for the pages faults wait for in each region, if any.
fn send_wants(
    stream: &mut MemoryStream<TcpStream>,
    regions: &[Arc<Region>],
    progress: &MigrationProgress,
) -> Result<(), MigrationError> {
    for (ri, r) in regions.iter().enumerate() {
        let mut wanted = r.take_wanted_pages();
        if wanted.is_empty() {
            continue;
        }
        wanted.sort_unstable();
        wanted.dedup();
        for piece in wanted.chunks(MAX_WANT_PAGES) {
            stream.send(&Message::Want {
                region: ri as u32,
                pages: piece.iter().map(|&p| p as u64).collect(),
            })?;
        }
        progress.add_wanted_pages(wanted.len() as u64);
    }
    Ok(())
}
