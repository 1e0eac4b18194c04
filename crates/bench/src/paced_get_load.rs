//! [`paced_gets`]: an open-loop GET load at a target request rate over one pipelined
//! connection, with latency measured from each request's *scheduled* send time (so a server
//! that falls behind is charged for the queue it builds, not hidden by a client that waits).
//!
//! Request `i` is due at `start + i / rate`; the writer sends every due request in one write
//! and sleeps until the next is due, and stops at `duration` (or when `max_outstanding`
//! requests are unanswered: the queue is then bounded and the schedule slips, which shows as
//! latency). The reader takes the replies in order, checks each value's header against the
//! key it asked for, and records `receive time - scheduled time`. Keys follow a Zipf law over
//! the data set (`memvisor_trace`'s `zipf` workload: ranks scattered over the keys by a fixed
//! permutation), the same sequence in both threads (same spec, same seed).

use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memvisor_trace::WorkloadSpec;

use crate::bench_error::BenchError;
use crate::redis_values::{header_matches, key_name};
use crate::resp_connection::{encode_command, read_reply, RespConnection, RespReply};

/// One load point.
#[derive(Debug, Clone)]
pub struct LoadSettings {
    /// Offered requests per second.
    pub rate: f64,
    /// How long requests are sent.
    pub duration: Duration,
    /// Number of keys (`mv:0 .. mv:keys-1`).
    pub keys: u64,
    /// Size of every value (checked in each reply).
    pub value_size: usize,
    /// Zipf exponent of key popularity.
    pub alpha: f64,
    /// Seed of the key sequence (it also fixes which keys are popular: keep it for a series).
    pub seed: u64,
    /// Requests of the sequence to skip (those of earlier points of the series), so that each
    /// point continues the stream with the same popular keys.
    pub skip: u64,
    /// Most requests in flight before the writer waits.
    pub max_outstanding: u64,
    /// Longest wait for any one reply.
    pub reply_timeout: Duration,
}

/// What one load point measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LoadResult {
    /// Offered rate (requests/s).
    pub offered_rps: f64,
    /// Replies per second over the point (first send to last reply).
    pub achieved_rps: f64,
    /// Requests sent and answered.
    pub requests: u64,
    /// Median latency from scheduled send to reply, microseconds.
    pub p50_us: f64,
    /// 99th percentile, microseconds.
    pub p99_us: f64,
    /// Largest latency, microseconds.
    pub max_us: f64,
}

fn key_stream(s: &LoadSettings) -> Result<impl Iterator<Item = u64>, BenchError> {
    // `len` bounds the sequence; the writer stops long before at any sane rate.
    let spec = format!(
        "zipf:n={}:alpha={}:len={}:seed={}",
        s.keys,
        s.alpha,
        u64::MAX / 4,
        s.seed
    );
    let w: WorkloadSpec = spec
        .parse()
        .map_err(|e| BenchError::bad("key distribution", spec.clone(), format!("{e}")))?;
    Ok(w.requests().skip(s.skip as usize).map(|r| r.unit))
}

/// Value at quantile `q` of sorted `v` (nearest rank).
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Runs one load point on a fresh connection to `addr`.
pub fn paced_gets(addr: &str, s: &LoadSettings) -> Result<LoadResult, BenchError> {
    if !(s.rate > 0.0 && s.rate.is_finite()) || s.keys == 0 {
        return Err(BenchError::bad(
            "load point",
            format!("rate {} keys {}", s.rate, s.keys),
            "rate and keys must be positive",
        ));
    }
    let conn = RespConnection::connect(addr, s.reply_timeout)?;
    let (writer, reader, addr) = conn.split();
    let sent = Arc::new(AtomicU64::new(0));
    let received = Arc::new(AtomicU64::new(0));
    let start = Instant::now() + Duration::from_millis(5);
    let interval = 1.0 / s.rate;
    let writer_thread = {
        let (sent, received, s2) = (sent.clone(), received.clone(), s.clone());
        let keys = key_stream(s)?;
        std::thread::Builder::new()
            .name("paced-writer".into())
            .spawn(move || write_paced(writer, keys, start, interval, &s2, &sent, &received))
            .map_err(|e| BenchError::Command {
                command: "spawn paced writer".into(),
                detail: e.to_string(),
            })?
    };
    let read = read_replies(
        reader,
        &addr,
        key_stream(s)?,
        start,
        interval,
        s,
        &sent,
        &received,
    );
    let wrote = writer_thread.join().map_err(|_| BenchError::Redis {
        addr: addr.clone(),
        detail: "paced writer panicked".into(),
    })?;
    let (mut lat, last) = read?;
    let total = wrote?;
    if lat.len() as u64 != total {
        return Err(BenchError::Redis {
            addr,
            detail: format!("{} replies to {total} requests", lat.len()),
        });
    }
    lat.sort_unstable();
    let span = last
        .saturating_duration_since(start)
        .as_secs_f64()
        .max(1e-9);
    let us = |ns: u64| ns as f64 / 1000.0;
    Ok(LoadResult {
        offered_rps: s.rate,
        achieved_rps: total as f64 / span,
        requests: total,
        p50_us: us(quantile(&lat, 0.5)),
        p99_us: us(quantile(&lat, 0.99)),
        max_us: us(lat.last().copied().unwrap_or(0)),
    })
}

