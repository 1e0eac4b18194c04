//! `memvisor top`: a live view of every managed process on the host.

use std::collections::HashMap;
use std::fmt::Write;
use std::io::IsTerminal;
use std::time::Duration;

use clap::Args;
use memvisor_broker::UtilityCurve;
use memvisor_control::{format_bytes, socket_dir, ControlClient, ControlError, ProcessStatus};

use crate::stat_command::align;

/// Arguments of `memvisor top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between refreshes (rates are measured over this interval).
    #[arg(long, default_value_t = 1.0, value_name = "SECS", value_parser = crate::seconds_arg::seconds)]
    interval: f64,
    /// Print N frames, then exit.
    #[arg(short = 'n', long = "iterations", value_name = "N")]
    iterations: Option<u64>,
    /// Print one frame and exit (same as -n 1).
    #[arg(long, conflicts_with = "iterations")]
    once: bool,
}

/// What one look at every control directory found.
#[derive(Debug, Default)]
pub struct Sample {
    /// Processes that answered, by pid.
    pub answered: HashMap<u32, ProcessStatus>,
    /// Processes that are stopped (SIGSTOP): not asked, shown as stopped.
    pub stopped: Vec<u32>,
}

/// Every managed process in every control directory this user may read (root: all users').
fn sample() -> Result<Sample, ControlError> {
    let mut out = Sample::default();
    for dir in socket_dir::control_dirs() {
        for pid in socket_dir::list_managed_pids(&dir)? {
            // A stopped process is reported without waiting for it; a stale socket (its
            // process died without removing it) or one that does not answer is skipped.
            match ControlClient::connect(&dir, pid).and_then(|mut c| c.status()) {
                Ok(s) => {
                    out.answered.insert(pid, s);
                }
                Err(ControlError::Stopped { .. }) => out.stopped.push(pid),
                Err(_) => {}
            }
        }
    }
    out.stopped.sort_unstable();
    Ok(out)
}

/// One frame: a row per process with rates against the previous sample, then a row per
/// stopped process.
pub fn render_frame(
    now: &HashMap<u32, ProcessStatus>,
    before: &HashMap<u32, ProcessStatus>,
    stopped: &[u32],
) -> String {
    let mut pids: Vec<&u32> = now.keys().collect();
    pids.sort();
    let mut rows = vec![[
        "pid",
        "program",
        "policy",
        "budget",
        "resident",
        "swapped",
        "faults/s",
        "in/s",
        "out/s",
        "ms/s saved +1/8 +1/4 +1/2",
        "regions",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    for pid in pids {
        let s = &now[pid];
        let rate = |f: &dyn Fn(&ProcessStatus) -> u64| -> f64 {
            match before.get(pid) {
                Some(b) if s.at_unix_ms > b.at_unix_ms => {
                    f(s).saturating_sub(f(b)) as f64 * 1000.0 / (s.at_unix_ms - b.at_unix_ms) as f64
                }
                _ => 0.0,
            }
        };
        let read = rate(&|p| p.total(|r| r.bytes_read));
        // The refault curve: milliseconds of page-in time per second a budget larger by 1/8, 1/4,
        // 1/2 would save.
        let curve = match before.get(pid) {
            Some(b) if s.at_unix_ms > b.at_unix_ms => {
                let secs = (s.at_unix_ms - b.at_unix_ms) as f64 / 1000.0;
                let step = (s.budget_bytes / 8).max(4096);
                curve_cells(&UtilityCurve::between(b, s, secs, step, 4), step)
            }
            _ => "-".into(),
        };
        let written = rate(&|p| p.total(|r| r.bytes_written));
        rows.push(vec![
            pid.to_string(),
            s.program.clone(),
            s.policy.clone(),
            format_bytes(s.budget_bytes),
            format_bytes(s.resident_bytes()),
            format_bytes(s.swapped_bytes()),
            format!("{:.0}", rate(&|p| p.faults())),
            format!("{}/s", format_bytes(read as u64)),
            format!("{}/s", format_bytes(written as u64)),
            curve,
            s.regions.len().to_string(),
        ]);
        rows.extend(image_rows(s, before.get(pid)));
    }
    for pid in stopped {
        let program = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| "-".into());
        let mut row = vec![pid.to_string(), program, "(stopped)".into()];
        row.resize(11, "-".into());
        rows.push(row);
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "memvisor top: {} managed process(es)",
        now.len() + stopped.len()
    );
    out.push_str(&align(&rows));
    out
}

/// The `ms/s saved +1/8 +1/4 +1/2` cell: what `step`, twice and four times it would save.
fn curve_cells(c: &UtilityCurve, step: u64) -> String {
    format!(
        "{:.0} {:.0} {:.0}",
        c.saved_with(step),
        c.saved_with(2 * step),
        c.saved_with(4 * step)
    )
}

/// A row under its process per image with a host cache limit: the limit (budget column), what
/// the host caches of it (resident), model misses per second (faults/s) and the limit's curve
/// (ms/s of the program's reads a limit larger by 1/8, 1/4, 1/2 would save).
fn image_rows(s: &ProcessStatus, before: Option<&ProcessStatus>) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for img in s.images.iter() {
        let Some(limit) = img.cache_limit_bytes else {
            continue;
        };
        let name = std::path::Path::new(&img.path)
            .file_name()
            .map_or(img.path.clone(), |n| n.to_string_lossy().into_owned());
        let earlier = before
            .filter(|b| s.at_unix_ms > b.at_unix_ms)
            .and_then(|b| b.images.iter().find(|i| i.path == img.path).map(|i| (b, i)));
        let (misses, curve) = match earlier {
            Some((b, i)) => {
                let secs = (s.at_unix_ms - b.at_unix_ms) as f64 / 1000.0;
                let step = (limit / 8).max(4096);
                let c = UtilityCurve::image_between(i, img, secs, step, 4);
                (format!("{:.0}", c.page_ins), curve_cells(&c, step))
            }
            None => ("-".into(), "-".into()),
        };
        rows.push(vec![
            String::new(),
            format!("  image {name}"),
            "car".into(),
            format_bytes(limit),
            format_bytes(img.cached_bytes),
            "-".into(),
            misses,
            "-".into(),
            "-".into(),
            curve,
            "-".into(),
        ]);
    }
    rows
}

