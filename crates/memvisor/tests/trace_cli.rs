//! `memvisor trace convert` end to end: the real binary, real files.

use std::process::{Command, Output};

fn memvisor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memvisor"))
        .args(args)
        .output()
        .expect("run memvisor")
}

fn misses(table: &str, policy: &str) -> u64 {
    let line = table.lines().find(|l| l.starts_with(policy)).unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn converted_traces_replay_like_their_source() {
    let dir = tempfile::tempdir().unwrap();
    let workload = "zipf:n=3000:alpha=0.8:len=30000";
    let mut tables = Vec::new();
    for (to, name) in [
        ("oracle-general", "w.oracleGeneral"),
        ("oracle-general", "w.oracleGeneral.zst"),
        ("text", "w.txt"),
    ] {
        let out = dir.path().join(name);
        let o = memvisor(&[
            "trace",
            "convert",
            "--workload",
            workload,
            "--to",
            to,
            "--output",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(!dir.path().join(format!("{name}.partial")).exists());
        let o = memvisor(&[
            "sim",
            "--trace",
            out.to_str().unwrap(),
            "--policy",
            "lru,arc",
            "--size",
            "300",
            "-q",
        ]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        tables.push(String::from_utf8(o.stdout).unwrap());
    }
    let o = memvisor(&[
        "sim",
        "--workload",
        workload,
        "--policy",
        "lru,arc",
        "--size",
        "300",
        "-q",
    ]);
    tables.push(String::from_utf8(o.stdout).unwrap());
    for p in ["lru", "arc", "opt"] {
        let m: Vec<u64> = tables.iter().map(|t| misses(t, p)).collect();
        assert!(m.iter().all(|&x| x == m[0]), "{p}: {m:?}");
        assert!(m[0] > 0);
    }
}

#[test]
fn a_malformed_trace_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.lackey");
    std::fs::write(&input, "I  04000000,3\n L 04000100,8\n Q garbage\n").unwrap();
    let out = dir.path().join("out.oracleGeneral");
    let o = memvisor(&[
        "trace",
        "convert",
        "--trace",
        input.to_str().unwrap(),
        "--to",
        "oracle-general",
        "--output",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(e.trim_end().lines().count(), 1, "{e}");
    assert!(e.contains("in.lackey:3"), "{e}");
    assert!(!out.exists(), "output written despite the error");
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "leftovers"
    );
}
