//! The swap mapper and the false-read preventer (issue 10, seed 004) with a real QEMU (TCG)
//! guest under `memvisor run`: the guest reads a virtio disk larger than its budget, twice,
//! verifying every block, so its page cache holds more disk data than memvisor keeps in memory.
//! With the mapper on, those pages are evicted without swap writes and paged in from the image;
//! with it off (`--swap-mapper off`), they go through swap. The guest must verify every byte
//! either way.
//!
//! Skipped (with `SKIPPED`) where QEMU or userfaultfd is unavailable, unless `CI=true`.
//!
//! The measurement behind `docs/benchmarks.md` ("VSwapper: a guest whose page cache outgrows
//! its budget"), mapper on and off alternated in one run:
//! `cargo test --release -p memvisor --test vswapper_guest -- --ignored --nocapture measure`

mod common;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use memvisor_control::RegionStatus;
use memvisor_testvm::{
    qemu_binary, DiskAio, DiskCache, DiskConfig, GuestConfig, GuestImage, GuestRun, MemoryBackend,
    RunningGuest,
};

const MIB: u64 = 1 << 20;

/// What one guest under `memvisor run` produced: its results, the guest-RAM region at the
/// last `memvisor stat` before it exited, and the wall time.
struct MapperRun {
    run: GuestRun,
    guest: RegionStatus,
    secs: f64,
}

/// Boots `config` under `memvisor run --budget BUDGET --swap-mapper on|off` and polls
/// `memvisor stat` until it exits.
fn run_guest(image: &GuestImage, config: &GuestConfig, budget: &str, mapper: bool) -> MapperRun {
    let tmp = tempfile::tempdir().unwrap();
    let ctl = tmp.path().join("ctl");
    let mut cmd = memvisor(&ctl);
    cmd.args(["run", "--budget", budget, "--swap-mapper"])
        .arg(if mapper { "on" } else { "off" })
        .arg("--swap-dir")
        .arg(tmp.path())
        .arg("--")
        .arg(qemu_binary().unwrap())
        .args(config.qemu_args(image).unwrap());
    let last: Arc<Mutex<Option<RegionStatus>>> = Arc::new(Mutex::new(None));
    let size = config.memory_mib * MIB;
    let started = Instant::now();
    let guest = RunningGuest::spawn(cmd).unwrap();
    let watch = {
        let last = last.clone();
        StatusWatch::start(&ctl, Duration::from_millis(100), move |st| {
            if let Some(g) = st
                .regions
                .iter()
                .find(|r| r.kind == "guest-memfd" && r.size_bytes == size)
            {
                *last.lock().unwrap() = Some(g.clone());
            }
        })
    };
    let result = guest.wait(config.timeout);
    let secs = started.elapsed().as_secs_f64();
    watch.stop();
    let guest = last
        .lock()
        .unwrap()
        .take()
        .expect("memvisor stat never showed the guest-RAM region");
    let run = result.unwrap_or_else(|e| panic!("guest failed: {e}\nlast stat: {guest:#?}"));
    MapperRun { run, guest, secs }
}

fn summary(what: &str, r: &MapperRun) -> String {
    let g = &r.guest;
    let phases: Vec<String> = r
        .run
        .disk_phases()
        .map(|p| format!("{:.0}ms", p.ms))
        .collect();
    format!(
        "{what}: {:.1} s wall, passes {}, swap written {} MiB, swap read {} MiB, image \
         re-read {} MiB, swap writes avoided {} MiB, false reads avoided {} MiB, image now {} \
         MiB, ended by guest {} by image {}, evictions put off by pins {}",
        r.secs,
        phases.join("/"),
        g.bytes_written / MIB,
        g.bytes_read / MIB,
        g.image_read_bytes / MIB,
        g.swap_write_bytes_avoided / MIB,
        g.false_read_bytes_avoided / MIB,
        g.image_bytes / MIB,
        g.image_associations_ended_by_guest,
        g.image_associations_ended_by_image,
        g.pinned_evictions_skipped,
    )
}

fn image_or_skip(test: &str) -> Option<GuestImage> {
    if !userfaultfd_usable() {
        return None;
    }
    GuestImage::for_test(test)
}

