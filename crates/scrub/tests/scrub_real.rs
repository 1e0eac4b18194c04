//! The scrubber on real files in the host page cache and real processes standing in for
//! guests (forked children holding copies of some image pages, located by pid).

// Address ranges of one mapping are meant as one-element lists of ranges here.
#![allow(clippy::single_range_in_vec_init)]

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;

use memvisor_dedup::{fill_seeded, PagesChild, PAGE_SIZE};
use memvisor_scrub::{cachestat, resident_pages, ScrubOptions, Scrubber, Vm};

fn page(seed: u64) -> Vec<u8> {
    let mut p = vec![0; PAGE_SIZE];
    fill_seeded(&mut p, seed);
    p
}

/// An image of pages with the given seeds, written one page per write (4 KiB folios), synced
/// (clean), and so in the page cache.
fn image(seeds: impl IntoIterator<Item = u64>) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    let mut n = 0;
    for s in seeds {
        f.write_all(&page(s)).unwrap();
        n += 1;
    }
    f.as_file().sync_all().unwrap();
    let cs = cachestat(f.as_file().as_fd(), 0, 0).unwrap();
    assert_eq!(
        (cs.nr_cache, cs.nr_dirty),
        (n, 0),
        "the image is cached and clean"
    );
    f
}

fn guest(pages: &[Vec<u8>]) -> PagesChild {
    PagesChild::spawn(&pages.concat()).unwrap()
}

fn vm(child: &PagesChild, images: &[&tempfile::NamedTempFile]) -> Vm {
    Vm {
        pid: child.pid(),
        name: "test".into(),
        images: images.iter().map(|f| f.path().to_path_buf()).collect(),
        ram: vec![child.address()..child.address() + child.len() as u64],
    }
}

fn resident(f: &tempfile::NamedTempFile) -> Vec<bool> {
    let len = f.as_file().metadata().unwrap().len();
    resident_pages(f.as_file(), len).unwrap()
}

#[test]
fn drops_exactly_the_pages_the_guest_holds() {
    let img = image(1..=64);
    let in_guest = [40u64, 41, 42, 43, 44, 3, 4, 5, 20, 10];
    // Guest memory: copies of image pages (page i has seed i + 1) among unrelated pages.
    let mut mem: Vec<Vec<u8>> = Vec::new();
    for (k, &p) in in_guest.iter().enumerate() {
        mem.push(page(p + 1));
        if k % 3 == 2 {
            mem.push(page(1000 + k as u64));
        }
    }
    let child = guest(&mem);
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let r = scrubber.scrub_vm(&vm(&child, &[&img]));
    assert!(r.error.is_none(), "{:?}", r.error);
    let i = &r.images[0];
    assert!(i.error.is_none(), "{:?}", i.error);
    assert_eq!(i.cached_before, 64);
    assert_eq!(i.hashed, 64);
    assert_eq!(i.in_guest, 10);
    assert_eq!(i.dropped, 10);
    assert_eq!(i.kept_not_in_guest, 54);
    assert_eq!(i.kept_dirty + i.kept_busy, 0);
    assert_eq!(i.cached_after, 54);
    // Guest order: 40 41 42 x 43 44 3 x 4 5 20 x 10. Lookahead finds the image pages that
    // follow their predecessor in the guest too: 5 (after 4), 41, 42 and 44.
    assert_eq!(i.lookahead_hits, 4);
    let after = resident(&img);
    for (p, &res) in after.iter().enumerate() {
        assert_eq!(res, !in_guest.contains(&(p as u64)), "page {p}");
    }
    assert_eq!(r.dropped(), 10);
    assert_eq!(r.guest_pages as usize, mem.len());

    // A second scrub finds nothing left to drop.
    let again = scrubber.scrub_vm(&vm(&child, &[&img]));
    assert_eq!(again.images[0].dropped, 0);
    assert_eq!(again.images[0].hashed, 54);
}

#[test]
fn never_drops_a_dirty_page() {
    let img = image(1..=16);
    // Pages 2 and 3 are rewritten and not synced: dirty in the page cache.
    let new2 = page(502);
    let new3 = page(503);
    img.as_file()
        .write_all_at(&new2, 2 * PAGE_SIZE as u64)
        .unwrap();
    img.as_file()
        .write_all_at(&new3, 3 * PAGE_SIZE as u64)
        .unwrap();
    let cs = cachestat(img.as_file().as_fd(), 0, 0).unwrap();
    assert_eq!(cs.nr_dirty, 2);
    let child = guest(&[new2.clone(), new3.clone(), page(6)]);
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let r = scrubber.scrub_vm(&vm(&child, &[&img]));
    let i = &r.images[0];
    assert!(i.error.is_none(), "{:?}", i.error);
    assert_eq!(i.in_guest, 3);
    assert_eq!(i.kept_dirty, 2);
    assert_eq!(i.dropped, 1);
    let after = resident(&img);
    assert!(after[2] && after[3], "dirty pages stay cached");
    assert!(!after[5], "the clean page in the guest is dropped");
    let mut back = vec![0u8; PAGE_SIZE];
    img.as_file()
        .read_exact_at(&mut back, 2 * PAGE_SIZE as u64)
        .unwrap();
    assert_eq!(back, new2);
    img.as_file()
        .read_exact_at(&mut back, 3 * PAGE_SIZE as u64)
        .unwrap();
    assert_eq!(back, new3);
}

