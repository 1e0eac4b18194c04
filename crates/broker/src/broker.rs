//! [`Broker`]: finds every process under memvisor through its control socket, measures what
//! more memory is worth to each ([`UtilityCurve`]), divides the total ([`partition`]) and sets
//! the budgets, one decision per interval.
//!
//! It keeps no state of its own that matters: each process keeps the budget last set, so a
//! broker that exits or is restarted loses nothing (a new one starts from the budgets it
//! finds). A process that exits is dropped. One that does not answer in time (stopped,
//! overloaded, hung) keeps its last known budget, which stays counted against the total,
//! until it answers again. Shrinking budgets are set before growing ones, and a growth is
//! made only from memory that a shrink really freed, so the sum of budgets never passes the
//! total even when a request fails.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memvisor_control::{
    format_bytes, socket_dir, ControlClient, ControlError, ProcessStatus, SetRules,
};

use crate::broker_error::BrokerError;
use crate::broker_metrics::{self, SplitRow};
use crate::partitioner::{partition, Allocation, Claimant, Limits, Mode, Reason};
use crate::process_limit::{process_label, ProcessLimit};
use crate::utility_curve::UtilityCurve;

/// Points of each process's curve.
const CURVE_POINTS: usize = 64;

/// What the broker divides and how.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// How the total is divided.
    pub mode: Mode,
    /// Budgets' steps, hysteresis, rate limit and the total (see [`Limits`]).
    pub limits: Limits,
    /// Least budget of a process without a `--limit`.
    pub min: u64,
    /// Most budget of a process without a `--limit` (`None`: its guest RAM, or the total).
    pub max: Option<u64>,
    /// Per-process bounds.
    pub process_limits: Vec<ProcessLimit>,
    /// Host RAM: no budget above it.
    pub host_ram: u64,
    /// Decide, log, but set nothing.
    pub dry_run: bool,
}

/// One managed process as the broker follows it.
#[derive(Debug)]
struct Tracked {
    label: String,
    /// The control directory its socket is in.
    dir: PathBuf,
    started_unix_ms: u64,
    /// The snapshot the next curve is measured from.
    since: (ProcessStatus, Instant),
    /// The last curve measured, and the budget it was measured at.
    curve: Option<UtilityCurve>,
    measured_at: u64,
    /// The last curve measured at a budget lower than now, and that budget.
    below: Option<(u64, UtilityCurve)>,
    /// Its budget as last seen or set.
    budget: u64,
    /// Set while it does not answer.
    silent: bool,
}

/// What one decision did.
#[derive(Debug, Default)]
pub struct Round {
    /// One line per event and per budget changed.
    pub lines: Vec<String>,
    /// The decision, per process that answered.
    pub allocations: Vec<Allocation>,
    /// Budgets of processes that did not answer, kept out of the division.
    pub reserved: u64,
}

/// The broker: its options and the processes it follows.
#[derive(Debug)]
pub struct Broker {
    options: BrokerOptions,
    /// Control directories looked in (`None`: memvisor's usual ones, as `memvisor top`).
    dirs: Option<Vec<PathBuf>>,
    tracked: HashMap<u32, Tracked>,
    /// Prometheus text of the last decision, for a metrics server.
    metrics: Arc<Mutex<String>>,
}

impl Broker {
    /// A broker looking in `dirs` (tests), or in every control directory this user may read.
    pub fn new(options: BrokerOptions, dirs: Option<Vec<PathBuf>>) -> Self {
        Self {
            options,
            dirs,
            tracked: HashMap::new(),
            metrics: Arc::new(Mutex::new(String::new())),
        }
    }

    /// The Prometheus text of the last decision, as a metrics server renders it.
    pub fn metrics(&self) -> Arc<Mutex<String>> {
        self.metrics.clone()
    }

