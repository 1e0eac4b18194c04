//! A stable-Rust stand-in for the `control_protocol` cargo-fuzz target: thousands of
//! deterministic random and mutated lines through the decoders, which must decode (and then
//! round-trip) or fail cleanly, never panic.
use memvisor_policy::DeterministicRng;

use memvisor_control::protocol::{
    decode_request, decode_response, encode_request, encode_response, read_line_limited,
    MAX_REQUEST_BYTES,
};
use memvisor_control::{ByteSize, ProcessStatus, RegionStatus, Request, Response};

const TOKENS: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b"\"",
    b":",
    b",",
    b"\n",
    b"\\",
    b"\\u0000",
    b"\"v\"",
    b"1",
    b"2",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\"op\"",
    b"\"status\"",
    b"\"set\"",
    b"\"budget_bytes\"",
    b"\"policy\"",
    b"\"ok\"",
    b"true",
    b"false",
    b"null",
    b"\"error\"",
    b"\xff",
    b"\xc3",
    b" ",
];

fn seeds() -> Vec<Vec<u8>> {
    let status = ProcessStatus {
        pid: 1,
        program: "p".into(),
        regions: vec![RegionStatus::default()],
        ..Default::default()
    };
    vec![
        encode_request(&Request::Status),
        encode_request(&Request::Set {
            budget_bytes: Some(1 << 30),
            policy: Some("clock".into()),
        }),
        encode_response(&Response::status(status)),
        encode_response(&Response::error("x")),
    ]
}

#[test]
fn decoders_never_panic_and_round_trip() {
    let mut rng = DeterministicRng::new(42);
    let seeds = seeds();
    let (mut requests, mut responses) = (0, 0);
    for i in 0..20_000 {
        let mut data = if i % 4 == 0 {
            (0..rng.index(64)).map(|_| rng.next_u64() as u8).collect()
        } else {
            seeds[rng.index(seeds.len())].clone()
        };
        for _ in 0..1 + rng.index(3) {
            let at = rng.index(data.len() + 1);
            match rng.index(3) {
                0 => {
                    let t = TOKENS[rng.index(TOKENS.len())];
                    data.splice(at..at, t.iter().copied());
                }
                1 if at < data.len() => {
                    let end = (at + 1 + rng.index(8)).min(data.len());
                    data.drain(at..end);
                }
                _ if at < data.len() => data[at] = rng.next_u64() as u8,
                _ => {}
            }
        }
        if let Ok(r) = decode_request(&data) {
            requests += 1;
            assert_eq!(decode_request(&encode_request(&r)).unwrap(), r);
        }
        if let Ok(r) = decode_response(&data) {
            responses += 1;
            assert_eq!(decode_response(&encode_response(&r)).unwrap(), r);
        }
        let mut input = &data[..];
        while let Ok(Some(line)) = read_line_limited(&mut input, 32) {
            assert!(line.len() <= 32);
        }
        let _ = ByteSize::parse(&String::from_utf8_lossy(&data));
    }
    // The mutations must reach the success paths too, or this test proves little.
    assert!(requests > 100 && responses > 100, "{requests} {responses}");
    assert!(decode_request(&vec![b'{'; MAX_REQUEST_BYTES + 1]).is_err());
}
