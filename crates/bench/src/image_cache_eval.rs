//! `image-cache-eval` (issue 12, seed 001 chapter 5): one disk image read by a VMM-like
//! process ([`crate::image_cache_worker`]) with its host page cache held to the same size by
//! the kernel (the process in a cgroup v1 memory group: the kernel's LRU) and by `memvisor run
//! --image-cache` (a CAR model per image), and at smaller sizes for memvisor, against no limit
//! at all. Each run drops the image from the host cache first; the order of the variants
//! rotates by one each repetition.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

use crate::bench_error::BenchError;
use crate::image_cache_worker::{drop_cached, write_image, ImageWorkload};
use crate::interrupt;
use crate::memory_cgroup::{group_name, MemoryCgroup};
use crate::private_dir::{private_dir, run_dir};

/// Where the host cache's size comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CacheVariant {
    /// Nothing limits it.
    Unlimited,
    /// Under `memvisor run` without a limit: what the interposition costs.
    MemvisorNoLimit,
    /// The process in a memory cgroup of guest RAM + slack + this many bytes of cache.
    Kernel(u64),
    /// `memvisor run --image-cache` this many bytes.
    Memvisor(u64),
}

impl CacheVariant {
    /// Its name in tables.
    pub fn name(&self) -> String {
        match self {
            Self::Unlimited => "unlimited".into(),
            Self::MemvisorNoLimit => "memvisor, no limit".into(),
            Self::Kernel(b) => format!("kernel {}M", b >> 20),
            Self::Memvisor(b) => format!("memvisor {}M", b >> 20),
        }
    }
}

/// What to run.
#[derive(Debug, Clone)]
pub struct ImageCacheEvalConfig {
    /// This benchmark's binary (its `worker` subcommand).
    pub exe: PathBuf,
    /// The `memvisor` binary.
    pub memvisor: PathBuf,
    /// Where the image and the control directory go.
    pub work_dir: PathBuf,
    /// Image size (a power of two, at least 1 MiB).
    pub image_bytes: u64,
    /// The worker's access pattern and timing.
    pub workload: ImageWorkload,
    /// The variants, in the first repetition's order.
    pub variants: Vec<CacheVariant>,
    /// Repetitions.
    pub reps: usize,
}

/// Memory the kernel variant's group allows beyond guest RAM and the cache: the process's own
/// (its binary's pages, heap and stacks: about 3 MiB here).
pub const KERNEL_SLACK: u64 = 4 << 20;

/// One variant's run.
#[derive(Debug, Clone, Serialize)]
pub struct ImageCacheRun {
    /// Which.
    pub variant: CacheVariant,
    /// Its name.
    pub name: String,
    /// Repetition.
    pub rep: usize,
    /// 4 KiB reads per second in the window.
    pub reads_per_s: f64,
    /// Bytes the process read from the device in the window, per 4 KiB read (scans included).
    pub storage_bytes_per_read: f64,
    /// Bytes of the image in the host page cache at the end (`cachestat(2)`).
    pub cached_bytes: u64,
    /// Blocks that did not hold the image's pattern (must be 0).
    pub errors: u64,
    /// The limit's model: hit ratio of block accesses at the end (memvisor only).
    pub model_hit_ratio: Option<f64>,
}

/// Runs every variant `reps` times; `progress` sees each run as it ends.
pub fn image_cache_eval(
    config: &ImageCacheEvalConfig,
    mut progress: impl FnMut(&ImageCacheRun),
) -> Result<Vec<ImageCacheRun>, BenchError> {
    if config
        .variants
        .iter()
        .any(|v| matches!(v, CacheVariant::Kernel(_)))
    {
        MemoryCgroup::check_available()?;
    }
    // The work directory may be shared (/var/tmp): the image, swap files and sockets go in
    // a private directory of this run's own.
    let private = private_dir(&config.work_dir, "image-cache-eval-")?;
    let image = private.path().join("disk.img");
    write_image(&image, config.image_bytes)?;
    let mut runs = Vec::new();
    let n = config.variants.len();
    for rep in 0..config.reps {
        for k in 0..n {
            let variant = config.variants[(k + rep) % n];
            let run = run_one(config, private.path(), &image, variant, rep, rep * n + k)?;
            progress(&run);
            runs.push(run);
        }
    }
    let _ = fs::remove_file(&image);
    Ok(runs)
}