    /// One decision: look, measure, divide, set.
    pub fn decide(&mut self) -> Result<Round, BrokerError> {
        let mut round = Round::default();
        let answered = self.look(&mut round);
        let claimants: Vec<Claimant> = answered
            .iter()
            .map(|(pid, status)| self.claimant(*pid, status))
            .collect();
        let limits = Limits {
            total: self.options.limits.total.saturating_sub(round.reserved),
            ..self.options.limits
        };
        if !claimants.is_empty() {
            let allocations = partition(self.options.mode, &limits, &claimants)?;
            self.apply(&allocations, &answered, &mut round);
            round.allocations = allocations;
        }
        let rows: Vec<SplitRow> = claimants
            .iter()
            .map(|c| SplitRow {
                pid: c.pid,
                label: self
                    .tracked
                    .get(&c.pid)
                    .map_or(String::new(), |t| t.label.clone()),
                budget: self.tracked.get(&c.pid).map_or(c.current, |t| t.budget),
                min: c.min,
                max: c.max,
                curve: c.curve.clone(),
            })
            .collect();
        if let Ok(mut m) = self.metrics.lock() {
            *m = broker_metrics::render(self.options.limits.total, round.reserved, &rows);
        }
        Ok(round)
    }

    /// Asks every process for its status; follows new ones, drops exited ones, reserves the
    /// budgets of silent ones. Returns those that answered.
    fn look(&mut self, round: &mut Round) -> Vec<(u32, ProcessStatus)> {
        let dirs = self.dirs.clone().unwrap_or_else(socket_dir::control_dirs);
        let mut seen = Vec::new();
        let mut answered = Vec::new();
        for dir in dirs {
            let pids = match socket_dir::list_managed_pids(&dir) {
                Ok(p) => p,
                Err(e) => {
                    round.lines.push(format!("broker: {e}"));
                    continue;
                }
            };
            for pid in pids {
                match ControlClient::connect(&dir, pid).and_then(|mut c| c.status()) {
                    Ok(status) => {
                        self.observe(&dir, pid, &status, round);
                        answered.push((pid, status));
                    }
                    // Gone (its socket removed, or stale): dropped below.
                    Err(ControlError::NoSuchProcess { .. } | ControlError::StaleSocket { .. }) => {
                        continue
                    }
                    Err(e) => self.silent(&dir, pid, &e, round),
                }
                seen.push(pid);
            }
        }
        let gone: Vec<u32> = self
            .tracked
            .keys()
            .copied()
            .filter(|p| !seen.contains(p))
            .collect();
        for pid in gone {
            if let Some(t) = self.tracked.remove(&pid) {
                round.lines.push(format!(
                    "broker: pid {pid} ({}) exited; its {} are free",
                    t.label,
                    format_bytes(t.budget)
                ));
            }
        }
        round.reserved = self
            .tracked
            .values()
            .filter(|t| t.silent)
            .map(|t| t.budget)
            .sum();
        answered
    }

