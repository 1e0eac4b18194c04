//! Reports of the migration evaluation: a Markdown table of medians per case and variant,
//! memvisor's speedup over each naive variant, one row per run, and the runs as JSON.

use std::fmt::Write as _;

use serde_json::json;

use crate::migration_eval_config::{MigrationCase, MigrationEvalConfig, MigrationVariant};
use crate::migration_run::MigrationRun;

const MIB: f64 = (1u64 << 20) as f64;

/// Median of `v` (`None` for none).
fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

fn show(v: Option<f64>, decimals: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.decimals$}"))
}

/// The (case, variant) pairs of `runs`, in first-seen order with memvisor first.
fn groups(runs: &[MigrationRun]) -> Vec<(MigrationCase, MigrationVariant)> {
    let mut out: Vec<(MigrationCase, MigrationVariant)> = Vec::new();
    for r in runs {
        if !out.contains(&(r.case, r.variant)) {
            out.push((r.case, r.variant));
        }
    }
    out.sort_by_key(|(c, v)| {
        (
            out_index(runs, *c),
            *v != MigrationVariant::Memvisor,
            v.name(),
        )
    });
    out
}

fn out_index(runs: &[MigrationRun], case: MigrationCase) -> usize {
    runs.iter().position(|r| r.case == case).unwrap_or(0)
}

/// Median total time of the completed runs of one group.
fn median_total(runs: &[MigrationRun], case: MigrationCase, v: MigrationVariant) -> Option<f64> {
    median(
        runs.iter()
            .filter(|r| r.case == case && r.variant == v)
            .filter_map(|r| r.total_secs)
            .collect(),
    )
}

/// The table of medians, the speedups, and one row per run.
pub fn migration_markdown(runs: &[MigrationRun]) -> String {
    let mut s = String::from(
        "| case | variant | runs | completed | total s (median) | memvisor faster by | downtime ms | source swap read / written MiB | source QEMU I/O r / w MiB | destination swap read / written MiB | destination QEMU I/O r / w MiB | guest rewrites/s before | after | verified |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (case, v) in groups(runs) {
        let rs: Vec<&MigrationRun> = runs
            .iter()
            .filter(|r| r.case == case && r.variant == v)
            .collect();
        let done: Vec<&&MigrationRun> = rs.iter().filter(|r| r.completed).collect();
        let m = |f: &dyn Fn(&MigrationRun) -> Option<f64>| {
            median(done.iter().filter_map(|r| f(r)).collect())
        };
        let total = m(&|r| r.total_secs);
        let faster = match (
            v,
            median_total(runs, case, MigrationVariant::Memvisor),
            total,
        ) {
            (MigrationVariant::Memvisor, _, _) => "-".to_string(),
            (_, Some(mv), Some(t)) if mv > 0.0 => format!("{:.2}x", t / mv),
            _ => "-".to_string(),
        };
        let swap = |f: &dyn Fn(&MigrationRun) -> (u64, u64, &'static str)| {
            let counter = done.first().map_or("-", |r| f(r).2);
            if counter == "-" {
                return "- (no swap)".to_string();
            }
            format!(
                "{} / {} ({counter})",
                show(m(&|r| Some(f(r).0 as f64 / MIB)), 0),
                show(m(&|r| Some(f(r).1 as f64 / MIB)), 0)
            )
        };
        let io = |f: &dyn Fn(&MigrationRun) -> (u64, u64)| {
            format!(
                "{} / {}",
                show(m(&|r| Some(f(r).0 as f64 / MIB)), 0),
                show(m(&|r| Some(f(r).1 as f64 / MIB)), 0)
            )
        };
        let verified = rs.iter().filter(|r| r.verified).count();
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {faster} | {} | {} | {} | {} | {} | {} | {} | {} |",
            case.name(),
            v.name(),
            rs.len(),
            done.len(),
            show(total, 2),
            show(m(&|r| r.downtime_ms.map(|d| d as f64)), 0),
            swap(&|r| (
                r.source_swap.read_bytes,
                r.source_swap.written_bytes,
                r.source_swap.counter.name()
            )),
            io(&|r| (r.source_io.read_bytes, r.source_io.written_bytes)),
            swap(&|r| (
                r.destination_swap.read_bytes,
                r.destination_swap.written_bytes,
                r.destination_swap.counter.name()
            )),
            io(&|r| (r.destination_io.read_bytes, r.destination_io.written_bytes)),
            show(m(&|r| r.rewrites_per_sec_before), 0),
            show(m(&|r| r.rewrites_per_sec_after), 0),
            if verified == rs.len() {
                "all".to_string()
            } else {
                format!("{verified} of {}", rs.len())
            },
        );
    }
    s.push('\n');
    for (case, v) in groups(runs) {
        if v == MigrationVariant::Memvisor {
            continue;
        }
        if let (Some(mv), Some(t)) = (
            median_total(runs, case, MigrationVariant::Memvisor),
            median_total(runs, case, v),
        ) {
            let _ = writeln!(
                s,
                "- {}: memvisor {mv:.2} s vs {} {t:.2} s: memvisor {:.2}x faster end to end",
                case.name(),
                v.name(),
                t / mv
            );
        }
    }
    s.push_str(
        "\nPer run (swap MiB read/written during the migration; \"after\": rewrites/s over the \
         guest seconds shown):\n\n\
         | case | variant | rep | total s | memvisor memory s | downtime ms | QEMU total ms | memory moved MiB | source swap r/w | source QEMU I/O r/w | destination swap r/w | destination QEMU I/O r/w | to memory / to swap MiB | before | after (s) | verified (errors) | failure |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let pages =
            |p: Option<u64>| p.map_or("-".into(), |p| format!("{:.0}", p as f64 * 4096.0 / MIB));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0}/{:.0} | {:.0}/{:.0} | {:.0}/{:.0} | {:.0}/{:.0} | {} / {} | {} | {} ({:.0}) | {} ({}) | {} |",
            r.case.name(),
            r.variant.name(),
            r.rep,
            show(r.total_secs, 2),
            show(r.memory_ms.map(|m| m as f64 / 1000.0), 2),
            r.downtime_ms.map_or("-".into(), |d| d.to_string()),
            r.qemu_total_ms.map_or("-".into(), |d| d.to_string()),
            show(r.memory_bytes_moved.map(|b| b as f64 / MIB), 0),
            r.source_swap.read_bytes as f64 / MIB,
            r.source_swap.written_bytes as f64 / MIB,
            r.source_io.read_bytes as f64 / MIB,
            r.source_io.written_bytes as f64 / MIB,
            r.destination_swap.read_bytes as f64 / MIB,
            r.destination_swap.written_bytes as f64 / MIB,
            r.destination_io.read_bytes as f64 / MIB,
            r.destination_io.written_bytes as f64 / MIB,
            pages(r.pages_to_memory),
            pages(r.pages_to_swap),
            show(r.rewrites_per_sec_before, 0),
            show(r.rewrites_per_sec_after, 0),
            r.after_covered_secs,
            if r.verified { "yes" } else { "NO" },
            r.guest_errors.map_or("-".into(), |e| e.to_string()),
            r.failure
                .as_deref()
                .map_or(String::new(), |f| f.replace(['\n', '|'], " ")),
        );
    }
    s
}