/// A guest of 512 MiB reading a 256 MiB disk twice (4 KiB reads through its page cache)
/// under a 128 MiB budget: every block verifies, the pages its page cache evicts go without
/// swap writes, and the second pass pages data in from the image rather than from swap.
#[test]
fn a_guest_reading_its_disk_twice_verifies_with_the_swap_mapper() {
    let Some(image) = image_or_skip("a_guest_reading_its_disk_twice_verifies_with_the_swap_mapper")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    image.make_disk_image(&disk, 256).unwrap();
    let pass = "disk /dev/vda seq --reads 65536 --verify";
    let config = GuestConfig::new(512, format!("{pass}; {pass}"))
        .backend(MemoryBackend::Memfd)
        .disk(DiskConfig::new(&disk))
        .timeout(Duration::from_secs(240));
    let on = run_guest(&image, &config, "128M", true);
    eprintln!("{}", summary("mapper on", &on));
    check_disk_passes_verified(&on.run, 2, 256 * MIB);
    let g = &on.guest;
    assert_region_error_free(g);
    assert!(
        g.swap_write_bytes_avoided >= 64 * MIB,
        "too few swap writes avoided: {g:?}"
    );
    assert!(
        g.image_read_bytes > 0,
        "nothing paged in from the image: {g:?}"
    );
}

/// `aio=io_uring` and `aio=native` requests complete without a library call. The library reads
/// them at submission (liburing's `io_uring_submit`, libaio's `io_submit`) and finds their
/// completions in the rings (`aio_in_flight.rs`): the reads are pinned while the device fills
/// them (`cache=none`: `O_DIRECT`), associated once complete, and paged back in from the image;
/// the guest verifies every byte of both passes.
#[test]
fn guests_with_io_uring_and_native_aio_verify_with_the_swap_mapper_on() {
    let Some(image) =
        image_or_skip("guests_with_io_uring_and_native_aio_verify_with_the_swap_mapper_on")
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    image.make_disk_image(&disk, 256).unwrap();
    let pass = "disk /dev/vda seq --reads 65536 --verify";
    for drive in [
        DiskConfig::new(&disk).aio(DiskAio::IoUring),
        DiskConfig::new(&disk)
            .aio(DiskAio::IoUring)
            .cache(DiskCache::None),
        DiskConfig::new(&disk)
            .aio(DiskAio::Native)
            .cache(DiskCache::None),
    ] {
        let config = GuestConfig::new(512, format!("{pass}; {pass}"))
            .backend(MemoryBackend::Memfd)
            .disk(drive.clone())
            .timeout(Duration::from_secs(240));
        let r = run_guest(&image, &config, "128M", true);
        let what = format!("{} cache={}", drive.aio.as_str(), drive.cache.as_str());
        eprintln!("{}", summary(&what, &r));
        check_disk_passes_verified(&r.run, 2, 256 * MIB);
        let g = &r.guest;
        assert_region_error_free(g);
        assert!(
            g.swap_write_bytes_avoided >= 64 * MIB && g.image_read_bytes > 0,
            "{what}: the mapper did not see the reads: {g:?}"
        );
    }
}

/// `cache=none` with QEMU's default `aio=threads`: the workers read the image with `O_DIRECT`
/// straight into guest RAM, the device writing into pinned pages; the library pins their
/// chunks against eviction for each read (`direct_io_reads.rs`), and the guest, paging under
/// its budget, must verify every byte of two passes over its disk.
#[test]
fn a_guest_reading_its_disk_with_direct_io_verifies() {
    let Some(image) = image_or_skip("a_guest_reading_its_disk_with_direct_io_verifies") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    image.make_disk_image(&disk, 256).unwrap();
    let pass = "disk /dev/vda seq --reads 65536 --verify";
    let config = GuestConfig::new(512, format!("{pass}; {pass}"))
        .backend(MemoryBackend::Memfd)
        .disk(DiskConfig::new(&disk).cache(DiskCache::None))
        .timeout(Duration::from_secs(240));
    let r = run_guest(&image, &config, "128M", true);
    eprintln!("{}", summary("threads, cache=none", &r));
    check_disk_passes_verified(&r.run, 2, 256 * MIB);
    let g = &r.guest;
    assert_region_error_free(g);
    // Paged: memory left under the budget (dropped as image blocks, the guest's own memory
    // kept while they were as cold), and the pinned reads' chunks with it.
    assert!(
        g.refaults.evicted_bytes > 0 && g.image_read_bytes > 0,
        "the guest did not page: {g:?}"
    );
}

/// Free page reporting (virtio-balloon): the guest frees 256 MiB it had written (most of it
/// paged out under the 128 MiB budget) and reports the free pages; QEMU discards them with
/// `fallocate(PUNCH_HOLE)` on the guest-RAM memfd, which the preload library turns into
/// discards through the pager (swap blocks dropped, nothing paged in), and the guest goes on
/// and verifies new memory.
#[test]
fn free_page_reporting_discards_through_the_pager() {
    let Some(image) = image_or_skip("free_page_reporting_discards_through_the_pager") else {
        return;
    };
    let config = GuestConfig::new(512, "mem 256 --patterns seq; idle 6; mem 64 --patterns seq")
        .backend(MemoryBackend::Memfd)
        .free_page_reporting(true)
        .timeout(Duration::from_secs(240));
    let r = run_guest(&image, &config, "128M", true);
    let done = r.run.done().expect("done line");
    assert!(
        done.ok && done.errors == 0,
        "{done:?}\n{}",
        r.run.console_tail(20)
    );
    assert_eq!(r.run.mem_phases().count(), 6, "{}", r.run.console_tail(20));
    let g = &r.guest;
    eprintln!(
        "discards {}, swapped {} MiB, resident {} MiB, written {} MiB",
        g.discards,
        g.swapped_bytes / MIB,
        g.resident_bytes / MIB,
        g.bytes_written / MIB
    );
    assert_region_error_free(g);
    assert!(g.discards > 0, "no discard reached the pager: {g:?}");
    // The 256 MiB the guest freed no longer sit in swap.
    assert!(g.swapped_bytes < 128 * MIB, "{g:?}");
}

