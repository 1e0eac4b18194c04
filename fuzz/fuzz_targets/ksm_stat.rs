//! Fuzzes the KSM text parsers: `/proc/PID/ksm_stat`, sysfs numbers, and `/proc/PID/stat`
//! CPU fields.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_dedup::{parse_number, parse_stat_cpu_ticks, ProcessKsmStat};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err((line, msg)) = ProcessKsmStat::parse(&text) {
        assert!(line >= 1 && line <= text.lines().count().max(1), "{line}: {msg}");
    }
    let _ = parse_number(&text);
    let _ = parse_stat_cpu_ticks(&text);
});
