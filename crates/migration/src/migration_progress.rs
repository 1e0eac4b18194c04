//! [`MigrationProgress`]: the counters and state of one end of a live migration, updated by
//! the thread moving memory and read at any time (by the control socket) as a
//! [`MigrationStatus`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

use memvisor_control::MigrationStatus;

use crate::role::Role;

/// Progress of one end, shared between its thread and readers.
#[derive(Debug)]
pub struct MigrationProgress {
    role: Role,
    migration: AtomicU64,
    peer: Mutex<String>,
    state: Mutex<(&'static str, Option<String>)>,
    started: Instant,
    /// Milliseconds from start to the end (0 while running).
    ended_ms: AtomicU64,
    rounds: AtomicU32,
    pages: AtomicU64,
    zero_pages: AtomicU64,
    /// Wire bytes of the current connection...
    wire_bytes: AtomicU64,
    /// ...and of the migration's earlier ones (post-copy resumed).
    wire_bytes_before: AtomicU64,
    last_round_changed_pages: AtomicU64,
    pages_to_memory: AtomicU64,
    pages_to_swap: AtomicU64,
    remote_pages: AtomicU64,
    post_copy_pages: AtomicU64,
    wanted_pages: AtomicU64,
}

impl MigrationProgress {
    /// A migration end starting now in `state`.
    pub fn new(role: Role, state: &'static str) -> Self {
        Self {
            role,
            migration: AtomicU64::new(0),
            peer: Mutex::new(String::new()),
            state: Mutex::new((state, None)),
            started: Instant::now(),
            ended_ms: AtomicU64::new(0),
            rounds: AtomicU32::new(0),
            pages: AtomicU64::new(0),
            zero_pages: AtomicU64::new(0),
            wire_bytes: AtomicU64::new(0),
            wire_bytes_before: AtomicU64::new(0),
            last_round_changed_pages: AtomicU64::new(0),
            pages_to_memory: AtomicU64::new(0),
            pages_to_swap: AtomicU64::new(0),
            remote_pages: AtomicU64::new(0),
            post_copy_pages: AtomicU64::new(0),
            wanted_pages: AtomicU64::new(0),
        }
    }

    /// Sets the state (`completed`, `failed` and `cancelled` also stop the clock).
    pub fn set_state(&self, state: &'static str) {
        if let Ok(mut s) = self.state.lock() {
            s.0 = state;
        }
        if matches!(state, "completed" | "failed" | "cancelled") {
            self.ended_ms.store(
                self.started.elapsed().as_millis().max(1) as u64,
                Ordering::Relaxed,
            );
        }
    }

    /// Records an error: the state becomes `failed` (`fatal`) or stays as it is (a refused
    /// attempt a destination survives).
    pub fn set_error(&self, error: String, fatal: bool) {
        if let Ok(mut s) = self.state.lock() {
            s.1 = Some(error);
        }
        if fatal {
            self.set_state("failed");
        }
    }

    /// The current state's name.
    pub fn state(&self) -> &'static str {
        self.state.lock().map(|s| s.0).unwrap_or("failed")
    }

    /// Sets the migration's number (from the source's `Begin`).
    pub fn set_migration(&self, migration: u64) {
        self.migration.store(migration, Ordering::Relaxed);
    }

    /// Sets the peer's address.
    pub fn set_peer(&self, peer: String) {
        if let Ok(mut p) = self.peer.lock() {
            *p = peer;
        }
    }

    /// A round was completed.
    pub fn round_done(&self) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// `n` pages with data crossed the connection.
    pub fn add_pages(&self, n: u64) {
        self.pages.fetch_add(n, Ordering::Relaxed);
    }

    /// `n` pages crossed as zero.
    pub fn add_zero_pages(&self, n: u64) {
        self.zero_pages.fetch_add(n, Ordering::Relaxed);
    }

    /// The current connection's wire bytes so far (both directions).
    pub fn set_wire_bytes(&self, n: u64) {
        self.wire_bytes.store(n, Ordering::Relaxed);
    }

    /// The migration goes on over a new connection (post-copy resumed): the wire bytes of the
    /// last one stay counted, and [`set_wire_bytes`](Self::set_wire_bytes) counts the new one.
    pub fn new_connection(&self) {
        let last = self.wire_bytes.swap(0, Ordering::Relaxed);
        self.wire_bytes_before.fetch_add(last, Ordering::Relaxed);
    }

    /// Pages changed during the last round.
    pub fn set_last_round_changed(&self, n: u64) {
        self.last_round_changed_pages.store(n, Ordering::Relaxed);
    }

    /// Post-copy: pages whose content has not crossed yet.
    pub fn set_remote_pages(&self, n: u64) {
        self.remote_pages.store(n, Ordering::Relaxed);
    }

    /// Source: `n` pages were named at the pause, to follow after the switch-over.
    pub fn set_post_copy_pages(&self, n: u64) {
        self.post_copy_pages.store(n, Ordering::Relaxed);
    }

    /// Post-copy: `n` more pages were asked for by faults waiting on the destination.
    pub fn add_wanted_pages(&self, n: u64) {
        self.wanted_pages.fetch_add(n, Ordering::Relaxed);
    }

    /// Destination: where installed pages went.
    pub fn add_placed(&self, to_memory: u64, to_swap: u64) {
        self.pages_to_memory.fetch_add(to_memory, Ordering::Relaxed);
        self.pages_to_swap.fetch_add(to_swap, Ordering::Relaxed);
    }

    /// Clears the counters for a new attempt (a destination listening again).
    pub fn reset_counters(&self) {
        for c in [
            &self.pages,
            &self.zero_pages,
            &self.wire_bytes,
            &self.wire_bytes_before,
            &self.last_round_changed_pages,
            &self.pages_to_memory,
            &self.pages_to_swap,
            &self.remote_pages,
            &self.post_copy_pages,
            &self.wanted_pages,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.rounds.store(0, Ordering::Relaxed);
    }

    /// A snapshot for the control socket.
    pub fn status(&self) -> MigrationStatus {
        let (state, error) = self
            .state
            .lock()
            .map(|s| (s.0, s.1.clone()))
            .unwrap_or(("failed", None));
        let ended = self.ended_ms.load(Ordering::Relaxed);
        MigrationStatus {
            role: self.role.to_string(),
            migration: self.migration.load(Ordering::Relaxed),
            state: state.to_string(),
            peer: self.peer.lock().map(|p| p.clone()).unwrap_or_default(),
            rounds: self.rounds.load(Ordering::Relaxed),
            pages: self.pages.load(Ordering::Relaxed),
            zero_pages: self.zero_pages.load(Ordering::Relaxed),
            wire_bytes: self.wire_bytes.load(Ordering::Relaxed)
                + self.wire_bytes_before.load(Ordering::Relaxed),
            last_round_changed_pages: self.last_round_changed_pages.load(Ordering::Relaxed),
            pages_to_memory: self.pages_to_memory.load(Ordering::Relaxed),
            pages_to_swap: self.pages_to_swap.load(Ordering::Relaxed),
            remote_pages: self.remote_pages.load(Ordering::Relaxed),
            post_copy_pages: self.post_copy_pages.load(Ordering::Relaxed),
            wanted_pages: self.wanted_pages.load(Ordering::Relaxed),
            elapsed_ms: if ended > 0 {
                ended
            } else {
                self.started.elapsed().as_millis() as u64
            },
            error,
        }
    }
}
