//! A stable-Rust stand-in for the cargo-fuzz targets: every reader and the spec parsers get a
//! few thousand deterministic random and mutated inputs, and must return (requests or an
//! error), never panic, and terminate. Errors must name the input.
use memvisor_policy::DeterministicRng;

use std::io::Cursor;

use memvisor_trace::{Request, TraceError, TraceFormat, TraceReader, WorkloadSpec};

/// Fragments that tend to reach interesting branches.
const TOKENS: &[&[u8]] = &[
    b"\n",
    b"\r\n",
    b",",
    b";",
    b"\t",
    b" ",
    b"\"",
    b"\"\"",
    b"#",
    b"==",
    b"0x",
    b"0X",
    b"ffffffffffffffff",
    b"18446744073709551616",
    b"99999999999999999999999",
    b"-1",
    b"0",
    b"I  ",
    b" L ",
    b" S ",
    b" M ",
    b"\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\0",
    b"=",
    b":",
    b"1048577",
    b"\x28\xb5\x2f\xfd",
];

fn mutate(rng: &mut DeterministicRng, input: &[u8]) -> Vec<u8> {
    let mut data = input.to_vec();
    for _ in 0..1 + rng.index(4) {
        let at = if data.is_empty() {
            0
        } else {
            rng.index(data.len() + 1)
        };
        match rng.index(7) {
            0 if !data.is_empty() => {
                let i = rng.index(data.len());
                data[i] ^= 1 << rng.index(8);
            }
            1 if !data.is_empty() => {
                let i = rng.index(data.len());
                data[i] = rng.next_u64() as u8;
            }
            2 => data.insert(at, rng.next_u64() as u8),
            3 if at < data.len() => {
                let end = (at + 1 + rng.index(8)).min(data.len());
                data.drain(at..end);
            }
            4 => {
                let t = TOKENS[rng.index(TOKENS.len())];
                data.splice(at..at, t.iter().copied());
            }
            5 if !data.is_empty() => {
                data.truncate(rng.index(data.len()));
            }
            _ => {
                // Duplicate a chunk somewhere else.
                if !data.is_empty() {
                    let from = rng.index(data.len());
                    let end = (from + 1 + rng.index(32)).min(data.len());
                    let chunk: Vec<u8> = data[from..end].to_vec();
                    data.splice(at..at, chunk);
                }
            }
        }
    }
    data
}

fn random_bytes(rng: &mut DeterministicRng) -> Vec<u8> {
    let len = rng.index(200);
    (0..len)
        .map(|_| {
            if rng.index(3) == 0 {
                *TOKENS[rng.index(TOKENS.len())].first().unwrap_or(&b'x')
            } else {
                b"0123456789abcdefxILSM ,\n"[rng.index(24)]
            }
        })
        .collect()
}

/// Drains a reader over `data`; checks the error contract. Returns (requests, errored).
fn drain(data: Vec<u8>, format: &TraceFormat) -> (u64, bool) {
    let name = "fuzz-input";
    let mut reader = TraceReader::from_reader(Box::new(Cursor::new(data)), name, format);
    let mut n = 0u64;
    let mut errored = false;
    for item in reader.by_ref() {
        match item {
            Ok(Request { .. }) => n += 1,
            Err(e) => {
                check_error(&e, name);
                errored = true;
            }
        }
        // Lackey spans at most 2^20 bytes per line; nothing here comes close.
        assert!(n < 50_000_000, "runaway reader");
    }
    assert!(reader.next().is_none(), "fused");
    (n, errored)
}

fn check_error(e: &TraceError, name: &str) {
    let msg = e.to_string();
    assert!(
        msg.starts_with(name),
        "error does not name the input: {msg}"
    );
    match e {
        TraceError::Line { line, .. } => {
            assert!(*line >= 1 && msg.contains(&format!(":{line}:")), "{msg}")
        }
        TraceError::Record { .. } | TraceError::PartialRecord { .. } => {
            assert!(
                msg.contains("record ") && msg.contains("byte offset"),
                "{msg}"
            )
        }
        TraceError::Read { .. } => {
            assert!(msg.contains("line ") || msg.contains("record ") || msg.contains("start"))
        }
        TraceError::TruncatedCompressed { .. } => {
            assert!(
                msg.contains("truncated") && msg.contains("compressed byte"),
                "{msg}"
            )
        }
        TraceError::WrongFormat { .. } => assert!(msg.contains(": byte offset "), "{msg}"),
        other => panic!("unexpected error kind from a reader: {other:?}"),
    }
}

fn og_record(time: u32, id: u64, size: u32, next: i64) -> Vec<u8> {
    [
        &time.to_le_bytes()[..],
        &id.to_le_bytes(),
        &size.to_le_bytes(),
        &next.to_le_bytes(),
    ]
    .concat()
}

