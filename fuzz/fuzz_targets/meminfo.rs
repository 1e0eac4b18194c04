//! Fuzzes the `/proc/meminfo` parser.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_scrub::MemInfo;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Err((line, msg)) = MemInfo::parse(&text) {
        assert!(line <= text.lines().count(), "{line}: {msg}");
    }
});
