//! A stable-Rust stand-in for the `qmp_reply` cargo-fuzz target: thousands of deterministic
//! random and mutated lines through `parse_reply` and `QmpAddress::from_str`, which must decode
//! or fail cleanly (one-line `Malformed` errors), never panic; parsed addresses round-trip
//! through `Display`.

use memvisor_qmp::{parse_reply, QmpAddress, QmpError, QmpReply};

/// xorshift64*: tiny, deterministic.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn index(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\n",
    b"\r",
    b"\\",
    b"\\u0000",
    b"\\ud800",
    b"1",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"true",
    b"null",
    b"\"QMP\"",
    b"\"return\"",
    b"\"error\"",
    b"\"event\"",
    b"\"id\"",
    b"\"class\"",
    b"\"desc\"",
    b"\"data\"",
    b"\"timestamp\"",
    b"unix:",
    b"tcp:",
    b"/",
    b"[::1]",
    b"\xff",
    b"\xc3",
    b"\0",
    b" ",
];

const SEEDS: &[&[u8]] = &[
    br#"{"QMP": {"version": {"qemu": {"micro": 0, "minor": 2, "major": 7}, "package": "Debian 1:7.2+dfsg-7"}, "capabilities": ["oob"]}}"#,
    br#"{"return": {}, "id": 1}"#,
    br#"{"return": {"status": "prelaunch", "singlestep": false, "running": false}, "id": 2}"#,
    br#"{"id": 3, "error": {"class": "CommandNotFound", "desc": "The command nope has not been found"}}"#,
    br#"{"error": {"class": "GenericError", "desc": "JSON parse error, invalid keyword"}}"#,
    br#"{"timestamp": {"seconds": 1700000000, "microseconds": 5}, "event": "MIGRATION", "data": {"status": "pre-switchover"}}"#,
    br#"{"timestamp": {"seconds": 1, "microseconds": 2}, "event": "STOP"}"#,
    br#"{"return": {"status": "completed", "setup-time": 5, "downtime": 260, "total-time": 267, "ram": {"transferred": 201910, "total": 532480}}, "id": 9}"#,
    b"unix:/run/memvisor/qmp.sock",
    b"tcp:127.0.0.1:4444",
    b"tcp:[::1]:1",
    b"/tmp/q.sock",
];

/// Applies one to three random edits to `data`: insert a token, delete a run, flip a byte.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.index(3) {
        let at = rng.index(data.len() + 1);
        match rng.index(3) {
            0 => {
                let token = TOKENS[rng.index(TOKENS.len())];
                data.splice(at..at, token.iter().copied());
            }
            1 if at < data.len() => {
                let end = (at + 1 + rng.index(8)).min(data.len());
                data.drain(at..end);
            }
            _ if at < data.len() => data[at] ^= 1 << rng.index(8),
            _ => data.push(rng.next() as u8),
        }
    }
}

/// What the fuzz target checks for one input.
fn check(data: &[u8]) -> bool {
    let decoded = match parse_reply(data) {
        Ok(QmpReply::Greeting(_) | QmpReply::Return { .. } | QmpReply::Error { .. }) => true,
        Ok(QmpReply::Event(event)) => {
            assert!(data.len() >= event.name.len());
            true
        }
        Err(e @ QmpError::Malformed { .. }) => {
            assert!(!e.to_string().contains('\n'), "{e}");
            false
        }
        Err(other) => panic!("{other:?}"),
    };
    if let Ok(text) = std::str::from_utf8(data) {
        match text.parse::<QmpAddress>() {
            Ok(address) => {
                let shown = address.to_string();
                assert_eq!(shown.parse::<QmpAddress>().unwrap(), address, "{shown}");
            }
            Err(e) => {
                assert!(matches!(e, QmpError::Address { .. }), "{e:?}");
            }
        }
    }
    decoded
}

#[test]
fn mutated_replies_and_addresses_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut decoded = 0;
    let mut total = 0;
    for round in 0..6000 {
        let mut data = SEEDS[round % SEEDS.len()].to_vec();
        for _ in 0..1 + rng.index(2) {
            mutate(&mut rng, &mut data);
        }
        decoded += usize::from(check(&data));
        total += 1;
    }
    // The mutations keep a fair share decodable, so the decoders' inner paths are exercised.
    assert!(decoded > total / 20, "{decoded} of {total} decoded");
    for _ in 0..2000 {
        let len = rng.index(64);
        let data: Vec<u8> = (0..len)
            .map(|_| {
                if rng.index(2) == 0 {
                    TOKENS[rng.index(TOKENS.len())][0]
                } else {
                    rng.next() as u8
                }
            })
            .collect();
        check(&data);
    }
    for seed in SEEDS {
        check(seed);
    }
}
