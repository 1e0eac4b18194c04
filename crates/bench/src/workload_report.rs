//! [`WorkloadReport`]: what one workload process measured, printed as one JSON line.

use serde::{Deserialize, Serialize};

use crate::counters::Counters;
use crate::region_counters::RegionCounters;

/// One phase (the fill, or the measured run).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseReport {
    /// Wall-clock seconds.
    pub secs: f64,
    /// Page accesses (the fill counts one per page).
    pub accesses: u64,
    /// Process and system counters over the phase.
    pub counters: Counters,
    /// The region's counters over the phase (memvisor only).
    pub region: Option<RegionCounters>,
}

impl PhaseReport {
    /// Microseconds per page access.
    pub fn us_per_access(&self) -> f64 {
        self.secs * 1e6 / self.accesses.max(1) as f64
    }
}

/// One phase of a phased workload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NamedPhaseReport {
    /// The phase's name (`seq`, `uniform`, `zipf`).
    pub name: String,
    /// What it measured.
    pub report: PhaseReport,
}

/// Everything one workload process reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkloadReport {
    /// The variant's spelling.
    pub variant: String,
    /// The workload's spelling.
    pub workload: String,
    /// Data set bytes.
    pub size: u64,
    /// Resident budget bytes (the region's; the cgroup limit is set by the driver).
    pub budget: u64,
    /// Pages of the data set.
    pub pages: u64,
    /// The process id.
    pub pid: u32,
    /// `/proc/loadavg` when the process started.
    pub loadavg_start: String,
    /// The fill: every word of every page written once, first page to last.
    pub fill: PhaseReport,
    /// The measured workload (all its phases).
    pub run: PhaseReport,
    /// A phased workload's phases, one by one (empty otherwise).
    #[serde(default)]
    pub phases: Vec<NamedPhaseReport>,
    /// Every word read was what was last written there (the process fails otherwise).
    pub verified: bool,
    /// Peak resident set of the process (`VmHWM`), bytes.
    pub vm_hwm_bytes: u64,
    /// Median page-in fault service time of the region over both phases, ns (bucket bound).
    pub page_in_p50_nanos: u64,
    /// 99th percentile of the same.
    pub page_in_p99_nanos: u64,
    /// Longest page-in service time.
    pub page_in_max_nanos: u64,
    /// Errors the region recorded (should be empty).
    pub region_errors: Vec<String>,
    /// Whether the region's swap file uses `O_DIRECT`.
    pub swap_direct: Option<bool>,
}
