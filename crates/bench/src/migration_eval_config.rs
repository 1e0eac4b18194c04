//! The settings of the migration evaluation ([`crate::migration_eval`]): its two cases, the
//! variants of each, and where each end's guest memory lives in each variant ([`plan`]).

use std::path::PathBuf;
use std::time::Duration;

use memvisor_control::PostCopy;
use serde::Serialize;

const MIB: u64 = 1 << 20;

/// Which way memory moves between "in memory" and "in swap".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationCase {
    /// Unconstrained source, destination with a small budget: most of what arrives must go
    /// to swap.
    Virtualizing,
    /// Source with a small budget (most of the guest in swap), unconstrained destination.
    Devirtualizing,
}

impl MigrationCase {
    /// Name in the report and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Virtualizing => "virtualizing",
            Self::Devirtualizing => "devirtualizing",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Virtualizing, Self::Devirtualizing]
            .into_iter()
            .find(|c| c.name() == s)
    }

    /// This case's variants, memvisor first.
    pub fn variants(self) -> Vec<MigrationVariant> {
        match self {
            Self::Virtualizing => vec![
                MigrationVariant::Memvisor,
                MigrationVariant::MemvisorPrecopy,
                MigrationVariant::MemvisorPostCopy,
                MigrationVariant::Naive,
            ],
            Self::Devirtualizing => vec![
                MigrationVariant::Memvisor,
                MigrationVariant::MemvisorPrecopy,
                MigrationVariant::MemvisorPostCopy,
                MigrationVariant::NaiveMemvisor,
                MigrationVariant::NaiveKernel,
            ],
        }
    }
}

/// How the guest is moved and how its ends are managed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MigrationVariant {
    /// `memvisor migrate` between two `memvisor run`s (QEMU moves device state only), with
    /// its defaults (`--post-copy=auto`).
    Memvisor,
    /// The same with `--post-copy=never`: the last round always goes while the guest is
    /// paused.
    MemvisorPrecopy,
    /// The same with `--post-copy` (always): the pages changed last follow after the
    /// switch-over.
    MemvisorPostCopy,
    /// Virtualizing: QEMU's own precopy from a plain QEMU into a QEMU in a memory cgroup of
    /// the small budget, the kernel swapping.
    Naive,
    /// Devirtualizing: QEMU's own precopy from a QEMU under `memvisor run` with the small
    /// budget (every swapped page QEMU reads is faulted in by the pager) to a plain QEMU.
    NaiveMemvisor,
    /// Devirtualizing: QEMU's own precopy from a QEMU in a memory cgroup of the small budget
    /// (kernel swap) to a plain QEMU.
    NaiveKernel,
}

impl MigrationVariant {
    /// Name in the report and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Self::Memvisor => "memvisor",
            Self::MemvisorPrecopy => "memvisor-precopy",
            Self::MemvisorPostCopy => "memvisor-post-copy",
            Self::Naive => "naive",
            Self::NaiveMemvisor => "naive-memvisor",
            Self::NaiveKernel => "naive-kernel",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Memvisor,
            Self::MemvisorPrecopy,
            Self::MemvisorPostCopy,
            Self::Naive,
            Self::NaiveMemvisor,
            Self::NaiveKernel,
        ]
        .into_iter()
        .find(|v| v.name() == s)
    }
}

/// Where one end's guest memory lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placement {
    /// QEMU alone, no limit.
    Plain,
    /// Under `memvisor run --budget BYTES`.
    Memvisor {
        /// The budget.
        budget: u64,
    },
    /// QEMU alone in a cgroup v1 memory group limited to `limit` bytes, swapping to a swap
    /// file of its own.
    Cgroup {
        /// `memory.limit_in_bytes`.
        limit: u64,
    },
}

/// Who moves guest memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mover {
    /// `memvisor migrate` (pager to pager; QEMU with `x-ignore-shared`), with `--post-copy`
    /// as given (`None`: the default).
    Memvisor(Option<PostCopy>),
    /// QEMU's own precopy migration (`migrate` over QMP).
    Qemu,
}

/// The two ends and the mover of one variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// The source QEMU.
    pub source: Placement,
    /// The destination QEMU.
    pub destination: Placement,
    /// Who moves the memory.
    pub mover: Mover,
}