#[test]
fn a_dry_run_drops_nothing() {
    let img = image(1..=8);
    let child = guest(&[page(1), page(2)]);
    let mut scrubber = Scrubber::new(ScrubOptions {
        dry_run: true,
        ..Default::default()
    });
    let r = scrubber.scrub_vm(&vm(&child, &[&img]));
    assert_eq!(r.images[0].dropped, 2);
    assert_eq!(resident(&img), vec![true; 8]);
}

#[test]
fn an_image_truncated_while_scrubbing_is_reported_and_the_rest_goes_on() {
    let img = image(1..=600);
    let other = image(2001..=2004);
    let mut mem: Vec<Vec<u8>> = (0..10).map(|p| page(p + 1)).collect();
    mem.extend((300..310).map(|p| page(p + 1)));
    mem.push(page(2002));
    let child = guest(&mem);
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let path = img.path().to_path_buf();
    scrubber.on_chunk(move |p, offset| {
        if p == path && offset == 256 * PAGE_SIZE as u64 {
            File::options()
                .write(true)
                .open(p)
                .unwrap()
                .set_len(280 * PAGE_SIZE as u64)
                .unwrap();
        }
    });
    let r = scrubber.scrub_vm(&vm(&child, &[&img, &other]));
    assert!(r.error.is_none(), "{:?}", r.error);
    let i = &r.images[0];
    assert!(i.error.is_none(), "{:?}", i.error);
    assert_eq!(i.truncated_to, Some(280 * PAGE_SIZE as u64));
    assert_eq!(i.dropped, 10);
    assert_eq!(i.hashed, 280);
    let o = &r.images[1];
    assert_eq!((o.hashed, o.dropped), (4, 1));
}

#[test]
fn a_missing_image_or_a_dead_guest_is_a_clear_error() {
    let img = image(1..=4);
    let child = guest(&[page(1)]);
    let mut v = vm(&child, &[&img]);
    v.images.insert(0, "/nonexistent/disk.img".into());
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let r = scrubber.scrub_vm(&v);
    let e = r.images[0].error.as_deref().unwrap();
    assert!(e.starts_with("/nonexistent/disk.img: opening:"), "{e}");
    assert_eq!(r.images[1].dropped, 1, "the next image is still scrubbed");

    let mut dead = guest(&[page(2)]);
    let v = vm(&dead, &[&img]);
    dead.kill();
    let r = scrubber.scrub_vm(&v);
    let e = r.error.as_deref().unwrap();
    assert!(
        e.contains(&format!("pid {}", v.pid)) && e.contains("exited"),
        "{e}"
    );
    assert!(r.images.is_empty());
    assert_eq!(resident(&img).iter().filter(|&&x| x).count(), 3);

    let mut v = vm(&child, &[&img]);
    v.ram.clear();
    let e = scrubber.scrub_vm(&v).error.unwrap();
    assert!(e.contains("no guest RAM"), "{e}");
}

#[test]
fn large_folios_are_dropped_only_whole() {
    // One 64 KiB write: the page cache may hold it as one large folio, which DONTNEED drops
    // only if every page of it is dropped. Whatever the folio layout, pages not in the guest stay.
    let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    let all: Vec<u8> = (1..=16).flat_map(page).collect();
    f.write_all(&all).unwrap();
    f.as_file().sync_all().unwrap();
    let child = guest(&(1..=8).map(page).collect::<Vec<_>>());
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let r = scrubber.scrub_vm(&vm(&child, &[&f]));
    let i = &r.images[0];
    assert_eq!(i.in_guest, 8);
    assert_eq!(i.dropped + i.kept_busy, 8);
    let after = resident(&f);
    assert!(
        after[8..].iter().all(|&x| x),
        "pages not in the guest stay: {after:?}"
    );
}

