//! Prometheus text of the broker's split: the total, what silent processes hold, and per
//! process its budget, bounds, and curve (page-in time per second more memory would save).

use std::fmt::Write;

use crate::utility_curve::UtilityCurve;

/// One process in the broker's last decision.
#[derive(Debug, Clone)]
pub struct SplitRow {
    /// Process id.
    pub pid: u32,
    /// Its label (guest name or program).
    pub label: String,
    /// Budget after the decision.
    pub budget: u64,
    /// Its bounds.
    pub min: u64,
    /// Its bounds.
    pub max: u64,
    /// Its last measured curve.
    pub curve: Option<UtilityCurve>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Renders the split (format 0.0.4).
pub fn render(total: u64, reserved: u64, rows: &[SplitRow]) -> String {
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    };
    gauge("memvisor_broker_total_bytes", "Memory the broker divides.");
    let _ = writeln!(out, "memvisor_broker_total_bytes {total}");
    let _ = writeln!(
        out,
        "# HELP memvisor_broker_reserved_bytes Budgets of processes that do not answer, kept aside.\n# TYPE memvisor_broker_reserved_bytes gauge\nmemvisor_broker_reserved_bytes {reserved}"
    );
    let per = [
        (
            "memvisor_broker_budget_bytes",
            "Budget the broker gave the process.",
        ),
        ("memvisor_broker_min_bytes", "Least budget of the process."),
        ("memvisor_broker_max_bytes", "Most budget of the process."),
    ];
    for (i, (name, help)) in per.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in rows {
            let v = [r.budget, r.min, r.max][i];
            let _ = writeln!(
                out,
                "{name}{{pid=\"{}\",label=\"{}\"}} {v}",
                r.pid,
                escape(&r.label)
            );
        }
    }
    let name = "memvisor_broker_page_in_time_saved_ratio";
    let _ = writeln!(
        out,
        "# HELP {name} Seconds of page-in time per second a budget larger by extra_bytes would save (last measured curve).\n# TYPE {name} gauge"
    );
    for r in rows {
        let Some(c) = &r.curve else { continue };
        for k in [1u64, 2, 4, 8, 16] {
            let extra = k * c.step_bytes;
            let _ = writeln!(
                out,
                "{name}{{pid=\"{}\",label=\"{}\",extra_bytes=\"{extra}\"}} {}",
                r.pid,
                escape(&r.label),
                c.saved_with(extra) / 1000.0
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_split_and_curves() {
        let rows = [
            SplitRow {
                pid: 7,
                label: "vm\"a".into(),
                budget: 100,
                min: 10,
                max: 1000,
                curve: Some(UtilityCurve::from_points(8, &[1.0, 2.0, 3.0], 3.0)),
            },
            SplitRow {
                pid: 8,
                label: "b".into(),
                budget: 50,
                min: 10,
                max: 60,
                curve: None,
            },
        ];
        let text = render(300, 40, &rows);
        assert!(text.contains("memvisor_broker_total_bytes 300\n"));
        assert!(text.contains("memvisor_broker_reserved_bytes 40\n"));
        assert!(text.contains("memvisor_broker_budget_bytes{pid=\"7\",label=\"vm\\\"a\"} 100\n"));
        assert!(text.contains("memvisor_broker_max_bytes{pid=\"8\",label=\"b\"} 60\n"));
        assert!(text.contains("extra_bytes=\"16\"} 0.002\n"), "{text}");
        assert_eq!(
            text.matches("memvisor_broker_page_in_time_saved_ratio{")
                .count(),
            5
        );
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                line.rsplit(' ').next().unwrap().parse::<f64>().is_ok(),
                "{line}"
            );
        }
    }
}
