//! Fuzzes QEMU command-line parsing: NUL-separated arguments, option strings, image paths.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memvisor_scrub::{images_from_cmdline, parse_qemu_options, split_cmdline};

fuzz_target!(|data: &[u8]| {
    let args = split_cmdline(data);
    let (images, _name) = images_from_cmdline(&args);
    assert!(images.len() <= args.len());
    for a in &args {
        for (k, v) in parse_qemu_options(a) {
            assert!(k.len() + v.len() <= a.len());
        }
    }
});
