//! Discovery and scrubbing against a real QEMU process (started paused: its guest RAM is a
//! `memory-backend-memfd` memfd and its disk image is open with `cache=writeback`; the test
//! writes copies of image pages into the guest RAM, as a guest reading its disk would).
//! QEMU comes from scripts/install (`qemu-system-x86`).

use std::io::Write;
use std::os::fd::AsFd;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use memvisor_dedup::{fill_seeded, PAGE_SIZE};
use memvisor_scrub::{cachestat, describe_vm, qemu_pids, resident_pages, ScrubOptions, Scrubber};

fn page(seed: u64) -> Vec<u8> {
    let mut p = vec![0; PAGE_SIZE];
    fill_seeded(&mut p, seed);
    p
}

struct Qemu(Child);

impl Drop for Qemu {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn finds_a_paused_qemu_and_scrubs_its_image() {
    let mut img = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    for s in 1..=64 {
        img.write_all(&page(s)).unwrap();
    }
    img.as_file().sync_all().unwrap();
    let qemu = Command::new("qemu-system-x86_64")
        .args([
            "-S",
            "-name",
            "guest=memvisor-test,debug-threads=on",
            "-machine",
            "q35,memory-backend=ram",
            "-object",
            "memory-backend-memfd,id=ram,size=64M",
            "-m",
            "64M",
            "-display",
            "none",
            "-monitor",
            "none",
            "-serial",
            "none",
            "-nodefaults",
            "-drive",
        ])
        .arg(format!(
            "file={},format=raw,if=virtio,cache=writeback",
            img.path().display()
        ))
        .stdin(Stdio::null())
        .spawn()
        .expect("qemu-system-x86_64 (scripts/install installs qemu-system-x86)");
    let qemu = Qemu(qemu);
    let pid = qemu.0.id() as i32;
    // Wait until QEMU has mapped its RAM and opened the image.
    let t = Instant::now();
    let vm = loop {
        if let Ok(vm) = describe_vm(pid) {
            if vm.ram.iter().any(|r| r.end - r.start == 64 << 20) && !vm.images.is_empty() {
                break vm;
            }
        }
        assert!(t.elapsed() < Duration::from_secs(30), "QEMU did not start");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(qemu_pids().contains(&pid));
    assert_eq!(vm.name, "memvisor-test");
    assert_eq!(vm.images, vec![img.path().canonicalize().unwrap()]);
    assert_eq!(vm.ram.len(), 1);
    let ram = vm.ram[0].clone();

    // "The guest reads" image pages 8..16 and 40 into its RAM (at arbitrary guest addresses).
    for (k, p) in (8..16).chain([40]).enumerate() {
        let data = page(p + 1);
        let local = libc::iovec {
            iov_base: data.as_ptr() as *mut _,
            iov_len: PAGE_SIZE,
        };
        let remote = libc::iovec {
            iov_base: (ram.start as usize + (1000 + k) * PAGE_SIZE) as *mut _,
            iov_len: PAGE_SIZE,
        };
        // SAFETY: writes one page into QEMU's guest RAM mapping (we are root); buffers live.
        let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
        assert_eq!(n, PAGE_SIZE as isize, "{}", std::io::Error::last_os_error());
    }
    // The image is in the host page cache (written through it).
    let cs = cachestat(img.as_file().as_fd(), 0, 0).unwrap();
    assert_eq!(cs.nr_cache, 64);

    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let r = scrubber.scrub_vm(&vm);
    assert!(r.error.is_none(), "{:?}", r.error);
    assert_eq!(
        r.guest_pages, 9,
        "only the pages written are present in the 64 MiB"
    );
    let i = &r.images[0];
    assert!(i.error.is_none(), "{:?}", i.error);
    assert_eq!((i.in_guest, i.dropped), (9, 9));
    assert_eq!(i.lookahead_hits, 7);
    let after = resident_pages(img.as_file(), 64 * PAGE_SIZE as u64).unwrap();
    for (p, &res) in after.iter().enumerate() {
        assert_eq!(res, !matches!(p, 8..=15 | 40), "page {p}");
    }
}
