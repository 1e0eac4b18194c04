//! Fuzzes liburing's ring reader and the io_uring completion queue reader (memvisor-io-rings
//! `UringRings`, `UringCompletions`) on made-up memory: the input is a script of liburing
//! handing out and submitting entries, the kernel posting completions, the readers looking and
//! bytes being overwritten; intact rings give exactly the entries handed out and the
//! completions posted (the newest ones when more were posted than the queue holds), and nothing
//! panics. Stable stand-in: `crates/io-rings/tests/fuzz_smoke.rs`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/io-rings/tests/fuzz_driver/mod.rs"]
mod fuzz_driver;

fuzz_target!(|data: &[u8]| fuzz_driver::uring_ring(data));
