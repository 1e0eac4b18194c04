//! Fuzzes the CSV reader: the first byte picks the options, the rest is the trace.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_trace::{TraceFormat, TraceReader};

fuzz_target!(|data: &[u8]| {
    let Some((&options, trace)) = data.split_first() else {
        return;
    };
    let format = TraceFormat::Csv {
        column: usize::from(options & 3) + 1,
        time_column: match (options >> 2) & 3 {
            0 => None,
            c => Some(usize::from(c)),
        },
        header: options & 16 != 0,
        delimiter: b",;\t "[usize::from(options >> 5) & 3],
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
