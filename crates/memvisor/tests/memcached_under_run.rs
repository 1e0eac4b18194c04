//! memcached from Debian under `memvisor run` with a budget smaller than its data: 200 MiB of
//! values stored over the text protocol, every value read back and compared twice (in order,
//! then in reverse, which pages the early keys back in), paging observed with `memvisor stat`.
//!
//! memcached takes its slab pages from `malloc` (`-L`: `posix_memalign`); glibc's allocator maps
//! them with its internal `mmap`, which the preload library cannot see, so under plain glibc
//! nothing of memcached would be managed. The test therefore runs it with jemalloc
//! (`libjemalloc.so.2`, installed with redis) in `LD_PRELOAD`: jemalloc maps through the public
//! `mmap`, and `memvisor run` puts its library ahead of an `LD_PRELOAD` it is given.
//! Skipped (with a message) where memcached or jemalloc is not installed; scripts/install
//! installs both.

mod common;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use common::*;
use memvisor_control::RegionStatus;

/// 50,000 values of 4 KiB: 195 MiB of data against a 64 MiB budget.
const KEYS: usize = 50_000;
const VALUE: usize = 4 << 10;
/// Sets per pipelined write, keys per `get`.
const BATCH: usize = 100;
const MIB: u64 = 1 << 20;
const BUDGET: u64 = 64 * MIB;

fn key(i: usize) -> String {
    format!("mv:{i}")
}

/// The value of key `i`: deterministic bytes, different for every key and offset.
fn value(i: usize) -> Vec<u8> {
    let mut v = vec![0; VALUE];
    memvisor_dedup::fill_seeded(&mut v, i as u64);
    v
}

/// One reply line without its `\r\n`.
fn line(r: &mut impl BufRead) -> String {
    let mut l = String::new();
    r.read_line(&mut l).unwrap();
    assert!(l.ends_with("\r\n"), "truncated reply {l:?}");
    l.truncate(l.len() - 2);
    l
}

/// Stores every key, `BATCH` pipelined `set`s at a time, each acknowledged with `STORED`.
fn store_all(w: &mut impl Write, r: &mut impl BufRead) {
    for batch in (0..KEYS).step_by(BATCH) {
        let mut out = Vec::with_capacity(BATCH * (VALUE + 32));
        for i in batch..batch + BATCH {
            out.extend(format!("set {} 0 0 {VALUE}\r\n", key(i)).as_bytes());
            out.extend(value(i));
            out.extend(b"\r\n");
        }
        w.write_all(&out).unwrap();
        for i in batch..batch + BATCH {
            assert_eq!(line(r), "STORED", "set {}", key(i));
        }
    }
}

/// What one read-back pass found.
#[derive(Debug, Default)]
struct Pass {
    misses: usize,
    mismatches: Vec<String>,
}

/// Reads every key back in `order`, `BATCH` keys per `get`, comparing each value byte for byte.
fn verify_all(w: &mut impl Write, r: &mut impl BufRead, order: &[usize]) -> Pass {
    let mut pass = Pass::default();
    for keys in order.chunks(BATCH) {
        let mut request = String::from("get");
        for &i in keys {
            request.push(' ');
            request.push_str(&key(i));
        }
        request.push_str("\r\n");
        w.write_all(request.as_bytes()).unwrap();
        let wanted: HashMap<String, usize> = keys.iter().map(|&i| (key(i), i)).collect();
        let mut found = 0;
        loop {
            let header = line(r);
            if header == "END" {
                break;
            }
            // VALUE <key> <flags> <bytes>
            let fields: Vec<&str> = header.split(' ').collect();
            assert!(
                fields.len() == 4 && fields[0] == "VALUE",
                "reply {header:?}"
            );
            let len: usize = fields[3].parse().unwrap();
            let mut data = vec![0; len + 2];
            r.read_exact(&mut data).unwrap();
            data.truncate(len);
            let i = wanted[fields[1]];
            found += 1;
            if data != value(i) {
                pass.mismatches.push(key(i));
            }
        }
        pass.misses += keys.len() - found;
    }
    pass
}

/// memcached's `stats`: name to value.
fn stats(w: &mut impl Write, r: &mut impl BufRead) -> HashMap<String, String> {
    w.write_all(b"stats\r\n").unwrap();
    let mut out = HashMap::new();
    loop {
        let l = line(r);
        if l == "END" {
            return out;
        }
        let mut f = l.splitn(3, ' ');
        assert_eq!(f.next(), Some("STAT"), "stats reply {l:?}");
        let (name, value) = (f.next().unwrap(), f.next().unwrap_or(""));
        out.insert(name.to_string(), value.to_string());
    }
}