    /// Records a status: a new process, or a new curve for a known one.
    fn observe(&mut self, dir: &Path, pid: u32, status: &ProcessStatus, round: &mut Round) {
        let now = Instant::now();
        let step = self.options.limits.step;
        match self.tracked.get_mut(&pid) {
            Some(t) if t.started_unix_ms == status.started_unix_ms => {
                t.dir = dir.to_path_buf();
                if t.silent {
                    round
                        .lines
                        .push(format!("broker: pid {pid} ({}) answers again", t.label));
                    t.silent = false;
                }
                let secs = now.duration_since(t.since.1).as_secs_f64();
                if status.budget_bytes != t.since.0.budget_bytes {
                    // Refaults measured under another budget say nothing about this one:
                    // start measuring again from here. A curve measured lower down says
                    // what the memory added since then saves.
                    if let Some(c) = t.curve.take() {
                        if t.measured_at < status.budget_bytes {
                            t.below = Some((t.measured_at, c));
                        }
                    }
                    if t.below
                        .as_ref()
                        .is_some_and(|(b, _)| *b >= status.budget_bytes)
                    {
                        t.below = None;
                    }
                    t.since = (status.clone(), now);
                } else if secs >= 0.2 {
                    // An idle process (no fault at all) loses nothing by giving memory back.
                    if status.faults() == t.since.0.faults() {
                        t.below = None;
                    }
                    t.curve = Some(UtilityCurve::between(
                        &t.since.0,
                        status,
                        secs,
                        step,
                        CURVE_POINTS,
                    ));
                    t.measured_at = status.budget_bytes;
                    t.since = (status.clone(), now);
                }
                t.budget = status.budget_bytes;
            }
            _ => {
                let label = process_label(pid, &status.program);
                round.lines.push(format!(
                    "broker: following pid {pid} ({label}), budget {}",
                    format_bytes(status.budget_bytes)
                ));
                self.tracked.insert(
                    pid,
                    Tracked {
                        label,
                        dir: dir.to_path_buf(),
                        started_unix_ms: status.started_unix_ms,
                        since: (status.clone(), now),
                        curve: None,
                        measured_at: 0,
                        below: None,
                        budget: status.budget_bytes,
                        silent: false,
                    },
                );
            }
        }
    }

    /// A process did not answer: a known one's budget stays reserved.
    fn silent(&mut self, dir: &Path, pid: u32, e: &ControlError, round: &mut Round) {
        match self.tracked.entry(pid) {
            Entry::Vacant(v) => {
                // Never seen answering (the broker started while it was stopped): its budget
                // is unknown, so nothing can be reserved for it.
                round.lines.push(format!(
                    "broker: pid {pid} does not answer ({e}); its budget is unknown and not counted"
                ));
                v.insert(Tracked {
                    label: "?".into(),
                    dir: dir.to_path_buf(),
                    started_unix_ms: 0,
                    since: (ProcessStatus::default(), Instant::now()),
                    curve: None,
                    measured_at: 0,
                    below: None,
                    budget: 0,
                    silent: true,
                });
            }
            Entry::Occupied(mut o) => {
                let t = o.get_mut();
                if !t.silent {
                    round.lines.push(format!(
                        "broker: pid {pid} ({}) does not answer ({e}); it keeps its {}",
                        t.label,
                        format_bytes(t.budget)
                    ));
                    t.silent = true;
                }
            }
        }
    }

    /// The claimant for a process that answered, with its bounds and curve.
    fn claimant(&self, pid: u32, status: &ProcessStatus) -> Claimant {
        let t = &self.tracked[&pid];
        let guest: u64 = status
            .regions
            .iter()
            .filter(|r| r.kind.starts_with("guest") || r.kind == "fixed")
            .map(|r| r.size_bytes)
            .sum();
        let weight = if guest > 0 {
            guest
        } else {
            status.total(|r| r.mapped_bytes).max(status.chunk_size)
        };
        let o = &self.options;
        let own = o
            .process_limits
            .iter()
            .rev()
            .find(|l| l.matches(pid, &t.label));
        let floor = status.chunk_size.max(1);
        let min = own.and_then(|l| l.min).unwrap_or(o.min).max(floor);
        let max = own
            .and_then(|l| l.max)
            .or(o.max)
            .unwrap_or(if guest > 0 { guest } else { o.limits.total })
            .min(o.host_ram)
            .max(min);
        Claimant {
            pid,
            current: status.budget_bytes,
            min,
            max,
            weight,
            curve: t.curve.clone(),
            below: t
                .below
                .as_ref()
                .map(|(b, c)| (status.budget_bytes.saturating_sub(*b), c.clone())),
        }
    }

