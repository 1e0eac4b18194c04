//! The `churn` guest workload's progress lines (`MEMVISOR-RESULT phase=churn-progress ms=MS
//! rewrites=N errors=E`, printed every `--report` ms; `ms` counts from the start of the churn
//! on the guest's clock) and the guest's speed over a window of host time: rewrites per
//! second between the first and the last progress line that arrived in the window, timed by
//! the guest's own `ms`.

use std::time::{Duration, Instant};

use memvisor_testvm::{parse_result_line, WorkloadResult};

use crate::live_guest::ConsoleLine;

/// One progress line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChurnProgress {
    /// Host time the line arrived.
    pub at: Instant,
    /// Guest milliseconds since the churn began.
    pub ms: f64,
    /// Pages rewritten so far.
    pub rewrites: u64,
    /// Pages that read back wrong so far.
    pub errors: u64,
}

/// The guest's speed over a window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChurnRate {
    /// Rewrites per second (guest clock).
    pub per_sec: f64,
    /// Guest seconds between the first and the last progress line used.
    pub covered_secs: f64,
}

/// The `ms`, `rewrites` and `errors` of a progress line; `None` for any other line (and for
/// a progress line missing one of them).
pub fn parse_progress(text: &str) -> Option<(f64, u64, u64)> {
    let Some(Ok(WorkloadResult::Other { kind, fields })) = parse_result_line(text, 0) else {
        return None;
    };
    if kind != "phase=churn-progress" {
        return None;
    }
    let get = |k: &str| fields.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    let ms = get("ms")?.parse::<f64>().ok().filter(|m| m.is_finite())?;
    Some((
        ms,
        get("rewrites")?.parse().ok()?,
        get("errors")?.parse().ok()?,
    ))
}

/// Every progress line of a console, in order.
pub fn progress_lines(console: &[ConsoleLine]) -> Vec<ChurnProgress> {
    console
        .iter()
        .filter_map(|l| {
            parse_progress(&l.text).map(|(ms, rewrites, errors)| ChurnProgress {
                at: l.at,
                ms,
                rewrites,
                errors,
            })
        })
        .collect()
}

/// The guest's speed over the progress lines that arrived in `[from, from + window]` (host
/// time): rewrites between the first and the last of them over the guest time between them.
/// `None` with fewer than two lines there (or no guest time between them).
pub fn rate_in_window(
    points: &[ChurnProgress],
    from: Instant,
    window: Duration,
) -> Option<ChurnRate> {
    let until = from + window;
    let mut inside = points.iter().filter(|p| p.at >= from && p.at <= until);
    let first = inside.next()?;
    let last = inside.next_back()?;
    let secs = (last.ms - first.ms) / 1000.0;
    if secs <= 0.0 || last.rewrites < first.rewrites {
        return None;
    }
    Some(ChurnRate {
        per_sec: (last.rewrites - first.rewrites) as f64 / secs,
        covered_secs: secs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_lines_parse_and_others_do_not() {
        assert_eq!(
            parse_progress(
                "[ 12.3] MEMVISOR-RESULT phase=churn-progress ms=2000.4 rewrites=81920 errors=0\r"
            ),
            Some((2000.4, 81920, 0))
        );
        assert_eq!(
            parse_progress(
                "MEMVISOR-RESULT phase=churn mib=8 pages=2048 rewrites=9 ms=1.0 ok=1 errors=0"
            ),
            None
        );
        assert_eq!(parse_progress("MEMVISOR-RESULT done ok=1 errors=0"), None);
        assert_eq!(parse_progress("random kernel message"), None);
        assert_eq!(
            parse_progress("MEMVISOR-RESULT phase=churn-progress ms=x rewrites=1 errors=0"),
            None
        );
        assert_eq!(
            parse_progress("MEMVISOR-RESULT phase=churn-progress ms=5 errors=0"),
            None
        );
    }

    #[test]
    fn the_rate_uses_the_lines_inside_the_window_and_the_guest_clock() {
        let t0 = Instant::now();
        let console: Vec<ConsoleLine> = [
            (
                0,
                "MEMVISOR-RESULT phase=churn-progress ms=1000.0 rewrites=1000 errors=0",
            ),
            (
                1000,
                "MEMVISOR-RESULT phase=write mib=8 pages=2048 reads=2048 ms=1 mbps=1 ok=1 errors=0",
            ),
            // The migration ends at t0 + 1.5 s; the guest was paused, its clock ran on.
            (
                2000,
                "MEMVISOR-RESULT phase=churn-progress ms=3000.0 rewrites=2000 errors=0",
            ),
            (
                3000,
                "MEMVISOR-RESULT phase=churn-progress ms=4000.0 rewrites=2500 errors=0",
            ),
            (
                4000,
                "MEMVISOR-RESULT phase=churn-progress ms=5000.0 rewrites=4000 errors=0",
            ),
            (
                9000,
                "MEMVISOR-RESULT phase=churn-progress ms=10000.0 rewrites=9000 errors=0",
            ),
        ]
        .iter()
        .map(|(ms, text)| ConsoleLine {
            at: t0 + Duration::from_millis(*ms),
            text: text.to_string(),
        })
        .collect();
        let points = progress_lines(&console);
        assert_eq!(points.len(), 5);
        let r = rate_in_window(
            &points,
            t0 + Duration::from_millis(1500),
            Duration::from_secs(3),
        )
        .unwrap();
        // Lines at 2 s, 3 s and 4 s: 2000 rewrites over 2 guest seconds.
        assert_eq!(r.covered_secs, 2.0);
        assert_eq!(r.per_sec, 1000.0);
        // One line alone gives no rate.
        assert_eq!(
            rate_in_window(
                &points,
                t0 + Duration::from_millis(8000),
                Duration::from_secs(3)
            ),
            None
        );
        // The window before the migration: lines at 0 s and 2 s (the window's end counts).
        let before = rate_in_window(&points, t0, Duration::from_millis(2000)).unwrap();
        assert_eq!((before.per_sec, before.covered_secs), (500.0, 2.0));
    }
}
