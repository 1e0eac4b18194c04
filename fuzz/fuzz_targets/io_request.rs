//! Fuzzes the readers of asynchronous I/O requests (memvisor-io-rings): the first 64 bytes as a
//! Linux AIO control block and as an io_uring submission entry, the rest as memory holding
//! their iovecs; any request is a read with its buffers, a write of a range, or other, never a
//! panic. Stable stand-in: `crates/io-rings/tests/fuzz_smoke.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/io-rings/tests/fuzz_driver/mod.rs"]
mod fuzz_driver;

fuzz_target!(|data: &[u8]| fuzz_driver::requests(data));
