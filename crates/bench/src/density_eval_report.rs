//! The density experiment's results ([`crate::density_eval`]): per guest count and variant,
//! each guest slot's throughput (mean over repetitions) and its ratio to the unconstrained
//! guests' mean throughput with the same count, whether every guest kept `keep` of it
//! ([`density_cells`]); per variant the largest guest count that keeps ([`largest_keeping`]);
//! the Markdown tables and the JSON.
//!
//! The reference is the mean over the unconstrained run's guests, not the same slot's: the
//! guests are identical (same RAM, same image content, same reads), so what tells one slot
//! from another in the unconstrained run is only its share of the 2 CPUs, noise that a
//! per-slot ratio would count twice (a quick run's unconstrained guests ran at 0.83x to 1.13x
//! of their mean). The unconstrained cell's own ratios show that noise.

use std::fmt::Write as _;

use serde::Serialize;

use crate::density_eval::DensityRun;
use crate::density_eval_config::{DensityEvalConfig, DensityVariant};
use crate::summary::median;

/// One guest count under one variant, over every repetition.
#[derive(Debug, Clone, Serialize)]
pub struct DensityCell {
    /// Guests.
    pub guests: usize,
    /// The variant.
    pub variant: DensityVariant,
    /// Repetitions measured.
    pub reps: usize,
    /// Per guest slot: reads per second, the mean over repetitions.
    pub reads_per_s: Vec<f64>,
    /// Per guest slot: that mean over the unconstrained guests' mean (0 without a reference).
    pub ratios: Vec<f64>,
    /// The smallest ratio.
    pub min_ratio: f64,
    /// The median ratio.
    pub median_ratio: f64,
    /// Every guest kept at least `keep` of its unconstrained throughput.
    pub keeps: bool,
    /// Paced guests: the highest p99 read latency of any guest in any repetition,
    /// microseconds.
    pub worst_p99_us: Option<f64>,
}

/// Per variant: how many guests the total holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Density {
    /// The variant.
    pub variant: DensityVariant,
    /// The largest guest count that keeps, with every smaller count swept keeping too
    /// (`None`: not even the smallest).
    pub largest: Option<usize>,
    /// Every guest count that kept (a larger one than `largest` here is noise or a cliff
    /// that is not monotonic).
    pub kept: Vec<usize>,
    /// `largest` is the largest count swept: the limit lies beyond the sweep.
    pub beyond_sweep: bool,
}

/// Guest counts in order of first appearance.
fn guest_counts(runs: &[DensityRun]) -> Vec<usize> {
    let mut out = Vec::new();
    for r in runs {
        if !out.contains(&r.guests) {
            out.push(r.guests);
        }
    }
    out
}

/// The runs of `variant` with `n` guests.
fn runs_of(runs: &[DensityRun], n: usize, variant: DensityVariant) -> Vec<&DensityRun> {
    runs.iter()
        .filter(|r| r.guests == n && r.variant == variant)
        .collect()
}

/// Per slot of `n`, the mean reads per second over `rs` (`None` without a run).
fn slot_means(rs: &[&DensityRun], n: usize) -> Option<Vec<f64>> {
    if rs.is_empty() {
        return None;
    }
    Some(
        (0..n)
            .map(|slot| {
                rs.iter()
                    .map(|r| r.fleet.per_guest.get(slot).map_or(0.0, |g| g.reads_per_s))
                    .sum::<f64>()
                    / rs.len() as f64
            })
            .collect(),
    )
}

