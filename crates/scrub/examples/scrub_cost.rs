//! What one scrub costs: a guest of GUEST_GIB GiB (a forked child standing in for QEMU) holding
//! copies of half of an IMAGE_GIB GiB image, whose pages are all in the host page cache.
//!
//! ```sh
//! cargo run --release -p memvisor-scrub --example scrub_cost -- [GUEST_GIB] [IMAGE_GIB]
//! ```
//!
//! The image is written 4 KiB per write (4 KiB folios; readahead makes larger ones, which drop
//! only whole), synced, and scrubbed once. Prints the scrub's wall and CPU time, the guest pages
//! indexed and image pages hashed per CPU second, and what was dropped. Needs root (reads the
//! child by pid). The image lives in /var/tmp and is removed at the end.

use std::io::Write;
use std::time::Instant;

use memvisor_dedup::{fill_seeded, PagesChild, PAGE_SIZE};
use memvisor_scrub::{ScrubOptions, Scrubber, Vm};

fn arg(n: usize, default: f64) -> f64 {
    std::env::args()
        .nth(n)
        .map(|a| {
            a.parse()
                .unwrap_or_else(|_| panic!("argument {n}: {a:?} is not a number"))
        })
        .unwrap_or(default)
}

fn main() {
    let guest_pages = (arg(1, 1.0) * (1u64 << 30) as f64) as usize / PAGE_SIZE;
    let image_pages = (arg(2, 1.0) * (1u64 << 30) as f64) as usize / PAGE_SIZE;
    // Image page p holds seed p + 1; the guest holds image pages in alternating runs of 16
    // (half the image, up to its size), then unrelated pages.
    let mut img = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    let mut page = vec![0u8; PAGE_SIZE];
    for p in 0..image_pages {
        fill_seeded(&mut page, p as u64 + 1);
        img.write_all(&page).unwrap();
    }
    img.as_file().sync_all().unwrap();
    let mut guest = vec![0u8; guest_pages * PAGE_SIZE];
    let mut in_guest = 0;
    for (g, chunk) in guest.chunks_mut(PAGE_SIZE).enumerate() {
        let p = (g / 16) * 32 + g % 16;
        if p < image_pages {
            fill_seeded(chunk, p as u64 + 1);
            in_guest += 1;
        } else {
            fill_seeded(chunk, (1 << 40) + g as u64);
        }
    }
    let child = PagesChild::spawn(&guest).expect("fork the guest");
    drop(guest);
    let vm = Vm {
        pid: child.pid(),
        name: "scrub_cost".into(),
        images: vec![img.path().to_path_buf()],
        ram: std::iter::once(child.address()..child.address() + child.len() as u64).collect(),
    };
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let t = Instant::now();
    let r = scrubber.scrub_vm(&vm);
    let wall = t.elapsed();
    assert!(r.error.is_none(), "{:?}", r.error);
    let i = &r.images[0];
    assert!(i.error.is_none(), "{:?}", i.error);
    let cpu = r.cpu.as_secs_f64();
    let gib = |pages: u64| (pages * PAGE_SIZE as u64) as f64 / (1u64 << 30) as f64;
    println!(
        "guest {:.2} GiB ({} pages present), image {:.2} GiB ({} cached), {} image pages in the guest",
        gib(guest_pages as u64),
        r.guest_pages,
        gib(image_pages as u64),
        i.cached_before,
        in_guest
    );
    println!(
        "scrub: wall {:.3} s, CPU {:.3} s; {:.2} GiB (guest + image) per CPU second",
        wall.as_secs_f64(),
        cpu,
        gib(r.guest_pages + i.hashed) / cpu
    );
    println!(
        "dropped {} pages ({:.2} GiB), kept: dirty {}, busy {}, not in guest {}; lookahead {} of {} matches; cached after {}",
        i.dropped,
        gib(i.dropped),
        i.kept_dirty,
        i.kept_busy,
        i.kept_not_in_guest,
        i.lookahead_hits,
        i.in_guest,
        i.cached_after
    );
}
