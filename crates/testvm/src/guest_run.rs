//! What a finished guest run produced.

use std::process::ExitStatus;
use std::time::Duration;

use crate::error::{Result, TestVmError};
use crate::guest_image::tail_of;
use crate::result_line::{DiskPhase, Done, MemPhase, WorkloadResult};

/// A guest that ran its workload to the final `done` line and powered off.
#[derive(Debug, Clone)]
pub struct GuestRun {
    /// Every result line, in order.
    pub results: Vec<WorkloadResult>,
    /// The serial console, one entry per line, `\r` removed.
    pub console: Vec<String>,
    /// QEMU's standard error.
    pub stderr: String,
    /// QEMU's (or the wrapper's) exit status.
    pub status: ExitStatus,
    /// Host time from starting QEMU to the workload's `start` line: the boot time.
    pub boot: Option<Duration>,
    /// Host time from starting QEMU to its exit.
    pub elapsed: Duration,
}

impl GuestRun {
    /// The final `done` line (always present in a `GuestRun`).
    pub fn done(&self) -> Option<&Done> {
        self.results.iter().rev().find_map(|r| match r {
            WorkloadResult::Done(done) => Some(done),
            _ => None,
        })
    }

    /// True if the workload finished and every read verified.
    pub fn ok(&self) -> bool {
        self.done().is_some_and(|d| d.ok)
    }

    /// The `mem` phases, in order.
    pub fn mem_phases(&self) -> impl Iterator<Item = &MemPhase> {
        self.results.iter().filter_map(|r| match r {
            WorkloadResult::Mem(p) => Some(p),
            _ => None,
        })
    }

    /// The `disk` runs, in order.
    pub fn disk_phases(&self) -> impl Iterator<Item = &DiskPhase> {
        self.results.iter().filter_map(|r| match r {
            WorkloadResult::Disk(d) => Some(d),
            _ => None,
        })
    }

    /// Guest uptime (ms) when the workload started, from the `start` line.
    pub fn guest_uptime_at_start_ms(&self) -> Option<f64> {
        self.results.iter().find_map(|r| match r {
            WorkloadResult::Start { uptime_ms, .. } if *uptime_ms >= 0.0 => Some(*uptime_ms),
            _ => None,
        })
    }

    /// The guest's `MemAvailable` (KiB) when the workload started, from the `start` line.
    pub fn guest_mem_available_kib(&self) -> Option<u64> {
        self.results.iter().find_map(|r| match r {
            WorkloadResult::Start {
                mem_available_kib, ..
            } => *mem_available_kib,
            _ => None,
        })
    }

    /// The last `n` console lines.
    pub fn console_tail(&self, n: usize) -> String {
        tail_of(&self.console.join("\n"), n)
    }

    /// `self` if every read verified, else [`TestVmError::Corruption`] naming the first bad
    /// page or block.
    pub fn verified(self) -> Result<Self> {
        match self.done() {
            Some(done) if done.ok => Ok(self),
            Some(done) => {
                let first_bad = match (done.first_bad_page, done.first_bad_block) {
                    (Some(page), _) => format!("page {page}"),
                    (None, Some(block)) => format!("block {block}"),
                    (None, None) => "an unknown place".to_string(),
                };
                Err(TestVmError::Corruption {
                    errors: done.errors,
                    first_bad,
                    console_tail: self.console_tail(20),
                })
            }
            None => Err(TestVmError::NoResult {
                status: self.status.to_string(),
                console_tail: self.console_tail(20),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;
    use crate::result_line::parse_console;

    fn run(console: &str) -> GuestRun {
        GuestRun {
            results: parse_console(console).unwrap(),
            console: console.lines().map(str::to_string).collect(),
            stderr: String::new(),
            status: ExitStatus::from_raw(0),
            boot: None,
            elapsed: Duration::ZERO,
        }
    }

    #[test]
    fn accessors_and_verification() {
        let good = run("MEMVISOR-RESULT start uptime_ms=1700 mem_available_kib=123 command=\"mem 8\"\n\
             MEMVISOR-RESULT phase=write mib=8 pages=2048 reads=2048 ms=1 mbps=1 ok=1 errors=0\n\
             MEMVISOR-RESULT phase=disk pattern=seq dev=/dev/vda block=4096 blocks=1 reads=1 bytes=4096 ms=1 mbps=1 verified=1 ok=1 errors=0\n\
             MEMVISOR-RESULT done ok=1 errors=0\n");
        assert!(good.ok());
        assert_eq!(good.mem_phases().count(), 1);
        assert_eq!(good.disk_phases().count(), 1);
        assert_eq!(good.guest_uptime_at_start_ms(), Some(1700.0));
        assert_eq!(good.guest_mem_available_kib(), Some(123));
        assert!(good.verified().is_ok());

        let bad = run("MEMVISOR-RESULT done ok=0 errors=4 first_bad_page=9\n");
        assert!(!bad.ok());
        let err = bad.verified().unwrap_err();
        assert!(
            err.to_string()
                .starts_with("guest data corruption: 4 bad reads, first at page 9;"),
            "{err}"
        );

        let unfinished = run("MEMVISOR-RESULT start uptime_ms=-1000\n");
        assert_eq!(unfinished.guest_uptime_at_start_ms(), None);
        assert_eq!(unfinished.guest_mem_available_kib(), None);
        assert!(matches!(
            unfinished.verified(),
            Err(TestVmError::NoResult { .. })
        ));
    }
}
