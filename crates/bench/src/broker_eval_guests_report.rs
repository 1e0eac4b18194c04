//! The report of `broker-eval --guests`: each guest's throughput relative to its own
//! unconstrained run, and the aggregate (the sum over the measured guests: weighted speedup),
//! as markdown.

use std::fmt::Write;

use crate::broker_eval::BrokerVariant;
use crate::broker_eval_guests::{GuestBrokerEvalConfig, GuestRole, GuestVariantRun};
use crate::guest_fleet::GuestResult;

/// Mean of `f` over the runs of `variant` (optionally one repetition) for guest `slot`.
fn mean(
    runs: &[GuestVariantRun],
    variant: BrokerVariant,
    rep: Option<usize>,
    slot: usize,
    f: impl Fn(&GuestResult) -> f64,
) -> Option<f64> {
    let v: Vec<f64> = runs
        .iter()
        .filter(|r| r.variant == variant && rep.is_none_or(|k| r.rep == k))
        .filter_map(|r| r.fleet.per_guest.get(slot).map(&f))
        .collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// A guest's throughput over its unconstrained one (same repetition if `rep`).
pub fn ratio(
    runs: &[GuestVariantRun],
    variant: BrokerVariant,
    rep: Option<usize>,
    slot: usize,
) -> Option<f64> {
    let rate = mean(runs, variant, rep, slot, |g| g.reads_per_s)?;
    let base = mean(runs, BrokerVariant::Unconstrained, rep, slot, |g| {
        g.reads_per_s
    })?;
    (base > 0.0).then(|| rate / base)
}

/// The sum of the measured guests' ratios (weighted speedup).
pub fn aggregate(
    runs: &[GuestVariantRun],
    variant: BrokerVariant,
    rep: Option<usize>,
) -> Option<f64> {
    GuestRole::ALL
        .iter()
        .enumerate()
        .filter(|(_, role)| role.measured())
        .map(|(slot, _)| ratio(runs, variant, rep, slot))
        .sum()
}

/// The whole report.
pub fn guest_broker_markdown(config: &GuestBrokerEvalConfig, runs: &[GuestVariantRun]) -> String {
    let mut out = String::new();
    let mib = |b: u64| b >> 20;
    let _ = writeln!(
        out,
        "Four TCG guests of {} MiB (stream and zipf over {} MiB, a {} MiB disk read again and \
         again, idle), {} s each, window from {:.0} s after the last start; total {}M, kernel \
         group {}M + {}M per QEMU; {} repetition(s).\n",
        config.guest_mib,
        config.mem_mib,
        config.disk_mib,
        config.seconds,
        config.warmup_secs,
        mib(config.total),
        mib(config.total),
        mib(config.qemu_allowance),
        config.reps
    );
    let names: Vec<&str> = GuestRole::ALL.iter().map(|r| r.name()).collect();
    let _ = writeln!(
        out,
        "| variant | {} | aggregate | page-ins in the window ({}) | RAM budget / image cache at the end, MiB ({}) |",
        GuestRole::ALL
            .iter()
            .filter(|r| r.measured())
            .map(|r| format!("{} reads/s (x)", r.name()))
            .collect::<Vec<_>>()
            .join(" | "),
        names.join(" / "),
        names.join(" / ")
    );
    let measured = GuestRole::ALL.iter().filter(|r| r.measured()).count();
    let _ = writeln!(out, "|---|{}---|---|---|", "---:|".repeat(measured));
    for variant in BrokerVariant::ALL {
        if !runs.iter().any(|r| r.variant == variant) {
            continue;
        }
        let rates: Vec<String> = GuestRole::ALL
            .iter()
            .enumerate()
            .filter(|(_, r)| r.measured())
            .map(|(slot, _)| {
                let rate = mean(runs, variant, None, slot, |g| g.reads_per_s).unwrap_or(0.0);
                match ratio(runs, variant, None, slot) {
                    Some(x) => format!("{rate:.0} ({x:.2})"),
                    None => format!("{rate:.0}"),
                }
            })
            .collect();
        let page_ins: Vec<String> = (0..GuestRole::ALL.len())
            .map(|slot| {
                mean(runs, variant, None, slot, |g| g.page_ins as f64)
                    .map_or("-".into(), |p| format!("{p:.0}"))
            })
            .collect();
        let budgets: Vec<String> = (0..GuestRole::ALL.len())
            .map(|slot| {
                let each: Vec<String> = runs
                    .iter()
                    .filter(|r| r.variant == variant)
                    .filter_map(|r| {
                        let g = r.fleet.per_guest.get(slot)?;
                        Some(format!(
                            "{:.0}/{:.0}",
                            g.budget_mib?,
                            g.image_cache_limit_mib.unwrap_or(0.0)
                        ))
                    })
                    .collect();
                if each.is_empty() {
                    "-".into()
                } else {
                    each.join(", ")
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} |",
            variant.name(),
            rates.join(" | "),
            aggregate(runs, variant, None).map_or("-".into(), |a| format!("{a:.2}")),
            page_ins.join(" / "),
            budgets.join(" ; ")
        );
    }
    let _ = writeln!(
        out,
        "\nReads are 4 KiB: memory pages (stream, zipf) or disk blocks (disk); (x) is the mean \
         over repetitions against the unconstrained run's mean; the aggregate sums them over \
         the three measured guests. Page-ins: memvisor's pager (swap or image), otherwise \
         QEMU's major faults.\n"
    );
    let _ = writeln!(
        out,
        "| variant | rep | position | aggregate (against this rep's unconstrained) | window s | broker changes | group peak MiB | rss MiB | guest RAM in memory MiB | image cache MiB |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in runs {
        let g = &r.fleet.group;
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            r.variant.name(),
            r.rep,
            r.position,
            aggregate(runs, r.variant, Some(r.rep)).map_or("-".into(), |a| format!("{a:.2}")),
            r.fleet.window_s,
            r.fleet.broker_changes,
            g.peak_mib,
            g.rss_mib,
            g.shmem_mib,
            g.file_cache_mib
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_fleet::FleetRun;

    fn run(variant: BrokerVariant, rep: usize, rates: [f64; 4]) -> GuestVariantRun {
        GuestVariantRun {
            variant,
            rep,
            position: 0,
            fleet: FleetRun::with_rates(&rates),
        }
    }

    #[test]
    fn the_aggregate_sums_each_measured_guest_against_its_own_reference() {
        let runs = vec![
            run(BrokerVariant::Unconstrained, 0, [100.0, 10.0, 1000.0, 0.0]),
            run(BrokerVariant::Unconstrained, 1, [300.0, 30.0, 1000.0, 0.0]),
            run(BrokerVariant::Utility, 0, [100.0, 5.0, 500.0, 0.0]),
            run(BrokerVariant::Utility, 1, [100.0, 15.0, 500.0, 0.0]),
        ];
        // Means: reference 200 / 20 / 1000, utility 100 / 10 / 500: 0.5 each.
        let a = aggregate(&runs, BrokerVariant::Utility, None).unwrap();
        assert!((a - 1.5).abs() < 1e-9, "{a}");
        // Repetition 0 against its own reference: 1.0 + 0.5 + 0.5.
        let a0 = aggregate(&runs, BrokerVariant::Utility, Some(0)).unwrap();
        assert!((a0 - 2.0).abs() < 1e-9, "{a0}");
        // No runs of a variant: no aggregate.
        assert_eq!(aggregate(&runs, BrokerVariant::Kernel, None), None);
        let md = guest_broker_markdown(
            &GuestBrokerEvalConfig {
                memvisor: "m".into(),
                work_dir: "/tmp".into(),
                guest_mib: 256,
                mem_mib: 160,
                disk_mib: 160,
                total: 512 << 20,
                qemu_allowance: 96 << 20,
                seconds: 100,
                warmup_secs: 40.0,
                reps: 2,
                variants: BrokerVariant::ALL.to_vec(),
                allow_other_swap: false,
            },
            &runs,
        );
        assert!(
            md.contains(
                "| memvisor broker (utility) | 100 (0.50) | 10 (0.50) | 500 (0.50) | 1.50 |"
            ),
            "{md}"
        );
        assert!(!md.contains("| kernel"), "{md}");
    }
}
