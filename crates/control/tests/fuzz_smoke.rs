//! A stable-Rust stand-in for the `control_protocol` and `metrics_http` cargo-fuzz targets:
//! thousands of deterministic random and mutated inputs through the decoders, which must
//! decode (and then round-trip, and pass or fail `SetRules`) or fail cleanly, never panic; and
//! through the metrics request-head parser, with the target's invariants.
use memvisor_policy::DeterministicRng;

use memvisor_control::http_request::{MetricsRequest, MAX_HEAD_BYTES};
use memvisor_control::protocol::{
    decode_request, decode_response, encode_request, encode_response, read_line_limited,
    MAX_REQUEST_BYTES,
};
use memvisor_control::{
    ByteSize, ProcessState, ProcessStatus, RegionStatus, Request, Response, SetRules,
};

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
    b"\"refaults\"",
    b"\"unit_bytes\"",
    b"\"sub_buckets\"",
    b"\"set_image_cache\"",
    b"\"limit_bytes\"",
    b"\"image\"",
    b"\"cache_refaults\"",
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
        images: vec![memvisor_control::ImageStatus::default()],
        ..Default::default()
    };
    vec![
        encode_request(&Request::Status),
        encode_request(&Request::Set {
            budget_bytes: Some(1 << 30),
            policy: Some("clock".into()),
        }),
        encode_request(&Request::SetImageCache {
            limit_bytes: Some(64 << 20),
            image: Some("/var/lib/disk.img".into()),
        }),
        encode_response(&Response::status(status)),
        encode_response(&Response::error("x")),
        encode_response(&Response::busy("full")),
        b"{\"v\":1,\"op\":\"set\",\"budget_bytes\":18446744073709551615,\"policy\":\"s3-fifo:small=0.5\"}".to_vec(),
    ]
}

/// Applies one to three random edits to `data`: insert a token, delete a run, flip a byte.
fn mutate(rng: &mut DeterministicRng, data: &mut Vec<u8>, tokens: &[&[u8]]) {
    for _ in 0..1 + rng.index(3) {
        let at = rng.index(data.len() + 1);
        match rng.index(3) {
            0 => {
                let t = tokens[rng.index(tokens.len())];
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
}

const HTTP_TOKENS: &[&[u8]] = &[
    b"GET",
    b"POST",
    b" ",
    b"/metrics",
    b"/",
    b"?",
    b"HTTP/1.1",
    b"\r\n",
    b"\n",
    b"\r\n\r\n",
    b"Host: x",
    b"\xff",
    b"\t",
];

#[test]
fn metrics_request_parser_never_panics() {
    let mut rng = DeterministicRng::new(7);
    let seeds: [&[u8]; 4] = [
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.0\n\n",
        b"POST /metrics HTTP/1.0\r\n\r\n",
        b"GET /nope",
    ];
    let mut kinds = std::collections::HashSet::new();
    for i in 0..20_000 {
        let mut data = if i % 4 == 0 {
            (0..rng.index(64)).map(|_| rng.next_u64() as u8).collect()
        } else {
            seeds[rng.index(seeds.len())].to_vec()
        };
        mutate(&mut rng, &mut data, HTTP_TOKENS);
        if i % 500 == 0 {
            data.resize(MAX_HEAD_BYTES + rng.index(3), b'a');
        }
        // The same checks as fuzz/fuzz_targets/metrics_http.rs.
        for closed in [false, true] {
            let request = MetricsRequest::parse(&data, closed);
            assert_eq!(
                request == MetricsRequest::TooLarge,
                data.len() > MAX_HEAD_BYTES
            );
            assert!(!(closed && request == MetricsRequest::Incomplete));
            assert!(!request.status().is_empty());
            kinds.insert(format!("{request:?}"));
        }
    }
    // Every outcome is reached, or this test proves little.
    assert_eq!(kinds.len(), 6, "{kinds:?}");
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
        mutate(&mut rng, &mut data, TOKENS);
        if let Ok(r) = decode_request(&data) {
            requests += 1;
            assert_eq!(decode_request(&encode_request(&r)).unwrap(), r);
            if let Request::Set {
                budget_bytes,
                policy,
            } = &r
            {
                let rules = SetRules {
                    host_ram_bytes: 1 << 30,
                    chunk_bytes: 1 << 20,
                };
                let _ = rules.check(*budget_bytes, policy.as_deref());
            }
            if let Request::SetImageCache {
                limit_bytes: Some(bytes),
                ..
            } = &r
            {
                let rules = SetRules {
                    host_ram_bytes: 1 << 30,
                    chunk_bytes: 1 << 20,
                };
                let _ = rules.check_image_cache(*bytes);
            }
        }
        let _ = ProcessState::from_stat_line(&data);
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
