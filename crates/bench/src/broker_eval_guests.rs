//! `broker-eval --guests` (issue 12's evaluation with real guests): four TCG guests with
//! different workloads share one memory total smaller than their sum, divided by `memvisor
//! broker` (utility, its defaults), by an equal split of fixed shares, and by the kernel (the
//! four QEMUs in one cgroup v1 memory group with a swap file); and, for reference, the same
//! four QEMUs with no limit. Each run is a [`crate::guest_fleet`] run; the variant order
//! rotates with the repetition. [`crate::broker_eval_guests_report`] turns the runs into each
//! guest's throughput relative to its unconstrained one and their sum (weighted speedup).
//!
//! The guests (`GuestRole`), each with its own disk image: `stream` (sequential passes over
//! `mem_mib` of anonymous memory), `zipf` (Zipf 0.99 page accesses over `mem_mib`), `disk`
//! (sequential reads of its whole disk again and again: its page cache holds the disk if it
//! has the memory), `idle` (boots, then sleeps). Every page and block read is verified.

use std::fs;
use std::path::PathBuf;
use std::time::Duration;

use memvisor_testvm::GuestImage;
use serde::Serialize;

use crate::bench_error::BenchError;
use crate::broker_eval::BrokerVariant;
use crate::guest_fleet::{
    make_disk, run_fleet, FleetBroker, FleetGuest, FleetMemory, FleetRun, FleetSpec,
};
use crate::interrupt;
use crate::memory_cgroup::MemoryCgroup;
use crate::private_dir::{private_dir, run_dir};

const MIB: u64 = 1 << 20;

/// The image cache limit each memvisor guest starts with (its share less this is its budget).
pub const INITIAL_IMAGE_CACHE: u64 = 16 * MIB;

/// Seconds per `disk` phase of the disk guest.
const DISK_PHASE_SECS: u64 = 5;

/// What a guest of the four does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum GuestRole {
    /// Sequential passes over its memory.
    Stream,
    /// Zipf 0.99 page accesses over its memory.
    Zipf,
    /// Sequential reads of its whole disk, repeated.
    Disk,
    /// Nothing after boot.
    Idle,
}

impl GuestRole {
    /// The four, in slot order.
    pub const ALL: [GuestRole; 4] = [Self::Stream, Self::Zipf, Self::Disk, Self::Idle];

    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Stream => "stream",
            Self::Zipf => "zipf",
            Self::Disk => "disk",
            Self::Idle => "idle",
        }
    }

    /// Whether its throughput is measured (and counts in the aggregate).
    pub fn measured(self) -> bool {
        self != Self::Idle
    }
}

/// Everything one `broker-eval --guests` run needs.
#[derive(Debug, Clone, Serialize)]
pub struct GuestBrokerEvalConfig {
    /// The `memvisor` binary (its `run` and `broker`).
    pub memvisor: PathBuf,
    /// Where the run's private 0700 directory (disk images, swap files, sockets) goes.
    pub work_dir: PathBuf,
    /// Guest RAM of every guest, MiB (a memfd).
    pub guest_mib: u64,
    /// The memory the stream and zipf guests use, MiB.
    pub mem_mib: u64,
    /// Each guest's disk image, MiB (the disk guest reads all of it).
    pub disk_mib: u64,
    /// The total every constrained variant shares, bytes.
    pub total: u64,
    /// Kernel variant: what its group gets per QEMU on top of the total (QEMU's own memory,
    /// which memvisor does not manage), bytes.
    pub qemu_allowance: u64,
    /// How long every workload runs, seconds.
    pub seconds: u64,
    /// Seconds from the last guest's start to the window's opening.
    pub warmup_secs: f64,
    /// Repetitions.
    pub reps: usize,
    /// The variants run, in the first repetition's order (the order rotates).
    pub variants: Vec<BrokerVariant>,
    /// Run the kernel variant even if another swap area is active.
    pub allow_other_swap: bool,
}

impl GuestBrokerEvalConfig {
    /// The workload of a guest.
    pub fn workload(&self, role: GuestRole) -> String {
        let (mem, secs) = (self.mem_mib, self.seconds);
        match role {
            GuestRole::Stream => format!("mem {mem} --patterns seq --seconds {secs}"),
            GuestRole::Zipf => format!("mem {mem} --patterns zipf --alpha 0.99 --seconds {secs}"),
            GuestRole::Disk => {
                // At least the whole run: the window's counters are read shortly before
                // `seconds` after the first start, while every guest must still run.
                let phases = secs.div_ceil(DISK_PHASE_SECS).max(1);
                vec![format!("disk /dev/vda seq {DISK_PHASE_SECS} --verify"); phases as usize]
                    .join("; ")
            }
            GuestRole::Idle => format!("idle {secs}"),
        }
    }

