//! Fuzzes the guest console parser (memvisor-testvm's MEMVISOR-RESULT lines).
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_testvm::{parse_console, parse_result_line, TestVmError, RESULT_MARKER};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let lines = text.lines().count();
    let mut first_error = None;
    for (i, line) in text.lines().enumerate() {
        match parse_result_line(line, i + 1) {
            None => assert!(!line.contains(RESULT_MARKER)),
            Some(Ok(_)) => {}
            Some(Err(TestVmError::ResultLine { line: n, .. })) => {
                assert_eq!(n, i + 1);
                first_error.get_or_insert(n);
            }
            Some(Err(e)) => panic!("unexpected error kind: {e}"),
        }
    }
    match parse_console(&text) {
        Ok(_) => assert!(first_error.is_none()),
        Err(TestVmError::ResultLine { line, .. }) => {
            assert_eq!(Some(line), first_error);
            assert!(line >= 1 && line <= lines);
        }
        Err(e) => panic!("unexpected error kind: {e}"),
    }
});
