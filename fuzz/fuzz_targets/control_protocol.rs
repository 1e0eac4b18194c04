//! Fuzzes the control protocol's decoders: any bytes decode to a request or response, or fail
//! cleanly; whatever decodes encodes back to an equal message; a decoded `set` goes through
//! `SetRules` without panicking; the line reader never returns more than its limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_control::protocol::{
    decode_request, decode_response, encode_request, encode_response, read_line_limited,
};
use memvisor_control::{ProcessState, Request, SetRules};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = decode_request(data) {
        assert_eq!(decode_request(&encode_request(&r)).unwrap(), r);
        if let Request::Set {
            budget_bytes,
            policy,
        } = &r
        {
            let rules = SetRules {
                host_ram_bytes: 1 << 30,
                chunk_bytes: 1 << 20,
            };
            let _ = rules.check(*budget_bytes, policy.as_deref());
        }
        if let Request::SetImageCache {
            limit_bytes: Some(bytes),
            ..
        } = &r
        {
            let rules = SetRules {
                host_ram_bytes: 1 << 30,
                chunk_bytes: 1 << 20,
            };
            let _ = rules.check_image_cache(*bytes);
        }
    }
    let _ = ProcessState::from_stat_line(data);
    if let Ok(r) = decode_response(data) {
        assert_eq!(decode_response(&encode_response(&r)).unwrap(), r);
    }
    let mut input = data;
    while let Ok(Some(line)) = read_line_limited(&mut input, 64) {
        assert!(line.len() <= 64);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = memvisor_control::ByteSize::parse(s);
        let _ = memvisor_control::parse_metrics_addr(s, false);
    }
});