/// Every guest count and variant measured, with ratios to unconstrained and whether it kept.
pub fn density_cells(runs: &[DensityRun], keep: f64) -> Vec<DensityCell> {
    let mut cells = Vec::new();
    for n in guest_counts(runs) {
        let base = slot_means(&runs_of(runs, n, DensityVariant::Unconstrained), n)
            .map(|b| b.iter().sum::<f64>() / b.len().max(1) as f64)
            .filter(|b| *b > 0.0);
        for variant in DensityVariant::ALL {
            let mine = runs_of(runs, n, variant);
            let Some(means) = slot_means(&mine, n) else {
                continue;
            };
            let ratios: Vec<f64> = means.iter().map(|m| base.map_or(0.0, |b| m / b)).collect();
            let min_ratio = ratios.iter().copied().fold(f64::INFINITY, f64::min);
            cells.push(DensityCell {
                worst_p99_us: mine
                    .iter()
                    .flat_map(|r| r.fleet.per_guest.iter().filter_map(|g| g.p99_us))
                    .reduce(f64::max),
                guests: n,
                variant,
                reps: mine.len(),
                reads_per_s: means,
                keeps: base.is_some() && min_ratio >= keep,
                median_ratio: median(&ratios),
                min_ratio: if min_ratio.is_finite() {
                    min_ratio
                } else {
                    0.0
                },
                ratios,
            });
        }
    }
    cells
}

/// The largest guest count at which `variant` keeps, every smaller count swept keeping too.
pub fn largest_keeping(cells: &[DensityCell], variant: DensityVariant) -> Density {
    let mut mine: Vec<&DensityCell> = cells.iter().filter(|c| c.variant == variant).collect();
    mine.sort_by_key(|c| c.guests);
    let largest = mine.iter().take_while(|c| c.keeps).last().map(|c| c.guests);
    Density {
        variant,
        largest,
        kept: mine.iter().filter(|c| c.keeps).map(|c| c.guests).collect(),
        beyond_sweep: largest.is_some() && largest == mine.last().map(|c| c.guests),
    }
}

fn list(v: &[String]) -> String {
    v.join(" / ")
}

