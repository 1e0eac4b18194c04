//! Fuzzes the spec parsers: workload and trace-format specs must parse or fail cleanly, print
//! back to an equal spec, and (workloads) generate in-range requests.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_trace::{TraceFormat, WorkloadSpec};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(w) = s.parse::<WorkloadSpec>() {
        let again: WorkloadSpec = w.to_string().parse().expect("Display parses back");
        assert_eq!(again, w);
        let mut count = 0u64;
        for r in w.requests().take(1000) {
            assert!(
                r.unit < w.universe(),
                "{w}: unit {} >= {}",
                r.unit,
                w.universe()
            );
            assert_eq!(r.time, count);
            count += 1;
        }
        assert_eq!(count, w.len().min(1000));
    }
    if let Ok(f) = s.parse::<TraceFormat>() {
        let again: TraceFormat = f.to_string().parse().expect("Display parses back");
        assert_eq!(again, f);
    }
});