    /// Each guest's share of the total, rounded down to whole MiB.
    pub fn share(&self) -> u64 {
        self.total / GuestRole::ALL.len() as u64 / MIB * MIB
    }

    /// How a variant limits memory.
    pub fn memory(&self, variant: BrokerVariant) -> FleetMemory {
        let n = GuestRole::ALL.len() as u64;
        let fixed = |broker| FleetMemory::Memvisor {
            budget: self.share() - INITIAL_IMAGE_CACHE,
            image_cache: INITIAL_IMAGE_CACHE,
            arena: None,
            run_args: Vec::new(),
            broker,
        };
        match variant {
            BrokerVariant::Unconstrained => FleetMemory::Unconstrained,
            BrokerVariant::Equal => fixed(None),
            BrokerVariant::Utility => fixed(Some(FleetBroker {
                total: self.total,
                args: Vec::new(),
            })),
            BrokerVariant::Kernel => FleetMemory::Kernel {
                limit: self.total + self.qemu_allowance * n,
                swap: n * self.guest_mib * MIB + 64 * MIB,
                allow_other_swap: self.allow_other_swap,
            },
        }
    }

    /// Refuses settings the experiment cannot run with, naming the flag.
    pub fn validate(&self) -> Result<(), BenchError> {
        // The broker's smallest share of a guest: its minimum budget and image cache.
        if self.share() < 80 * MIB {
            return Err(BenchError::bad(
                "--total",
                format!("{}M", self.total / MIB),
                "at least 320M (80M per guest, the broker's smallest share)",
            ));
        }
        if self.share() - INITIAL_IMAGE_CACHE > self.guest_mib * MIB {
            return Err(BenchError::bad(
                "--total",
                format!("{}M", self.total / MIB),
                format!(
                    "at most {}M: each guest's share of it would exceed its {} MiB of RAM",
                    (self.guest_mib * MIB + INITIAL_IMAGE_CACHE) * 4 / MIB,
                    self.guest_mib
                ),
            ));
        }
        if self.mem_mib + 48 > self.guest_mib {
            return Err(BenchError::bad(
                "--mem-mib",
                self.mem_mib.to_string(),
                format!(
                    "at most {} (the guest's {} MiB less 48 for its kernel)",
                    self.guest_mib.saturating_sub(48),
                    self.guest_mib
                ),
            ));
        }
        if self.variants.is_empty() {
            return Err(BenchError::bad("--variants", "", "at least one variant"));
        }
        if self.warmup_secs + 2.0 * DISK_PHASE_SECS as f64 + 2.0 > self.seconds as f64 {
            return Err(BenchError::bad(
                "--seconds",
                self.seconds.to_string(),
                format!(
                    "longer than the warm-up ({} s) and two disk phases",
                    self.warmup_secs
                ),
            ));
        }
        Ok(())
    }
}

/// One variant's run.
#[derive(Debug, Clone, Serialize)]
pub struct GuestVariantRun {
    /// The variant.
    pub variant: BrokerVariant,
    /// Repetition.
    pub rep: usize,
    /// Position in this repetition's variant order (0 first).
    pub position: usize,
    /// What the fleet measured, guests in [`GuestRole::ALL`] order.
    pub fleet: FleetRun,
}