/// The ends of `variant` in `case` for a guest of `guest_bytes` and a small budget of
/// `budget` bytes. An unconstrained memvisor end gets the whole guest plus `headroom` (the
/// budget is per process: QEMU's other large mappings count against it too).
pub fn plan(
    case: MigrationCase,
    variant: MigrationVariant,
    guest_bytes: u64,
    budget: u64,
    headroom: u64,
) -> Option<Plan> {
    let whole = Placement::Memvisor {
        budget: guest_bytes + headroom,
    };
    let small = Placement::Memvisor { budget };
    let cgroup = Placement::Cgroup { limit: budget };
    let precopy = Mover::Memvisor(Some(PostCopy::Never));
    let post_copy = Mover::Memvisor(Some(PostCopy::Always));
    use MigrationCase::*;
    use MigrationVariant::*;
    let (source, destination, mover) = match (case, variant) {
        (Virtualizing, Memvisor) => (whole, small, Mover::Memvisor(None)),
        (Virtualizing, MemvisorPrecopy) => (whole, small, precopy),
        (Virtualizing, MemvisorPostCopy) => (whole, small, post_copy),
        (Virtualizing, Naive) => (Placement::Plain, cgroup, Mover::Qemu),
        (Devirtualizing, Memvisor) => (small, whole, Mover::Memvisor(None)),
        (Devirtualizing, MemvisorPrecopy) => (small, whole, precopy),
        (Devirtualizing, MemvisorPostCopy) => (small, whole, post_copy),
        (Devirtualizing, NaiveMemvisor) => (small, Placement::Plain, Mover::Qemu),
        (Devirtualizing, NaiveKernel) => (cgroup, Placement::Plain, Mover::Qemu),
        _ => return None,
    };
    Some(Plan {
        source,
        destination,
        mover,
    })
}

/// The evaluation's settings.
#[derive(Debug, Clone)]
pub struct MigrationEvalConfig {
    /// The `memvisor` binary.
    pub memvisor: PathBuf,
    /// Cases, each with the variants to run (in the order of the first repetition, rotated by
    /// one each repetition).
    pub cases: Vec<(MigrationCase, Vec<MigrationVariant>)>,
    /// Repetitions.
    pub reps: usize,
    /// Guest RAM, MiB.
    pub guest_mib: u64,
    /// Memory the guest writes first (`mem MIB --patterns seq`: written, read, verified and
    /// freed; its pages keep their data in guest RAM, so the host has that much to move).
    pub fill_mib: u64,
    /// Memory the `churn` workload then writes and keeps rewriting at random (the part of the
    /// guest that changes during the migration), MiB.
    pub churn_mib: u64,
    /// How long the churn runs (it must outlast boot, its write phase, the warm-up, the
    /// migration and the window after it; the guest verifies all its memory after that).
    pub churn_secs: u64,
    /// The constrained end's budget (memvisor) or cgroup limit (kernel), bytes.
    pub budget: u64,
    /// Added to the guest size for an unconstrained memvisor end's budget.
    pub headroom: u64,
    /// Churn time on the source before the migration starts (the guest rewrites its memory in
    /// a steady state by then).
    pub warmup: Duration,
    /// Window after the migration over which the guest's speed is measured.
    pub after: Duration,
    /// Window before the migration over which the guest's speed is measured on the source.
    pub before: Duration,
    /// QEMU's `max-bandwidth` for the naive variants, bytes per second.
    pub qemu_max_bandwidth: u64,
    /// `memvisor migrate --max-bandwidth` (none: unlimited).
    pub memvisor_max_bandwidth: Option<u64>,
    /// Downtime limit of both movers.
    pub downtime_limit: Duration,
    /// A migration that has not completed by then is cancelled and reported failed.
    pub migration_timeout: Duration,
    /// Where swap files, keys, sockets and control directories go (in a private directory).
    pub work_dir: PathBuf,
    /// Allow other swap areas to be active during the kernel variants.
    pub allow_other_swap: bool,
}

