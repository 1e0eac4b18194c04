//! Markdown tables and the plot of an [`ExperimentReport`].

use std::fmt::Write as _;

use crate::latency_plot::{latency_svg, LatencySeries};
use crate::redis_experiment::ExperimentReport;

fn chunk_label(bytes: u64) -> String {
    memvisor_control::format_bytes(bytes)
}

/// The latency table (one row per point), the per-series summary and the stress table.
pub fn redis_markdown(r: &ExperimentReport) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "| policy | chunk | offered/s | achieved/s | p50 µs | p99 µs | page-ins | missing faults | minor faults |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|---:|---:|");
    for s in &r.series {
        for p in &s.points {
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {} | {} | {} |",
                s.policy,
                chunk_label(s.chunk_size),
                p.load.offered_rps,
                p.load.achieved_rps,
                p.load.p50_us,
                p.load.p99_us,
                p.page_ins,
                p.missing_faults,
                p.minor_faults
            );
        }
    }
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "| policy | chunk | fill s | used_memory MiB | budget MiB | page-ins (whole run) | every value verified | verify s |"
    );
    let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---|---:|");
    for s in &r.series {
        let _ = writeln!(
            md,
            "| {} | {} | {:.1} | {} | {} | {} | {} keys | {:.1} |",
            s.policy,
            chunk_label(s.chunk_size),
            s.fill_seconds,
            s.used_memory >> 20,
            s.budget >> 20,
            s.final_page_ins,
            s.verified_keys,
            s.verify_seconds
        );
    }
    if !r.stress.is_empty() {
        let _ = writeln!(md);
        let _ = writeln!(
            md,
            "| stress: policy | chunk | page-ins | missing faults | minor faults | page-outs | seconds |"
        );
        let _ = writeln!(md, "|---|---|---:|---:|---:|---:|---:|");
        for s in &r.stress {
            let _ = writeln!(
                md,
                "| {} | {} | {} | {} | {} | {} | {:.1} |",
                s.policy,
                chunk_label(s.chunk_size),
                s.page_ins,
                s.missing_faults,
                s.minor_faults,
                s.page_outs,
                s.seconds
            );
        }
    }
    md
}

/// Latency against achieved rate, one series per policy and chunk size.
pub fn redis_svg(r: &ExperimentReport, subtitle: &str) -> String {
    let series: Vec<LatencySeries> = r
        .series
        .iter()
        .map(|s| LatencySeries {
            label: format!("{} / {}", s.policy, chunk_label(s.chunk_size)),
            points: s
                .points
                .iter()
                .map(|p| (p.load.achieved_rps, p.load.p50_us, p.load.p99_us))
                .collect(),
        })
        .collect();
    latency_svg(
        "redis-server under memvisor run: GET latency against request rate",
        subtitle,
        &series,
    )
}
