//! Fuzzes the metrics endpoint's request-head parser: any bytes, complete or not, give a
//! request kind without panicking; a head over the limit is always refused as too large; an
//! unfinished head is only "incomplete" while the peer may send more.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_control::http_request::{MetricsRequest, MAX_HEAD_BYTES};

fuzz_target!(|data: &[u8]| {
    for closed in [false, true] {
        let request = MetricsRequest::parse(data, closed);
        assert_eq!(
            request == MetricsRequest::TooLarge,
            data.len() > MAX_HEAD_BYTES
        );
        assert!(!(closed && request == MetricsRequest::Incomplete));
        assert!(!request.status().is_empty());
    }
});
