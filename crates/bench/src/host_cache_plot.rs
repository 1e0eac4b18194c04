//! [`host_cache_svg`]: the host page cache held for the guest's image over time, one panel per
//! guest pattern, one line per host policy, as a self-contained SVG.

use std::fmt::Write as _;

use memvisor_sim::{nice_ceiling, svg_document, svg_escape as escape};

use crate::scrub_eval_run::EvalRun;

const PANEL_W: f64 = 360.0;
const PANEL_H: f64 = 300.0;
const LEFT: f64 = 60.0;
const GAP: f64 = 40.0;
const TOP: f64 = 60.0;
const BOTTOM: f64 = 90.0;
const COLORS: &[&str] = &["#7f7f7f", "#ff7f0e", "#1f77b4", "#2ca02c", "#d62728"];

/// Draws every run's `image_cached_pages` (MiB) against seconds since QEMU started.
pub fn host_cache_svg(runs: &[EvalRun], subtitle: &str) -> String {
    let mut patterns: Vec<&str> = Vec::new();
    let mut policies: Vec<&str> = Vec::new();
    for r in runs {
        if !patterns.contains(&r.pattern.as_str()) {
            patterns.push(&r.pattern);
        }
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let mib = |pages: u64| pages as f64 * 4096.0 / (1u64 << 20) as f64;
    let max_t = runs
        .iter()
        .flat_map(|r| r.samples.iter().map(|s| s.t_s))
        .fold(1.0f64, f64::max)
        .ceil();
    let max_y = nice_ceiling(
        runs.iter()
            .flat_map(|r| r.samples.iter().map(|s| mib(s.image_cached_pages)))
            .fold(1.0f64, f64::max),
        &[1.0, 2.0, 5.0],
    );
    let width = LEFT + patterns.len().max(1) as f64 * (PANEL_W + GAP);
    let height = TOP + PANEL_H + BOTTOM;
    let mut svg = svg_document(
        width,
        height,
        12,
        width / 2.0,
        "Host page cache held for the guest's disk image",
        subtitle,
    );
    for (pi, pattern) in patterns.iter().enumerate() {
        let x0 = LEFT + pi as f64 * (PANEL_W + GAP);
        let sx = |t: f64| x0 + t / max_t * PANEL_W;
        let sy = |v: f64| TOP + PANEL_H - v / max_y * PANEL_H;
        let _ = writeln!(
            svg,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="14">guest reads: {}</text>"#,
            x0 + PANEL_W / 2.0,
            TOP - 6.0,
            escape(pattern)
        );
        for i in 0..=5 {
            let v = max_y * i as f64 / 5.0;
            let y = sy(v);
            let _ = writeln!(
                svg,
                r##"<line x1="{x0}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                x0 + PANEL_W
            );
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{v:.0}</text>"#,
                x0 - 5.0,
                y + 4.0
            );
        }
        for i in 0..=4 {
            let t = max_t * i as f64 / 4.0;
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{t:.0}</text>"#,
                sx(t),
                TOP + PANEL_H + 16.0
            );
        }
        let _ = writeln!(
            svg,
            r#"<rect x="{x0}" y="{TOP}" width="{PANEL_W}" height="{PANEL_H}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">seconds since QEMU started</text>"#,
            x0 + PANEL_W / 2.0,
            TOP + PANEL_H + 34.0
        );
        if pi == 0 {
            let _ = writeln!(
                svg,
                r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">MiB of the image in the host cache</text>"#,
                TOP + PANEL_H / 2.0,
                TOP + PANEL_H / 2.0
            );
        }
        for r in runs.iter().filter(|r| r.pattern == *pattern) {
            let color =
                COLORS[policies.iter().position(|p| *p == r.policy).unwrap_or(0) % COLORS.len()];
            let points: Vec<String> = r
                .samples
                .iter()
                .map(|s| format!("{:.1},{:.1}", sx(s.t_s), sy(mib(s.image_cached_pages))))
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
                points.join(" ")
            );
            let x = sx(r.measure_start_s.max(0.0));
            let _ = writeln!(
                svg,
                r#"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="{color}" stroke-dasharray="3,4" stroke-width="1"/>"#,
                TOP + PANEL_H
            );
        }
    }
    // Legend under the panels.
    for (i, policy) in policies.iter().enumerate() {
        let x = LEFT + i as f64 * 140.0;
        let y = TOP + PANEL_H + 62.0;
        let color = COLORS[i % COLORS.len()];
        let _ = writeln!(
            svg,
            r#"<line x1="{x}" y1="{y}" x2="{:.1}" y2="{y}" stroke="{color}" stroke-width="3"/>"#,
            x + 24.0
        );
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}">{}</text>"#,
            x + 30.0,
            y + 4.0,
            escape(policy)
        );
    }
    let _ = writeln!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" font-size="11" fill="#444">dashed: start of the measured phase</text>"##,
        LEFT + policies.len() as f64 * 140.0,
        TOP + PANEL_H + 66.0
    );
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_sample::HostSample;
    use crate::policy_driver::PolicyCounters;

    fn run(policy: &str, pattern: &str, cached: &[u64]) -> EvalRun {
        EvalRun {
            policy: policy.into(),
            pattern: pattern.into(),
            measure_start_s: 1.0,
            end_s: 3.0,
            mean_host_cache_mib: 0.0,
            mean_outside_group_mib: 0.0,
            peak_host_cache_mib: 0.0,
            host_hit_ratio: 0.0,
            guest_mbps: 0.0,
            guest_reads: 0,
            guest_verified: true,
            boot_s: 0.0,
            cgroup_peak_mib: 0.0,
            cgroup_failcnt: 0,
            counters: PolicyCounters::default(),
            samples: cached
                .iter()
                .enumerate()
                .map(|(i, &c)| HostSample {
                    t_s: i as f64,
                    image_cached_pages: c,
                    ..HostSample::default()
                })
                .collect(),
        }
    }

    #[test]
    fn one_panel_per_pattern_one_line_per_run() {
        let runs = [
            run("default", "seq", &[0, 25600, 25600]),
            run("scrub", "seq", &[0, 25600, 256]),
            run("default", "random", &[0, 12800]),
        ];
        let svg = host_cache_svg(&runs, "a <test>");
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("guest reads: seq") && svg.contains("guest reads: random"));
        assert!(svg.contains("a &lt;test&gt;"));
        // 100 MiB peak: the axis goes to 100, and the peak point sits on the top edge.
        assert!(svg.contains(">100</text>"));
        assert!(svg.contains(&format!(",{TOP:.1}")), "{svg}");
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(100.0, &[1.0, 2.0, 5.0]), 100.0);
        assert_eq!(nice_ceiling(101.0, &[1.0, 2.0, 5.0]), 200.0);
        assert_eq!(nice_ceiling(3.0, &[1.0, 2.0, 5.0]), 5.0);
    }
}
