//! Failure semantics: failed writes lose nothing, failed reads never map garbage, swap files
//! are private and vanish.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::Arc;

use common::{pattern, read, supported, write};
use memvisor_pager::{
    page_size, FaultInjector, PageInUnit, PageOut, PagerError, Region, RegionConfig, ResolveMode,
};

const CHILD_ENV: &str = "MEMVISOR_PAGER_TEST_CHILD";
const CHILD_DIR_ENV: &str = "MEMVISOR_PAGER_TEST_DIR";

/// The descriptors of this process open on `path` (an unlinked file shows as `PATH (deleted)`).
fn fds_on(path: &std::path::Path) -> Vec<std::path::PathBuf> {
    let want = path.to_string_lossy().into_owned();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let t = std::fs::read_link(e.path()).ok()?;
            t.to_string_lossy().starts_with(&want).then(|| e.path())
        })
        .collect()
}

#[test]
fn swap_file_is_private_and_gone_after_drop() {
    if !supported() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let chunk = 4 * page_size();
    let region = Region::new(
        RegionConfig::new(8 * chunk, chunk, dir.path())
            .chunk_size(chunk)
            .page_in_unit(PageInUnit::Chunk),
    )
    .unwrap();
    write(&region, 0, &[1; 100]);
    write(&region, chunk, &[2; 100]);
    assert_eq!(region.stats().page_outs, 1);
    // Nameless (O_TMPFILE) or unlinked at creation: nothing in the directory, one deleted
    // file open there.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    assert!(region.swap_path().starts_with(dir.path()));
    let path = dir.path().to_path_buf();
    let fds = fds_on(&path);
    assert_eq!(fds.len(), 1, "{fds:?}");
    let target = std::fs::read_link(&fds[0]).unwrap();
    assert!(
        target.to_string_lossy().ends_with("(deleted)"),
        "{target:?}"
    );
    let mode = std::fs::metadata(&fds[0]).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    drop(region);
    assert!(fds_on(&path).is_empty());
}

fn write_failure_keeps_data(errno: i32, mode: ResolveMode) {
    let ps = page_size();
    let chunk = 4 * ps;
    let dir = tempfile::tempdir().unwrap();
    let inj = Arc::new(FaultInjector::new());
    // Synchronous page-out: the counts after each step are exact.
    let region = Region::new(
        RegionConfig::new(6 * chunk, 2 * chunk, dir.path())
            .chunk_size(chunk)
            .page_in_unit(PageInUnit::Chunk)
            .resolve(mode)
            .page_out(PageOut::Sync)
            .fault_injector(inj.clone())
            .log_errors(false),
    )
    .unwrap();
    let mut buf = vec![0u8; chunk];
    let fill = |c: usize, buf: &mut Vec<u8>| {
        pattern(100 + c as u64, buf);
        write(&region, c * chunk, buf);
    };
    fill(0, &mut buf);
    fill(1, &mut buf);
    inj.fail_writes(errno, 2);
    // Chunk 2 comes in: evicting a victim fails, it stays resident over budget.
    fill(2, &mut buf);
    let s = region.stats();
    assert_eq!(
        (s.write_errors, s.overrun_chunks, s.resident_chunks),
        (1, 1, 3),
        "{s:?}"
    );
    // Chunk 3: after an I/O error the overrun chunk is retried first (fails again), then
    // policy victims go out until chunk 3 fits the budget. The overrun chunk is over the
    // budget, not in it: one victim (chunk 1) is enough, and chunks 2 and 3 fill the budget.
    // While swap is full the overrun chunk waits (a retry at most every 100 ms): the next
    // policy victim's write fails instead and joins it over the budget.
    fill(3, &mut buf);
    let s = region.stats();
    let expected = if errno == libc::ENOSPC {
        (2, 2, 4)
    } else {
        (2, 1, 3)
    };
    assert_eq!(
        (s.write_errors, s.overrun_chunks, s.resident_chunks),
        expected,
        "{s:?}"
    );
    check_write_errors(&region, 2);
    // Writes work again: the overrun drains as new chunks come in, and nothing was lost.
    fill(4, &mut buf);
    fill(5, &mut buf);
    verify_patterns(&region, 6, chunk, &format!("{errno} {mode:?}"));
    let s = region.stats();
    assert_eq!(s.overrun_chunks, 0, "{s:?}");
    assert!(s.resident_chunks <= 2, "{s:?}");
}

