//! Fuzzes the QMP line decoder and the QMP address parser: any bytes give a reply or a one-line
//! `Malformed` error without panicking; any UTF-8 text gives an address that round-trips
//! through `Display`, or an `Address` error.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_qmp::{parse_reply, QmpAddress, QmpError, QmpReply, MAX_LINE_BYTES};

fuzz_target!(|data: &[u8]| {
    match parse_reply(data) {
        Ok(QmpReply::Greeting(_) | QmpReply::Return { .. } | QmpReply::Error { .. }) => {}
        Ok(QmpReply::Event(_)) => {}
        Err(e @ QmpError::Malformed { .. }) => assert!(!e.to_string().contains('\n')),
        Err(other) => panic!("parse_reply gave a non-Malformed error: {other:?}"),
    }
    assert!(data.len() <= MAX_LINE_BYTES + 2 || parse_reply(data).is_err());
    if let Ok(text) = std::str::from_utf8(data) {
        match text.parse::<QmpAddress>() {
            Ok(address) => {
                let shown = address.to_string();
                assert_eq!(shown.parse::<QmpAddress>().ok(), Some(address));
            }
            Err(e) => assert!(matches!(e, QmpError::Address { .. })),
        }
    }
});
