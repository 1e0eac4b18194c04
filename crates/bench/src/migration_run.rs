//! [`MigrationRun`]: what one live migration of the migration evaluation measured.

use serde::Serialize;

use crate::migration_eval_config::{MigrationCase, MigrationVariant};

/// Where an end's swap figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SwapCounter {
    /// A plain QEMU with no limit: it does not swap (no swap area is active but the kernel
    /// variant's own).
    None,
    /// memvisor's counters of the guest RAM region (`memvisor stat`: `bytes_read`,
    /// `bytes_written` of its swap file).
    MemvisorStat,
    /// `/proc/vmstat` `pswpin`/`pswpout` (system-wide; the swap file is the kernel variant's
    /// own and this QEMU the only process under a limit, so the traffic is its).
    KernelVmstat,
}

impl SwapCounter {
    /// Short name in the table.
    pub fn name(self) -> &'static str {
        match self {
            Self::None => "-",
            Self::MemvisorStat => "memvisor stat",
            Self::KernelVmstat => "/proc/vmstat",
        }
    }
}

/// Swap traffic of one end between the start and the end of the migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SwapTraffic {
    /// Bytes read from swap.
    pub read_bytes: u64,
    /// Bytes written to swap.
    pub written_bytes: u64,
    /// Where the figures come from.
    pub counter: SwapCounter,
}

impl SwapTraffic {
    /// No swap traffic, as for a plain QEMU.
    pub const NONE: SwapTraffic = SwapTraffic {
        read_bytes: 0,
        written_bytes: 0,
        counter: SwapCounter::None,
    };
}

/// Storage I/O a QEMU process issued between two instants (`/proc/PID/io` `read_bytes`,
/// `write_bytes`; for a memvisor end this includes the pager's swap reads for the migration,
/// which `memvisor stat` does not count in `bytes_read`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ProcessIo {
    /// Bytes read from storage.
    pub read_bytes: u64,
    /// Bytes written to storage.
    pub written_bytes: u64,
}

/// One migration.
#[derive(Debug, Clone, Serialize)]
pub struct MigrationRun {
    /// The case.
    pub case: MigrationCase,
    /// The variant.
    pub variant: MigrationVariant,
    /// Repetition (0-based).
    pub rep: usize,
    /// Whether the migration completed (the guest ran on the destination).
    pub completed: bool,
    /// Why it did not, or what else went wrong around it.
    pub failure: Option<String>,
    /// Host seconds from the start of `memvisor migrate` (or QMP `migrate`) to completion.
    pub total_secs: Option<f64>,
    /// QEMU's `query-migrate` `total-time` on the source, ms (memvisor: device state only).
    pub qemu_total_ms: Option<u64>,
    /// QEMU's `query-migrate` `downtime` on the source, ms.
    pub downtime_ms: Option<u64>,
    /// Memory bytes moved: memvisor's bytes on the wire, or QEMU's `ram.transferred`.
    pub memory_bytes_moved: Option<u64>,
    /// memvisor: rounds of memory sent.
    pub rounds: Option<u32>,
    /// memvisor destination: pages placed in memory.
    pub pages_to_memory: Option<u64>,
    /// memvisor destination: pages written straight to swap.
    pub pages_to_swap: Option<u64>,
    /// The source's swap traffic during the migration.
    pub source_swap: SwapTraffic,
    /// The destination's swap traffic during the migration.
    pub destination_swap: SwapTraffic,
    /// The source QEMU's storage I/O during the migration.
    pub source_io: ProcessIo,
    /// The destination QEMU's storage I/O during the migration.
    pub destination_io: ProcessIo,
    /// memvisor: milliseconds its memory migration took (the source's `elapsed_ms`).
    pub memory_ms: Option<u64>,
    /// memvisor: what `memvisor migrate` printed (its summary).
    pub mover_summary: Option<String>,
    /// Guest speed on the source before the migration, rewrites per second.
    pub rewrites_per_sec_before: Option<f64>,
    /// Guest speed on the destination in the window after completion, rewrites per second.
    pub rewrites_per_sec_after: Option<f64>,
    /// Guest seconds the "after" figure covers (less than the window if the churn ended).
    pub after_covered_secs: f64,
    /// The guest's final line said `done ok=1 errors=0` (on the destination).
    pub verified: bool,
    /// Bad pages the guest counted, from its `done` line (none if it printed none).
    pub guest_errors: Option<u64>,
}