/// One QMP command on `sock` after the capabilities handshake; returns QEMU's answer line.
fn qmp(sock: &std::path::Path, command: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::os::unix::net::UnixStream::connect(sock).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut out = stream.try_clone().unwrap();
    let mut lines = BufReader::new(stream);
    let read_answer = |lines: &mut BufReader<_>| loop {
        let mut l = String::new();
        assert!(lines.read_line(&mut l).unwrap() > 0, "QMP closed");
        if l.contains("\"return\"") || l.contains("\"error\"") {
            return l;
        }
    };
    let mut greeting = String::new();
    lines.read_line(&mut greeting).unwrap();
    assert!(greeting.contains("QMP"), "{greeting}");
    out.write_all(b"{\"execute\":\"qmp_capabilities\"}\n")
        .unwrap();
    read_answer(&mut lines);
    out.write_all(command.as_bytes()).unwrap();
    out.write_all(b"\n").unwrap();
    read_answer(&mut lines)
}

/// Balloon inflation (QMP `balloon`): while the guest idles, its balloon grows to take 256 of
/// its 512 MiB; QEMU discards the pages the guest gives up (`fallocate(PUNCH_HOLE)` on the
/// guest-RAM memfd, then `MADV_DONTNEED`), which reach the pager as discards, and the guest
/// goes on correctly with the rest.
#[test]
fn balloon_inflation_discards_through_the_pager() {
    let Some(image) = image_or_skip("balloon_inflation_discards_through_the_pager") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("qmp.sock");
    let config = GuestConfig::new(512, "mem 192 --patterns seq; idle 8; mem 96 --patterns seq")
        .backend(MemoryBackend::Memfd)
        .free_page_reporting(true)
        .qmp_socket(&sock)
        .timeout(Duration::from_secs(240));
    let inflate = {
        let sock = sock.clone();
        thread::spawn(move || {
            // The guest boots and writes 192 MiB first (a few seconds); inflate while it idles.
            let start = Instant::now();
            while !sock.exists() && start.elapsed() < Duration::from_secs(60) {
                thread::sleep(Duration::from_millis(50));
            }
            thread::sleep(Duration::from_secs(6));
            qmp(
                &sock,
                "{\"execute\":\"balloon\",\"arguments\":{\"value\":268435456}}",
            )
        })
    };
    let r = run_guest(&image, &config, "128M", true);
    let answer = inflate.join().unwrap();
    assert!(answer.contains("\"return\""), "balloon: {answer}");
    let done = r.run.done().expect("done line");
    assert!(
        done.ok && done.errors == 0,
        "{done:?}\n{}",
        r.run.console_tail(20)
    );
    let g = &r.guest;
    eprintln!(
        "balloon: discards {}, swapped {} MiB, resident {} MiB",
        g.discards,
        g.swapped_bytes / MIB,
        g.resident_bytes / MIB
    );
    assert_region_error_free(g);
    assert!(g.discards > 0, "no discard reached the pager: {g:?}");
}

/// Issue 10's evaluation (a): a 1 GiB guest under a 192 MiB budget reads its 512 MiB disk
/// twice, mapper on and off alternated, `reps` of each.
#[test]
#[ignore = "measurement (minutes): run by hand, see the module docs"]
fn measure() {
    let Some(image) = image_or_skip("measure") else {
        return;
    };
    let reps: usize = std::env::var("REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    image.make_disk_image(&disk, 512).unwrap();
    let pass = "disk /dev/vda seq --reads 131072 --verify";
    let config = GuestConfig::new(1024, format!("{pass}; {pass}"))
        .backend(MemoryBackend::Memfd)
        .disk(DiskConfig::new(&disk))
        .timeout(Duration::from_secs(900));
    for rep in 0..reps {
        let order = if rep % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for mapper in order {
            let r = run_guest(&image, &config, "192M", mapper);
            check_disk_passes_verified(&r.run, 2, 512 * MIB);
            eprintln!(
                "{}",
                summary(if mapper { "mapper on " } else { "mapper off" }, &r)
            );
        }
    }
}
