//! A stable-Rust stand-in for the `migration_frame` cargo-fuzz target: thousands of
//! deterministic pseudo-random and mutated inputs through every decoder (message payloads,
//! frame headers, hellos, and a live stream's receive), which must decode, and then round-trip
//! byte for byte, or fail with a one-line error; never panic, never hang.
use std::io::Write;
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::Duration;

use memvisor_migration::{
    decode_payload, encode_payload, FrameHeader, Hello, MemoryStream, Message, MessageKind,
    MigrationError, MigrationKey, RegionInfo, Role, FRAME_HEADER_LEN, HELLO_LEN, MAX_PAYLOAD,
};

/// xorshift64*: small, deterministic, good enough to pick mutations.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound.max(1) as u64) as usize
    }

    fn byte(&mut self) -> u8 {
        self.next() as u8
    }
}

/// Valid inputs: a type byte followed by a payload, for every message.
fn seeds() -> Vec<Vec<u8>> {
    let messages = vec![
        Message::Begin {
            migration: 0xfeed,
            regions: vec![
                RegionInfo {
                    name: "pc.ram".into(),
                    bytes: 1 << 32,
                    page_size: 4096,
                },
                RegionInfo {
                    name: "é".into(),
                    bytes: 0,
                    page_size: 1 << 21,
                },
            ],
        },
        Message::Begin {
            migration: 1,
            regions: vec![],
        },
        Message::Resume { migration: 0xfeed },
        Message::Ready,
        Message::pages(2, 9, 4096, vec![0; 4096]),
        Message::pages(0, 1, 4096, (0..8192u32).map(|i| (i % 253) as u8).collect()),
        Message::page_runs(1, 4096, vec![(3, 1), (4, 2)], vec![7; 3 * 4096]),
        Message::Zero {
            region: 1,
            first_page: 2,
            pages: 3,
        },
        Message::RoundEnd { round: 4, pages: 5 },
        Message::Finish,
        Message::Done { pages: 6, bytes: 7 },
        Message::Abort {
            reason: "disk full".into(),
        },
        Message::Remote {
            region: 0,
            runs: vec![(1, 2), (9, 1)],
        },
        Message::Want {
            region: 1,
            pages: vec![5, 3],
        },
    ];
    messages
        .iter()
        .map(|message| {
            let mut input = vec![message.kind().to_byte()];
            input.extend_from_slice(&encode_payload(message));
            input
        })
        .collect()
}

/// Values that tend to sit on boundaries of length and count fields.
const INTERESTING: &[u8] = &[0, 1, 2, 0x7f, 0x80, 0xff, 0x40, 0x10, 0x20, 0x04, 0x08];

fn mutate(rng: &mut XorShift, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
    for _ in 0..1 + rng.below(4) {
        match rng.below(8) {
            0 if !input.is_empty() => {
                let at = rng.below(input.len());
                input[at] ^= 1 << rng.below(8);
            }
            1 if !input.is_empty() => {
                let at = rng.below(input.len());
                input[at] = INTERESTING[rng.below(INTERESTING.len())];
            }
            2 => {
                let len = rng.below(input.len() + 1);
                input.truncate(len);
            }
            3 => {
                let at = rng.below(input.len() + 1);
                let extra: Vec<u8> = (0..1 + rng.below(8)).map(|_| rng.byte()).collect();
                input.splice(at..at, extra);
            }
            4 if !input.is_empty() => {
                // Overwrite a little-endian field with a boundary value.
                let at = rng.below(input.len());
                let value: u64 = match rng.below(5) {
                    0 => 0,
                    1 => u64::MAX,
                    2 => u32::MAX as u64,
                    3 => MAX_PAYLOAD as u64 + 1,
                    _ => 1 << rng.below(64),
                };
                for (offset, byte) in value
                    .to_le_bytes()
                    .iter()
                    .enumerate()
                    .take(1 + rng.below(8))
                {
                    if let Some(slot) = input.get_mut(at + offset) {
                        *slot = *byte;
                    }
                }
            }
            5 if !input.is_empty() => {
                input[0] = rng.below(10) as u8;
            }
            6 => {
                let other = &pool[rng.below(pool.len())];
                let from = rng.below(other.len() + 1);
                let at = rng.below(input.len() + 1);
                input.truncate(at);
                input.extend_from_slice(&other[from..]);
            }
            _ => input.push(rng.byte()),
        }
    }
}

fn assert_one_line(error: &MigrationError) {
    let text = error.to_string();
    assert!(!text.is_empty() && !text.contains('\n'), "{text:?}");
}

