//! [`DensityEvalConfig`]: the settings of the density experiment ([`crate::density_eval`]):
//! guest and disk sizes, the host total, the guest counts swept, the variants, the guest
//! workload and its timing; the full and `--quick` presets and the parsing of the list flags.

use std::path::PathBuf;

use serde::Serialize;

use crate::bench_error::BenchError;

const MIB: u64 = 1 << 20;

/// The broker's smallest budget of a process (`memvisor broker --min`, default 64M) plus its
/// smallest image cache limit (`--image-min`, default 16M): what each guest needs at least
/// under the broker's defaults, so `total / guests` must not be less.
pub const BROKER_MIN_PER_GUEST: u64 = (64 + 16) * MIB;

/// The image cache limit each guest starts with under memvisor when its guest RAM takes the
/// rest of its share (the broker's `--image-min` default).
pub const INITIAL_IMAGE_CACHE: u64 = 16 * MIB;

/// How the N guests' memory is managed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DensityVariant {
    /// Plain QEMUs without any memory limit (the reference: the same CPU contention).
    Unconstrained,
    /// Plain QEMUs in one cgroup v1 memory group of the total plus QEMU's own allowance per
    /// guest, a swap file on the work directory's disk.
    Kernel,
    /// Each QEMU under `memvisor run` with a share of the total (budget and image cache
    /// limit), then `memvisor broker --total TOTAL` with its defaults.
    Memvisor,
}

impl DensityVariant {
    /// Every variant, in the first run's order.
    pub const ALL: [DensityVariant; 3] = [Self::Unconstrained, Self::Kernel, Self::Memvisor];

    /// Its name in tables and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Unconstrained => "unconstrained",
            Self::Kernel => "kernel",
            Self::Memvisor => "memvisor",
        }
    }
}

/// Everything one density experiment needs.
#[derive(Debug, Clone, Serialize)]
pub struct DensityEvalConfig {
    /// The `memvisor` binary (its `run` and `broker`).
    pub memvisor: PathBuf,
    /// Where the run's private 0700 directory (disk images, swap files, sockets) goes.
    pub work_dir: PathBuf,
    /// Guest RAM, MiB (a memfd).
    pub guest_mib: u64,
    /// Each guest's own raw disk image, MiB.
    pub disk_mib: u64,
    /// The host total every constrained variant shares, bytes.
    pub total: u64,
    /// Guest counts, in sweep order.
    pub guests: Vec<usize>,
    /// A configuration keeps if every guest's ratio to unconstrained is at least this.
    pub keep: f64,
    /// How long each guest's workload runs (after boot), seconds: `phases` phases.
    pub phases: u32,
    /// Length of one workload phase (one `disk ... zipf SECONDS --verify` command), seconds.
    pub phase_secs: u32,
    /// Seconds after the last guest's workload started before the window opens.
    pub warmup_secs: f64,
    /// Zipf exponent of the guests' block reads.
    pub alpha: f64,
    /// The guests read uniformly random blocks instead (`alpha` unused): every block of the
    /// disk is the working set, so a disk smaller than guest RAM is a working set of known
    /// size.
    pub uniform: bool,
    /// Reads a second each guest asks for (`disk --rate`, open loop), or `None`: as fast as it
    /// can. Paced guests measure whether memory keeps up with a load the CPUs can carry, where
    /// unpaced TCG guests on 2 CPUs are bound by CPU first.
    pub rate: Option<f64>,
    /// Each guest first reads its whole disk once, as fast as it can (64 KiB reads, verified),
    /// so that its page cache fills its RAM as a long-running guest's does before the
    /// measured phases (paced guests alone fill it slowly). The window opens after it.
    pub fill: bool,
    /// Kernel variant: memory of QEMU itself (heap, TCG's code buffer) allowed per guest on
    /// top of the total, bytes (memvisor does not count it either).
    pub qemu_allowance: u64,
    /// Memvisor variant: bytes per guest its broker's total gets on top of the total, for the
    /// part of QEMU's own memory that memvisor pages under its budgets (TCG's code buffer),
    /// which the kernel variant's `qemu_allowance` covers there (0: none).
    pub memvisor_allowance: u64,
    /// Memvisor variant: `memvisor run --arena`, bytes (`None`: memvisor's default, twice
    /// host RAM; its per-page tables cost no memory until used).
    pub arena: Option<u64>,
    /// Memvisor variant: more arguments of `memvisor broker`, after `--total` (`--broker-arg`,
    /// repeated; the broker checks them, and a run whose broker exits fails with its message).
    pub broker_args: Vec<String>,
    /// Memvisor variant: more arguments of each `memvisor run`, before `--` (`--run-arg`,
    /// repeated; `memvisor run` checks them).
    pub run_args: Vec<String>,
    /// Repetitions (the variant order rotates).
    pub reps: usize,
    /// Run the kernel variant even if another swap area is active.
    pub allow_other_swap: bool,
}

