//! Prometheus text of the broker's split: the total, what silent processes hold, and per
//! claimant its budget (or image cache limit), bounds, and curve (time per second more memory
//! would save). Processes' budgets keep their families (`memvisor_broker_budget_bytes`, ...);
//! image caches have their own, labelled with the image (`memvisor_broker_image_cache_*`), so
//! a sum over a family never mixes the two.

use std::fmt::Write;

use crate::utility_curve::UtilityCurve;

/// One claimant in the broker's last decision.
#[derive(Debug, Clone)]
pub struct SplitRow {
    /// Process id.
    pub pid: u32,
    /// The image, for an image cache limit (`None`: the process's budget).
    pub image: Option<String>,
    /// Its label (guest name or program).
    pub label: String,
    /// Budget (or limit) after the decision.
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

/// The names of one kind of claimant's families: budget, min, max, curve.
struct Families {
    per: [(&'static str, &'static str); 3],
    curve: (&'static str, &'static str),
}

const PROCESS_FAMILIES: Families = Families {
    per: [
        (
            "memvisor_broker_budget_bytes",
            "Budget the broker gave the process.",
        ),
        ("memvisor_broker_min_bytes", "Least budget of the process."),
        ("memvisor_broker_max_bytes", "Most budget of the process."),
    ],
    curve: (
        "memvisor_broker_page_in_time_saved_ratio",
        "Seconds of page-in time per second a budget larger by extra_bytes would save (last measured curve).",
    ),
};

const IMAGE_FAMILIES: Families = Families {
    per: [
        (
            "memvisor_broker_image_cache_limit_bytes",
            "Host page cache limit the broker gave the image.",
        ),
        (
            "memvisor_broker_image_cache_min_bytes",
            "Least cache limit of the image.",
        ),
        (
            "memvisor_broker_image_cache_max_bytes",
            "Most cache limit of the image.",
        ),
    ],
    curve: (
        "memvisor_broker_image_read_time_saved_ratio",
        "Seconds of image read time per second a cache limit larger by extra_bytes would save (last measured curve).",
    ),
};

/// Renders the split (format 0.0.4).
pub fn render(total: u64, reserved: u64, rows: &[SplitRow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# HELP memvisor_broker_total_bytes Memory the broker divides.\n# TYPE memvisor_broker_total_bytes gauge\nmemvisor_broker_total_bytes {total}"
    );
    let _ = writeln!(
        out,
        "# HELP memvisor_broker_reserved_bytes Budgets and image cache limits of processes that do not answer, kept aside.\n# TYPE memvisor_broker_reserved_bytes gauge\nmemvisor_broker_reserved_bytes {reserved}"
    );
    let (processes, images): (Vec<&SplitRow>, Vec<&SplitRow>) =
        rows.iter().partition(|r| r.image.is_none());
    render_families(&mut out, &PROCESS_FAMILIES, &processes);
    if !images.is_empty() {
        render_families(&mut out, &IMAGE_FAMILIES, &images);
    }
    out
}

/// The labels of a row: `pid="7",label="vm1"`, and `,image="/a.img"` for an image cache.
fn labels(r: &SplitRow) -> String {
    let mut l = format!("pid=\"{}\",label=\"{}\"", r.pid, escape(&r.label));
    if let Some(image) = &r.image {
        let _ = write!(l, ",image=\"{}\"", escape(image));
    }
    l
}

fn render_families(out: &mut String, families: &Families, rows: &[&SplitRow]) {
    for (i, (name, help)) in families.per.iter().enumerate() {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for r in rows {
            let v = [r.budget, r.min, r.max][i];
            let _ = writeln!(out, "{name}{{{}}} {v}", labels(r));
        }
    }
    let (name, help) = families.curve;
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for r in rows {
        let Some(c) = &r.curve else { continue };
        for k in [1u64, 2, 4, 8, 16] {
            let extra = k * c.step_bytes;
            let _ = writeln!(
                out,
                "{name}{{{},extra_bytes=\"{extra}\"}} {}",
                labels(r),
                c.saved_with(extra) / 1000.0
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_split_and_curves() {
        let rows = [
            SplitRow {
                pid: 7,
                image: None,
                label: "vm\"a".into(),
                budget: 100,
                min: 10,
                max: 1000,
                curve: Some(UtilityCurve::from_points(8, &[1.0, 2.0, 3.0], 3.0)),
            },
            SplitRow {
                pid: 8,
                image: None,
                label: "b".into(),
                budget: 50,
                min: 10,
                max: 60,
                curve: None,
            },
            SplitRow {
                pid: 8,
                image: Some("/var/lib/b.img".into()),
                label: "b".into(),
                budget: 24 << 20,
                min: 4 << 20,
                max: 300,
                curve: Some(UtilityCurve::from_points(4, &[10.0], 10.0)),
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
        // The image's cache in families of its own, labelled with the image.
        assert_eq!(text.matches("memvisor_broker_budget_bytes{").count(), 2);
        assert!(text.contains(
            "memvisor_broker_image_cache_limit_bytes{pid=\"8\",label=\"b\",image=\"/var/lib/b.img\"} 25165824\n"
        ));
        assert!(text.contains("memvisor_broker_image_cache_min_bytes{pid=\"8\""));
        assert!(text.contains(
            "memvisor_broker_image_read_time_saved_ratio{pid=\"8\",label=\"b\",image=\"/var/lib/b.img\",extra_bytes=\"64\"} 0.01\n"
        ), "{text}");
        assert!(!text.contains("image=\"\""));
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(
                line.rsplit(' ').next().unwrap().parse::<f64>().is_ok(),
                "{line}"
            );
        }
    }
}
