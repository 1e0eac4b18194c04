//! [`Broker`]: finds every process under memvisor through its control socket, measures what
//! more memory is worth to each of its claimants (its budget, and the host cache limit of each
//! of its disk images that has one: a [`UtilityCurve`](crate::UtilityCurve) each), divides
//! the total ([`partition`]) and sets the budgets and limits, one decision per interval.
//! Images without a limit are left to the kernel.
//!
//! It keeps no state of its own that matters: each process keeps the budget and limits last
//! set, so a broker that exits or is restarted loses nothing (a new one starts from the
//! budgets and limits it finds). A process that exits is dropped. One that does not answer in
//! time (stopped, overloaded, hung) keeps its last known budget and limits, which stay counted
//! against the total, until it answers again. Shrinks are set before growths, and a growth is
//! made only from memory that a shrink really freed, so the sum never passes the total even
//! when a request fails.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use memvisor_control::{
    format_bytes, socket_dir, ControlClient, ControlError, ImageStatus, ProcessStatus, SetRules,
    MIN_IMAGE_CACHE_BYTES,
};

use crate::broker_error::BrokerError;
use crate::broker_metrics::{self, SplitRow};
use crate::claimant_key::ClaimantKey;
use crate::curve_history::{CurveHistory, Measured};
use crate::partitioner::{partition, Allocation, Claimant, Limits, Mode, Reason};
use crate::process_limit::{process_label, ProcessLimit};
use crate::status_bounds::bounded;

/// What the broker divides and how.
#[derive(Debug, Clone)]
pub struct BrokerOptions {
    /// How the total is divided.
    pub mode: Mode,
    /// Budgets' steps, hysteresis, rate limit and the total (see [`Limits`]).
    pub limits: Limits,
    /// Least budget of a process without a `--limit`.
    pub min: u64,
    /// Most budget of a process without a `--limit` (`None`: its guest RAM and room for its
    /// code beside it, or the total).
    pub max: Option<u64>,
    /// Per-process bounds.
    pub process_limits: Vec<ProcessLimit>,
    /// Least cache limit of an image that has one (never below
    /// [`MIN_IMAGE_CACHE_BYTES`]).
    pub image_min: u64,
    /// Most cache limit of an image (`None`: the total).
    pub image_max: Option<u64>,
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
    /// Its budget's curve.
    ram: CurveHistory<ProcessStatus>,
    /// Its budget as last seen or set.
    budget: u64,
    /// Its images that have a cache limit, by path.
    images: BTreeMap<String, TrackedImage>,
    /// Set while it does not answer.
    silent: bool,
}

/// One image's cache limit as the broker follows it.
#[derive(Debug)]
struct TrackedImage {
    history: CurveHistory<ImageStatus>,
    /// Its limit as last seen or set.
    limit: u64,
}

impl Tracked {
    /// What it holds, for a log line: `192M`, or `192M (and 24M of image caches)`.
    fn holding(&self) -> String {
        let caches: u64 = self.images.values().map(|i| i.limit).sum();
        if self.images.is_empty() {
            format_bytes(self.budget)
        } else {
            format!(
                "{} (and {} of image caches)",
                format_bytes(self.budget),
                format_bytes(caches)
            )
        }
    }

    /// Its budget and its images' limits.
    fn held(&self) -> u64 {
        self.budget + self.images.values().map(|i| i.limit).sum::<u64>()
    }

    /// Follows the images of `status` that have a cache limit (new ones, new curves), and
    /// drops those whose limit was lifted.
    fn observe_images(
        &mut self,
        pid: u32,
        status: &ProcessStatus,
        now: Instant,
        step: u64,
        round: &mut Round,
    ) {
        let limited: Vec<&ImageStatus> = status
            .images
            .iter()
            .filter(|i| i.cache_limit_bytes.is_some())
            .collect();
        for image in &limited {
            let limit = image.size();
            match self.images.get_mut(&image.path) {
                Some(t) => {
                    t.history.observe(image, now, step);
                    t.limit = limit;
                }
                None => {
                    round.lines.push(format!(
                        "broker: following pid {pid} ({}) image {}, cache limit {}",
                        self.label,
                        image.path,
                        format_bytes(limit)
                    ));
                    self.images.insert(
                        image.path.clone(),
                        TrackedImage {
                            history: CurveHistory::new((*image).clone(), now),
                            limit,
                        },
                    );
                }
            }
        }
        let label = &self.label;
        self.images.retain(|path, t| {
            let kept = limited.iter().any(|i| &i.path == path);
            if !kept {
                round.lines.push(format!(
                    "broker: pid {pid} ({label}) image {path}: its cache limit was lifted; its {} \
                     are free",
                    format_bytes(t.limit)
                ));
            }
            kept
        });
    }
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
    /// Labels of `--limit`s that several followed processes carry (told once).
    shared_labels: BTreeSet<String>,
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
            shared_labels: BTreeSet::new(),
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
        self.tell_shared_labels(&mut round);
        let claimants: Vec<Claimant> = answered
            .iter()
            .flat_map(|(pid, status)| self.claimants(*pid, status))
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
                pid: c.key.pid(),
                image: c.key.image().map(str::to_string),
                label: self.label(c.key.pid()).to_string(),
                budget: self.size(&c.key).unwrap_or(c.current),
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