/// Every recorded error is a swap write error naming the region and an offset.
fn check_write_errors(region: &Region, n: usize) {
    let errors = region.take_errors();
    assert_eq!(errors.len(), n, "{errors:?}");
    for e in &errors {
        assert!(matches!(e, PagerError::SwapWrite { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains(region.name()) && msg.contains("offset 0x"),
            "{msg}"
        );
    }
}

/// Two passes over chunks `0..chunks`, each holding `pattern(100 + c)`.
fn verify_patterns(region: &Region, chunks: usize, chunk: usize, what: &str) {
    let mut want = vec![0u8; chunk];
    let mut buf = vec![0u8; chunk];
    for _pass in 0..2 {
        for c in 0..chunks {
            pattern(100 + c as u64, &mut want);
            read(region, c * chunk, &mut buf);
            assert!(buf == want, "{what}: chunk {c} lost");
        }
    }
}

/// Asynchronous page-out: a write that fails on a writer thread or in the io_uring keeps the
/// chunk in memory (overrun), is reported, and is retried; nothing is lost.
fn async_write_failure_keeps_data(errno: i32, mode: ResolveMode, page_out: PageOut) {
    let chunk = 4 * page_size();
    let dir = tempfile::tempdir().unwrap();
    let inj = Arc::new(FaultInjector::new());
    let region = Region::new(
        RegionConfig::new(8 * chunk, 3 * chunk, dir.path())
            .chunk_size(chunk)
            .page_in_unit(PageInUnit::Chunk)
            .resolve(mode)
            .page_out(page_out)
            .fault_injector(inj.clone())
            .log_errors(false),
    )
    .unwrap();
    let mut buf = vec![0u8; chunk];
    for c in 0..3 {
        pattern(100 + c as u64, &mut buf);
        write(&region, c * chunk, &buf);
    }
    inj.fail_writes(errno, 2);
    for c in 3..8 {
        pattern(100 + c as u64, &mut buf);
        write(&region, c * chunk, &buf);
    }
    let what = format!("{errno} {mode:?} {page_out}");
    verify_patterns(&region, 8, chunk, &what);
    let s = region.stats();
    assert_eq!(s.write_errors, 2, "{what}: {s:?}");
    check_write_errors(&region, 2);
    // More passes drain the overrun chunks through successful writes.
    verify_patterns(&region, 8, chunk, &what);
    let s = region.stats();
    assert_eq!(s.overrun_chunks, 0, "{what}: {s:?}");
    assert!(s.resident_chunks <= 3, "{what}: {s:?}");
}

#[test]
fn swap_write_failure_keeps_the_chunk_resident() {
    if !supported() {
        return;
    }
    for mode in [ResolveMode::AliasContinue, ResolveMode::Copy] {
        write_failure_keeps_data(libc::EIO, mode);
        write_failure_keeps_data(libc::ENOSPC, mode);
        for page_out in [PageOut::Threads(2), PageOut::IoUring(4)] {
            async_write_failure_keeps_data(libc::EIO, mode, page_out);
            async_write_failure_keeps_data(libc::ENOSPC, mode, page_out);
        }
    }
}

/// A full swap filesystem over a long time: many chunks overrun the budget, and the program
/// reads back what swap holds. Overrun chunks are over the budget, not in it, so each chunk
/// paged in stays until its thread used it. Counting them in the budget made the asynchronous
/// page-out evict every chunk just paged in right after waking its thread: the thread faulted
/// again, and the reads crawled or never ended (swap_full's CLI test hit its 180 s watchdog).
#[test]
fn reads_go_on_while_swap_stays_full() {
    if !supported() {
        return;
    }
    for page_out in [PageOut::Threads(2), PageOut::IoUring(4)] {
        let chunk = 4 * page_size();
        let dir = tempfile::tempdir().unwrap();
        let inj = Arc::new(FaultInjector::new());
        let region = Arc::new(
            Region::new(
                RegionConfig::new(64 * chunk, 8 * chunk, dir.path())
                    .chunk_size(chunk)
                    .page_out(page_out)
                    .fault_injector(inj.clone())
                    .log_errors(false),
            )
            .unwrap(),
        );
        let mut buf = vec![0u8; chunk];
        // 24 chunks go through the budget of 8 while swap has room: 16 or more are stored.
        for c in 0..24 {
            pattern(100 + c as u64, &mut buf);
            write(&region, c * chunk, &buf);
        }
        // Then swap is full for good: 24 more chunks stay in memory over the budget.
        inj.fail_writes(libc::ENOSPC, u32::MAX);
        for c in 24..48 {
            pattern(100 + c as u64, &mut buf);
            write(&region, c * chunk, &buf);
        }
        let before = region.stats();
        assert!(before.overrun_chunks >= 16, "{page_out}: {before:?}");
        let (tx, rx) = std::sync::mpsc::channel();
        let r = region.clone();
        std::thread::spawn(move || {
            verify_patterns(&r, 48, chunk, "swap full");
            let _ = tx.send(());
        });
        let done = rx.recv_timeout(std::time::Duration::from_secs(60));
        let s = region.stats();
        assert!(
            done.is_ok(),
            "{page_out}: reads stalled with swap full: {s:?}"
        );
        // Two passes over 48 chunks of 4 pages: at most one page-in per page and pass.
        let page_ins = s.page_ins - before.page_ins;
        assert!(
            page_ins <= 2 * 48 * 4,
            "{page_out}: {page_ins} page-ins: {s:?}"
        );
        assert!(s.resident_chunks > 8, "{page_out}: {s:?}");
        // Writes work again: the overrun drains and nothing was lost.
        inj.fail_writes(libc::ENOSPC, 0);
        verify_patterns(&region, 48, chunk, "swap free again");
        std::thread::sleep(std::time::Duration::from_millis(120));
        verify_patterns(&region, 48, chunk, "swap free again");
        let s = region.stats();
        assert_eq!(s.overrun_chunks, 0, "{page_out}: {s:?}");
    }
}

/// Child side of the SIGBUS tests: only runs when spawned by `run_child`.
#[test]
fn child_reads_a_chunk_whose_page_in_fails() {
    let Ok(what) = std::env::var(CHILD_ENV) else {
        return;
    };
    let ps = page_size();
    let chunk = 4 * ps;
    let dir = std::path::PathBuf::from(std::env::var(CHILD_DIR_ENV).unwrap());
    let inj = Arc::new(FaultInjector::new());
    let mode = if what.ends_with("copy") {
        ResolveMode::Copy
    } else {
        ResolveMode::AliasContinue
    };
    let region = Region::new(
        RegionConfig::new(4 * chunk, chunk, &dir)
            .chunk_size(chunk)
            .page_in_unit(PageInUnit::Chunk)
            .resolve(mode)
            .async_page_in(what.contains("async"))
            .fault_injector(inj.clone()),
    )
    .unwrap();
    write(&region, 2 * chunk + 5, &[0xAB; 64]);
    write(&region, 0, &[1; 8]); // evicts chunk 2 to swap
    assert_eq!(region.stats().page_outs, 1);
    if what.starts_with("eio") {
        inj.fail_reads(libc::EIO, 1);
    } else {
        inj.corrupt_reads(1);
    }
    let mut b = [0u8; 64];
    read(&region, 2 * chunk + 5, &mut b);
    // Unreachable if the pager is right.
    println!("CHILD READ {:?}", &b[..4]);
    std::process::exit(0);
}

fn run_child(what: &str) {
    let exe = std::env::current_exe().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "child_reads_a_chunk_whose_page_in_fails",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, what)
        .env(CHILD_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGBUS),
        "{what}: child should die of SIGBUS; status {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    assert!(!stdout.contains("CHILD READ"), "{stdout}");
    let want = if what.starts_with("eio") {
        "swap read of chunk 2 (offset 0x"
    } else {
        "checksum mismatch in chunk 2 (offset 0x"
    };
    assert!(stderr.contains(want), "{what}: error not logged:\n{stderr}");
    // The child died with its swap file open: the file is gone with it.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn failed_swap_read_raises_sigbus() {
    if !supported() {
        return;
    }
    run_child("eio-alias");
    run_child("eio-copy");
    // The faulting page's own read fails (asynchronous page-in reads it first).
    run_child("eio-async-copy");
}

#[test]
fn checksum_mismatch_raises_sigbus() {
    if !supported() {
        return;
    }
    run_child("crc-alias");
    run_child("crc-copy");
    run_child("crc-async-copy");
}

#[test]
fn armed_read_failure_spares_chunks_that_need_no_read() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    let dir = tempfile::tempdir().unwrap();
    let inj = Arc::new(FaultInjector::new());
    let region = Region::new(
        RegionConfig::new(4 * chunk, chunk, dir.path())
            .chunk_size(chunk)
            .page_in_unit(PageInUnit::Chunk)
            .fault_injector(inj.clone())
            .log_errors(false),
    )
    .unwrap();
    write(&region, 0, &[9; 16]);
    write(&region, chunk, &[8; 16]);
    write(&region, 2 * chunk, &[7; 16]);
    let s = region.stats();
    assert_eq!(s.swapped_chunks, 2, "{s:?}");
    // Chunk 3 was never written: its page-in reads nothing, so an armed read failure is not
    // consumed and the chunk reads as zeros.
    inj.fail_reads(libc::EIO, 1);
    let mut b = [0u8; 16];
    read(&region, 3 * chunk, &mut b);
    assert_eq!(b, [0; 16]);
    inj.fail_reads(libc::EIO, 0);
    read(&region, 0, &mut b);
    assert_eq!(b, [9; 16]);
    read(&region, chunk, &mut b);
    assert_eq!(b, [8; 16]);
    assert_eq!(region.stats().read_errors, 0);
    assert!(region.take_errors().is_empty());
}

