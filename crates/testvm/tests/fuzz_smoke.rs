//! A stable-Rust stand-in for the `result_line` cargo-fuzz target: deterministic mutations of
//! real console lines must parse or fail with a `ResultLine` error naming the right line, never
//! panic.
use memvisor_policy::DeterministicRng;

use memvisor_testvm::{parse_console, parse_result_line, TestVmError, RESULT_MARKER};

/// Lines as the guest prints them.
const SAMPLES: &[&str] = &[
    "MEMVISOR-RESULT start uptime_ms=1740 mem_available_kib=450560 command=\"mem 256 --patterns seq,zipf\"\r",
    "MEMVISOR-RESULT phase=write mib=256 pages=65536 reads=65536 ms=1853.4 mbps=144.8 ok=1 errors=0 anon_huge_kib=-1",
    "MEMVISOR-RESULT phase=zipf pass=1 mib=256 pages=65536 reads=65536 ms=116.9 mbps=2296.7 ok=0 errors=2 first_bad_page=77",
    "MEMVISOR-RESULT phase=disk pattern=random dev=/dev/vda block=4096 blocks=32768 reads=37056 bytes=151781376 ms=2000.4 mbps=75.9 verified=1 ok=1 errors=0",
    "MEMVISOR-RESULT phase=disk pattern=zipf dev=/dev/vda block=4096 blocks=65536 reads=10000 bytes=40960000 ms=9999.8 mbps=4.1 verified=1 rate=1000.0 p50_us=41 p99_us=1290 ok=1 errors=0",
    "MEMVISOR-RESULT error message=\"mem: unknown pattern 'x\\\"y' in --patterns\"",
    "MEMVISOR-RESULT done ok=0 errors=1 first_bad_block=777\r",
    "[    1.772602] reboot: Power down",
];

/// Fragments that reach the tokenizer's and field parsers' edges.
const TOKENS: &[&str] = &[
    " ",
    "=",
    "\"",
    "\\",
    "\\\"",
    "\r",
    "\n",
    "phase=",
    "done",
    "ok=",
    "1",
    "0",
    "-1",
    "nan",
    "1e999",
    "18446744073709551616",
    "é",
    "MEMVISOR-RESULT ",
    "\t",
];

fn mutate(rng: &mut DeterministicRng, input: &str) -> String {
    let mut chars: Vec<char> = input.chars().collect();
    for _ in 0..1 + rng.index(4) {
        let at = rng.index(chars.len() + 1);
        match rng.index(4) {
            0 if at < chars.len() => {
                chars.remove(at);
            }
            1 => {
                let token = TOKENS[rng.index(TOKENS.len())];
                chars.splice(at..at, token.chars());
            }
            2 if at < chars.len() => chars.truncate(at),
            _ => chars.insert(at, char::from(b" =\"\\a1.-"[rng.index(8)])),
        }
    }
    chars.into_iter().collect()
}

/// Checks the parser's contract on one console text; returns whether it parsed cleanly.
fn check(text: &str) -> bool {
    let mut first_error = None;
    for (i, line) in text.lines().enumerate() {
        match parse_result_line(line, i + 1) {
            None => assert!(!line.contains(RESULT_MARKER), "{line:?}"),
            Some(Ok(_)) => {}
            Some(Err(TestVmError::ResultLine {
                line: n, reason, ..
            })) => {
                assert_eq!(n, i + 1);
                assert!(!reason.is_empty());
                first_error.get_or_insert(n);
            }
            Some(Err(e)) => panic!("unexpected error kind: {e}"),
        }
    }
    match parse_console(text) {
        Ok(_) => {
            assert!(first_error.is_none());
            true
        }
        Err(TestVmError::ResultLine { line, .. }) => {
            assert_eq!(Some(line), first_error);
            false
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
}

#[test]
fn samples_parse() {
    assert!(check(&SAMPLES.join("\n")));
}

#[test]
fn result_lines_survive_mutations() {
    let mut rng = DeterministicRng::new(11);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..20_000 {
        let lines = 1 + rng.index(3);
        let text: Vec<String> = (0..lines)
            .map(|_| {
                let mut line = SAMPLES[rng.index(SAMPLES.len())].to_string();
                for _ in 0..rng.index(3) {
                    line = mutate(&mut rng, &line);
                }
                line
            })
            .collect();
        if check(&text.join("\n")) {
            ok += 1;
        } else {
            err += 1;
        }
    }
    assert!(ok > 1000 && err > 1000, "ok {ok} err {err}");
}