    /// Says when a `--limit` selecting a label starts or stops matching several processes
    /// (then it applies to none of them: see [`Self::claimants`]).
    fn tell_shared_labels(&mut self, round: &mut Round) {
        for limit in &self.options.process_limits {
            let label = &limit.selector;
            let mut pids: Vec<u32> = self
                .tracked
                .iter()
                .filter(|(pid, t)| t.label == *label && pid.to_string() != *label)
                .map(|(pid, _)| *pid)
                .collect();
            pids.sort_unstable();
            let list = pids
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            if pids.len() > 1 {
                if self.shared_labels.insert(label.clone()) {
                    round.lines.push(format!(
                        "broker: --limit {label}: {} processes are labelled {label} (pids \
                         {list}): applied to none of them until one is",
                        pids.len()
                    ));
                }
            } else if self.shared_labels.remove(label) {
                round.lines.push(match pids.first() {
                    Some(pid) => format!(
                        "broker: --limit {label}: one process labelled {label} again (pid {pid}): \
                         applied"
                    ),
                    None => {
                        format!("broker: --limit {label}: no process labelled {label} any more")
                    }
                });
            }
        }
    }

    /// Whether exactly one followed process carries `label`.
    fn label_is_unique(&self, label: &str) -> bool {
        self.tracked.values().filter(|t| t.label == label).count() == 1
    }

    /// The label of a followed process (empty if it is not followed).
    fn label(&self, pid: u32) -> &str {
        self.tracked.get(&pid).map_or("", |t| t.label.as_str())
    }

    /// The budget or cache limit of `key` as last seen or set.
    fn size(&self, key: &ClaimantKey) -> Option<u64> {
        let t = self.tracked.get(&key.pid())?;
        match key {
            ClaimantKey::Ram(_) => Some(t.budget),
            ClaimantKey::ImageCache(_, path) => t.images.get(path).map(|i| i.limit),
        }
    }

