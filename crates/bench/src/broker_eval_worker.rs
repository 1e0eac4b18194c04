//! [`run_worker`]: one process of `broker-eval`: maps its memory, writes every page, then runs
//! its access pattern for a fixed time, checking every word it reads, and prints its progress
//! once a second (`progress SECONDS PAGES`) and a last line (`done PAGES ERRORS`), so the
//! driver measures every worker over the same window while they all run.

use std::io::Write;
use std::str::FromStr;
use std::time::{Duration, Instant};

use memvisor_trace::WorkloadSpec;

use crate::bench_error::BenchError;

const PAGE: usize = 4096;

/// What a worker does with its memory.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerKind {
    /// Sequential passes over all of it (a streaming VM).
    Stream,
    /// Zipf(0.99) page accesses over all of it.
    Zipf,
    /// Sequential passes over its first `mib` MiB only (a working set with a cliff: a VM
    /// rereading a data set).
    Loop {
        /// Size of the loop.
        mib: u64,
    },
    /// Nothing after writing it (a mostly idle VM).
    Idle,
}

impl FromStr for WorkerKind {
    type Err = BenchError;
    fn from_str(s: &str) -> Result<Self, BenchError> {
        match s {
            "stream" => Ok(Self::Stream),
            "zipf" => Ok(Self::Zipf),
            "idle" => Ok(Self::Idle),
            _ => match s.strip_prefix("loop:").map(str::parse) {
                Some(Ok(mib)) if mib > 0 => Ok(Self::Loop { mib }),
                _ => Err(BenchError::BadArgument {
                    what: "worker kind",
                    value: s.to_string(),
                    reason: "expected stream, zipf, idle or loop:MIB".into(),
                }),
            },
        }
    }
}

impl std::fmt::Display for WorkerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stream => f.write_str("stream"),
            Self::Zipf => f.write_str("zipf"),
            Self::Loop { mib } => write!(f, "loop:{mib}"),
            Self::Idle => f.write_str("idle"),
        }
    }
}

fn word(page: usize) -> u64 {
    0x9E37_79B9_7F4A_7C15u64.wrapping_mul(page as u64 + 1)
}

/// Runs one worker over `mib` MiB for `seconds` after the fill; prints progress to stdout.
pub fn run_worker(kind: &WorkerKind, mib: u64, seconds: f64) -> Result<(), BenchError> {
    let pages = (mib as usize) << 20 >> 12;
    // An anonymous mapping through libc's `mmap` (which the preload library interposes; a
    // `Vec` this large comes from glibc's malloc, whose internal mmap the library does not
    // see): under `memvisor run` it goes to the pager, under the kernel it is ordinary memory
    // in the worker's cgroup.
    let len = pages * PAGE;
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(BenchError::io(
            "mmap the worker's memory for",
            "broker-eval worker",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the mapping is `len` bytes, readable and writable, page-aligned (so aligned for
    // u64), owned by this function until the process exits, and nothing else refers to it.
    let memory: &mut [u64] = unsafe { std::slice::from_raw_parts_mut(base.cast::<u64>(), len / 8) };
    for p in 0..pages {
        memory[p * PAGE / 8] = word(p);
    }
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    };
    say("filled".into());
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(seconds);
    let mut next_report = started + Duration::from_secs(1);
    let (mut done, mut errors) = (0u64, 0u64);
    let zipf = WorkloadSpec::from_str(&format!(
        "zipf:n={pages}:alpha=0.99:len=18446744073709551615:seed=7"
    ))
    .map_err(|e| BenchError::BadArgument {
        what: "zipf workload",
        value: format!("n={pages}"),
        reason: e.to_string(),
    })?;
    let mut requests = zipf.requests();
    let mut cursor = 0usize;
    let span = match kind {
        WorkerKind::Loop { mib } => ((*mib as usize) << 20 >> 12).min(pages),
        _ => pages,
    };
    loop {
        let now = Instant::now();
        if now >= next_report {
            say(format!(
                "progress {:.3} {done}",
                (now - started).as_secs_f64()
            ));
            next_report += Duration::from_secs(1);
        }
        if now >= end {
            break;
        }
        match kind {
            WorkerKind::Idle => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                // 1024 accesses between clock reads.
                for _ in 0..1024 {
                    let p = match kind {
                        WorkerKind::Zipf => requests.next().map_or(0, |r| r.unit as usize % pages),
                        _ => {
                            cursor = (cursor + 1) % span;
                            cursor
                        }
                    };
                    // black_box: the compiler must not skip or hoist the access.
                    let v = std::hint::black_box(memory[p * PAGE / 8]);
                    if v != word(p) {
                        errors += 1;
                    }
                    done += 1;
                }
            }
        }
    }
    say(format!("done {done} {errors}"));
    // Stay a moment, so the driver can read this process's counters after its last line.
    std::thread::sleep(Duration::from_secs(3));
    Ok(())
}
