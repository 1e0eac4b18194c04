//! Fuzzes the lackey reader: the first byte picks the options, the rest is the trace.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_trace::{TraceFormat, TraceReader};

fuzz_target!(|data: &[u8]| {
    let Some((&options, trace)) = data.split_first() else {
        return;
    };
    let format = TraceFormat::Lackey {
        instructions: options & 1 == 0,
        page_size: [4096, 1, 3, 65536][usize::from(options >> 1) & 3],
    };
    let reader = TraceReader::from_reader(
        Box::new(std::io::Cursor::new(trace.to_vec())),
        "fuzz",
        &format,
    );
    for item in reader {
        if let Err(e) = item {
            assert!(e.to_string().starts_with("fuzz:"), "{e}");
        }
    }
});