/// The writer: sends every due request, sleeps until the next; returns how many it sent.
fn write_paced(
    mut w: TcpStream,
    mut keys: impl Iterator<Item = u64>,
    start: Instant,
    interval: f64,
    s: &LoadSettings,
    sent: &AtomicU64,
    received: &AtomicU64,
) -> Result<u64, BenchError> {
    let mut n: u64 = 0;
    let mut buf = Vec::with_capacity(64 << 10);
    // A server that stops reading must not hold the writer forever.
    w.set_write_timeout(Some(s.reply_timeout))
        .map_err(|e| BenchError::Redis {
            addr: format!("{:?}", w.peer_addr().ok()),
            detail: format!("socket options: {e}"),
        })?;
    let end = start + s.duration;
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        let due = ((now.saturating_duration_since(start).as_secs_f64() / interval) as u64 + 1)
            .min(received.load(Ordering::Acquire) + s.max_outstanding);
        buf.clear();
        while n < due {
            let k = keys.next().unwrap_or(0);
            encode_command(&mut buf, &[b"GET", key_name(k).as_bytes()]);
            n += 1;
        }
        if !buf.is_empty() {
            w.write_all(&buf).map_err(|e| BenchError::Redis {
                addr: format!("{:?}", w.peer_addr().ok()),
                detail: format!("sending GETs: {e}"),
            })?;
            sent.store(n, Ordering::Release);
        }
        let next = start + Duration::from_secs_f64(n as f64 * interval);
        let now = Instant::now();
        if next > now {
            std::thread::sleep((next - now).min(end.saturating_duration_since(now)));
        } else {
            // Behind schedule and held back by max_outstanding: wait for replies.
            std::thread::sleep(Duration::from_micros(50));
        }
    }
    sent.store(n | DONE, Ordering::Release);
    Ok(n)
}

/// Flag in `sent`: the writer has finished.
const DONE: u64 = 1 << 63;

/// The reader: one latency (ns) per request, and when the last reply came.
#[allow(clippy::too_many_arguments)]
fn read_replies(
    reader: BufReader<TcpStream>,
    addr: &str,
    mut keys: impl Iterator<Item = u64>,
    start: Instant,
    interval: f64,
    s: &LoadSettings,
    sent: &AtomicU64,
    received: &AtomicU64,
) -> Result<(Vec<u64>, Instant), BenchError> {
    let mut r = reader;
    let mut lat = Vec::with_capacity((s.rate * s.duration.as_secs_f64()) as usize + 16);
    let mut i: u64 = 0;
    let mut last = start;
    loop {
        let st = sent.load(Ordering::Acquire);
        let (n, done) = (st & !DONE, st & DONE != 0);
        if i >= n {
            if done {
                break;
            }
            std::thread::sleep(Duration::from_micros(20));
            continue;
        }
        let reply = read_reply(&mut r, addr)?;
        let now = Instant::now();
        let k = keys.next().unwrap_or(0);
        match reply {
            RespReply::Bulk(Some(v)) if header_matches(k, s.value_size, &v) => {}
            other => {
                return Err(BenchError::Redis {
                    addr: addr.to_string(),
                    detail: format!(
                        "GET {} returned a wrong value ({})",
                        key_name(k),
                        describe(&other)
                    ),
                })
            }
        }
        let due = start + Duration::from_secs_f64(i as f64 * interval);
        lat.push(now.saturating_duration_since(due).as_nanos() as u64);
        last = now;
        i += 1;
        received.store(i, Ordering::Release);
    }
    Ok((lat, last))
}

fn describe(r: &RespReply) -> String {
    match r {
        RespReply::Bulk(Some(v)) => format!("{} bytes", v.len()),
        RespReply::Bulk(None) => "missing".into(),
        other => format!("{other:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), 50);
        assert_eq!(quantile(&v, 0.99), 99);
        assert_eq!(quantile(&v, 1.0), 100);
        assert_eq!(quantile(&[], 0.5), 0);
    }

    #[test]
    fn key_stream_is_skewed_and_in_range() {
        let s = LoadSettings {
            rate: 1.0,
            duration: Duration::from_secs(1),
            keys: 1000,
            value_size: 16,
            alpha: 0.99,
            seed: 3,
            skip: 0,
            max_outstanding: 1,
            reply_timeout: Duration::from_secs(1),
        };
        let mut counts = vec![0u32; 1000];
        for k in key_stream(&s).unwrap().take(100_000) {
            counts[k as usize] += 1;
        }
        counts.sort_unstable();
        let top10: u32 = counts.iter().rev().take(10).sum();
        assert!(top10 > 20_000, "top 1% of keys get {top10} of 100000");
        let a: Vec<u64> = key_stream(&s).unwrap().take(50).collect();
        let b: Vec<u64> = key_stream(&s).unwrap().take(50).collect();
        assert_eq!(a, b, "writer and reader see the same keys");
        let c: Vec<u64> = key_stream(&LoadSettings {
            skip: 10,
            ..s.clone()
        })
        .unwrap()
        .take(40)
        .collect();
        assert_eq!(c, a[10..], "a later point continues the stream");
    }
}
