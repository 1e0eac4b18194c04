//! A stable-Rust stand-in for the cargo-fuzz targets `proc_maps` and `ksm_stat`: thousands of
//! deterministic mutations of real inputs through the parsers, which must return a value or an
//! error naming the line, never panic.
use memvisor_policy::DeterministicRng;

use memvisor_dedup::{parse_number, parse_stat_cpu_ticks, MapEntry, ProcessKsmStat};

const TOKENS: &[&str] = &[
    " ",
    "\n",
    "-",
    ":",
    "0",
    "ffffffffffffffffff",
    "rw-p",
    "r-xs",
    "[heap]",
    "/memfd:x",
    "yes",
    "no",
    "-1",
    "99999999999999999999999",
    "(",
    ")",
    "\u{e9}",
    "\t",
];

fn mutate(rng: &mut DeterministicRng, input: &str) -> String {
    let mut s: Vec<char> = input.chars().collect();
    for _ in 0..1 + rng.index(4) {
        let at = rng.index(s.len() + 1);
        match rng.index(4) {
            0 if !s.is_empty() => {
                s.remove(at.min(s.len() - 1));
            }
            1 => {
                let t = TOKENS[rng.index(TOKENS.len())];
                for (k, c) in t.chars().enumerate() {
                    s.insert(at + k, c);
                }
            }
            2 if at < s.len() => s.truncate(at),
            _ => s.insert(at, char::from(b' ' + rng.index(95) as u8)),
        }
    }
    s.into_iter().collect()
}

#[test]
fn maps_lines_never_panic() {
    let seeds = std::fs::read_to_string("/proc/self/maps").unwrap();
    let mut rng = DeterministicRng::new(1);
    let lines: Vec<&str> = seeds.lines().collect();
    for _ in 0..5000 {
        let pick = lines[rng.index(lines.len())];
        let line = mutate(&mut rng, pick);
        if let Ok(e) = MapEntry::parse(&line) {
            assert!(e.start <= e.end);
        }
        let file = format!("{}\n{line}\n", lines[0]);
        if let Err(e) = MapEntry::parse_all(&file, "maps".as_ref()) {
            // The first line is valid; mutations may add lines after it.
            let msg = e.to_string();
            assert!(
                msg.starts_with("maps:") && !msg.starts_with("maps:1:"),
                "{msg}"
            );
        }
    }
}

#[test]
fn ksm_texts_never_panic() {
    let stat = std::fs::read_to_string("/proc/self/ksm_stat").unwrap();
    let pstat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let mut rng = DeterministicRng::new(2);
    for _ in 0..5000 {
        let t = mutate(&mut rng, &stat);
        if let Err((line, _)) = ProcessKsmStat::parse(&t) {
            assert!(line >= 1 && line <= t.lines().count());
        }
        let _ = parse_number(&mutate(&mut rng, "12345\n"));
        let _ = parse_stat_cpu_ticks(&mutate(&mut rng, &pstat));
    }
}