/// Runs every variant `reps` times (the order rotating); `progress` sees each run.
pub fn guest_broker_eval(
    config: &GuestBrokerEvalConfig,
    image: &GuestImage,
    mut progress: impl FnMut(&GuestVariantRun),
) -> Result<Vec<GuestVariantRun>, BenchError> {
    config.validate()?;
    MemoryCgroup::check_available()?;
    let private = private_dir(&config.work_dir, "broker-eval-guests-")?;
    let mut guests = Vec::new();
    for role in GuestRole::ALL {
        let disk = private.path().join(format!("disk-{}.img", role.name()));
        let what = format!("disk image of the {} guest", role.name());
        make_disk(image, &disk, config.disk_mib, &what)?;
        guests.push(FleetGuest {
            workload: config.workload(role),
            disk,
            measured: role.measured(),
        });
    }
    let mut runs = Vec::new();
    let mut seq = 0u64;
    let count = config.variants.len();
    for rep in 0..config.reps {
        for position in 0..count {
            let variant = config.variants[(position + rep) % count];
            seq += 1;
            let dir = run_dir(private.path(), seq)?;
            let fleet = run_fleet(&FleetSpec {
                label: format!("{} / rep {rep}", variant.name()),
                image,
                guest_mib: config.guest_mib,
                guests: &guests,
                dir: &dir,
                memory: config.memory(variant),
                memvisor: &config.memvisor,
                seq,
                warmup_secs: config.warmup_secs,
                run_secs: config.seconds as f64,
                // The idle guest prints nothing until its end.
                quiet: Duration::from_secs(config.seconds + 120),
            });
            let _ = fs::remove_dir_all(&dir);
            let run = GuestVariantRun {
                variant,
                rep,
                position,
                fleet: fleet?,
            };
            progress(&run);
            runs.push(run);
            if interrupt::requested() {
                return Err(BenchError::Interrupted);
            }
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> GuestBrokerEvalConfig {
        GuestBrokerEvalConfig {
            memvisor: "memvisor".into(),
            work_dir: "/tmp".into(),
            guest_mib: 256,
            mem_mib: 160,
            disk_mib: 160,
            total: 512 * MIB,
            qemu_allowance: 96 * MIB,
            seconds: 100,
            warmup_secs: 40.0,
            reps: 1,
            variants: BrokerVariant::ALL.to_vec(),
            allow_other_swap: false,
        }
    }

    #[test]
    fn each_guest_gets_its_workload_for_the_whole_run() {
        let c = config();
        assert_eq!(
            c.workload(GuestRole::Stream),
            "mem 160 --patterns seq --seconds 100"
        );
        assert_eq!(
            c.workload(GuestRole::Zipf),
            "mem 160 --patterns zipf --alpha 0.99 --seconds 100"
        );
        let disk = c.workload(GuestRole::Disk);
        assert_eq!(disk.matches("disk /dev/vda seq 5 --verify").count(), 20);
        // Never shorter than the run.
        let short = GuestBrokerEvalConfig {
            seconds: 24,
            ..config()
        };
        let disk = short.workload(GuestRole::Disk);
        assert_eq!(disk.matches("disk /dev/vda seq 5 --verify").count(), 5);
        assert_eq!(c.workload(GuestRole::Idle), "idle 100");
        assert!(!GuestRole::Idle.measured() && GuestRole::Disk.measured());
    }

    #[test]
    fn the_variants_divide_the_same_total() {
        let c = config();
        for v in [BrokerVariant::Equal, BrokerVariant::Utility] {
            let FleetMemory::Memvisor {
                budget,
                image_cache,
                broker,
                ..
            } = c.memory(v)
            else {
                panic!("{v:?} is not a memvisor variant");
            };
            // A quarter of 512M each: 112M of RAM and 16M of image cache.
            assert_eq!((budget, image_cache), (112 * MIB, 16 * MIB));
            assert_eq!(
                broker.map(|b| b.total),
                (v == BrokerVariant::Utility).then_some(c.total)
            );
        }
        let FleetMemory::Kernel { limit, .. } = c.memory(BrokerVariant::Kernel) else {
            panic!("not the kernel's");
        };
        assert_eq!(limit, (512 + 4 * 96) * MIB);
        assert!(matches!(
            c.memory(BrokerVariant::Unconstrained),
            FleetMemory::Unconstrained
        ));
    }

    #[test]
    fn settings_that_cannot_run_are_refused_with_the_flag() {
        let bad = |f: &dyn Fn(&mut GuestBrokerEvalConfig)| {
            let mut c = config();
            f(&mut c);
            c.validate().unwrap_err().to_string()
        };
        assert!(bad(&|c| c.total = 256 * MIB).contains("--total"));
        assert!(bad(&|c| c.total = 2048 * MIB).contains("exceed its 256 MiB"));
        assert!(bad(&|c| c.mem_mib = 240).contains("--mem-mib"));
        assert!(bad(&|c| c.seconds = 45).contains("--seconds"));
        assert!(bad(&|c| c.variants.clear()).contains("--variants"));
        config().validate().unwrap();
    }
}
