//! Fuzzes the text reader.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_trace::{TraceFormat, TraceReader};

fuzz_target!(|data: &[u8]| {
    let reader = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(data.to_vec())),
        "fuzz",
        &TraceFormat::Text,
    );
    for item in reader {
        if let Err(e) = item {
            assert!(e.to_string().starts_with("fuzz:"), "{e}");
        }
    }
});
