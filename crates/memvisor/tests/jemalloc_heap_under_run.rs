//! QEMU's heap under the budget: `memvisor run --malloc jemalloc` preloads jemalloc after the
//! library, so QEMU's `malloc` maps through the interposed `mmap` and its heap (device state,
//! the iovec arrays of its disk reads, the copy of the `-kernel` image) is carved from the
//! arena and paged with guest RAM. A real TCG guest reads its virtio disk twice and runs a
//! memory workload under a budget smaller than its RAM, verifying every byte; the library's
//! own threads allocate from a jemalloc arena of their own, so no fault handler waits for a
//! page of the heap it evicted itself.
//!
//! Skipped (with `SKIPPED`) where QEMU, jemalloc or userfaultfd is unavailable, unless
//! `CI=true`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use memvisor_control::RegionStatus;
use memvisor_testvm::{
    qemu_binary, DiskConfig, GuestConfig, GuestImage, MemoryBackend, RunningGuest,
};

const MIB: u64 = 1 << 20;

#[test]
fn a_guest_whose_qemu_heap_is_paged_verifies_its_disk_and_memory() {
    let test = "a_guest_whose_qemu_heap_is_paged_verifies_its_disk_and_memory";
    if !userfaultfd_usable() {
        return;
    }
    if !jemalloc_or_skip(test) {
        return;
    }
    let Some(image) = GuestImage::for_test(test) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk.img");
    image.make_disk_image(&disk, 128).unwrap();
    let pass = "disk /dev/vda seq --reads 32768 --verify";
    let config = GuestConfig::new(384, format!("{pass}; mem 192 --patterns seq,zipf; {pass}"))
        .backend(MemoryBackend::Memfd)
        .disk(DiskConfig::new(&disk))
        .timeout(Duration::from_secs(240));
    let ctl = dir.path().join("ctl");
    let mut cmd = memvisor(&ctl);
    cmd.args([
        "run",
        "--budget",
        "96M",
        "--malloc",
        "jemalloc",
        "--swap-dir",
    ])
    .arg(dir.path())
    .arg("--")
    .arg(qemu_binary().unwrap())
    .args(config.qemu_args(&image).unwrap());
    // The arena (QEMU's heap) and guest RAM at the last `memvisor stat`.
    let last: Arc<Mutex<Option<(RegionStatus, RegionStatus)>>> = Arc::new(Mutex::new(None));
    let guest = RunningGuest::spawn(cmd).unwrap();
    let watch = {
        let last = last.clone();
        StatusWatch::start(&ctl, Duration::from_millis(100), move |st| {
            let find = |kind: &str| st.regions.iter().find(|r| r.kind == kind).cloned();
            if let (Some(a), Some(g)) = (find("arena"), find("guest-memfd")) {
                *last.lock().unwrap() = Some((a, g));
            }
        })
    };
    let result = guest.wait(config.timeout);
    watch.stop();
    let (arena, ram) = last
        .lock()
        .unwrap()
        .take()
        .expect("memvisor stat never showed the arena and guest RAM");
    let run = result.unwrap_or_else(|e| panic!("guest failed: {e}\nlast arena: {arena:#?}"));
    check_disk_passes_verified(&run, 2, 128 * MIB);
    eprintln!(
        "arena: mapped {} KiB, resident {} KiB, page-outs {}, page-ins {}; guest RAM: page-outs {}",
        arena.mapped_bytes >> 10,
        arena.resident_bytes >> 10,
        arena.page_outs,
        arena.page_ins,
        ram.page_outs
    );
    assert_region_error_free(&arena);
    assert_region_error_free(&ram);
    // QEMU's heap is in the arena (with glibc's malloc nothing is mapped there: its heap
    // comes from mappings the library cannot see), and part of it was paged out.
    assert!(
        arena.mapped_bytes >= 8 * MIB,
        "QEMU's heap is not in the arena: {arena:?}"
    );
    assert!(
        arena.page_outs > 0,
        "nothing of QEMU's heap paged out: {arena:?}"
    );
    assert!(ram.page_outs > 0, "the guest was not paged: {ram:?}");
}