/// A page that left memory clean (read from swap, not written since) keeps a uffd-wp marker in
/// its empty page-table entry. A failed read of it must still poison it (a kernel read sees
/// EFAULT): `UFFDIO_POISON` refuses a marker, and the access used to fault forever.
#[test]
fn a_failed_read_of_a_page_that_left_memory_clean_poisons_it() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    for mode in [ResolveMode::Copy, ResolveMode::AliasContinue] {
        let dir = tempfile::tempdir().unwrap();
        let inj = Arc::new(FaultInjector::new());
        let region = Region::new(
            RegionConfig::new(4 * chunk, chunk, dir.path())
                .chunk_size(chunk)
                .resolve(mode)
                .fault_injector(inj.clone())
                .log_errors(false),
        )
        .unwrap();
        assert!(region.dirty_tracking());
        write(&region, 0, &[9; 16]);
        write(&region, chunk, &[8; 16]); // chunk 0 written to swap
        let mut b = [0u8; 16];
        read(&region, 0, &mut b); // chunk 0 back, clean
        assert_eq!(b, [9; 16]);
        read(&region, chunk, &mut b); // chunk 0 leaves memory clean
        let s = region.stats();
        assert!(s.clean_evictions >= 1, "{mode:?}: {s:?}");
        inj.fail_reads(libc::EIO, 1);
        let e = common::kernel_reads(&region, 0, 16).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EFAULT), "{mode:?}");
        assert_eq!(region.stats().read_errors, 1, "{mode:?}");
    }
}

