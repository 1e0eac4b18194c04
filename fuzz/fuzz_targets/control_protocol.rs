//! Fuzzes the control protocol's decoders: any bytes decode to a request or response, or fail
//! cleanly; whatever decodes encodes back to an equal message; the line reader never returns
//! more than its limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_control::protocol::{
    decode_request, decode_response, encode_request, encode_response, read_line_limited,
};

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = decode_request(data) {
        assert_eq!(decode_request(&encode_request(&r)).unwrap(), r);
    }
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
