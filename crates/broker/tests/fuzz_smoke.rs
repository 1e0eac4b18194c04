//! A stable-Rust stand-in for the `broker_limit` cargo-fuzz target: thousands of deterministic
//! random and mutated `--limit` values through the parser, which must parse (a selector,
//! MIN <= MAX) or fail with a message naming the option, never panic.

use memvisor_broker::ProcessLimit;

const PIECES: &[&str] = &[
    "vm1",
    "=",
    ":",
    "1",
    "512M",
    "2G",
    "0",
    "18446744073709551615",
    "99999999999T",
    "%",
    "50%",
    "K",
    "iB",
    " ",
    "",
    "-",
    "1.5G",
    "NaN",
    "inf",
    "é",
    "\n",
    "==",
    "::",
];

fn check(s: &str) {
    match s.parse::<ProcessLimit>() {
        Ok(l) => {
            assert!(!l.selector.is_empty(), "{s:?}");
            if let (Some(lo), Some(hi)) = (l.min, l.max) {
                assert!(lo <= hi, "{s:?}");
            }
        }
        Err(e) => assert!(e.to_string().contains("--limit"), "{s:?}: {e}"),
    }
}

#[test]
fn limits_parse_or_fail_cleanly() {
    let mut x = 7u64;
    let mut next = |m: usize| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (x >> 33) as usize % m
    };
    for _ in 0..20_000 {
        let n = 1 + next(7);
        let s: String = (0..n).map(|_| PIECES[next(PIECES.len())]).collect();
        check(&s);
        let mut bytes = s.into_bytes();
        if !bytes.is_empty() {
            let i = next(bytes.len());
            bytes[i] = next(128) as u8;
        }
        if let Ok(m) = String::from_utf8(bytes) {
            check(&m);
        }
    }
}
