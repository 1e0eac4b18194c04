//! Fuzzes the oracleGeneral reader (and, through inputs starting with the zstd magic bytes, the
//! streaming decompression path).
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_trace::{TraceFormat, TraceReader};

fuzz_target!(|data: &[u8]| {
    let reader = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(data.to_vec())),
        "fuzz",
        &TraceFormat::OracleGeneral,
    );
    let mut index = 0u64;
    for item in reader {
        match item {
            Ok(r) => {
                if let Some(next) = r.next_access {
                    assert!(next > index, "next access {next} at request {index}");
                }
                index += 1;
            }
            Err(e) => assert!(e.to_string().starts_with("fuzz:"), "{e}"),
        }
    }
});