    /// Sets the changed budgets: shrinks first; a growth only from memory actually freed.
    fn apply(
        &mut self,
        allocations: &[Allocation],
        answered: &[(u32, ProcessStatus)],
        round: &mut Round,
    ) {
        let total = self.options.limits.total.saturating_sub(round.reserved);
        let mut held: u64 = allocations.iter().map(|a| a.from).sum();
        let mut order: Vec<&Allocation> = allocations.iter().filter(|a| a.to != a.from).collect();
        order.sort_by_key(|a| a.to > a.from);
        for a in order {
            let grows = a.to > a.from;
            if grows && held - a.from + a.to > total {
                round.lines.push(format!(
                    "broker: pid {}: not growing to {}: a shrink it needed failed",
                    a.pid,
                    format_bytes(a.to)
                ));
                continue;
            }
            let label = self
                .tracked
                .get(&a.pid)
                .map_or("", |t| t.label.as_str())
                .to_string();
            let chunk = answered
                .iter()
                .find(|(p, _)| *p == a.pid)
                .map_or(1, |(_, s)| s.chunk_size);
            let line = format!(
                "broker: pid {} ({label}): budget {} -> {} ({})",
                a.pid,
                format_bytes(a.from),
                format_bytes(a.to),
                describe(&a.reason, a, self.options.mode)
            );
            if self.options.dry_run {
                round.lines.push(format!("{line} [dry run]"));
                continue;
            }
            match self.set_budget(a.pid, a.to, chunk) {
                Ok(()) => {
                    held = held - a.from + a.to;
                    if let Some(t) = self.tracked.get_mut(&a.pid) {
                        t.budget = a.to;
                    }
                    round.lines.push(line);
                }
                Err(e) => round.lines.push(format!("{line} failed: {e}")),
            }
        }
    }

    /// Sets one budget, checked by the same rules as `memvisor set`.
    fn set_budget(&self, pid: u32, bytes: u64, chunk: u64) -> Result<(), BrokerError> {
        let rules = SetRules {
            host_ram_bytes: self.options.host_ram,
            chunk_bytes: chunk,
        };
        rules.check_budget(bytes)?;
        // Where its status came from this round (only processes that answered get a budget).
        let dir = match self.tracked.get(&pid) {
            Some(t) => t.dir.clone(),
            None => socket_dir::find_socket_dir(pid),
        };
        ControlClient::connect(&dir, pid)?.set(Some(bytes), None)?;
        Ok(())
    }

    /// Runs decisions every `interval` until `stop` says so, printing each line.
    pub fn run(&mut self, interval: Duration, stop: impl Fn() -> bool) -> Result<(), BrokerError> {
        while !stop() {
            let started = Instant::now();
            match self.decide() {
                Ok(round) => round.lines.iter().for_each(|l| println!("{l}")),
                Err(e @ BrokerError::MinimumsExceedTotal { .. }) => {
                    println!("broker: {e}; nothing changed")
                }
                Err(e) => return Err(e),
            }
            while started.elapsed() < interval && !stop() {
                std::thread::sleep(Duration::from_millis(50).min(interval));
            }
        }
        Ok(())
    }
}

/// The reason part of a decision's log line.
fn describe(reason: &Reason, a: &Allocation, mode: Mode) -> String {
    let delta = a.to.abs_diff(a.from);
    match reason {
        Reason::Unchanged => format!("{mode}"),
        Reason::Share => format!("{mode} share"),
        Reason::Bounds => "brought within its minimum and maximum".into(),
        Reason::Fit { saved } => format!(
            "fit the total: -{}, its next step saved {saved:.1} ms/s of page-ins",
            format_bytes(delta)
        ),
        Reason::Gain { saved, toward } if *toward > delta => format!(
            "utility: +{} toward +{}, which saves {saved:.1} ms/s of page-ins",
            format_bytes(delta),
            format_bytes(*toward)
        ),
        Reason::Gain { saved, .. } => format!(
            "utility: +{} saves {saved:.1} ms/s of page-ins",
            format_bytes(delta)
        ),
        Reason::Donor { saved } => format!(
            "utility: -{} for others, its next step saved {saved:.1} ms/s of page-ins",
            format_bytes(delta)
        ),
    }
}
