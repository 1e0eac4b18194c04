//! [`MigrationStatus`]: the progress of a live migration of a managed process's memory, as
//! `memvisor stat --json` and `memvisor migrate` see it (both ends report one).

use serde::{Deserialize, Serialize};

/// One end of a live migration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MigrationStatus {
    /// `source` (sends memory) or `destination` (receives it).
    pub role: String,
    /// The migration's number: random, chosen by the source; a source resuming a post-copy
    /// push names it.
    pub migration: u64,
    /// `connecting`, `sending` (rounds run while the guest runs), `converged`, `finishing`
    /// (the last round, guest paused), `post-copy` (post-copy only: the destination may run,
    /// the pages changed last are being pushed), `post-copy-paused` (the connection failed
    /// during the push; reconnecting), `completed`, `failed`, `cancelled` (source);
    /// `listening`, `receiving`, `post-copy`, `post-copy-paused` (waiting for the source to
    /// resume the push), `completed`, `failed` (destination).
    pub state: String,
    /// The other end's address.
    pub peer: String,
    /// Rounds completed (round 0 sends everything, later ones what changed).
    pub rounds: u32,
    /// Pages whose data crossed the connection.
    pub pages: u64,
    /// Pages sent (or received) as "now zero" without data.
    pub zero_pages: u64,
    /// Bytes on the wire (framing and MACs included).
    pub wire_bytes: u64,
    /// Pages that changed during the last completed round (what the next one sends).
    pub last_round_changed_pages: u64,
    /// Destination: pages installed in memory.
    pub pages_to_memory: u64,
    /// Destination: pages written straight to swap.
    pub pages_to_swap: u64,
    /// Post-copy: pages whose content is still at the source (named at the pause, sent after
    /// the switch-over).
    #[serde(default)]
    pub remote_pages: u64,
    /// Source: pages named at the pause to follow after the switch-over (0: the last round
    /// sent every changed page; the migration was precopy).
    #[serde(default)]
    pub post_copy_pages: u64,
    /// Post-copy: pages that faults on the destination waited for and asked for first.
    #[serde(default)]
    pub wanted_pages: u64,
    /// Milliseconds since the migration started (or took until it ended).
    pub elapsed_ms: u64,
    /// Why it failed (set with state `failed`), or the last incident it went on after: on the
    /// destination a refused or broken attempt while it listens again, on either end a
    /// connection lost during a post-copy push (which then resumed, or waits to).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl MigrationStatus {
    /// Whether the migration is over (completed, failed or cancelled).
    pub fn is_over(&self) -> bool {
        matches!(self.state.as_str(), "completed" | "failed" | "cancelled")
    }
}
