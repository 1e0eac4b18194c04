//! A stable-Rust stand-in for the `resp_reply` cargo-fuzz target: deterministic random and
//! mutated RESP streams through the reply reader, which must return replies or a clean error,
//! never panic, and never return more bulk bytes than it was given.
use memvisor_policy::DeterministicRng;

use memvisor_bench::resp_connection::{encode_command, read_reply, RespReply};

const TOKENS: &[&[u8]] = &[
    b"+OK\r\n",
    b"-ERR x\r\n",
    b":12\r\n",
    b"$3\r\nabc\r\n",
    b"$-1\r\n",
    b"$0\r\n\r\n",
    b"$99999999\r\n",
    b"$",
    b"\r\n",
    b"\r",
    b"*2\r\n",
    b":-\r\n",
    b"x",
];

fn read_all(data: &[u8]) -> usize {
    let mut input = data;
    let mut n = 0;
    while !input.is_empty() {
        match read_reply(&mut input, "smoke") {
            Ok(RespReply::Bulk(Some(v))) => assert!(v.len() <= data.len()),
            Ok(_) => {}
            Err(_) => break,
        }
        n += 1;
    }
    n
}

#[test]
fn random_and_mutated_streams_never_panic() {
    let mut rng = DeterministicRng::new(7);
    for _ in 0..20_000 {
        let mut data = Vec::new();
        for _ in 0..rng.index(8) {
            data.extend_from_slice(TOKENS[rng.index(TOKENS.len())]);
        }
        for _ in 0..rng.index(3) {
            if !data.is_empty() {
                let i = rng.index(data.len());
                data[i] = rng.next_u64() as u8;
            }
        }
        read_all(&data);
        // Commands are valid RESP arrays the reader refuses cleanly (it reads replies only).
        let mut cmd = Vec::new();
        encode_command(&mut cmd, &[&data]);
        read_all(&cmd);
    }
    // Unmutated streams of well-formed replies read completely.
    let stream = b"+OK\r\n$3\r\nabc\r\n:5\r\n$-1\r\n-ERR e\r\n";
    assert_eq!(read_all(stream), 5);
}