impl DensityEvalConfig {
    /// The full experiment (192 MiB guests, 256 MiB disks, 768M, 2 to 6 guests, 150 s runs)
    /// or the `quick` smoke run (128 MiB guests, 160 MiB disks, 256M, 2 and 3 guests, 40 s).
    pub fn sized(memvisor: PathBuf, work_dir: PathBuf, quick: bool) -> Self {
        let base = Self {
            memvisor,
            work_dir,
            guest_mib: 192,
            disk_mib: 256,
            total: 768 * MIB,
            guests: vec![2, 3, 4, 5, 6],
            keep: 0.8,
            phases: 15,
            phase_secs: 10,
            warmup_secs: 45.0,
            alpha: 0.99,
            uniform: false,
            rate: None,
            fill: false,
            qemu_allowance: 96 * MIB,
            memvisor_allowance: 0,
            arena: None,
            broker_args: Vec::new(),
            run_args: Vec::new(),
            reps: 2,
            allow_other_swap: false,
        };
        if !quick {
            return base;
        }
        Self {
            guest_mib: 128,
            disk_mib: 160,
            total: 256 * MIB,
            guests: vec![2, 3],
            phases: 8,
            phase_secs: 5,
            warmup_secs: 15.0,
            reps: 1,
            ..base
        }
    }

    /// Seconds each guest's workload runs.
    pub fn run_secs(&self) -> f64 {
        f64::from(self.phases * self.phase_secs)
    }

    /// The guest workload: `phases` Zipf (or uniform) reads of the whole disk, `phase_secs`
    /// each, every block verified, paced at `rate` if set, after one read of the whole disk if
    /// `fill`. Every Zipf phase restarts the generator with the same seed (a new seed would move
    /// the popular blocks), so each replays the start of the same sequence; uniform phases each
    /// take the next seed.
    pub fn workload(&self) -> String {
        let pace = self.rate.map_or(String::new(), |r| format!(" --rate {r}"));
        let (pattern, alpha) = if self.uniform {
            ("random", String::new())
        } else {
            ("zipf", format!(" --alpha {}", self.alpha))
        };
        let phases = (0..self.phases)
            .map(|k| {
                // Uniform phases each take the next seed: one seed replays the same blocks, so
                // a paced phase (fewer reads than blocks) would only ever visit its first few.
                let seed = if self.uniform {
                    format!(" --seed {}", k + 1)
                } else {
                    String::new()
                };
                format!(
                    "disk /dev/vda {pattern} {}{alpha}{seed}{pace} --verify",
                    self.phase_secs
                )
            })
            .collect::<Vec<_>>()
            .join("; ");
        if self.fill {
            format!(
                "disk /dev/vda seq --reads {} --block 65536 --verify; {phases}",
                self.disk_mib * 16
            )
        } else {
            phases
        }
    }

    /// Memvisor variant: each guest's starting budget and image cache limit for `n` guests:
    /// its share of the total, guest RAM first (at most all of it), the rest (at least
    /// [`INITIAL_IMAGE_CACHE`]) for its image's host cache.
    pub fn initial_split(&self, n: usize) -> (u64, u64) {
        let share = self.share(n);
        let budget = share
            .saturating_sub(INITIAL_IMAGE_CACHE)
            .min(self.guest_mib * MIB);
        (budget, share - budget)
    }

    /// One guest's share of the memvisor variant's total for `n` guests, rounded down to
    /// whole MiB.
    pub fn share(&self, n: usize) -> u64 {
        self.memvisor_total(n) / n.max(1) as u64 / MIB * MIB
    }

