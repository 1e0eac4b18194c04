//! Rendering a [`SweepReport`]: an aligned text table, CSV and JSON.

use std::fmt::Write as _;

use crate::sweep::SweepReport;

impl SweepReport {
    /// An aligned text table with a header line describing the run.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "source: {}  requests: {}  distinct units: {}  model: {}  sample every: {}",
            self.source, self.requests, self.unique_units, self.model, self.sample_period
        );
        let header = [
            "policy",
            "size",
            "accesses",
            "misses",
            "miss ratio",
            "gap to OPT",
            "req/s",
        ];
        let cells: Vec<[String; 7]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    r.policy.clone(),
                    r.size.to_string(),
                    r.accesses.to_string(),
                    r.misses.to_string(),
                    format!("{:.4}", r.miss_ratio),
                    r.gap_to_opt
                        .map_or_else(|| "-".to_string(), |g| format!("{:+.4}", g)),
                    format!("{:.3e}", r.requests_per_sec),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &cells {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.len());
            }
        }
        let line = |out: &mut String, row: &[&str]| {
            for (i, (c, w)) in row.iter().zip(widths).enumerate() {
                let sep = if i + 1 == row.len() { "\n" } else { "  " };
                if i == 0 {
                    let _ = write!(out, "{c:<w$}{sep}");
                } else {
                    let _ = write!(out, "{c:>w$}{sep}");
                }
            }
        };
        line(&mut out, &header);
        for row in &cells {
            line(&mut out, &row.each_ref().map(String::as_str));
        }
        out
    }

    /// CSV with a header row; empty fields where OPT did not run.
    pub fn to_csv(&self) -> String {
        let mut out = String::from(
            "policy,size,accesses,misses,miss_ratio,opt_misses,gap_to_opt,seconds,requests_per_sec\n",
        );
        for r in &self.rows {
            let _ = writeln!(
                out,
                "{},{},{},{},{:.6},{},{},{:.6},{:.1}",
                csv_field(&r.policy),
                r.size,
                r.accesses,
                r.misses,
                r.miss_ratio,
                r.opt_misses.map(|m| m.to_string()).unwrap_or_default(),
                r.gap_to_opt.map(|g| format!("{g:.6}")).unwrap_or_default(),
                r.seconds,
                r.requests_per_sec
            );
        }
        out
    }

    /// Pretty-printed JSON of the whole report.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("report serializes")
    }
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use crate::sweep::{SweepReport, SweepRow};

    fn report() -> SweepReport {
        let row = |policy: &str, misses: u64, gap: Option<f64>| SweepRow {
            policy: policy.into(),
            size: 10,
            accesses: 100,
            misses,
            miss_ratio: misses as f64 / 100.0,
            opt_misses: gap.map(|_| 20),
            gap_to_opt: gap,
            seconds: 0.5,
            requests_per_sec: 200.0,
        };
        SweepReport {
            source: "t".into(),
            model: "exact",
            sample_period: "10 accesses".into(),
            requests: 100,
            unique_units: 40,
            rows: vec![row("lru", 30, Some(0.1)), row("a,b", 20, None)],
        }
    }

    #[test]
    fn table_csv_and_json_carry_every_row() {
        let r = report();
        let t = r.to_table();
        assert!(
            t.contains("lru") && t.contains("0.3000") && t.contains("+0.1000"),
            "{t}"
        );
        let csv = r.to_csv();
        assert_eq!(csv.lines().count(), 3);
        assert!(csv.contains("\"a,b\",10,100,20,0.200000,,,"), "{csv}");
        let json: serde_json::Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["rows"][0]["misses"], 30);
        assert_eq!(json["unique_units"], 40);
    }
}
