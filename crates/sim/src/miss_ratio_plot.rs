//! [`miss_ratio_svg`]: miss-ratio curves of a sweep as a self-contained SVG.

use std::fmt::Write as _;

use crate::svg_document::{escape, nice_ceiling, svg_document};
use crate::sweep::SweepReport;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;
/// Longest source name drawn under the title (the plot is 900 px wide).
const MAX_SUBTITLE_CHARS: usize = 110;
const COLORS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#637939",
];

/// Draws one curve per policy: miss ratio (y, from 0) against resident-set size (x, logarithmic
/// when the sizes span more than a factor of 20). OPT, if present, is drawn dashed and black.
pub fn miss_ratio_svg(report: &SweepReport) -> String {
    let mut policies: Vec<&str> = Vec::new();
    for r in &report.rows {
        if !policies.contains(&r.policy.as_str()) {
            policies.push(&r.policy);
        }
    }
    let (min_x, max_x) = report.rows.iter().fold((u64::MAX, 0), |(lo, hi), r| {
        (lo.min(r.size), hi.max(r.size))
    });
    let max_y = report
        .rows
        .iter()
        .map(|r| r.miss_ratio)
        .fold(0.0f64, f64::max)
        .max(1e-6);
    let y_top = nice_ceiling(max_y, NICE);
    let log_x = max_x as f64 > 20.0 * min_x.max(1) as f64;
    let (x0, x1) = if log_x {
        ((min_x.max(1) as f64).log10(), (max_x as f64).log10())
    } else {
        (0.0, max_x.max(1) as f64)
    };
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |size: u64| {
        let v = if log_x {
            (size.max(1) as f64).log10()
        } else {
            size as f64
        };
        let span = if x1 > x0 { x1 - x0 } else { 1.0 };
        LEFT + (v - x0) / span * plot_w
    };
    let sy = |ratio: f64| TOP + plot_h - ratio / y_top * plot_h;

    let mut svg = svg_document(
        WIDTH,
        HEIGHT,
        13,
        LEFT + plot_w / 2.0,
        &format!("Miss ratio by resident-set size ({} model)", report.model),
        &truncate(&report.source, MAX_SUBTITLE_CHARS),
    );
    // Axes, grid and ticks.
    for i in 0..=5 {
        let v = y_top * i as f64 / 5.0;
        let y = sy(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{v:.3}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0
        );
    }
    for tick in x_ticks(min_x, max_x, log_x) {
        let x = sx(tick);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 18.0,
            short_count(tick)
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">resident-set size (units{})</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 22.0,
        if log_x { ", log scale" } else { "" }
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(22 {:.1}) rotate(-90)" text-anchor="middle">miss ratio</text>"#,
        TOP + plot_h / 2.0
    );
    // Curves and legend.
    for (i, policy) in policies.iter().enumerate() {
        let is_opt = *policy == "opt";
        let color = if is_opt {
            "black"
        } else {
            COLORS[i % COLORS.len()]
        };
        let dash = if is_opt {
            r#" stroke-dasharray="6 4""#
        } else {
            ""
        };
        let mut points: Vec<(u64, f64)> = report
            .rows
            .iter()
            .filter(|r| r.policy == *policy)
            .map(|r| (r.size, r.miss_ratio))
            .collect();
        points.sort_by_key(|p| p.0);
        let path: Vec<String> = points
            .iter()
            .map(|&(s, m)| format!("{:.1},{:.1}", sx(s), sy(m)))
            .collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
            path.join(" ")
        );
        for &(s, m) in &points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}"/>"#,
                sx(s),
                sy(m)
            );
        }
        let ly = TOP + 10.0 + i as f64 * 20.0;
        let lx = LEFT + plot_w + 15.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0,
            escape(policy)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Round axis tops: 1, 2, 2.5 or 5 times a power of ten.
const NICE: &[f64] = &[1.0, 2.0, 2.5, 5.0];

fn x_ticks(min: u64, max: u64, log: bool) -> Vec<u64> {
    if log {
        let mut t = Vec::new();
        let mut p = 1u64;
        while p <= max {
            for m in [1, 2, 5] {
                let v = p.saturating_mul(m);
                if v >= min && v <= max {
                    t.push(v);
                }
            }
            p = p.saturating_mul(10);
            if p == u64::MAX {
                break;
            }
        }
        t
    } else {
        let step = nice_ceiling(max.max(1) as f64 / 6.0, NICE).max(1.0) as u64;
        (0..=max / step).map(|i| i * step).collect()
    }
}

fn short_count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 1_000 && n % 1_000 == 0 => format!("{}k", n / 1_000),
        n => n.to_string(),
    }
}

/// `s`, cut to at most `max` characters with an ellipsis in the middle.
fn truncate(s: &str, max: usize) -> String {
    let n = s.chars().count();
    if n <= max {
        return s.to_string();
    }
    let keep = max.saturating_sub(1) / 2;
    let head: String = s.chars().take(keep).collect();
    let tail: String = s.chars().skip(n - keep).collect();
    format!("{head}…{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::SweepRow;

    #[test]
    fn draws_a_curve_per_policy_with_escaped_names() {
        let rows = [
            ("lru", 10, 0.5),
            ("lru", 1000, 0.1),
            ("opt", 10, 0.4),
            ("opt", 1000, 0.05),
        ]
        .iter()
        .map(|&(p, size, m)| SweepRow {
            policy: p.into(),
            size,
            accesses: 100,
            misses: (m * 100.0) as u64,
            miss_ratio: m,
            opt_misses: None,
            gap_to_opt: None,
            seconds: 1.0,
            requests_per_sec: 1.0,
        })
        .collect();
        let report = SweepReport {
            source: "a<b>".into(),
            model: "exact",
            sample_period: "1 accesses".into(),
            requests: 100,
            unique_units: 1000,
            rows,
        };
        let svg = miss_ratio_svg(&report);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a&lt;b&gt;"));
        assert!(svg.contains("log scale"));
        assert!(svg.contains("stroke-dasharray"));
    }

    #[test]
    fn long_names_are_shortened_in_the_middle() {
        let long = "x".repeat(50) + &"y".repeat(50) + &"z".repeat(50);
        let t = truncate(&long, 21);
        assert_eq!(t.chars().count(), 21);
        assert!(
            t.starts_with("xxxxxxxxxx…") && t.ends_with("zzzzzzzzzz"),
            "{t}"
        );
        assert_eq!(truncate("short", 21), "short");
    }

    #[test]
    fn nice_ceiling_rounds_up() {
        assert_eq!(nice_ceiling(0.37, NICE), 0.5);
        assert_eq!(nice_ceiling(0.11, NICE), 0.2);
        assert_eq!(nice_ceiling(1.0, NICE), 1.0);
    }
}