/// The results as Markdown: the density per variant, the ratios per guest count, every run.
pub fn density_markdown(config: &DensityEvalConfig, runs: &[DensityRun]) -> String {
    let cells = density_cells(runs, config.keep);
    let mut s = String::new();
    let pace = config
        .rate
        .map_or(String::new(), |r| format!(" paced at {r:.0} a second"));
    let pace = if config.fill {
        format!("{pace} after reading all of it once")
    } else {
        pace
    };
    let _ = writeln!(
        s,
        "Density: the most identical guests ({} MiB RAM, a {} MiB disk each, {} reads of it{pace}, \
         verified) that each keep at least {:.0}% of their unconstrained throughput, under a \
         total of {} MiB (kernel: + {} MiB per QEMU for QEMU itself{}){}{}.\n",
        config.guest_mib,
        config.disk_mib,
        if config.uniform {
            "uniformly random".to_string()
        } else {
            format!("Zipf {}", config.alpha)
        },
        config.keep * 100.0,
        config.total >> 20,
        config.qemu_allowance >> 20,
        if config.memvisor_allowance == 0 {
            String::new()
        } else {
            format!(
                "; memvisor: + {} MiB per guest for the part of QEMU it pages",
                config.memvisor_allowance >> 20
            )
        },
        if config.broker_args.is_empty() {
            String::new()
        } else {
            format!("; memvisor broker {}", config.broker_args.join(" "))
        },
        if config.run_args.is_empty() {
            String::new()
        } else {
            format!("; memvisor run {}", config.run_args.join(" "))
        }
    );
    let _ = writeln!(
        s,
        "| variant | largest N that keeps | N that kept |\n|---|---|---|"
    );
    for variant in [DensityVariant::Kernel, DensityVariant::Memvisor] {
        let d = largest_keeping(&cells, variant);
        let largest = match (d.largest, d.beyond_sweep) {
            (Some(n), true) => format!("{n} (every N swept kept: at least {n})"),
            (Some(n), false) => n.to_string(),
            (None, _) => "none".into(),
        };
        let kept: Vec<String> = d.kept.iter().map(|n| n.to_string()).collect();
        let _ = writeln!(
            s,
            "| {} | {largest} | {} |",
            variant.name(),
            if kept.is_empty() {
                "-".into()
            } else {
                kept.join(", ")
            }
        );
    }
    let _ = writeln!(
        s,
        "\n| N | unconstrained reads/s per guest (ratio to their mean: the noise) | kernel: reads/s per guest (ratio) | kernel min / median ratio | kernel keeps | memvisor: reads/s per guest (ratio) | memvisor min / median ratio | memvisor keeps |\n|---:|---|---|---|---|---|---|---|"
    );
    for n in guest_counts(runs) {
        let cell = |v: DensityVariant| cells.iter().find(|c| c.guests == n && c.variant == v);
        let rates = |c: Option<&DensityCell>| {
            c.map_or("-".into(), |c| {
                list(
                    &c.reads_per_s
                        .iter()
                        .zip(&c.ratios)
                        .map(|(r, x)| format!("{r:.0} ({x:.2})"))
                        .collect::<Vec<_>>(),
                )
            })
        };
        let summary = |c: Option<&DensityCell>| {
            c.map_or(("-".to_string(), "-"), |c| {
                (
                    format!("{:.2} / {:.2}", c.min_ratio, c.median_ratio),
                    if c.keeps { "yes" } else { "no" },
                )
            })
        };
        let (k, m) = (cell(DensityVariant::Kernel), cell(DensityVariant::Memvisor));
        let (ks, kk) = summary(k);
        let (ms, mk) = summary(m);
        let _ = writeln!(
            s,
            "| {n} | {} | {} | {ks} | {kk} | {} | {ms} | {mk} |",
            rates(cell(DensityVariant::Unconstrained)),
            rates(k),
            rates(m),
        );
    }
    if cells.iter().any(|c| c.worst_p99_us.is_some()) {
        let _ = writeln!(
            s,
            "\nRead latency of the paced guests, the worst guest's p99 (µs, from when each read \
             was due):\n\n| N | unconstrained | kernel | memvisor |\n|---:|---:|---:|---:|"
        );
        for n in guest_counts(runs) {
            let p99 = |v: DensityVariant| {
                cells
                    .iter()
                    .find(|c| c.guests == n && c.variant == v)
                    .and_then(|c| c.worst_p99_us)
                    .map_or("-".into(), |p| format!("{p:.0}"))
            };
            let _ = writeln!(
                s,
                "| {n} | {} | {} | {} |",
                p99(DensityVariant::Unconstrained),
                p99(DensityVariant::Kernel),
                p99(DensityVariant::Memvisor)
            );
        }
    }
    let _ = writeln!(
        s,
        "\nEvery run (ratios against the mean guest of the same repetition's unconstrained run; \
         page-ins over the window: memvisor the pager's, otherwise QEMU's major faults; memory \
         as the window closed; rss is the QEMUs' own anonymous memory, outside the total):\n"
    );
    let _ = writeln!(
        s,
        "| N | variant | rep | order | boot s | window s | reads/s per guest (ratio) | page-ins per guest | budget / image cache limit MiB | image host-cached MiB | kernel swap in / out MiB | memvisor swap read / written, image re-read MiB | group usage / peak / limit MiB | rss per QEMU / shmem / file MiB | broker changes |\n|---:|---|---:|---:|---:|---:|---|---|---|---|---|---|---|---|---:|"
    );
    for r in runs {
        let base = runs
            .iter()
            .find(|b| {
                b.guests == r.guests && b.rep == r.rep && b.variant == DensityVariant::Unconstrained
            })
            .map(|b| {
                b.fleet.per_guest.iter().map(|g| g.reads_per_s).sum::<f64>()
                    / b.fleet.per_guest.len().max(1) as f64
            })
            .unwrap_or(0.0);
        let each = |f: &dyn Fn(usize, &crate::density_eval::GuestResult) -> String| {
            list(
                &r.fleet
                    .per_guest
                    .iter()
                    .enumerate()
                    .map(|(i, g)| f(i, g))
                    .collect::<Vec<_>>(),
            )
        };
        let rates = each(&|_, g| {
            if base > 0.0 {
                format!("{:.0} ({:.2})", g.reads_per_s, g.reads_per_s / base)
            } else {
                format!("{:.0}", g.reads_per_s)
            }
        });
        let memvisor = r.variant == DensityVariant::Memvisor;
        let opt = |x: Option<f64>| x.map_or("-".into(), |x| format!("{x:.0}"));
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.0} | {:.0} | {rates} | {} | {} | {} | {:.0} / {:.0} | {} | {:.0} / {:.0} / {} | {:.0} / {:.0} / {:.0} | {} |",
            r.guests,
            r.variant.name(),
            r.rep,
            r.position + 1,
            r.fleet.boot_s,
            r.fleet.window_s,
            each(&|_, g| g.page_ins.to_string()),
            if memvisor {
                each(&|_, g| format!("{}+{}", opt(g.budget_mib), opt(g.image_cache_limit_mib)))
            } else {
                "-".into()
            },
            each(&|_, g| format!("{:.0}", g.image_cached_mib)),
            r.fleet.kernel_swap_in_mib,
            r.fleet.kernel_swap_out_mib,
            if memvisor {
                each(&|_, g| {
                    format!(
                        "{}/{}/{}",
                        opt(g.swap_read_mib),
                        opt(g.swap_written_mib),
                        opt(g.image_read_mib)
                    )
                })
            } else {
                "-".into()
            },
            r.fleet.group.usage_mib,
            r.fleet.group.peak_mib,
            opt(r.fleet.group.limit_mib),
            r.fleet.group.rss_mib / r.guests.max(1) as f64,
            r.fleet.group.shmem_mib,
            r.fleet.group.file_cache_mib,
            r.fleet.broker_changes,
        );
    }
    s
}