    /// Memvisor variant: its broker's total for `n` guests.
    pub fn memvisor_total(&self, n: usize) -> u64 {
        self.total + self.memvisor_allowance * n as u64
    }

    /// Kernel variant: the group's limit for `n` guests.
    pub fn kernel_limit(&self, n: usize) -> u64 {
        self.total + self.qemu_allowance * n as u64
    }

    /// Refuses settings the experiment cannot run with, naming the flag.
    pub fn validate(&self) -> Result<(), BenchError> {
        if self.guests.is_empty() {
            return Err(BenchError::bad("--guests", "", "at least one guest count"));
        }
        if self.total < BROKER_MIN_PER_GUEST {
            return Err(BenchError::bad(
                "--total",
                format!("{}M", self.total / MIB),
                "at least 80M (the broker's smallest share of one guest)",
            ));
        }
        if let Some(&n) = self
            .guests
            .iter()
            .find(|&&n| self.share(n) < BROKER_MIN_PER_GUEST)
        {
            return Err(BenchError::bad(
                "--guests",
                n.to_string(),
                format!(
                    "{} MiB per guest of --total {} MiB is below the broker's smallest share \
                     (64M budget + 16M image cache)",
                    self.share(n) / MIB,
                    self.total / MIB
                ),
            ));
        }
        if !(64..=65536).contains(&self.guest_mib) {
            return Err(BenchError::bad(
                "--guest-mib",
                self.guest_mib.to_string(),
                "64 to 65536",
            ));
        }
        if let Some(arena) = self.arena.filter(|&a| a < MIB) {
            return Err(BenchError::bad(
                "--arena",
                arena.to_string(),
                "at least one chunk (1M)",
            ));
        }
        if let Some(r) = self.rate.filter(|r| !(1.0..=1e7).contains(r)) {
            return Err(BenchError::bad(
                "--rate",
                r.to_string(),
                "reads a second per guest, 1 to 10000000",
            ));
        }
        if self.disk_mib == 0 {
            return Err(BenchError::bad("--disk-mib", "0", "at least 1"));
        }
        if self.reps == 0 {
            return Err(BenchError::bad("--reps", "0", "at least 1"));
        }
        if self.warmup_secs + 2.0 * f64::from(self.phase_secs) > self.run_secs() {
            return Err(BenchError::bad(
                "--seconds",
                self.run_secs().to_string(),
                format!(
                    "leaves less than two {} s phases after the {} s warm-up",
                    self.phase_secs, self.warmup_secs
                ),
            ));
        }
        if self.workload().len() > 1800 {
            return Err(BenchError::bad(
                "--seconds",
                self.run_secs().to_string(),
                "too many phases for the guest kernel's command line",
            ));
        }
        Ok(())
    }
}

/// Parses `--guests`: comma-separated guest counts, each at least 1, no repeats.
pub fn parse_guest_counts(text: &str) -> Result<Vec<usize>, BenchError> {
    let bad = |reason: &str| BenchError::bad("--guests", text, reason);
    let mut out = Vec::new();
    for part in text.split(',') {
        let n: usize = part
            .trim()
            .parse()
            .map_err(|_| bad("expected guest counts such as 2,3,4"))?;
        if n == 0 || n > 64 {
            return Err(bad("each count must be 1 to 64"));
        }
        if out.contains(&n) {
            return Err(bad("a count appears twice"));
        }
        out.push(n);
    }
    Ok(out)
}

/// Parses `--keep`: the fraction of unconstrained throughput a guest must keep, in (0, 1].
pub fn parse_keep(text: &str) -> Result<f64, BenchError> {
    match text.trim().parse::<f64>() {
        Ok(k) if k > 0.0 && k <= 1.0 => Ok(k),
        _ => Err(BenchError::bad(
            "--keep",
            text,
            "a fraction in (0, 1], such as 0.8",
        )),
    }
}