/// Prints frames until interrupted (or N frames).
pub fn run(args: TopArgs) -> Result<(), ControlError> {
    let frames = if args.once { Some(1) } else { args.iterations };
    let interval = Duration::from_secs_f64(args.interval.clamp(0.05, 3600.0));
    let clear = std::io::stdout().is_terminal() && frames != Some(1);
    let mut before = sample()?.answered;
    let mut shown = 0u64;
    loop {
        std::thread::sleep(interval);
        let now = sample()?;
        if clear {
            print!("\x1b[H\x1b[2J");
        }
        print!("{}", render_frame(&now.answered, &before, &now.stopped));
        shown += 1;
        if frames.is_some_and(|n| shown >= n) {
            return Ok(());
        }
        before = now.answered;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_control::{RefaultStatus, RegionStatus};

    fn status(at_unix_ms: u64, page_ins: u64, refaults: Vec<u64>) -> ProcessStatus {
        ProcessStatus {
            pid: 9,
            program: "qemu".into(),
            budget_bytes: 64 << 20,
            at_unix_ms,
            regions: vec![RegionStatus {
                name: "ram".into(),
                budget_bytes: 64 << 20,
                page_ins,
                // 2 ms each.
                page_in_nanos: page_ins * 2_000_000,
                refaults: RefaultStatus {
                    unit_bytes: 8 << 20,
                    sub_buckets: 16,
                    refaults,
                    beyond: 0,
                    evicted_bytes: 0,
                },
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn frames_show_each_process_curve() {
        let before = HashMap::from([(9, status(1000, 0, vec![0; 8]))]);
        // In 2 s: 20 page-ins +8M would have saved, 40 more at +16M, 100 more at +32M; 2 ms
        // each.
        let now = HashMap::from([(9, status(3000, 200, vec![20, 40, 0, 100, 0, 0, 0, 0]))]);
        let frame = render_frame(&now, &before, &[]);
        assert!(frame.contains("ms/s saved +1/8 +1/4 +1/2"), "{frame}");
        let row = frame.lines().find(|l| l.starts_with('9')).unwrap();
        assert!(row.contains("20 60 160"), "{row}");
        let first = render_frame(&now, &HashMap::new(), &[]);
        let row = first.lines().find(|l| l.starts_with('9')).unwrap();
        assert!(
            row.contains(" - "),
            "no curve without an earlier sample: {row}"
        );
    }

    #[test]
    fn frames_show_each_limited_image_under_its_process() {
        let image = |at: u64, misses: u64, refaults: Vec<u64>| {
            let mut s = status(at, 0, vec![0; 8]);
            s.images = vec![memvisor_control::ImageStatus {
                path: "/var/lib/vm1.img".into(),
                cache_limit_bytes: Some(64 << 20),
                cached_bytes: 60 << 20,
                cache_misses: misses,
                cache_timed_misses: misses,
                // 1 ms per miss.
                cache_miss_read_nanos: misses * 1_000_000,
                cache_refaults: RefaultStatus {
                    unit_bytes: 8 << 20,
                    sub_buckets: 16,
                    refaults,
                    beyond: 0,
                    evicted_bytes: 0,
                },
                ..Default::default()
            }];
            s
        };
        let before = HashMap::from([(9, image(1000, 0, vec![0; 8]))]);
        // In 2 s: 400 misses, 20 of them saved by +8M, 40 more by +16M, 100 more by +32M.
        let now = HashMap::from([(9, image(3000, 400, vec![20, 40, 0, 100, 0, 0, 0, 0]))]);
        let frame = render_frame(&now, &before, &[]);
        let row = frame.lines().find(|l| l.contains("image vm1.img")).unwrap();
        assert!(row.contains("64M") && row.contains("60M"), "{row}");
        assert!(row.contains(" 200 ") && row.contains("10 30 80"), "{row}");
        // An image without a limit has no row.
        let mut unlimited = now.clone();
        if let Some(p) = unlimited.get_mut(&9) {
            p.images[0].cache_limit_bytes = None;
        }
        assert!(!render_frame(&unlimited, &before, &[]).contains("image vm1.img"));
    }
}