/// Asynchronous page-in maps the faulting page first and wakes its thread, then reads the rest
/// of the chunk. If that read fails, the faulting page, which its thread may have written by
/// then, must stay: resident, with the thread's bytes (the rest of the chunk is poisoned, as any
/// failed read). It used to be left out of the chunk table and punched with the rest.
#[test]
fn a_failed_chunk_read_keeps_the_page_mapped_first() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    let dir = tempfile::tempdir().unwrap();
    let inj = Arc::new(FaultInjector::new());
    let region = Region::new(
        RegionConfig::new(4 * chunk, chunk, dir.path())
            .chunk_size(chunk)
            .page_in_unit(PageInUnit::Chunk)
            .async_page_in(true)
            .fault_injector(inj.clone())
            .log_errors(false),
    )
    .unwrap();
    for p in 0..4 {
        write(&region, p * ps, &[p as u8 + 1; 64]);
    }
    write(&region, chunk, &[0xAA; 16]); // chunk 0 leaves memory, written to swap
    assert!(region.stats().swapped_chunks >= 1);
    // The page read on its own succeeds, the chunk's read fails.
    inj.fail_reads_after(1, libc::EIO, 1);
    write(&region, 2 * ps + 8, &[0x55; 8]); // faults on page 2 of chunk 0, then writes it
                                            // The thread ran on as soon as its page was mapped: the handler's command queue is served
                                            // once the rest of the page-in is over.
    region.barrier().unwrap();
    inj.fail_reads(libc::EIO, 0);
    let s = region.stats();
    assert_eq!(s.read_errors, 1, "{s:?}");
    assert!(s.early_wakes >= 1, "the page was mapped first: {s:?}");
    let got = common::kernel_reads(&region, 2 * ps, 16).expect("page 2 stays readable");
    assert_eq!(&got[..8], &[3u8; 8], "page 2 keeps its stored bytes");
    assert_eq!(
        &got[8..16],
        &[0x55; 8],
        "and the write made after the early wake"
    );
    // The pages whose read failed are poisoned: a kernel read of them is EFAULT.
    assert_eq!(
        common::kernel_reads(&region, 0, 16)
            .unwrap_err()
            .raw_os_error(),
        Some(libc::EFAULT)
    );
    // Evicted and read back, page 2 still holds what was written.
    write(&region, 3 * chunk, &[0xBB; 16]);
    let got = common::kernel_reads(&region, 2 * ps, 16).expect("page 2 after eviction");
    assert_eq!(&got[8..16], &[0x55; 8]);
}