#[test]
fn replacement_heuristic_tells_evicted_from_modified() {
    let img = image(1..=4);
    let child = guest(&[page(1), page(2), page(9)]);
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let first = scrubber.scrub_vm(&vm(&child, &[&img]));
    assert_eq!(first.images[0].dropped, 2);
    // The guest replaces page 0 (content and first 8 bytes change) and modifies page 1 past
    // its first 8 bytes.
    child.write_page(0, &page(77)).unwrap();
    let mut modified = page(2);
    modified[100] ^= 0xff;
    child.write_page(1, &modified).unwrap();
    // The host reads image pages 0 and 1 again (no readahead).
    let fd = File::open(img.path()).unwrap();
    // SAFETY: fadvise on our descriptor.
    unsafe {
        libc::posix_fadvise(
            std::os::fd::AsRawFd::as_raw_fd(&fd),
            0,
            0,
            libc::POSIX_FADV_RANDOM,
        )
    };
    let mut b = vec![0u8; PAGE_SIZE];
    fd.read_exact_at(&mut b, 0).unwrap();
    fd.read_exact_at(&mut b, PAGE_SIZE as u64).unwrap();
    let second = scrubber.scrub_vm(&vm(&child, &[&img]));
    assert_eq!(second.guest_replaced, 1);
    assert_eq!(second.guest_modified, 1);
    let i = &second.images[0];
    assert_eq!(i.dropped, 0);
    assert_eq!(
        i.kept_evicted_by_guest, 1,
        "page 0's old content was evicted by the guest"
    );
    assert_eq!(i.kept_not_in_guest, 3);
    assert!(resident(&img)[0]);
}

#[test]
fn a_guest_that_exits_mid_scrub_is_reported_and_nothing_more_is_dropped() {
    // The guest holds image pages 0..16 and 300..316; it is killed after the first chunk
    // (pages 0..256) of the image was processed.
    let img = image(1..=600);
    let mut mem: Vec<Vec<u8>> = (0..16).map(|p| page(p + 1)).collect();
    mem.extend((300..316).map(|p| page(p + 1)));
    let child = guest(&mem);
    let pid = child.pid();
    let v = vm(&child, &[&img]);
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    scrubber.on_chunk(move |_, offset| {
        if offset == 256 * PAGE_SIZE as u64 {
            // SAFETY: signals our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            while !memvisor_dedup::is_exited(pid) {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    });
    let r = scrubber.scrub_vm(&v);
    let e = r.error.as_deref().expect("the exit is reported");
    assert!(
        e.contains("exited during the scrub; 16 pages dropped before"),
        "{e}"
    );
    assert_eq!(r.images[0].dropped, 16);
    let after = resident(&img);
    assert!(after[..16].iter().all(|&x| !x));
    assert!(
        after[16..].iter().all(|&x| x),
        "nothing dropped after the guest exited"
    );
    drop(child);
}

#[test]
fn a_partial_last_page_is_compared_zero_padded() {
    // 3.5 pages: the page cache holds the last page zero-padded, as a guest would.
    let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
    for s in 1..=3 {
        f.write_all(&page(s)).unwrap();
    }
    let half = &page(4)[..PAGE_SIZE / 2];
    f.write_all(half).unwrap();
    f.as_file().sync_all().unwrap();
    let mut last = half.to_vec();
    last.resize(PAGE_SIZE, 0);
    let child = guest(&[last, page(2)]);
    let mut scrubber = Scrubber::new(ScrubOptions::default());
    let r = scrubber.scrub_vm(&vm(&child, &[&f]));
    let i = &r.images[0];
    assert_eq!(i.truncated_to, None);
    assert_eq!((i.hashed, i.in_guest, i.dropped), (4, 2, 2));
}

#[test]
fn discovery_takes_open_images_not_logs_or_standard_streams() {
    let img = image(1..=2);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let log = dir.path().join("vm.log");
    let out = File::create(dir.path().join("stdout")).unwrap();
    // The shell waits in its built-in `read` once ready: an `exec sleep` here raced the
    // check, which then saw the files the new program opens as it starts (glibc's
    // /etc/locale.alias).
    let mut sh = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 3<'{}' 4>>'{}' 5<>'{}'; echo ready; read line",
            img.path().display(),
            log.display(),
            img.path().display()
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(out)
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    let vm = loop {
        let vm = memvisor_scrub::describe_vm(sh.id() as i32).unwrap();
        if !vm.images.is_empty()
            && std::fs::read_to_string(dir.path().join("stdout")).is_ok_and(|s| s.contains("ready"))
        {
            break vm;
        }
        assert!(t.elapsed() < std::time::Duration::from_secs(10));
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    sh.kill().unwrap();
    sh.wait().unwrap();
    assert_eq!(vm.images, vec![img.path().canonicalize().unwrap()]);
}
