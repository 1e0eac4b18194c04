//! Fuzzes the Linux AIO completion ring reader (memvisor-io-rings `AioRing`) on made-up memory:
//! the input is a script of the kernel posting events, the reader looking and bytes being
//! overwritten; an intact ring reports each event once, in order, and nothing panics. Stable
//! stand-in: `crates/io-rings/tests/fuzz_smoke.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/io-rings/tests/fuzz_driver/mod.rs"]
mod fuzz_driver;

fuzz_target!(|data: &[u8]| fuzz_driver::aio_ring(data));