/// The fuzz target's checks for one input.
fn check(input: &[u8]) -> bool {
    let mut decoded = false;
    if let Some((&kind, payload)) = input.split_first() {
        match decode_payload(kind, payload) {
            Ok(message) => {
                decoded = true;
                assert_eq!(message.kind().to_byte(), kind);
                message.validate().unwrap();
                let encoded = encode_payload(&message);
                assert_eq!(encoded, payload, "{message:?} re-encodes byte for byte");
                assert_eq!(decode_payload(kind, &encoded).unwrap(), message);
            }
            Err(error) => assert_one_line(&error),
        }
    }
    for header in [input, &input[..input.len().min(FRAME_HEADER_LEN)]] {
        match FrameHeader::parse(header) {
            Ok(parsed) => {
                assert_eq!(parsed.encode(), header);
                assert!(parsed.payload_len as usize <= MAX_PAYLOAD);
            }
            Err(error) => assert_one_line(&error),
        }
    }
    match Hello::parse(input) {
        Ok(hello) => assert_eq!(hello.encode(), input),
        Err(error) => assert_one_line(&error),
    }
    decoded
}

#[test]
fn seeds_decode_and_round_trip() {
    for seed in seeds() {
        assert!(check(&seed), "seed {seed:?}");
    }
}

#[test]
fn mutated_inputs_decode_or_fail_cleanly() {
    let pool = seeds();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let mut decoded = 0;
    for round in 0..20_000 {
        let mut input = pool[round % pool.len()].clone();
        mutate(&mut rng, &mut input, &pool);
        decoded += usize::from(check(&input));
    }
    // Mutations outside checksummed data still decode; the round trips above were exercised.
    assert!(decoded > 500, "only {decoded} mutated inputs decoded");
}

#[test]
fn random_inputs_fail_cleanly() {
    let mut rng = XorShift(0x1234_5678_9abc_def1);
    for _ in 0..20_000 {
        let len = rng.below(64);
        let mut input: Vec<u8> = (0..len).map(|_| rng.byte()).collect();
        if let Some(kind) = input.first_mut() {
            *kind = rng.below(10) as u8;
        }
        check(&input);
    }
}

#[test]
fn mutated_frame_headers_and_hellos_fail_cleanly() {
    let mut pool: Vec<Vec<u8>> = MessageKind::ALL
        .iter()
        .map(|&kind| {
            FrameHeader {
                kind,
                payload_len: 20,
            }
            .encode()
            .to_vec()
        })
        .collect();
    pool.push(Hello::new(Role::Source).unwrap().encode().to_vec());
    pool.push(Hello::new(Role::Destination).unwrap().encode().to_vec());
    let mut rng = XorShift(0xdead_beef_cafe_f00d);
    let mut parsed = 0;
    for round in 0..20_000 {
        let mut input = pool[round % pool.len()].clone();
        mutate(&mut rng, &mut input, &pool);
        check(&input);
        if (input.len() == FRAME_HEADER_LEN && FrameHeader::parse(&input).is_ok())
            || (input.len() == HELLO_LEN && Hello::parse(&input).is_ok())
        {
            parsed += 1;
        }
    }
    assert!(
        parsed > 500,
        "only {parsed} mutated headers and hellos parsed"
    );
}

#[test]
fn junk_after_a_handshake_is_refused_without_hanging() {
    let key = MigrationKey::from_bytes(&[3; 32]).unwrap();
    let mut rng = XorShift(0x0bad_5eed_0bad_5eed);
    for _ in 0..100 {
        let (a, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let destination_key = key.clone();
        let destination =
            thread::spawn(move || MemoryStream::handshake(b, &destination_key, Role::Destination));
        let mut source = MemoryStream::handshake(a, &key, Role::Source).unwrap();
        let mut destination = destination.join().unwrap().unwrap();
        // Junk, often starting with a plausible header, then the end of the stream.
        let mut junk: Vec<u8> = (0..rng.below(200)).map(|_| rng.byte()).collect();
        if rng.below(2) == 0 {
            let kind = MessageKind::ALL[rng.below(MessageKind::ALL.len())];
            let header = FrameHeader {
                kind,
                payload_len: rng.below(64) as u32,
            };
            junk.splice(0..0, header.encode());
        }
        source.get_mut().write_all(&junk).unwrap();
        source.get_mut().shutdown(Shutdown::Write).unwrap();
        let error = destination.receive().unwrap_err();
        assert!(
            matches!(
                error,
                MigrationError::Integrity { .. }
                    | MigrationError::UnexpectedEnd { .. }
                    | MigrationError::FrameTooLarge { .. }
            ),
            "{error}"
        );
        assert_one_line(&error);
        assert!(destination.receive().is_err());
    }
}
