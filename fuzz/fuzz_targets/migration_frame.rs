//! Fuzzes the migration stream's decoders: the first byte is a message type and the rest its
//! payload for `decode_payload`, which must refuse it with a one-line error or decode a message
//! that follows the message rules and re-encodes to the same bytes; the whole input (and its
//! first 8 bytes) goes to `FrameHeader::parse`, and the whole input to `Hello::parse`, with the
//! same round-trip checks. Stable stand-in: `crates/migration/tests/fuzz_smoke.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_migration::{
    decode_payload, encode_payload, FrameHeader, Hello, FRAME_HEADER_LEN, MAX_PAYLOAD,
};

fuzz_target!(|data: &[u8]| {
    if let Some((&kind, payload)) = data.split_first() {
        match decode_payload(kind, payload) {
            Ok(message) => {
                assert_eq!(message.kind().to_byte(), kind);
                message
                    .validate()
                    .expect("a decoded message follows the rules");
                let encoded = encode_payload(&message);
                assert_eq!(encoded, payload, "the encoding is canonical");
                assert_eq!(decode_payload(kind, &encoded).unwrap(), message);
            }
            Err(error) => assert!(!error.to_string().contains('\n')),
        }
    }
    for header in [data, &data[..data.len().min(FRAME_HEADER_LEN)]] {
        match FrameHeader::parse(header) {
            Ok(parsed) => {
                assert_eq!(parsed.encode(), header);
                assert!(parsed.payload_len as usize <= MAX_PAYLOAD);
            }
            Err(error) => assert!(!error.to_string().contains('\n')),
        }
    }
    match Hello::parse(data) {
        Ok(hello) => assert_eq!(hello.encode(), data),
        Err(error) => assert!(!error.to_string().contains('\n')),
    }
});
