//! Records a real lackey trace of `/bin/true` with valgrind and reads it completely.

use std::process::Command;

use memvisor_trace::{open_trace, TraceFormat};

#[test]
fn real_valgrind_lackey_trace() {
    if Command::new("valgrind").arg("--version").output().is_err() {
        println!("SKIPPED: valgrind is not installed");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("true.lackey");
    let status = Command::new("valgrind")
        .arg("--tool=lackey")
        .arg("--trace-mem=yes")
        .arg(format!("--log-file={}", log.display()))
        .arg("/bin/true")
        .status()
        .expect("run valgrind");
    assert!(status.success(), "valgrind failed: {status}");

    // Line counts by kind, straight from the file.
    let text = std::fs::read_to_string(&log).unwrap();
    let count = |k: char| {
        text.lines()
            .filter(|l| !l.starts_with("==") && l.trim_start().starts_with(k))
            .count() as u64
    };
    let (i_lines, data_lines) = (count('I'), count('L') + count('S') + count('M'));

    let count_requests = |spec: &str| -> u64 {
        let format: TraceFormat = spec.parse().unwrap();
        let mut n = 0;
        for r in open_trace(&log, &format).unwrap() {
            r.unwrap_or_else(|e| panic!("{spec}: {e}"));
            n += 1;
        }
        n
    };
    let all = count_requests("lackey");
    let data = count_requests("lackey:instructions=false");
    let instructions = all - data;
    println!(
        "lines: {i_lines} I, {data_lines} L/S/M; requests: {all} total, {instructions} \
         instruction, {data} data"
    );
    assert!(instructions > 1000 && data > 1000, "{instructions} {data}");
    assert!(data < all);
    // Page crossings add a few requests, never remove any.
    assert!(instructions >= i_lines && data >= data_lines);
    assert!(all - i_lines - data_lines < (i_lines + data_lines) / 100);
    // Byte-granular pages: far more crossings, still parses.
    let bytes = count_requests("lackey:page-size=1");
    assert!(bytes > all);
    assert_eq!(TraceFormat::detect(&log), Some(TraceFormat::LACKEY));
}
