//! [`run_redis_experiment`]: seed 000's redis experiment in memvisor's terms. For every chunk
//! size and policy: redis-server (`--save '' --appendonly no`) under `memvisor run`, filled
//! over the wire with a data set larger than the budget, driven by [`paced_gets`] at each
//! offered rate (Zipf key popularity), every value read back and compared at the end; per
//! point the pager's page-ins and faults (deltas of the control socket's counters, what
//! `memvisor stat PID --json` prints). Then the stress table: [`hot_scan_stress`] under each
//! policy with the same budget.
//!
//! [`hot_scan_stress`]: crate::hot_scan_stress

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use memvisor_control::ProcessStatus;

use crate::bench_error::BenchError;
use crate::hot_scan_stress::StressSettings;
use crate::managed_process::{ManagedProcess, RunSettings};
use crate::paced_get_load::{paced_gets, LoadResult, LoadSettings};
use crate::redis_values::{key_name, value_of};
use crate::resp_connection::{encode_command, RespConnection, RespReply};

/// Everything one experiment run needs.
#[derive(Debug, Clone)]
pub struct ExperimentSettings {
    /// The `memvisor` binary.
    pub memvisor: PathBuf,
    /// The `hot-scan-stress` binary.
    pub stress_program: PathBuf,
    /// The redis server program.
    pub redis_server: PathBuf,
    /// Budget given to `memvisor run` (bytes, as text: `96M`).
    pub budget: String,
    /// Policies, in run order.
    pub policies: Vec<String>,
    /// Chunk size of every policy's series and of the stress runs (as `--chunk-size` takes it).
    pub chunk_size: String,
    /// Further chunk sizes, run with `compare_policy` only.
    pub compare_chunk_sizes: Vec<String>,
    /// The policy of the chunk-size comparison.
    pub compare_policy: String,
    /// Keys in the data set.
    pub keys: u64,
    /// Bytes per value.
    pub value_size: usize,
    /// Offered rates, requests/s.
    pub rates: Vec<f64>,
    /// Length of one load point.
    pub point: Duration,
    /// Unrecorded load at the first rate before the points.
    pub warmup: Duration,
    /// Zipf exponent of the keys.
    pub alpha: f64,
    /// Swap directory.
    pub swap_dir: PathBuf,
    /// Scratch directory (control sockets).
    pub work_dir: PathBuf,
    /// The stress workload.
    pub stress: StressSettings,
    /// Budget of the stress runs.
    pub stress_budget: String,
}

/// One load point with the pager's counters over it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PointRecord {
    /// The load measurement.
    #[serde(flatten)]
    pub load: LoadResult,
    /// Chunks paged in during the point.
    pub page_ins: u64,
    /// Missing faults (chunk not resident).
    pub missing_faults: u64,
    /// Minor faults (access sampling re-maps, chunks paged out in between).
    pub minor_faults: u64,
}

/// One policy at one chunk size.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SeriesRecord {
    /// Policy spec.
    pub policy: String,
    /// Chunk size in bytes, as the pager reported it.
    pub chunk_size: u64,
    /// Seconds to fill the data set.
    pub fill_seconds: f64,
    /// redis `used_memory` after the fill.
    pub used_memory: u64,
    /// Seconds to read back and compare every value.
    pub verify_seconds: f64,
    /// Values compared (every key).
    pub verified_keys: u64,
    /// Points in rate order.
    pub points: Vec<PointRecord>,
    /// Pager counters at the end.
    pub final_page_ins: u64,
    /// Resident bytes at the end (within budget + a chunk).
    pub final_resident: u64,
    /// Budget of the process.
    pub budget: u64,
}

/// One stress run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StressRecord {
    /// Policy spec.
    pub policy: String,
    /// Chunk size in bytes.
    pub chunk_size: u64,
    /// Page-ins over the whole run (fill included).
    pub page_ins: u64,
    /// Missing faults.
    pub missing_faults: u64,
    /// Minor faults.
    pub minor_faults: u64,
    /// Page-outs.
    pub page_outs: u64,
    /// Seconds the program reported for fill + accesses.
    pub seconds: f64,
}

/// The whole result.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ExperimentReport {
    /// Latency series.
    pub series: Vec<SeriesRecord>,
    /// Stress runs.
    pub stress: Vec<StressRecord>,
}

fn free_port() -> Result<u16, BenchError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| BenchError::io("bind a free port", "127.0.0.1:0", e))
}

fn run_settings(e: &ExperimentSettings, budget: &str, policy: &str, chunk: &str) -> RunSettings {
    RunSettings {
        memvisor: e.memvisor.clone(),
        budget: budget.to_string(),
        policy: policy.to_string(),
        chunk_size: chunk.to_string(),
        min_region: "1M".into(),
        arena: "4G".into(),
        swap_dir: e.swap_dir.clone(),
        control_dir: e.work_dir.join(format!("ctl-{policy}-{chunk}")),
    }
}