/// The arena of memcached's `memvisor stat --json`, checked against the budget.
fn arena(ctl: &std::path::Path, pid: &str) -> RegionStatus {
    let s = stat_json(ctl, pid);
    assert_eq!(s.program, "memcached");
    let a = s.regions.into_iter().find(|r| r.kind == "arena").unwrap();
    assert!(a.resident_bytes <= BUDGET + s.chunk_size, "{a:?}");
    assert_eq!((a.read_errors, a.write_errors), (0, 0), "{a:?}");
    a
}

#[test]
fn memcached_data_larger_than_budget_survives_paging() {
    if !userfaultfd_usable() {
        return;
    }
    if Command::new("memcached").arg("-V").output().is_err() {
        eprintln!("SKIPPED: memcached is not installed (scripts/install installs it)");
        return;
    }
    let Some(jemalloc) = jemalloc_library() else {
        eprintln!("SKIPPED: libjemalloc.so.2 is not installed (scripts/install installs it)");
        return;
    };
    let started = Instant::now();
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    let port = free_port();
    // 64 KiB chunks: a lookup touches single items all over the slabs. `hashpower=20` (a 1 M
    // bucket table, 8 MiB) keeps the hash chains short: with the default 64 K buckets, 50,000
    // keys share buckets and every lookup walking a chain touches another, random, item (three
    // times the page-ins). `--arena 2G`, as in the redis test: debug builds check every
    // chunk's state after each batch of faults, which over the default arena (twice host RAM:
    // 47 GiB, 770 K chunks of 64 KiB) cost about 1 ms of CPU a fault (minutes, not seconds).
    let server = memvisor(&ctl)
        .env("LD_PRELOAD", &jemalloc)
        .args(["run", "--budget", "64M", "--chunk-size", "64K"])
        .args(["--min-region", "1M", "--arena", "2G", "--swap-dir"])
        .arg(t.path())
        .args(["--", "memcached", "-u", "root", "-l", "127.0.0.1"])
        .args(["-p", &port.to_string(), "-m", "512", "-t", "2"])
        .args(["-o", "hashpower=20"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let server = RunGuard::new(server);
    let stream = connect_when_listening(port, "memcached");
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);

    let fill = Instant::now();
    store_all(&mut w, &mut r);
    let fill = fill.elapsed();

    // `memvisor run`'s child is memcached: its pid is the one with a socket.
    let sockets = memvisor_control::socket_dir::list_managed_pids(&ctl).unwrap();
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    let mpid = sockets[0].to_string();
    assert_ne!(mpid, server.id().to_string());
    let filled = arena(&ctl, &mpid);
    assert!(
        filled.mapped_bytes > 2 * BUDGET,
        "memcached's slabs in the arena: {filled:?}"
    );
    assert!(
        filled.swapped_bytes > 0 && filled.page_outs > 0,
        "{filled:?}"
    );

    let forward: Vec<usize> = (0..KEYS).collect();
    let reverse: Vec<usize> = (0..KEYS).rev().collect();
    let verify = Instant::now();
    let first = verify_all(&mut w, &mut r, &forward);
    let after_first = arena(&ctl, &mpid);
    let second = verify_all(&mut w, &mut r, &reverse);
    let verify = verify.elapsed();
    let after_second = arena(&ctl, &mpid);
    for pass in [&first, &second] {
        assert_eq!(pass.misses, 0, "keys missing: {pass:?}");
        assert!(
            pass.mismatches.is_empty(),
            "{} values differ, first {:?}",
            pass.mismatches.len(),
            &pass.mismatches[..pass.mismatches.len().min(10)]
        );
    }
    assert!(after_first.page_ins > filled.page_ins, "{after_first:?}");
    assert!(
        after_second.page_ins > after_first.page_ins,
        "the reverse pass pages the early keys back in: {after_second:?}"
    );

    let st = stats(&mut w, &mut r);
    assert_eq!(st["curr_items"], KEYS.to_string(), "{st:?}");
    assert_eq!(st["evictions"], "0", "{st:?}");
    let bytes: u64 = st["bytes"].parse().unwrap();
    assert!(bytes > 2 * BUDGET, "memcached holds {bytes} bytes: {st:?}");

    let o = memvisor(&ctl).args(["stat", &mpid]).output().unwrap();
    eprintln!(
        "memcached: {KEYS} keys x {VALUE} B, bytes {} MiB, budget 64 MiB, 64 KiB chunks: fill {:.1} s, \
         two read-back passes {:.1} s (page-ins {} after the fill, {} after pass 1, {} after pass 2), \
         test {:.1} s\n{}",
        bytes / MIB,
        fill.as_secs_f64(),
        verify.as_secs_f64(),
        filled.page_ins,
        after_first.page_ins,
        after_second.page_ins,
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&o.stdout)
    );

    // SIGTERM to memvisor run is forwarded; memcached exits on it with status 0.
    let status = server.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "memcached exit status through memvisor run"
    );
    assert!(memvisor_control::socket_dir::list_managed_pids(&ctl)
        .unwrap()
        .is_empty());
}
