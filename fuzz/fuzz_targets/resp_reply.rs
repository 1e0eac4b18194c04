//! Fuzzes the redis benchmark's RESP reply reader: any bytes give a sequence of replies ending
//! in a clean error or the end of input, never a panic; a bulk reply never holds more bytes
//! than the input had.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_bench::resp_connection::{read_reply, RespReply};

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    while !input.is_empty() {
        match read_reply(&mut input, "fuzz") {
            Ok(RespReply::Bulk(Some(v))) => assert!(v.len() <= data.len()),
            Ok(_) => {}
            Err(_) => break,
        }
    }
});
