//! Tables from run records: a Markdown summary (medians and spread per workload and variant,
//! speedup over the kernel baseline, memvisor's own time breakdown) and a CSV with one row per
//! run.

use std::fmt::Write as _;

use crate::driver::RunRecord;

const MIB: f64 = (1u64 << 20) as f64;

/// The median of `xs` (mean of the middle two for an even count); 0 if empty.
pub fn median(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return 0.0;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn min_max(xs: &[f64]) -> (f64, f64) {
    xs.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
            (a.min(x), b.max(x))
        })
}

/// Workloads and variants in order of first appearance.
fn groups(records: &[RunRecord]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for r in records {
        match out.iter_mut().find(|(w, _)| *w == r.workload) {
            Some((_, vs)) => {
                if !vs.contains(&r.variant) {
                    vs.push(r.variant.clone());
                }
            }
            None => out.push((r.workload.clone(), vec![r.variant.clone()])),
        }
    }
    out
}

/// The Markdown summary.
pub fn summary_markdown(records: &[RunRecord]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "| workload | variant | runs | run s: median (min–max) | µs/access | speedup vs kernel: median (paired min–max) | fill s | majflt | pswpin / pswpout | paged in / out MiB | disk read / write MiB | cgroup peak MiB |"
    );
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (workload, variants) in groups(records) {
        let of = |v: &str| -> Vec<&RunRecord> {
            records
                .iter()
                .filter(|r| r.workload == workload && r.variant == v)
                .collect()
        };
        let kernel: Vec<&RunRecord> = records
            .iter()
            .filter(|r| r.workload == workload && r.kernel)
            .collect();
        let kernel_secs: Vec<f64> = kernel.iter().map(|r| r.report.run.secs).collect();
        for v in &variants {
            let rs = of(v);
            let m = |f: &dyn Fn(&RunRecord) -> f64| {
                median(&rs.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let secs: Vec<f64> = rs.iter().map(|r| r.report.run.secs).collect();
            let (lo, hi) = min_max(&secs);
            let speed = if kernel.is_empty() || rs.first().is_some_and(|r| r.kernel) {
                "—".to_string()
            } else {
                let paired: Vec<f64> = rs
                    .iter()
                    .filter_map(|r| {
                        kernel
                            .iter()
                            .find(|k| k.rep == r.rep)
                            .map(|k| k.report.run.secs / r.report.run.secs)
                    })
                    .collect();
                let (plo, phi) = min_max(&paired);
                format!(
                    "{:.2}x ({plo:.2}–{phi:.2})",
                    median(&kernel_secs) / median(&secs)
                )
            };
            let paged_in = m(&|r| match &r.report.run.region {
                Some(g) => g.bytes_read as f64,
                None => r.report.run.counters.pswpin as f64 * 4096.0,
            });
            let paged_out = m(&|r| match &r.report.run.region {
                Some(g) => g.bytes_written as f64,
                None => r.report.run.counters.pswpout as f64 * 4096.0,
            });
            let _ = writeln!(
                s,
                "| {workload} | {v} | {} | {:.2} ({lo:.2}–{hi:.2}) | {:.1} | {speed} | {:.2} | {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} |",
                rs.len(),
                median(&secs),
                m(&|r| r.report.run.us_per_access()),
                m(&|r| r.report.fill.secs),
                m(&|r| r.report.run.counters.majflt as f64),
                m(&|r| r.report.run.counters.pswpin as f64),
                m(&|r| r.report.run.counters.pswpout as f64),
                paged_in / MIB,
                paged_out / MIB,
                m(&|r| r.report.run.counters.disk_read_bytes as f64) / MIB,
                m(&|r| r.report.run.counters.disk_write_bytes as f64) / MIB,
                m(&|r| r.cgroup.peak_bytes as f64) / MIB,
            );
        }
    }
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "memvisor's fault handler during the run (medians): where the time goes"
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "| workload | variant | run s | faults | page-ins | page-outs | clean evictions | page-in total s | of which evict s | swap read s | swap write s | map s | sample s | page-in p50 / p99 µs |"
    );
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for (workload, variants) in groups(records) {
        for v in &variants {
            let rs: Vec<&RunRecord> = records
                .iter()
                .filter(|r| {
                    r.workload == workload && &r.variant == v && r.report.run.region.is_some()
                })
                .collect();
            if rs.is_empty() {
                continue;
            }
            let m = |f: &dyn Fn(&RunRecord) -> f64| {
                median(&rs.iter().map(|r| f(r)).collect::<Vec<_>>())
            };
            let g = |f: fn(&crate::region_counters::RegionCounters) -> u64| {
                m(&|r: &RunRecord| r.report.run.region.as_ref().map_or(0.0, |x| f(x) as f64))
            };
            let _ = writeln!(
                s,
                "| {workload} | {v} | {:.2} | {:.0} | {:.0} | {:.0} | {:.0} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {:.0} / {:.0} |",
                m(&|r| r.report.run.secs),
                g(|x| x.faults()),
                g(|x| x.page_ins),
                g(|x| x.page_outs),
                g(|x| x.clean_evictions),
                g(|x| x.page_in_nanos) / 1e9,
                g(|x| x.evict_nanos) / 1e9,
                g(|x| x.swap_read_nanos) / 1e9,
                g(|x| x.swap_write_nanos) / 1e9,
                g(|x| x.page_in_nanos.saturating_sub(x.evict_nanos).saturating_sub(x.swap_read_nanos)) / 1e9,
                g(|x| x.sample_nanos) / 1e9,
                m(&|r| r.report.page_in_p50_nanos as f64) / 1e3,
                m(&|r| r.report.page_in_p99_nanos as f64) / 1e3,
            );
        }
    }
    s
}

