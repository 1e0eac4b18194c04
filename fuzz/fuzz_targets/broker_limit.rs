//! Fuzzes the broker's `--limit NAME=MIN:MAX` parser: any text parses or fails cleanly with a
//! message naming the option; a parsed limit has a selector and MIN <= MAX.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_broker::ProcessLimit;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match s.parse::<ProcessLimit>() {
        Ok(l) => {
            assert!(!l.selector.is_empty());
            if let (Some(lo), Some(hi)) = (l.min, l.max) {
                assert!(lo <= hi);
            }
            let _ = l.matches(1, "x");
        }
        Err(e) => assert!(e.to_string().contains("--limit")),
    }
});
