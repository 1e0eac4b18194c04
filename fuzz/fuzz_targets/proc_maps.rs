//! Fuzzes the `/proc/PID/maps` line parser: lines parse or fail with a message; whole files
//! fail naming the file and line.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_dedup::MapEntry;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for line in text.lines() {
        if let Ok(e) = MapEntry::parse(line) {
            assert!(e.start <= e.end);
            let _ = e.is_scanned(true);
        }
    }
    if let Err(e) = MapEntry::parse_all(&text, "fuzz".as_ref()) {
        assert!(e.to_string().starts_with("fuzz:"), "{e}");
    }
});