/// One CSV row per run.
pub fn csv(records: &[RunRecord]) -> String {
    let mut s = String::from(
        "rep,workload,variant,run_secs,accesses,us_per_access,fill_secs,wall_secs,majflt,minflt,user_secs,sys_secs,proc_read_bytes,proc_write_bytes,pswpin,pswpout,disk_read_bytes,disk_write_bytes,faults,page_ins,page_outs,clean_evictions,region_bytes_read,region_bytes_written,page_in_nanos,evict_nanos,swap_read_nanos,swap_write_nanos,sample_nanos,page_in_p50_nanos,page_in_p99_nanos,cgroup_limit_bytes,cgroup_peak_bytes,cgroup_failcnt,vm_hwm_bytes,loadavg_start\n",
    );
    for r in records {
        let run = &r.report.run;
        let c = &run.counters;
        let g = run.region.unwrap_or_default();
        let _ = writeln!(
            s,
            "{},\"{}\",\"{}\",{:.6},{},{:.3},{:.6},{:.3},{},{},{:.3},{:.3},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"",
            r.rep,
            r.workload,
            r.variant,
            run.secs,
            run.accesses,
            run.us_per_access(),
            r.report.fill.secs,
            r.wall_secs,
            c.majflt,
            c.minflt,
            c.user_secs,
            c.sys_secs,
            c.read_bytes,
            c.write_bytes,
            c.pswpin,
            c.pswpout,
            c.disk_read_bytes,
            c.disk_write_bytes,
            g.faults(),
            g.page_ins,
            g.page_outs,
            g.clean_evictions,
            g.bytes_read,
            g.bytes_written,
            g.page_in_nanos,
            g.evict_nanos,
            g.swap_read_nanos,
            g.swap_write_nanos,
            g.sample_nanos,
            r.report.page_in_p50_nanos,
            r.report.page_in_p99_nanos,
            r.cgroup.limit_bytes,
            r.cgroup.peak_bytes,
            r.cgroup.failcnt,
            r.report.vm_hwm_bytes,
            r.report.loadavg_start,
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload_report::{PhaseReport, WorkloadReport};

    fn rec(rep: u32, variant: &str, secs: f64) -> RunRecord {
        RunRecord {
            rep,
            variant: variant.into(),
            kernel: variant == "kernel",
            workload: "seq:passes=1".into(),
            wall_secs: secs,
            cgroup: Default::default(),
            report: WorkloadReport {
                run: PhaseReport {
                    secs,
                    accesses: 10,
                    region: (variant != "kernel").then(Default::default),
                    ..Default::default()
                },
                ..Default::default()
            },
        }
    }

    #[test]
    fn medians_and_speedups() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        let rs = vec![
            rec(0, "kernel", 9.0),
            rec(0, "memvisor", 3.0),
            rec(1, "kernel", 6.0),
            rec(1, "memvisor", 3.0),
            rec(2, "kernel", 12.0),
            rec(2, "memvisor", 2.0),
        ];
        let md = summary_markdown(&rs);
        assert!(
            md.contains("| seq:passes=1 | memvisor | 3 | 3.00 (2.00–3.00)"),
            "{md}"
        );
        assert!(md.contains("3.00x (2.00–6.00)"), "{md}");
        let c = csv(&rs);
        assert_eq!(c.lines().count(), 7);
        assert!(c
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("0,\"seq:passes=1\",\"kernel\",9.0"));
    }
}