fn run_one(
    config: &ImageCacheEvalConfig,
    private: &Path,
    image: &Path,
    variant: CacheVariant,
    rep: usize,
    seq: usize,
) -> Result<ImageCacheRun, BenchError> {
    drop_cached(image)?;
    let w = &config.workload;
    let ctl = run_dir(private, seq as u64)?;
    let worker_args: Vec<String> = vec![
        "worker".into(),
        image.display().to_string(),
        format!("--alpha={}", w.alpha),
        format!("--scan-every={}", w.scan_every),
        format!("--scan-bytes={}", w.scan_bytes),
        format!("--ram-bytes={}", w.ram_bytes),
        format!("--warmup={}", w.warmup_s),
        format!("--seconds={}", w.measure_s),
    ];
    let mut _group = None;
    let mut command = match variant {
        CacheVariant::Unlimited => {
            let mut c = Command::new(&config.exe);
            c.args(&worker_args);
            c
        }
        CacheVariant::Kernel(cache) => {
            let g = MemoryCgroup::create(
                &group_name(seq as u64),
                Some(w.ram_bytes + KERNEL_SLACK + cache),
            )?;
            // The shell joins the group and becomes the worker (same pid).
            let mut c = Command::new("sh");
            c.arg("-c")
                .arg(r#"echo $$ > "$0" && exec "$@""#)
                .arg(g.procs_path())
                .arg(&config.exe)
                .args(&worker_args);
            _group = Some(g);
            c
        }
        CacheVariant::Memvisor(_) | CacheVariant::MemvisorNoLimit => {
            let mut c = Command::new(&config.memvisor);
            c.env("MEMVISOR_CONTROL_DIR", &ctl)
                .arg("run")
                .arg("--budget")
                .arg((w.ram_bytes + (64 << 20)).to_string());
            if let CacheVariant::Memvisor(cache) = variant {
                c.arg("--image-cache").arg(cache.to_string());
            }
            c.arg("--swap-dir")
                .arg(private)
                .arg("--")
                .arg(&config.exe)
                .args(&worker_args);
            c
        }
    };
    let what = format!("{} / rep {rep}", variant.name());
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| BenchError::io("start", &config.exe, e))?;
    let stdout = child.stdout.take();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Some(out) = stdout {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        }
    });
    let limit = Duration::from_secs_f64(w.warmup_s + w.measure_s + 120.0);
    let deadline = std::time::Instant::now() + limit;
    let measured = loop {
        if interrupt::requested() {
            let _ = child.kill();
            return Err(BenchError::Interrupted);
        }
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(l) if l.starts_with("measure ") => break l,
            Ok(_) => {}
            Err(mpsc::RecvTimeoutError::Timeout) if std::time::Instant::now() < deadline => {}
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError::Command {
                    command: what,
                    detail: format!("no measurement within {limit:?} (did the worker fail?)"),
                });
            }
        }
    };
    let cached_bytes = fs::File::open(image)
        .ok()
        .and_then(|f| memvisor_pager::cachestat(f.as_fd(), 0, 0).ok())
        .map_or(0, |c| c.nr_cache * 4096);
    let model_hit_ratio = match variant {
        // `pid` is memvisor's; the program is the one process with a socket in `ctl`.
        CacheVariant::Memvisor(_) => memvisor_control::socket_dir::list_managed_pids(&ctl)
            .ok()
            .and_then(|pids| pids.first().copied())
            .and_then(|p| crate::managed_process::status_of(&ctl, p).ok())
            .and_then(|s| s.images.first().cloned())
            .map(|i| i.cache_hits as f64 / (i.cache_hits + i.cache_misses).max(1) as f64),
        _ => None,
    };
    let _ = child.wait();
    let _ = fs::remove_dir_all(&ctl);
    let f: Vec<f64> = measured
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(f64::NAN))
        .collect();
    let [reads, _bytes, storage, seconds, errors] = f[..] else {
        return Err(BenchError::Command {
            command: what,
            detail: format!("unexpected worker line {measured:?}"),
        });
    };
    Ok(ImageCacheRun {
        variant,
        name: variant.name(),
        rep,
        reads_per_s: reads / seconds.max(1e-9),
        storage_bytes_per_read: storage / reads.max(1.0),
        cached_bytes,
        errors: errors as u64,
        model_hit_ratio,
    })
}

/// The runs as a Markdown table: medians per variant, and every run.
pub fn image_cache_markdown(runs: &[ImageCacheRun]) -> String {
    let mut names: Vec<String> = Vec::new();
    for r in runs {
        if !names.contains(&r.name) {
            names.push(r.name.clone());
        }
    }
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let mut md = String::from(
        "| variant | runs | 4 KiB reads/s: median (each) | device KiB per read (median) | image cached at end, MiB (each) | model hit ratio | errors |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for name in &names {
        let rs: Vec<&ImageCacheRun> = runs.iter().filter(|r| &r.name == name).collect();
        let each = |f: &dyn Fn(&ImageCacheRun) -> String| {
            rs.iter().map(|r| f(r)).collect::<Vec<_>>().join(", ")
        };
        md.push_str(&format!(
            "| {name} | {} | {:.0} ({}) | {:.1} | {} | {} | {} |\n",
            rs.len(),
            median(rs.iter().map(|r| r.reads_per_s).collect()),
            each(&|r| format!("{:.0}", r.reads_per_s)),
            median(
                rs.iter()
                    .map(|r| r.storage_bytes_per_read / 1024.0)
                    .collect()
            ),
            each(&|r| format!("{}", r.cached_bytes >> 20)),
            each(&|r| r.model_hit_ratio.map_or("-".into(), |h| format!("{h:.3}"))),
            rs.iter().map(|r| r.errors).sum::<u64>(),
        ));
    }
    md
}