fn counters(s: &ProcessStatus) -> (u64, u64, u64) {
    (
        s.total(|r| r.page_ins),
        s.total(|r| r.missing_faults),
        s.total(|r| r.minor_faults),
    )
}

fn redis_error(addr: &str, detail: String) -> BenchError {
    BenchError::Redis {
        addr: addr.to_string(),
        detail,
    }
}

/// Pipelined SETs of every key, `batch` at a time.
fn fill(c: &mut RespConnection, keys: u64, size: usize) -> Result<(), BenchError> {
    const BATCH: u64 = 32;
    let mut out = Vec::new();
    for first in (0..keys).step_by(BATCH as usize) {
        out.clear();
        let last = (first + BATCH).min(keys);
        for i in first..last {
            encode_command(
                &mut out,
                &[b"SET", key_name(i).as_bytes(), &value_of(i, size)],
            );
        }
        c.send(&out)?;
        for i in first..last {
            match c.reply()? {
                RespReply::Status(s) if s == "OK" => {}
                other => return Err(redis_error(c.addr(), format!("SET mv:{i}: {other:?}"))),
            }
        }
    }
    Ok(())
}

/// Pipelined GETs of every key, each value compared in full.
fn verify(c: &mut RespConnection, keys: u64, size: usize) -> Result<u64, BenchError> {
    const BATCH: u64 = 32;
    let mut out = Vec::new();
    for first in (0..keys).step_by(BATCH as usize) {
        out.clear();
        let last = (first + BATCH).min(keys);
        for i in first..last {
            encode_command(&mut out, &[b"GET", key_name(i).as_bytes()]);
        }
        c.send(&out)?;
        for i in first..last {
            match c.reply()? {
                RespReply::Bulk(Some(v)) if v == value_of(i, size) => {}
                _ => {
                    return Err(redis_error(
                        c.addr(),
                        format!("value of {} differs from what was SET", key_name(i)),
                    ))
                }
            }
        }
    }
    Ok(keys)
}

fn used_memory(c: &mut RespConnection) -> Result<u64, BenchError> {
    match c.call(&[b"INFO", b"memory"])? {
        RespReply::Bulk(Some(v)) => String::from_utf8_lossy(&v)
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| redis_error(c.addr(), "INFO memory without used_memory".into())),
        other => Err(redis_error(c.addr(), format!("INFO memory: {other:?}"))),
    }
}

