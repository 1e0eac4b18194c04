//! A stable-Rust stand-in for the cargo-fuzz targets `meminfo` and `qemu_cmdline`: thousands of
//! deterministic mutations of real inputs through the parsers, which must never panic.

use memvisor_policy::DeterministicRng;
use memvisor_scrub::{images_from_cmdline, parse_qemu_options, split_cmdline, MemInfo};

const TOKENS: &[&[u8]] = &[
    b"\0",
    b",",
    b",,",
    b"=",
    b"-drive",
    b"file=",
    b"-name",
    b"-hda",
    b"-blockdev",
    b"kB",
    b":",
    b"\n",
    b"99999999999999999999",
    b"\xff",
    b"\xc3",
];

fn mutate(rng: &mut DeterministicRng, input: &[u8]) -> Vec<u8> {
    let mut d = input.to_vec();
    for _ in 0..1 + rng.index(4) {
        let at = rng.index(d.len() + 1);
        match rng.index(4) {
            0 if !d.is_empty() => {
                d.remove(at.min(d.len() - 1));
            }
            1 => {
                let t = TOKENS[rng.index(TOKENS.len())];
                d.splice(at..at, t.iter().copied());
            }
            2 if at < d.len() => d.truncate(at),
            _ => d.insert(at, rng.next_u64() as u8),
        }
    }
    d
}

#[test]
fn meminfo_never_panics() {
    let real = std::fs::read("/proc/meminfo").unwrap();
    let mut rng = DeterministicRng::new(3);
    for _ in 0..3000 {
        let t = mutate(&mut rng, &real);
        let _ = MemInfo::parse(&String::from_utf8_lossy(&t));
    }
}

#[test]
fn qemu_command_lines_never_panic() {
    let real: &[u8] = b"qemu-system-x86_64\0-name\0guest=vm1,debug-threads=on\0-m\x001G\0-drive\0file=/v/a,,b.img,if=virtio,cache=writeback\0-hdb\0/b.raw\0-blockdev\0driver=file,node-name=f,filename=/c\0";
    let mut rng = DeterministicRng::new(4);
    for _ in 0..5000 {
        let t = mutate(&mut rng, real);
        let args = split_cmdline(&t);
        let (images, _) = images_from_cmdline(&args);
        assert!(images.len() <= args.len());
        for a in &args {
            let _ = parse_qemu_options(a);
        }
    }
}