    /// Asks every process for its status; follows new ones, drops exited ones, reserves the
    /// budgets and image cache limits of silent ones. Returns those that answered.
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
                        let status = bounded(status, self.options.host_ram);
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
                    t.holding()
                ));
            }
        }
        round.reserved = self
            .tracked
            .values()
            .filter(|t| t.silent)
            .map(Tracked::held)
            .sum();
        answered
    }

    /// Records a status: a new process, or new curves for a known one.
    fn observe(&mut self, dir: &Path, pid: u32, status: &ProcessStatus, round: &mut Round) {
        let now = Instant::now();
        let step = self.options.limits.step;
        let t = match self.tracked.entry(pid) {
            Entry::Occupied(o) if o.get().started_unix_ms == status.started_unix_ms => {
                let t = o.into_mut();
                t.dir = dir.to_path_buf();
                if t.silent {
                    round
                        .lines
                        .push(format!("broker: pid {pid} ({}) answers again", t.label));
                    t.silent = false;
                }
                t.ram.observe(status, now, step);
                t.budget = status.budget_bytes;
                t
            }
            entry => {
                let label = process_label(pid, &status.program);
                round.lines.push(format!(
                    "broker: following pid {pid} ({label}), budget {}",
                    format_bytes(status.budget_bytes)
                ));
                let tracked = Tracked {
                    label,
                    dir: dir.to_path_buf(),
                    started_unix_ms: status.started_unix_ms,
                    ram: CurveHistory::new(status.clone(), now),
                    budget: status.budget_bytes,
                    images: BTreeMap::new(),
                    silent: false,
                };
                match entry {
                    Entry::Occupied(mut o) => {
                        // The same pid, another process (the old one exited meanwhile).
                        o.insert(tracked);
                        o.into_mut()
                    }
                    Entry::Vacant(v) => v.insert(tracked),
                }
            }
        };
        t.observe_images(pid, status, now, step, round);
    }

    /// A process did not answer: a known one's budget and image cache limits stay reserved.
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
                    ram: CurveHistory::new(ProcessStatus::default(), Instant::now()),
                    budget: 0,
                    images: BTreeMap::new(),
                    silent: true,
                });
            }
            Entry::Occupied(mut o) => {
                let t = o.get_mut();
                if !t.silent {
                    round.lines.push(format!(
                        "broker: pid {pid} ({}) does not answer ({e}); it keeps its {}",
                        t.label,
                        t.holding()
                    ));
                    t.silent = true;
                }
            }
        }
    }

    /// The claimants of a process that answered, with their bounds and curves: its budget,
    /// and each of its images that has a cache limit.
    fn claimants(&self, pid: u32, status: &ProcessStatus) -> Vec<Claimant> {
        let Some(t) = self.tracked.get(&pid) else {
            return Vec::new();
        };
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
            .find(|l| l.matches(pid, &t.label))
            // A label is what a process's command line says (any user can name a process
            // `vm1`): a limit found by a label that several processes carry applies to none of
            // them, so that one user cannot take the bounds meant for another's VM. A limit by
            // pid always applies.
            .filter(|l| l.selector == pid.to_string() || self.label_is_unique(&t.label));
        let floor = status.chunk_size.max(1);
        let min = own.and_then(|l| l.min).unwrap_or(o.min).max(floor);
        let max = own
            .and_then(|l| l.max)
            .or(o.max)
            .unwrap_or(if guest > 0 {
                guest.saturating_add(code_room(status, guest))
            } else {
                o.limits.total
            })
            .min(o.host_ram)
            .max(min);
        let mut out = vec![Claimant {
            key: ClaimantKey::Ram(pid),
            current: status.budget_bytes,
            min,
            max,
            weight,
            curve: t.ram.curve().cloned(),
            below: t.ram.below(status.budget_bytes),
        }];
        let image_min = o.image_min.max(MIN_IMAGE_CACHE_BYTES);
        let image_max = o
            .image_max
            .unwrap_or(o.limits.total)
            .min(o.host_ram)
            .max(image_min);
        for image in &status.images {
            let (Some(limit), Some(tracked)) = (image.cache_limit_bytes, t.images.get(&image.path))
            else {
                continue;
            };
            let size = image_size(pid, &image.path);
            // Only proportional mode weighs; the image's size, as guest RAM's size for a
            // budget.
            let weight = if o.mode == Mode::Proportional {
                size.unwrap_or(limit)
            } else {
                limit
            };
            // The host never caches more of a file than the file: a limit past the image's
            // size (rounded up to a step) would hold memory nobody can use: with 2G to divide
            // among two guests, the limits of their 256 MiB images reached 749M and 877M
            // (`docs/benchmarks.md`, density, 2026-12-07).
            let max = size
                .map_or(image_max, |size| {
                    image_max.min(size.next_multiple_of(o.limits.step.max(1)))
                })
                .max(image_min);
            out.push(Claimant {
                key: ClaimantKey::ImageCache(pid, image.path.clone()),
                current: limit,
                min: image_min,
                max,
                weight: weight.max(1),
                curve: tracked.history.curve().cloned(),
                below: tracked.history.below(limit),
            });
        }
        out
    }

    /// Sets the changed budgets and limits: shrinks first; a growth only from memory actually
    /// freed.
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
            let pid = a.key.pid();
            if grows && held - a.from + a.to > total {
                round.lines.push(format!(
                    "broker: {}: not growing to {}: a shrink it needed failed",
                    a.key,
                    format_bytes(a.to)
                ));
                continue;
            }
            let label = self.label(pid).to_string();
            let (from, to) = (format_bytes(a.from), format_bytes(a.to));
            let mode = self.options.mode;
            let line = match &a.key {
                ClaimantKey::Ram(_) => format!(
                    "broker: pid {pid} ({label}): budget {from} -> {to} ({})",
                    describe(&a.reason, a, mode, "page-ins")
                ),
                ClaimantKey::ImageCache(_, path) => format!(
                    "broker: pid {pid} ({label}) image {path}: cache {from} -> {to} ({})",
                    describe(&a.reason, a, mode, "image reads")
                ),
            };
            if self.options.dry_run {
                // As if it were set, so the growths it makes room for are shown too.
                held = held - a.from + a.to;
                round.lines.push(format!("{line} [dry run]"));
                continue;
            }
            let chunk = answered
                .iter()
                .find(|(p, _)| *p == pid)
                .map_or(1, |(_, s)| s.chunk_size);
            match self.set(&a.key, a.to, chunk) {
                Ok(()) => {
                    held = held - a.from + a.to;
                    if let Some(t) = self.tracked.get_mut(&pid) {
                        match &a.key {
                            ClaimantKey::Ram(_) => t.budget = a.to,
                            ClaimantKey::ImageCache(_, path) => {
                                if let Some(i) = t.images.get_mut(path) {
                                    i.limit = a.to;
                                }
                            }
                        }
                    }
                    round.lines.push(line);
                }
                Err(e) => round.lines.push(format!("{line} failed: {e}")),
            }
        }
    }

    /// Sets one budget or image cache limit, checked by the same rules as `memvisor set`.
    fn set(&self, key: &ClaimantKey, bytes: u64, chunk: u64) -> Result<(), BrokerError> {
        let rules = SetRules {
            host_ram_bytes: self.options.host_ram,
            chunk_bytes: chunk,
        };
        let pid = key.pid();
        // Where its status came from this round (only processes that answered get a budget).
        let dir = match self.tracked.get(&pid) {
            Some(t) => t.dir.clone(),
            None => socket_dir::find_socket_dir(pid),
        };
        match key {
            ClaimantKey::Ram(_) => {
                rules.check_budget(bytes)?;
                ControlClient::connect(&dir, pid)?.set(Some(bytes), None)?;
            }
            ClaimantKey::ImageCache(_, path) => {
                rules.check_image_cache(bytes)?;
                ControlClient::connect(&dir, pid)?
                    .set_image_cache(Some(bytes), Some(path.clone()))?;
            }
        }
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

/// The size of the image at `path` as process `pid` sees it (through its root, in case it
/// runs in another mount namespace), if it can be read.
fn image_size(pid: u32, path: &str) -> Option<u64> {
    let through_root = Path::new("/proc")
        .join(pid.to_string())
        .join("root")
        .join(path.trim_start_matches('/'));
    std::fs::metadata(through_root)
        .or_else(|_| std::fs::metadata(path))
        .ok()
        .map(|m| m.len())
}

/// The reason part of a decision's log line; `waits`: what the curve's time is spent in
/// (`page-ins`, `image reads`).
fn describe(reason: &Reason, a: &Allocation, mode: Mode, waits: &str) -> String {
    let delta = a.to.abs_diff(a.from);
    match reason {
        Reason::Unchanged => format!("{mode}"),
        Reason::Share => format!("{mode} share"),
        Reason::Bounds => "brought within its minimum and maximum".into(),
        Reason::Fit { saved } => format!(
            "fit the total: -{}, its next step saved {saved:.1} ms/s of {waits}",
            format_bytes(delta)
        ),
        Reason::Gain { saved, toward } if *toward > delta => format!(
            "utility: +{} toward +{}, which saves {saved:.1} ms/s of {waits}",
            format_bytes(delta),
            format_bytes(*toward)
        ),
        Reason::Gain { saved, .. } => format!(
            "utility: +{} saves {saved:.1} ms/s of {waits}",
            format_bytes(delta)
        ),
        Reason::Donor { saved } => format!(
            "utility: -{} for others, its next step saved {saved:.1} ms/s of {waits}",
            format_bytes(delta)
        ),
    }
}

/// The room a process with `guest` bytes of guest RAM needs beside it for its whole guest to
/// fit its budget: TCG's code regions get their allotments first, and all allotments together
/// are at most a quarter of the budget, so a third of the guest (or all the code regions'
/// size, if smaller) is enough; none without code regions (a KVM guest). The default most of
/// a process is its guest plus this. At the guest's size alone (the default before TCG's code
/// buffer was paged under the budget) four 192 MiB guests under `density-eval` stopped at 192M
/// each, the code took its allotment of that, and their guest RAM paged 2,199 to 21,064 times
/// while the broker gave the memory left to image caches. Sizes, not the allotments of the
/// moment: a most that followed the code's allotment (which gives back a chunk each second
/// its code pages nothing in) moved the budget with it at every decision (4M every 5 s in
/// one run), and each change restarted the broker's measurement of that process
/// (`docs/benchmarks.md`, density, 2026-12-06).
fn code_room(status: &ProcessStatus, guest: u64) -> u64 {
    let code = status.total(|r| if r.kind == "code" { r.size_bytes } else { 0 });
    code.min(guest / 3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_control::RegionStatus;

    const M: u64 = 1 << 20;

    fn region(kind: &str, size_bytes: u64, budget_bytes: u64) -> RegionStatus {
        RegionStatus {
            kind: kind.into(),
            size_bytes,
            budget_bytes,
            ..Default::default()
        }
    }

    #[test]
    fn the_room_for_code_is_a_third_of_the_guest_or_the_code_regions_size() {
        let status = |code: &[u64]| ProcessStatus {
            regions: [
                region("arena", 1 << 40, M),
                region("guest-memfd", 192 * M, 160 * M),
            ]
            .into_iter()
            .chain(code.iter().map(|&size| region("code", size, 20 * M)))
            .collect(),
            ..Default::default()
        };
        // TCG's 1 GiB buffer, or its 16 slices: a third of the guest.
        assert_eq!(code_room(&status(&[1 << 30]), 192 * M), 64 * M);
        assert_eq!(code_room(&status(&[64 * M; 16]), 192 * M), 64 * M);
        // A small code region: all of it. No code region (KVM): nothing.
        assert_eq!(code_room(&status(&[16 * M]), 192 * M), 16 * M);
        assert_eq!(code_room(&status(&[]), 192 * M), 0);
    }
}
