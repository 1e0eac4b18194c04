//! [`latency_svg`]: latency against achieved request rate, one colour per series (policy and
//! chunk size): p99 solid, p50 dashed, latency on a logarithmic axis. Plain SVG text.

use std::fmt::Write as _;

use memvisor_sim::{nice_ceiling, svg_document, svg_escape as escape};

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 560.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 210.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;
const COLORS: &[&str] = &[
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// One curve: its label and points `(achieved rps, p50 µs, p99 µs)`.
#[derive(Debug, Clone)]
pub struct LatencySeries {
    /// Legend text.
    pub label: String,
    /// Points in offered-rate order.
    pub points: Vec<(f64, f64, f64)>,
}

/// The plot, titled `title`, `subtitle` under it.
pub fn latency_svg(title: &str, subtitle: &str, series: &[LatencySeries]) -> String {
    let all = series.iter().flat_map(|s| s.points.iter());
    let max_x = all.clone().map(|p| p.0).fold(1.0f64, f64::max);
    let lo = all
        .clone()
        .map(|p| p.1.min(p.2))
        .filter(|v| *v > 0.0)
        .fold(f64::MAX, f64::min);
    let hi = all.map(|p| p.1.max(p.2)).fold(1.0f64, f64::max);
    let (y0, y1) = if lo == f64::MAX {
        (0.0, 1.0)
    } else {
        (
            lo.log10().floor(),
            hi.log10().ceil().max(lo.log10().floor() + 1.0),
        )
    };
    let x_top = nice_ceiling(max_x, &[1.0, 2.0, 5.0]);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let sx = |x: f64| LEFT + x / x_top * plot_w;
    let sy = |us: f64| TOP + plot_h - (us.max(1e-3).log10() - y0) / (y1 - y0) * plot_h;

    let mut svg = svg_document(WIDTH, HEIGHT, 13, LEFT + plot_w / 2.0, title, subtitle);
    let mut e = y0;
    while e <= y1 + 1e-9 {
        let y = sy(10f64.powf(e));
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            format_us(10f64.powf(e))
        );
        e += 1.0;
    }
    for i in 0..=5 {
        let v = x_top * i as f64 / 5.0;
        let x = sx(v);
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 18.0,
            v.round()
        );
    }
    let _ = writeln!(
        svg,
        r#"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="black"/>"#
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">achieved GET requests per second</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 22.0
    );
    let _ = writeln!(
        svg,
        r#"<text transform="translate(20 {:.1}) rotate(-90)" text-anchor="middle">latency (log scale): p99 solid, p50 dashed</text>"#,
        TOP + plot_h / 2.0
    );
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        for (dash, pick) in [("", 2usize), (r#" stroke-dasharray="6 4""#, 1)] {
            let pts: Vec<String> = s
                .points
                .iter()
                .map(|p| {
                    let y = if pick == 2 { p.2 } else { p.1 };
                    format!("{:.1},{:.1}", sx(p.0), sy(y))
                })
                .collect();
            let _ = writeln!(
                svg,
                r#"<polyline fill="none" stroke="{color}" stroke-width="2"{dash} points="{}"/>"#,
                pts.join(" ")
            );
            for p in &s.points {
                let y = if pick == 2 { p.2 } else { p.1 };
                let _ = writeln!(
                    svg,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}"/>"#,
                    sx(p.0),
                    sy(y)
                );
            }
        }
        let ly = TOP + 10.0 + 20.0 * i as f64;
        let lx = LEFT + plot_w + 14.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(&s.label)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// `1 µs`, `10 µs`, `1 ms`, `1 s` ...
fn format_us(us: f64) -> String {
    if us >= 1e6 {
        format!("{} s", us / 1e6)
    } else if us >= 1e3 {
        format!("{} ms", us / 1e3)
    } else {
        format!("{us} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_every_series_with_legend() {
        let s = vec![
            LatencySeries {
                label: "fifo <64K>".into(),
                points: vec![(1000.0, 80.0, 300.0), (4000.0, 90.0, 5000.0)],
            },
            LatencySeries {
                label: "clock".into(),
                points: vec![(1000.0, 70.0, 200.0)],
            },
        ];
        let svg = latency_svg("t", "sub", &s);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 4);
        assert!(svg.contains("fifo &lt;64K&gt;"));
        assert!(svg.contains("1 ms") || svg.contains("10 ms"));
    }

    #[test]
    fn empty_input_is_still_a_document() {
        let svg = latency_svg("t", "", &[]);
        assert!(svg.contains("</svg>"));
        assert_eq!(nice_ceiling(3700.0, &[1.0, 2.0, 5.0]), 5000.0);
    }
}