/// The settings and every run as JSON.
pub fn migration_json(config: &MigrationEvalConfig, runs: &[MigrationRun]) -> String {
    let v = json!({
        "guest_mib": config.guest_mib,
        "fill_mib": config.fill_mib,
        "churn_mib": config.churn_mib,
        "churn_secs": config.churn_secs,
        "workload": config.workload(),
        "budget_bytes": config.budget,
        "headroom_bytes": config.headroom,
        "warmup_secs": config.warmup.as_secs_f64(),
        "after_window_secs": config.after.as_secs_f64(),
        "before_window_secs": config.before.as_secs_f64(),
        "qemu_max_bandwidth": config.qemu_max_bandwidth,
        "memvisor_max_bandwidth": config.memvisor_max_bandwidth,
        "downtime_limit_ms": config.downtime_limit.as_millis() as u64,
        "reps": config.reps,
        "runs": runs,
    });
    let mut s =
        serde_json::to_string_pretty(&v).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::migration_run::{ProcessIo, SwapCounter, SwapTraffic};

    fn run(
        case: MigrationCase,
        variant: MigrationVariant,
        total: f64,
        verified: bool,
    ) -> MigrationRun {
        MigrationRun {
            case,
            variant,
            rep: 0,
            completed: true,
            failure: None,
            total_secs: Some(total),
            qemu_total_ms: Some(100),
            downtime_ms: Some(40),
            memory_bytes_moved: Some(800 << 20),
            rounds: None,
            pages_to_memory: None,
            pages_to_swap: None,
            source_swap: SwapTraffic::NONE,
            destination_swap: SwapTraffic {
                read_bytes: 1 << 20,
                written_bytes: 512 << 20,
                counter: SwapCounter::MemvisorStat,
            },
            source_io: ProcessIo::default(),
            destination_io: ProcessIo {
                read_bytes: 2 << 20,
                written_bytes: 510 << 20,
            },
            memory_ms: None,
            mover_summary: None,
            rewrites_per_sec_before: Some(20000.0),
            rewrites_per_sec_after: Some(9000.0),
            after_covered_secs: 29.0,
            verified,
            guest_errors: Some(u64::from(!verified)),
        }
    }

    #[test]
    fn medians_speedups_and_verification_per_group() {
        let v = MigrationCase::Virtualizing;
        let runs = vec![
            run(v, MigrationVariant::Naive, 30.0, false),
            run(v, MigrationVariant::Memvisor, 10.0, true),
            run(v, MigrationVariant::Memvisor, 14.0, true),
            run(v, MigrationVariant::Naive, 40.0, true),
        ];
        let md = migration_markdown(&runs);
        let rows: Vec<&str> = md
            .lines()
            .filter(|l| l.starts_with("| virtualizing"))
            .collect();
        assert!(rows[0].starts_with("| virtualizing | memvisor | 2 | 2 | 12.00 | - | 40 | - (no swap) | 0 / 0 | 1 / 512 (memvisor stat) | 2 / 510 |"), "{md}");
        assert!(
            rows[1].starts_with("| virtualizing | naive | 2 | 2 | 35.00 | 2.92x |"),
            "{md}"
        );
        assert!(rows[1].ends_with("| 20000 | 9000 | 1 of 2 |"), "{md}");
        assert!(md.contains("- virtualizing: memvisor 12.00 s vs naive 35.00 s: memvisor 2.92x faster end to end"), "{md}");
        // Four per-run rows after the summary.
        assert_eq!(rows.len(), 2 + 4);
        let json = migration_json(
            &MigrationEvalConfig::sized("m".into(), "w".into(), true),
            &runs,
        );
        let parsed: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(parsed["runs"].as_array().unwrap().len(), 4);
        assert_eq!(parsed["runs"][0]["variant"], "naive");
        assert_eq!(
            parsed["runs"][0]["destination_swap"]["counter"],
            "memvisor-stat"
        );
    }
}