/// Parses `--seconds` for phases of `phase_secs`: a whole number of phases.
pub fn parse_run_secs(text: &str, phase_secs: u32) -> Result<u32, BenchError> {
    match text.trim().parse::<u32>() {
        Ok(s) if s >= phase_secs && s % phase_secs == 0 && s <= 3600 => Ok(s / phase_secs),
        _ => Err(BenchError::bad(
            "--seconds",
            text,
            format!("a multiple of the {phase_secs} s phase, at most 3600"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> DensityEvalConfig {
        DensityEvalConfig::sized("memvisor".into(), "/var/tmp".into(), false)
    }

    #[test]
    fn guest_counts_parse_and_bad_ones_name_the_flag() {
        assert_eq!(parse_guest_counts("2,3,4").unwrap(), vec![2, 3, 4]);
        assert_eq!(parse_guest_counts(" 6 , 2").unwrap(), vec![6, 2]);
        for bad in ["", "2,,3", "x", "0", "2,2", "-1", "65"] {
            let e = parse_guest_counts(bad).unwrap_err().to_string();
            assert!(e.starts_with(&format!("bad --guests {bad:?}")), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
        assert_eq!(parse_keep("0.8").unwrap(), 0.8);
        for bad in ["0", "1.5", "NaN", "x", "-0.1"] {
            assert!(parse_keep(bad)
                .unwrap_err()
                .to_string()
                .starts_with("bad --keep"));
        }
        assert_eq!(parse_run_secs("150", 10).unwrap(), 15);
        assert!(parse_run_secs("155", 10).is_err());
        assert!(parse_run_secs("0", 10).is_err());
    }

    #[test]
    fn presets_validate_and_split_the_total() {
        let c = config();
        c.validate().unwrap();
        DensityEvalConfig::sized("m".into(), "w".into(), true)
            .validate()
            .unwrap();
        // 768M over 2: guest RAM whole (192M), 192M of image cache; over 6: 112M + 16M.
        assert_eq!(c.initial_split(2), (192 * MIB, 192 * MIB));
        assert_eq!(c.initial_split(6), (112 * MIB, 16 * MIB));
        for n in 1..=9 {
            let (b, i) = c.initial_split(n);
            assert!(
                b + i <= c.total / n as u64 && i >= INITIAL_IMAGE_CACHE,
                "{n}"
            );
        }
        assert_eq!(c.kernel_limit(4), 768 * MIB + 4 * 96 * MIB);
        assert_eq!(c.memvisor_total(4), 768 * MIB);
        // The memvisor variant's own allowance per guest goes to its broker's total only.
        let paced = DensityEvalConfig {
            total: 320 * MIB,
            memvisor_allowance: 45 * MIB,
            ..config()
        };
        assert_eq!(paced.memvisor_total(4), 500 * MIB);
        assert_eq!(paced.initial_split(4), (109 * MIB, 16 * MIB));
        assert_eq!(paced.kernel_limit(4), 704 * MIB);
        assert_eq!(c.workload().matches("--verify").count(), 15);
        assert!(c
            .workload()
            .starts_with("disk /dev/vda zipf 10 --alpha 0.99 --verify; disk"));
        let too_many = DensityEvalConfig {
            guests: vec![2, 10],
            ..config()
        };
        let e = too_many.validate().unwrap_err().to_string();
        assert!(e.starts_with("bad --guests \"10\""), "{e}");
        let short = DensityEvalConfig {
            phases: 5,
            ..config()
        };
        assert!(short
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--seconds"));
        let paced = DensityEvalConfig {
            rate: Some(1500.0),
            ..config()
        };
        paced.validate().unwrap();
        assert!(paced
            .workload()
            .starts_with("disk /dev/vda zipf 10 --alpha 0.99 --rate 1500 --verify; disk"));
        let filled = DensityEvalConfig {
            fill: true,
            ..paced.clone()
        };
        assert!(filled.workload().starts_with(
            "disk /dev/vda seq --reads 4096 --block 65536 --verify; disk /dev/vda zipf 10"
        ));
        let uniform = DensityEvalConfig {
            uniform: true,
            ..paced
        };
        assert!(uniform.workload().starts_with(
            "disk /dev/vda random 10 --seed 1 --rate 1500 --verify; \
             disk /dev/vda random 10 --seed 2 --rate 1500 --verify; disk"
        ));
        for bad in [0.0, 0.5, f64::NAN, 2e7] {
            let e = DensityEvalConfig {
                rate: Some(bad),
                ..config()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(e.starts_with("bad --rate"), "{e}");
        }
    }
}