impl MigrationEvalConfig {
    /// Full size (1 GiB guest writing 768 MiB then rewriting 32 MiB, 256 MiB budget, 30 s
    /// windows) or `quick` (512 MiB guest writing 384 MiB, 128 MiB budget, 15 s windows).
    ///
    /// Why not `churn 768`: rewriting random pages of all 768 MiB at a TCG guest's full
    /// speed (about 70,000 pages a second here) changes about 300 MB/s, more than memvisor
    /// sends on this host (about 150 MB/s): each round re-sent most of the memory and the
    /// migration never converged (measured with `churn 384` on the quick guest). A part that
    /// changes during the migration must fit the downtime limit at the transfer rate.
    pub fn sized(memvisor: PathBuf, work_dir: PathBuf, quick: bool) -> Self {
        let (guest_mib, fill_mib, budget_mib, churn_secs, after) = if quick {
            (512, 384, 128, 45, 15)
        } else {
            (1024, 768, 256, 150, 30)
        };
        Self {
            memvisor,
            cases: [MigrationCase::Virtualizing, MigrationCase::Devirtualizing]
                .into_iter()
                .map(|c| (c, c.variants()))
                .collect(),
            reps: 2,
            guest_mib,
            fill_mib,
            churn_mib: 32,
            churn_secs,
            budget: budget_mib * MIB,
            headroom: 128 * MIB,
            warmup: Duration::from_secs(5),
            after: Duration::from_secs(after),
            before: Duration::from_secs(10),
            qemu_max_bandwidth: 1 << 30,
            memvisor_max_bandwidth: None,
            downtime_limit: Duration::from_millis(300),
            migration_timeout: Duration::from_secs(600),
            work_dir,
            allow_other_swap: false,
        }
    }

    /// The guest workload's command line.
    pub fn workload(&self) -> String {
        format!(
            "mem {} --patterns seq; churn {} {} --report 1000",
            self.fill_mib, self.churn_mib, self.churn_secs
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_of_a_case_has_a_plan_and_no_other() {
        let (g, b, h) = (1024 * MIB, 256 * MIB, 128 * MIB);
        for case in [MigrationCase::Virtualizing, MigrationCase::Devirtualizing] {
            for v in [
                MigrationVariant::Memvisor,
                MigrationVariant::MemvisorPrecopy,
                MigrationVariant::MemvisorPostCopy,
                MigrationVariant::Naive,
                MigrationVariant::NaiveMemvisor,
                MigrationVariant::NaiveKernel,
            ] {
                assert_eq!(
                    plan(case, v, g, b, h).is_some(),
                    case.variants().contains(&v),
                    "{case:?} {v:?}"
                );
            }
        }
        let p = plan(
            MigrationCase::Virtualizing,
            MigrationVariant::Memvisor,
            g,
            b,
            h,
        )
        .unwrap();
        assert_eq!(p.source, Placement::Memvisor { budget: g + h });
        assert_eq!(p.destination, Placement::Memvisor { budget: b });
        let p = plan(
            MigrationCase::Devirtualizing,
            MigrationVariant::NaiveKernel,
            g,
            b,
            h,
        )
        .unwrap();
        assert_eq!(
            (p.source, p.destination, p.mover),
            (
                Placement::Cgroup { limit: b },
                Placement::Plain,
                Mover::Qemu
            )
        );
    }

    #[test]
    fn names_round_trip_and_sizes_scale_with_quick() {
        for v in [
            "memvisor",
            "memvisor-precopy",
            "memvisor-post-copy",
            "naive",
            "naive-memvisor",
            "naive-kernel",
        ] {
            assert_eq!(MigrationVariant::parse(v).unwrap().name(), v);
        }
        assert_eq!(
            MigrationCase::parse("devirtualizing")
                .unwrap()
                .variants()
                .len(),
            5
        );
        assert_eq!(MigrationCase::parse("other"), None);
        let full = MigrationEvalConfig::sized("m".into(), "w".into(), false);
        assert_eq!(
            full.workload(),
            "mem 768 --patterns seq; churn 32 150 --report 1000"
        );
        assert_eq!(full.budget, 256 * MIB);
        let quick = MigrationEvalConfig::sized("m".into(), "w".into(), true);
        assert_eq!(quick.guest_mib, 512);
        assert!(quick.churn_secs < full.churn_secs);
    }
}
