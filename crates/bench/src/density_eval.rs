//! `density-eval` (issue 12, seed 001's density experiment): N identical real TCG guests, each
//! reading its own disk image (Zipf, every block verified), under one host memory total, for
//! each N of a sweep and three variants: unconstrained (the reference, with the same CPU
//! contention), the kernel (all N QEMUs in one cgroup v1 memory group, a swap file) and
//! memvisor (each QEMU under `memvisor run` with a share of the total as budget and image
//! cache limit, `memvisor broker --total` dividing it). Each guest's throughput is measured
//! over a common window while every guest runs; [`crate::density_eval_report`] turns the runs
//! into ratios to unconstrained and the largest N whose guests all keep `--keep` of it.
//!
//! Each run is a [`crate::guest_fleet`] run of N guests with the same workload.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memvisor_testvm::GuestImage;
use serde::Serialize;

use crate::bench_error::BenchError;
use crate::density_eval_config::{DensityEvalConfig, DensityVariant};
use crate::guest_fleet::{
    make_disk, run_fleet, FleetBroker, FleetGuest, FleetMemory, FleetRun, FleetSpec,
};
pub use crate::guest_fleet::{GroupMemory, GuestResult};
use crate::interrupt;
use crate::memory_cgroup::MemoryCgroup;
use crate::private_dir::{private_dir, run_dir};

const MIB: u64 = 1 << 20;

/// One variant with N guests, one repetition.
#[derive(Debug, Clone, Serialize)]
pub struct DensityRun {
    /// Guests.
    pub guests: usize,
    /// The variant.
    pub variant: DensityVariant,
    /// Repetition.
    pub rep: usize,
    /// Position in this N's and repetition's variant order (0 first).
    pub position: usize,
    /// What the fleet measured.
    #[serde(flatten)]
    pub fleet: FleetRun,
}

/// Runs every N of the sweep under every variant, `reps` times; `progress` sees the runs so
/// far after each one (the last is the new one).
pub fn density_eval(
    config: &DensityEvalConfig,
    image: &GuestImage,
    mut progress: impl FnMut(&[DensityRun]),
) -> Result<Vec<DensityRun>, BenchError> {
    config.validate()?;
    MemoryCgroup::check_available()?;
    let private = private_dir(&config.work_dir, "density-eval-")?;
    let slots = config.guests.iter().copied().max().unwrap_or(0);
    let mut disks = Vec::new();
    for slot in 0..slots {
        let disk = private.path().join(format!("disk-{slot}.img"));
        make_disk(image, &disk, config.disk_mib, &format!("disk image {slot}"))?;
        disks.push(disk);
    }
    let mut runs = Vec::new();
    let mut seq = 0u64;
    for rep in 0..config.reps {
        for (k, &n) in config.guests.iter().enumerate() {
            let count = DensityVariant::ALL.len();
            for position in 0..count {
                let variant = DensityVariant::ALL[(position + rep + k) % count];
                seq += 1;
                let dir = run_dir(private.path(), seq)?;
                let spec = RunSpec {
                    config,
                    image,
                    disks: &disks[..n],
                    dir: &dir,
                    variant,
                    rep,
                    position,
                    seq,
                };
                let run = run_one(&spec);
                let _ = fs::remove_dir_all(&dir);
                runs.push(run?);
                progress(&runs);
                if interrupt::requested() {
                    return Err(BenchError::Interrupted);
                }
            }
        }
    }
    Ok(runs)
}

/// What one run needs.
struct RunSpec<'a> {
    config: &'a DensityEvalConfig,
    image: &'a GuestImage,
    disks: &'a [PathBuf],
    dir: &'a Path,
    variant: DensityVariant,
    rep: usize,
    position: usize,
    seq: u64,
}

impl RunSpec<'_> {
    fn label(&self) -> String {
        format!(
            "{} guests / {} / rep {}",
            self.disks.len(),
            self.variant.name(),
            self.rep
        )
    }
}

/// One run: the fleet of N guests under the variant's memory arrangement.
fn run_one(spec: &RunSpec) -> Result<DensityRun, BenchError> {
    let config = spec.config;
    let n = spec.disks.len();
    let workload = config.workload();
    let guests: Vec<FleetGuest> = spec
        .disks
        .iter()
        .map(|disk| FleetGuest {
            workload: workload.clone(),
            disk: disk.clone(),
            measured: true,
        })
        .collect();
    let memory = match spec.variant {
        DensityVariant::Unconstrained => FleetMemory::Unconstrained,
        DensityVariant::Kernel => FleetMemory::Kernel {
            limit: config.kernel_limit(n),
            swap: n as u64 * config.guest_mib * MIB + 64 * MIB,
            allow_other_swap: config.allow_other_swap,
        },
        DensityVariant::Memvisor => {
            let (budget, image_cache) = config.initial_split(n);
            FleetMemory::Memvisor {
                budget,
                image_cache,
                arena: config.arena,
                run_args: config.run_args.clone(),
                broker: Some(FleetBroker {
                    total: config.memvisor_total(n),
                    args: config.broker_args.clone(),
                }),
            }
        }
    };
    let run = run_fleet(&FleetSpec {
        label: spec.label(),
        image: spec.image,
        guest_mib: config.guest_mib,
        guests: &guests,
        dir: spec.dir,
        memory,
        memvisor: &config.memvisor,
        seq: spec.seq,
        warmup_secs: config.warmup_secs,
        run_secs: config.run_secs(),
        // A phase line every few seconds: six phases of silence is stuck.
        quiet: Duration::from_secs(u64::from(config.phase_secs) * 6 + 60),
    })?;
    Ok(DensityRun {
        guests: n,
        variant: spec.variant,
        rep: spec.rep,
        position: spec.position,
        fleet: run,
    })
}
