//! Reports of the scrub evaluation: the Markdown table (policy × pattern) and the per-second
//! samples as CSV.

use std::fmt::Write as _;

use crate::scrub_eval_run::EvalRun;

/// One row per run: mean host cache, hit ratio, guest throughput, policy CPU, what it dropped.
pub fn scrub_eval_markdown(runs: &[EvalRun]) -> String {
    let mut s = String::from(
        "| pattern | policy | host cache of the image, mean MiB (peak) | host hit ratio | guest MB/s | policy CPU s | actions | dropped MiB | cgroup peak MiB | verified |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    for r in runs {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} ({:.1}) | {:.3} | {:.2} | {:.2} | {} | {:.1} | {:.0} | {} |",
            r.pattern,
            r.policy,
            r.mean_host_cache_mib,
            r.peak_host_cache_mib,
            r.host_hit_ratio,
            r.guest_mbps,
            r.counters.cpu_s,
            r.counters.actions,
            r.counters.dropped_pages as f64 * 4096.0 / (1u64 << 20) as f64,
            r.cgroup_peak_mib,
            if r.guest_verified { "yes" } else { "NO" },
        );
    }
    s
}

/// Every sample of every run, one CSV line each.
pub fn scrub_eval_csv(runs: &[EvalRun]) -> String {
    let mut s = String::from(
        "policy,pattern,t_s,in_measured_phase,image_cached_pages,image_dirty_pages,qemu_rchar,qemu_read_bytes,cgroup_usage,cgroup_file_cache,cgroup_shmem,cgroup_rss,policy_cpu_s,policy_dropped_pages\n",
    );
    for r in runs {
        for x in &r.samples {
            let _ = writeln!(
                s,
                "{},{},{:.2},{},{},{},{},{},{},{},{},{},{:.4},{}",
                r.policy,
                r.pattern,
                x.t_s,
                u8::from(x.t_s >= r.measure_start_s && x.t_s <= r.end_s),
                x.image_cached_pages,
                x.image_dirty_pages,
                x.qemu_rchar,
                x.qemu_read_bytes,
                x.cgroup_usage,
                x.cgroup_file_cache,
                x.cgroup_shmem,
                x.cgroup_rss,
                x.policy_cpu_s,
                x.policy_dropped_pages
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_sample::HostSample;
    use crate::policy_driver::PolicyCounters;

    pub(crate) fn run(policy: &str, pattern: &str, cached: &[u64]) -> EvalRun {
        EvalRun {
            policy: policy.into(),
            pattern: pattern.into(),
            measure_start_s: 1.5,
            end_s: 3.5,
            mean_host_cache_mib: 2.0,
            mean_outside_group_mib: 0.0,
            peak_host_cache_mib: 3.0,
            host_hit_ratio: 0.25,
            guest_mbps: 12.5,
            guest_reads: 100,
            guest_verified: true,
            boot_s: 1.0,
            cgroup_peak_mib: 300.0,
            cgroup_failcnt: 0,
            counters: PolicyCounters {
                cpu_s: 0.5,
                actions: 2,
                dropped_pages: 512,
                ..PolicyCounters::default()
            },
            samples: cached
                .iter()
                .enumerate()
                .map(|(i, &c)| HostSample {
                    t_s: i as f64 + 1.0,
                    image_cached_pages: c,
                    ..HostSample::default()
                })
                .collect(),
        }
    }

    #[test]
    fn table_and_csv_rows() {
        let runs = [run("scrub", "seq", &[10, 20, 30])];
        let md = scrub_eval_markdown(&runs);
        assert!(
            md.contains("| seq | scrub | 2.0 (3.0) | 0.250 | 12.50 | 0.50 | 2 | 2.0 | 300 | yes |"),
            "{md}"
        );
        let csv = scrub_eval_csv(&runs);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[1].starts_with("scrub,seq,1.00,0,10,"), "{}", lines[1]);
        assert!(lines[2].starts_with("scrub,seq,2.00,1,20,"), "{}", lines[2]);
    }
}