fn connect_when_up(addr: &str, m: &mut ManagedProcess) -> Result<RespConnection, BenchError> {
    let start = Instant::now();
    loop {
        match RespConnection::connect(addr, Duration::from_secs(60)) {
            Ok(c) => return Ok(c),
            Err(e) if start.elapsed() > Duration::from_secs(30) => return Err(e),
            Err(_) => {
                if let Ok(Some(st)) = m.child.try_wait() {
                    return Err(redis_error(
                        addr,
                        format!("redis under memvisor run exited: {st}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50))
            }
        }
    }
}

/// One series: redis under one policy and chunk size.
pub fn run_series(
    e: &ExperimentSettings,
    policy: &str,
    chunk: &str,
    log: &mut dyn Write,
) -> Result<SeriesRecord, BenchError> {
    let port = free_port()?;
    let addr = format!("127.0.0.1:{port}");
    let program: Vec<OsString> = [
        e.redis_server.as_os_str(),
        "--port".as_ref(),
        port.to_string().as_ref(),
        "--bind".as_ref(),
        "127.0.0.1".as_ref(),
        "--save".as_ref(),
        "".as_ref(),
        "--appendonly".as_ref(),
        "no".as_ref(),
        "--daemonize".as_ref(),
        "no".as_ref(),
        "--loglevel".as_ref(),
        "warning".as_ref(),
    ]
    .iter()
    .map(|s| s.to_os_string())
    .collect();
    let settings = run_settings(e, &e.budget, policy, chunk);
    let mut m = ManagedProcess::start(&settings, &program, false, Duration::from_secs(30))?;
    let mut c = connect_when_up(&addr, &mut m)?;
    let t = Instant::now();
    fill(&mut c, e.keys, e.value_size)?;
    let fill_seconds = t.elapsed().as_secs_f64();
    let used = used_memory(&mut c)?;
    let _ = writeln!(
        log,
        "{policy:>13} chunk {chunk:>4}: filled {} keys x {} B (used_memory {} MiB) in {fill_seconds:.1} s",
        e.keys,
        e.value_size,
        used >> 20
    );
    let load = |rate: f64, duration: Duration, skip: u64| LoadSettings {
        rate,
        duration,
        keys: e.keys,
        value_size: e.value_size,
        alpha: e.alpha,
        seed: 1,
        skip,
        // Half a second of requests (64..4096) may wait: past saturation, latency is then
        // about that queue over the service rate, and a point drains in bounded time.
        max_outstanding: ((rate * 0.5) as u64).clamp(64, 4096),
        reply_timeout: Duration::from_secs(60),
    };
    let mut sent = 0;
    if !e.warmup.is_zero() {
        sent += paced_gets(&addr, &load(e.rates[0], e.warmup, sent))?.requests;
    }
    let mut points = Vec::new();
    for &rate in &e.rates {
        let before = counters(&m.status()?);
        let r = paced_gets(&addr, &load(rate, e.point, sent))?;
        sent += r.requests;
        let after = counters(&m.status()?);
        let _ = writeln!(
            log,
            "{policy:>13} chunk {chunk:>4}: offered {rate:>7.0}/s achieved {:>7.0}/s p50 {:>9.0} us p99 {:>9.0} us, {} page-ins",
            r.achieved_rps,
            r.p50_us,
            r.p99_us,
            after.0 - before.0
        );
        points.push(PointRecord {
            load: r,
            page_ins: after.0 - before.0,
            missing_faults: after.1 - before.1,
            minor_faults: after.2 - before.2,
        });
    }
    let t = Instant::now();
    let verified_keys = verify(&mut c, e.keys, e.value_size)?;
    let verify_seconds = t.elapsed().as_secs_f64();
    let s = m.status()?;
    let _ = c.send(b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n");
    let code = m.wait(Duration::from_secs(20))?;
    if code != Some(0) {
        return Err(redis_error(
            &addr,
            format!("memvisor run exited with {code:?} after SHUTDOWN"),
        ));
    }
    Ok(SeriesRecord {
        policy: policy.to_string(),
        chunk_size: s.chunk_size,
        fill_seconds,
        used_memory: used,
        verify_seconds,
        verified_keys,
        points,
        final_page_ins: s.total(|r| r.page_ins),
        final_resident: s.resident_bytes(),
        budget: s.budget_bytes,
    })
}

/// One stress run under `policy`.
pub fn run_stress_under(e: &ExperimentSettings, policy: &str) -> Result<StressRecord, BenchError> {
    let chunk = e.chunk_size.as_str();
    let s = &e.stress;
    let program: Vec<OsString> = vec![
        e.stress_program.clone().into_os_string(),
        "--size".into(),
        s.size.to_string().into(),
        "--accesses".into(),
        s.accesses.to_string().into(),
        "--hot".into(),
        s.hot.to_string().into(),
        "--scan-every".into(),
        s.scan_every.to_string().into(),
        "--scan-len".into(),
        s.scan_len.to_string().into(),
        "--seed".into(),
        s.seed.to_string().into(),
    ];
    let mut settings = run_settings(e, &e.stress_budget, policy, chunk);
    settings.control_dir = e.work_dir.join(format!("ctl-stress-{policy}"));
    let mut m = ManagedProcess::start(&settings, &program, true, Duration::from_secs(30))?;
    let out = m.child.stdout.take().ok_or_else(|| BenchError::Command {
        command: "hot-scan-stress".into(),
        detail: "no stdout".into(),
    })?;
    let mut line = String::new();
    BufReader::new(out)
        .read_line(&mut line)
        .map_err(|e| BenchError::io("read stress output", "hot-scan-stress stdout", e))?;
    let seconds = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("seconds="))
        .and_then(|v| v.parse::<f64>().ok())
        .ok_or_else(|| BenchError::Command {
            command: "hot-scan-stress".into(),
            detail: format!("no DONE line (got {line:?})"),
        })?;
    let st = m.status()?;
    drop(m.child.stdin.take());
    let code = m.wait(Duration::from_secs(20))?;
    if code != Some(0) {
        return Err(BenchError::Command {
            command: "hot-scan-stress".into(),
            detail: format!("exit {code:?}"),
        });
    }
    Ok(StressRecord {
        policy: policy.to_string(),
        chunk_size: st.chunk_size,
        page_ins: st.total(|r| r.page_ins),
        missing_faults: st.total(|r| r.missing_faults),
        minor_faults: st.total(|r| r.minor_faults),
        page_outs: st.total(|r| r.page_outs),
        seconds,
    })
}

/// The whole experiment; progress lines go to `log`.
pub fn run_redis_experiment(
    e: &ExperimentSettings,
    log: &mut dyn Write,
) -> Result<ExperimentReport, BenchError> {
    let mut series = Vec::new();
    for policy in &e.policies {
        series.push(run_series(e, policy, &e.chunk_size, log)?);
    }
    for chunk in &e.compare_chunk_sizes {
        series.push(run_series(e, &e.compare_policy, chunk, log)?);
    }
    let mut stress = Vec::new();
    for policy in &e.policies {
        let r = run_stress_under(e, policy)?;
        let _ = writeln!(
            log,
            "stress {policy:>13}: {} page-ins, {} missing + {} minor faults, {:.1} s",
            r.page_ins, r.missing_faults, r.minor_faults, r.seconds
        );
        stress.push(r);
    }
    Ok(ExperimentReport { series, stress })
}
