//! `memvisor sim` end to end: the real binary, real files.

use std::path::Path;
use std::process::{Command, Output};

fn memvisor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memvisor"))
        .args(args)
        .output()
        .expect("run memvisor")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn sweep_prints_a_table_and_writes_csv_json_and_svg() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("r.csv");
    let json = dir.path().join("r.json");
    let svg = dir.path().join("r.svg");
    let o = memvisor(&[
        "sim",
        "--workload",
        "zipf:n=2000:alpha=0.9:len=40000",
        "--policy",
        "all",
        "--size",
        "5%,20%",
        "--out",
        csv.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    assert!(table.contains("gap to OPT"), "{table}");
    let policies: Vec<String> = memvisor_policy::PolicySpec::all()
        .iter()
        .map(|p| p.to_string())
        .collect();
    for p in &policies {
        assert!(
            table.lines().any(|l| l.starts_with(p.as_str())),
            "{p} missing:\n{table}"
        );
    }
    let rows = std::fs::read_to_string(&csv).unwrap();
    // header + 2 sizes per policy (OPT included in PolicySpec::all()).
    assert_eq!(rows.lines().count(), 1 + 2 * policies.len(), "{rows}");
    // OPT is a lower bound: every online policy's gap is >= 0.
    for line in rows.lines().skip(1) {
        let gap: f64 = line.split(',').nth(6).unwrap().parse().unwrap();
        assert!(gap >= -1e-12, "negative gap to OPT: {line}");
    }
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(svg_text.starts_with("<svg") && svg_text.contains("<polyline"));

    let o = memvisor(&[
        "sim",
        "--workload",
        "uniform:n=500:len=5000",
        "--policy",
        "lru,clock",
        "--size",
        "50",
        "--model",
        "sampled",
        "--no-opt",
        "--out",
        json.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["model"], "sampled");
    assert_eq!(v["rows"].as_array().unwrap().len(), 2);
    assert!(v["rows"][0]["gap_to_opt"].is_null());
}

#[test]
fn text_trace_replays_with_the_format_detected() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("ids.txt");
    std::fs::write(&trace, "1\n2\n1\n3\n2\n").unwrap();
    let o = memvisor(&[
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "lru,fifo",
        "--size",
        "2",
        "-q",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let table = String::from_utf8(o.stdout).unwrap();
    // Capacity 2 over 1 2 1 3 2. LRU: 3 evicts 2, which misses again (4 misses).
    // FIFO: 3 evicts 1, the final 2 hits (3). OPT: 3 evicts 1, never used again (3).
    let misses = |p: &str| -> u64 {
        let line = table.lines().find(|l| l.starts_with(p)).unwrap();
        line.split_whitespace().nth(3).unwrap().parse().unwrap()
    };
    assert_eq!(misses("lru"), 4, "{table}");
    assert_eq!(misses("fifo"), 3, "{table}");
    assert_eq!(misses("opt"), 3, "{table}");
}

#[test]
fn bad_input_is_one_line_and_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (&["sim", "--policy", "lru,nope"], "unknown policy \"nope\""),
        (&["sim", "--size", "0"], "size \"0\""),
        (&["sim", "--size", "150%"], "size \"150%\""),
        (&["sim", "--model", "psychic"], "--model"),
        (&["sim", "--sample-every", "0"], "--sample-every"),
        (
            &["sim", "--trace", "/nonexistent/trace.txt"],
            "/nonexistent/trace.txt",
        ),
        (&["sim", "--workload", "nosuch:n=5"], "--workload"),
        (&["sim", "--out", "x.txt"], "x.txt"),
        (&["sim", "--policy", "chunk-queues:m=99"], "chunk-queues"),
    ];
    for (args, expect) in cases {
        let o = memvisor(args);
        assert!(!o.status.success(), "{args:?} succeeded");
        let e = stderr(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "{args:?}: {e}");
        assert!(e.contains(expect), "{args:?}: {e}");
    }
    // A malformed trace names the file and the line.
    let trace = dir.path().join("bad.txt");
    std::fs::write(&trace, "1\n2\nnot-a-number\n").unwrap();
    let o = memvisor(&["sim", "--trace", trace.to_str().unwrap(), "--size", "2"]);
    assert!(!o.status.success());
    let e = stderr(&o);
    assert!(e.contains("bad.txt") && e.contains('3'), "{e}");
    assert!(!Path::new("x.txt").exists());
}

#[test]
fn help_exists_for_every_subcommand() {
    for args in [&["--help"][..], &["sim", "--help"]] {
        let o = memvisor(args);
        assert!(o.status.success());
        assert!(String::from_utf8_lossy(&o.stdout).contains("Usage"));
    }
}

#[test]
fn unwritable_outputs_fail_before_the_simulation() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("r.csv");
    for (arg, path) in [
        ("--out", "/nonexistent/x.csv"),
        ("--plot", "/nonexistent/x.svg"),
    ] {
        let start = std::time::Instant::now();
        let o = memvisor(&[
            "sim",
            "--workload",
            "zipf:n=200000:alpha=0.7:len=4000000",
            "--policy",
            "all",
            "--sweep",
            "-q",
            if arg == "--out" { "--plot" } else { "--out" },
            good.to_str().unwrap(),
            arg,
            path,
        ]);
        let took = start.elapsed();
        assert!(!o.status.success(), "{arg} {path} accepted");
        let e = stderr(&o);
        assert_eq!(e.trim_end().lines().count(), 1, "{e}");
        assert!(
            e.contains(&format!("{path}: cannot open its directory")),
            "{e}"
        );
        // Nothing was simulated: no table, no other output, and no time spent.
        assert!(
            o.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
        assert!(!good.exists());
        assert!(took < std::time::Duration::from_secs(5), "took {took:?}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "leftovers"
    );
}