/// Everything as JSON: the settings, the cells, the density per variant and every run.
pub fn density_json(config: &DensityEvalConfig, runs: &[DensityRun]) -> String {
    let cells = density_cells(runs, config.keep);
    let density: Vec<Density> = [DensityVariant::Kernel, DensityVariant::Memvisor]
        .into_iter()
        .map(|v| largest_keeping(&cells, v))
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({
        "config": config,
        "density": density,
        "cells": cells,
        "runs": runs,
    }))
    .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_fleet::FleetRun;

    fn run(guests: usize, variant: DensityVariant, rep: usize, rates: &[f64]) -> DensityRun {
        DensityRun {
            guests,
            variant,
            rep,
            position: 0,
            fleet: FleetRun::with_rates(rates),
        }
    }

    use DensityVariant::{Kernel, Memvisor, Unconstrained};

    #[test]
    fn ratios_are_per_slot_means_and_every_guest_must_keep() {
        let runs = vec![
            run(2, Unconstrained, 0, &[100.0, 200.0]),
            run(2, Unconstrained, 1, &[300.0, 200.0]),
            run(2, Kernel, 0, &[150.0, 170.0]),
            run(2, Kernel, 1, &[170.0, 150.0]),
            run(2, Memvisor, 0, &[200.0, 150.0]),
        ];
        let cells = density_cells(&runs, 0.8);
        let k = cells.iter().find(|c| c.variant == Kernel).unwrap();
        // Slot means 160 and 160 against the unconstrained guests' mean, 200.
        assert_eq!(k.reads_per_s, vec![160.0, 160.0]);
        assert_eq!(k.ratios, vec![0.8, 0.8]);
        assert!(k.keeps && k.reps == 2);
        let m = cells.iter().find(|c| c.variant == Memvisor).unwrap();
        // One guest at 0.75 is enough to fail.
        assert_eq!(m.ratios, vec![1.0, 0.75]);
        assert_eq!((m.min_ratio, m.median_ratio, m.keeps), (0.75, 0.875, false));
        let u = cells.iter().find(|c| c.variant == Unconstrained).unwrap();
        assert!(u.keeps && u.ratios == vec![1.0, 1.0]);
        // Identical guests: the reference is their mean, not the same slot's throughput.
        let uneven = vec![
            run(2, Unconstrained, 0, &[150.0, 250.0]),
            run(2, Kernel, 0, &[250.0, 170.0]),
        ];
        let cells = density_cells(&uneven, 0.8);
        assert_eq!(cells[0].ratios, vec![0.75, 1.25]);
        assert_eq!(cells[1].ratios, vec![1.25, 0.85]);
        assert!(cells[1].keeps && !cells[0].keeps);
    }

    #[test]
    fn the_largest_n_that_keeps_needs_every_smaller_one_to_keep() {
        let mut runs = Vec::new();
        // kernel keeps at 2 and 4 but not 3; memvisor at 2, 3, 4.
        for (n, k, m) in [(2, 0.9, 0.95), (3, 0.7, 0.9), (4, 0.85, 0.81)] {
            runs.push(run(n, Unconstrained, 0, &vec![100.0; n]));
            runs.push(run(n, Kernel, 0, &vec![100.0 * k; n]));
            runs.push(run(n, Memvisor, 0, &vec![100.0 * m; n]));
        }
        let cells = density_cells(&runs, 0.8);
        let k = largest_keeping(&cells, Kernel);
        assert_eq!(
            k,
            Density {
                variant: Kernel,
                largest: Some(2),
                kept: vec![2, 4],
                beyond_sweep: false
            }
        );
        let m = largest_keeping(&cells, Memvisor);
        assert_eq!((m.largest, m.beyond_sweep), (Some(4), true));
        // Nothing keeps; no reference at all keeps nothing either.
        let cells = density_cells(&runs, 0.99);
        assert_eq!(largest_keeping(&cells, Kernel).largest, None);
        let lone = density_cells(&[run(2, Kernel, 0, &[1.0, 1.0])], 0.8);
        assert!(!lone[0].keeps);
        assert_eq!(largest_keeping(&lone, Kernel).largest, None);
        let md = density_markdown(
            &DensityEvalConfig::sized("m".into(), "w".into(), true),
            &runs,
        );
        assert!(md.contains("| kernel | 2 | 2, 4 |"), "{md}");
        assert!(
            md.contains("| memvisor | 4 (every N swept kept: at least 4) | 2, 3, 4 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| 3 | 100 (1.00) / 100 (1.00) / 100 (1.00) | 70 (0.70) / 70 (0.70) / 70 (0.70) | 0.70 / 0.70 | no |"
            ),
            "{md}"
        );
        assert!(!md.contains("worst guest's p99"), "{md}");
    }

    #[test]
    fn paced_runs_report_the_worst_guests_p99() {
        let mut runs = vec![
            run(2, Unconstrained, 0, &[1000.0, 1000.0]),
            run(2, Kernel, 0, &[990.0, 700.0]),
            run(2, Kernel, 1, &[995.0, 1000.0]),
            run(2, Memvisor, 0, &[1000.0, 1000.0]),
        ];
        for (r, p99) in runs.iter_mut().zip([
            [90.0, 120.0],
            [5000.0, 250.0],
            [800.0, 40000.0],
            [300.0, 700.0],
        ]) {
            for (g, p) in r.fleet.per_guest.iter_mut().zip(p99) {
                g.p99_us = Some(p);
            }
        }
        let cells = density_cells(&runs, 0.8);
        let k = cells.iter().find(|c| c.variant == Kernel).unwrap();
        assert_eq!(k.worst_p99_us, Some(40000.0));
        let config = DensityEvalConfig {
            rate: Some(1000.0),
            ..DensityEvalConfig::sized("m".into(), "w".into(), true)
        };
        let md = density_markdown(&config, &runs);
        assert!(md.contains("| 2 | 120 | 40000 | 700 |"), "{md}");
        assert!(md.contains("reads of it paced at 1000 a second"), "{md}");
        assert!(md.contains("QEMU itself).\n"), "{md}");
        let with_allowance = DensityEvalConfig {
            memvisor_allowance: 45 << 20,
            ..config.clone()
        };
        let md = density_markdown(&with_allowance, &runs);
        assert!(
            md.contains(
                "QEMU itself; memvisor: + 45 MiB per guest for the part of QEMU it pages).\n"
            ),
            "{md}"
        );
        // The broker's own arguments are part of the set-up the header names.
        let config = DensityEvalConfig {
            broker_args: vec!["--hysteresis".into(), "8M".into()],
            ..config
        };
        let md = density_markdown(&config, &runs);
        assert!(
            md.contains("QEMU itself); memvisor broker --hysteresis 8M.\n"),
            "{md}"
        );
    }
}