fn run(formats: &[&str], samples: &[Vec<u8>], iterations: usize, seed: u64) {
    let formats: Vec<TraceFormat> = formats.iter().map(|f| f.parse().unwrap()).collect();
    let mut rng = DeterministicRng::new(seed);
    let (mut ok, mut err) = (0, 0);
    // The valid samples themselves parse without error, plain and compressed.
    for s in samples {
        for f in &formats {
            assert!(
                !drain(s.clone(), f).1,
                "sample {:?} with {f}",
                String::from_utf8_lossy(s)
            );
            let z = zstd::encode_all(&s[..], 1).unwrap();
            assert!(!drain(z, f).1);
        }
    }
    for i in 0..iterations {
        let input = match i % 10 {
            0 => random_bytes(&mut rng),
            1 => {
                // Mutate a compressed sample: exercises the decoder's error paths.
                let s = &samples[rng.index(samples.len())];
                mutate(&mut rng, &zstd::encode_all(&s[..], 1).unwrap())
            }
            _ => {
                let mut s = samples[rng.index(samples.len())].clone();
                for _ in 0..rng.index(3) {
                    s = mutate(&mut rng, &s);
                }
                s
            }
        };
        let f = &formats[rng.index(formats.len())];
        if drain(input, f).1 {
            err += 1;
        } else {
            ok += 1;
        }
    }
    // Mutations should produce both outcomes.
    assert!(
        ok > iterations / 50 && err > iterations / 50,
        "ok {ok} err {err}"
    );
}

#[test]
fn lackey_survives_mutations() {
    let samples = [
        b"==42== Lackey\n==42== \nI  0401ab70,3\n S 1fff000758,8\n L 04222cac,8\n M 0421d2c8,4\nI  0x0fff,2\n"
            .to_vec(),
        b"I  04222ffe,16\n L 7ff000398,8\r\n".to_vec(),
    ];
    run(
        &[
            "lackey",
            "lackey:instructions=false",
            "lackey:page-size=1",
            "lackey:page-size=3",
        ],
        &samples,
        6000,
        1,
    );
}

#[test]
fn text_survives_mutations() {
    let samples = [
        b"# ids\n1\n2\n\n0x10\n18446744073709551615\n".to_vec(),
        b"7 # c\r\n0XAB\n".to_vec(),
    ];
    run(&["text"], &samples, 5000, 2);
}

#[test]
fn csv_survives_mutations() {
    let samples = [
        b"time,id,size\n1,42,10\n2,\"a,b\",3\n3,0x1f,5\n4,name,1\n".to_vec(),
        b"5;x;y\n6;\"q\"\"r\";z\n".to_vec(),
        b"1 a b\n2 0x3 d\n\n3 \"e\" f\n".to_vec(),
    ];
    run(
        &[
            "csv:column=2:time-column=1:header=true",
            "csv:column=2:header=true",
            "csv:column=3:header=true",
        ],
        &samples[..1],
        3000,
        3,
    );
    run(&["csv:column=2:delimiter=;"], &samples[1..2], 1500, 4);
    run(
        &[
            "csv:column=2:time-column=1:delimiter=space",
            "csv:column=3:delimiter=space",
        ],
        &samples[2..],
        1500,
        7,
    );
}

#[test]
fn oracle_general_survives_mutations() {
    let samples = [
        [
            og_record(0, 5, 1, 3),
            og_record(1, 6, 1, -1),
            og_record(2, 5, 1, 4),
            og_record(3, 5, 4096, i64::MAX),
        ]
        .concat(),
        og_record(9, u64::MAX, 0, -1),
    ];
    run(&["oracle-general"], &samples, 5000, 5);
}

#[test]
fn specs_survive_mutations() {
    let workloads = [
        "seq:n=100",
        "loop:n=10:len=50",
        "uniform:n=1000:seed=3",
        "zipf:n=1000:alpha=0.99",
        "hotset:n=100:hot=0.2:hot-prob=0.8:scan-every=10:scan-len=5",
        "phases:n=100:phases=4:alpha=1.2:ws=30",
    ];
    let formats = [
        "lackey:instructions=false:page-size=4096",
        "csv:column=2:time-column=1:header=true:delimiter=tab",
        "text",
        "oracle-general",
    ];
    let mut rng = DeterministicRng::new(6);
    let (mut ok, mut err) = (0, 0);
    for _ in 0..4000 {
        let base = workloads[rng.index(workloads.len())].as_bytes();
        let s = String::from_utf8_lossy(&mutate(&mut rng, base)).into_owned();
        match s.parse::<WorkloadSpec>() {
            Ok(w) => {
                ok += 1;
                let again: WorkloadSpec = w.to_string().parse().unwrap();
                assert_eq!(again, w, "{s}");
                let reqs: Vec<Request> = w.requests().take(200).collect();
                assert_eq!(reqs.len() as u64, w.len().min(200));
                assert!(reqs.iter().all(|r| r.unit < w.universe()), "{s}");
            }
            Err(e) => {
                err += 1;
                assert!(!e.to_string().is_empty());
            }
        }
        let base = formats[rng.index(formats.len())].as_bytes();
        let s = String::from_utf8_lossy(&mutate(&mut rng, base)).into_owned();
        if let Ok(f) = s.parse::<TraceFormat>() {
            assert_eq!(f.to_string().parse::<TraceFormat>().unwrap(), f, "{s}");
        }
    }
    assert!(ok > 100 && err > 100, "ok {ok} err {err}");
}
