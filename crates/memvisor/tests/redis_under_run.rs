//! redis-server from Debian under `memvisor run` with a budget smaller than its data: filled
//! over the wire, loaded with redis-benchmark, every value read back and compared, paging
//! observed with `memvisor stat`. Skipped (with a message) where redis-server is not
//! installed; scripts/install installs it.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Instant;

use common::*;

/// 200 values of 512 KiB: 100 MiB of data against a 48 MiB budget. (Many small keys work
/// too, but thrash with 1 MiB chunks once redis rehashes its dictionary under memory pressure:
/// the rehash walks every key in hash order; see the preload crate's README.)
const KEYS: usize = 200;
const VALUE: usize = 512 << 10;
const BATCH: usize = 10;
const MIB: u64 = 1 << 20;

/// The value of key `i`: deterministic bytes, different for every key and offset.
fn value(i: usize) -> Vec<u8> {
    let mut v = vec![0; VALUE];
    memvisor_dedup::fill_seeded(&mut v, i as u64);
    v
}

fn command(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", parts.len()).into_bytes();
    for p in parts {
        out.extend_from_slice(format!("${}\r\n", p.len()).as_bytes());
        out.extend_from_slice(p);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// One RESP reply: a status line, or a bulk string's bytes.
fn reply(r: &mut impl BufRead) -> Vec<u8> {
    let mut line = Vec::new();
    r.read_until(b'\n', &mut line).unwrap();
    assert!(line.ends_with(b"\r\n"), "truncated reply {line:?}");
    match line[0] {
        b'+' | b':' => line[1..line.len() - 2].to_vec(),
        b'$' => {
            let n: i64 = std::str::from_utf8(&line[1..line.len() - 2])
                .unwrap()
                .parse()
                .unwrap();
            assert!(n >= 0, "missing key");
            let mut buf = vec![0; n as usize + 2];
            r.read_exact(&mut buf).unwrap();
            buf.truncate(n as usize);
            buf
        }
        _ => panic!("redis error: {}", String::from_utf8_lossy(&line)),
    }
}

#[test]
fn redis_data_larger_than_budget_survives_paging() {
    if !userfaultfd_usable() {
        return;
    }
    if Command::new("redis-server")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: redis-server is not installed (scripts/install installs it)");
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let ctl = t.path().join("ctl");
    let port = free_port().to_string();
    let server = memvisor(&ctl)
        .args([
            "run",
            "--budget",
            "48M",
            "--min-region",
            "1M",
            "--arena",
            "2G",
            "--swap-dir",
        ])
        .arg(t.path())
        .args([
            "--",
            "redis-server",
            "--port",
            &port,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--daemonize", "no", "--loglevel", "warning"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let server = RunGuard::new(server);
    let stream = connect_when_listening(port.parse().unwrap(), "redis-server");
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);

    let fill = Instant::now();
    for batch in (0..KEYS).step_by(BATCH) {
        let mut out = Vec::new();
        for i in batch..batch + BATCH {
            out.extend(command(&[b"SET", format!("mv:{i}").as_bytes(), &value(i)]));
        }
        w.write_all(&out).unwrap();
        for _ in 0..BATCH {
            assert_eq!(reply(&mut r), b"OK");
        }
    }
    let fill = fill.elapsed();

    let bench = Command::new("redis-benchmark")
        .args([
            "-p", &port, "-t", "set,get", "-n", "20000", "-r", "1000", "-d", "64", "-q",
        ])
        .output()
        .unwrap();
    assert!(bench.status.success(), "{}", stderr(&bench));

    let pid = server.id().to_string();
    // `memvisor run`'s child is redis: its pid is the one with a socket.
    let sockets = memvisor_control::socket_dir::list_managed_pids(&ctl).unwrap();
    assert_eq!(sockets.len(), 1, "{sockets:?}");
    let rpid = sockets[0].to_string();
    assert_ne!(rpid, pid);
    let s = stat_json(&ctl, &rpid);
    assert_eq!(s.program, "redis-server");
    let a = &s.regions[0];
    assert!(a.mapped_bytes > 96 * MIB, "redis data in the arena: {a:?}");
    assert!(a.swapped_bytes > 0 && a.page_outs > 0, "{a:?}");
    assert!(a.resident_bytes <= 48 * MIB + s.chunk_size, "{a:?}");

    let verify = Instant::now();
    for batch in (0..KEYS).step_by(BATCH) {
        let mut out = Vec::new();
        for i in batch..batch + BATCH {
            out.extend(command(&[b"GET", format!("mv:{i}").as_bytes()]));
        }
        w.write_all(&out).unwrap();
        for i in batch..batch + BATCH {
            assert!(reply(&mut r) == value(i), "value of mv:{i} differs");
        }
    }
    let verify = verify.elapsed();
    w.write_all(&command(&[b"INFO", b"memory"])).unwrap();
    let info = String::from_utf8(reply(&mut r)).unwrap();
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        used > 2 * 48 * MIB,
        "redis holds {used} bytes, more than twice the budget"
    );
    let o = memvisor(&ctl).args(["stat", &rpid]).output().unwrap();
    eprintln!(
        "redis: {KEYS} keys x {VALUE} B, used_memory {} MiB, budget 48 MiB: fill {:.1} s, verify {:.1} s\n{}",
        used / MIB,
        fill.as_secs_f64(),
        verify.as_secs_f64(),
        String::from_utf8_lossy(&o.stdout)
    );
    let _ = w.write_all(&command(&[b"SHUTDOWN", b"NOSAVE"]));
    let status = server.wait();
    assert_eq!(
        status.code(),
        Some(0),
        "redis exit status through memvisor run"
    );
}