/// A chunk pinned for a direct-I/O read (the kernel writing into its pages from a device) is
/// not evicted while pinned, however hard the budget presses: it stays resident, and goes once
/// the pin is dropped, its data intact.
#[test]
fn a_chunk_pinned_for_direct_io_is_not_evicted_until_unpinned() {
    if !supported() {
        return;
    }
    let ps = page_size();
    let chunk = 4 * ps;
    let dir = tempfile::tempdir().unwrap();
    let region = Region::new(
        RegionConfig::new(6 * chunk, 2 * chunk, dir.path())
            .chunk_size(chunk)
            .log_errors(false),
    )
    .unwrap();
    let mut data = vec![0u8; chunk];
    pattern(7, &mut data);
    write(&region, 0, &data);
    let pin = region.pin_for_direct_io(ps, 2 * ps).unwrap();
    for round in 0..3 {
        for c in 1..6 {
            write(&region, c * chunk, &[round as u8 + c as u8; 64]);
        }
    }
    assert!(
        region.covered_pages_resident(0, chunk),
        "the pinned chunk stayed: {:?}",
        region.stats()
    );
    assert!(
        region.stats().pinned_evictions_skipped > 0,
        "{:?}",
        region.stats()
    );
    drop(pin);
    for round in 0..3 {
        for c in 1..6 {
            write(&region, c * chunk, &[round as u8 + c as u8; 64]);
        }
    }
    assert!(
        !region.covered_pages_resident(0, chunk),
        "unpinned, it was evicted: {:?}",
        region.stats()
    );
    let mut back = vec![0u8; chunk];
    read(&region, 0, &mut back);
    assert!(back == data, "its data came back intact");
    assert!(
        region.pin_for_direct_io(6 * chunk, 1).is_err(),
        "outside the region"
    );
}
