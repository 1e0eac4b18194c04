//! Real guests running the `mem` workload under plain QEMU (TCG).

use std::time::{Duration, Instant};

use memvisor_testvm::{GuestConfig, GuestImage, MemPhaseKind, MemoryBackend, RunningGuest};

/// 512 MiB of memfd-backed RAM, `mem 256`: every phase verifies every page it reads.
#[test]
fn mem_256_on_a_memfd_backend_verifies() {
    let Some(image) = GuestImage::for_test("mem_256_on_a_memfd_backend_verifies") else {
        return;
    };
    let config = GuestConfig::new(512, "mem 256 --thp on")
        .backend(MemoryBackend::Memfd)
        .timeout(Duration::from_secs(60));
    let guest = RunningGuest::spawn(config.command(&image).unwrap()).unwrap();

    // The guest's RAM really is the memfd memvisor will manage.
    let maps = format!("/proc/{}/maps", guest.pid());
    let poll_until = Instant::now() + Duration::from_secs(10);
    let mut found = false;
    while !found && Instant::now() < poll_until {
        found = std::fs::read_to_string(&maps)
            .map(|m| m.contains("/memfd:memory-backend-memfd"))
            .unwrap_or(false);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(found, "no memory-backend-memfd mapping in {maps}");

    let run = guest.wait(config.timeout).unwrap().verified().unwrap();
    let kinds: Vec<_> = run.mem_phases().map(|p| (p.kind, p.pass)).collect();
    assert_eq!(
        kinds,
        vec![
            (MemPhaseKind::Write, None),
            (MemPhaseKind::Seq, Some(1)),
            (MemPhaseKind::Rev, Some(1)),
            (MemPhaseKind::Random, Some(1)),
            (MemPhaseKind::Zipf, Some(1)),
            (MemPhaseKind::Verify, None),
        ]
    );
    for phase in run.mem_phases() {
        assert!(phase.ok && phase.errors == 0, "{phase:?}");
        assert_eq!((phase.mib, phase.pages, phase.reads), (256, 65536, 65536));
        assert!(phase.ms > 0.0, "{phase:?}");
    }
    // Linux turns THP off in guests below 512 MiB of RAM; --thp on turns it back on.
    let write = run.mem_phases().next().unwrap();
    assert!(
        write.anon_huge_kib.unwrap() >= 128 << 10,
        "AnonHugePages {:?} KiB",
        write.anon_huge_kib
    );
    let available = run
        .guest_mem_available_kib()
        .expect("start line reports MemAvailable");
    assert!(
        (300 << 10..512 << 10).contains(&available),
        "MemAvailable {available} KiB in a 512 MiB guest"
    );
    let done = run.done().unwrap();
    assert!(done.ok && done.errors == 0);
    let boot = run.boot.expect("start line seen");
    eprintln!(
        "memfd mem 256: boot {:.2} s (guest uptime {:.0} ms at start), total {:.2} s; phases (ms): {}",
        boot.as_secs_f64(),
        run.guest_uptime_at_start_ms().unwrap_or(-1.0),
        run.elapsed.as_secs_f64(),
        run.mem_phases()
            .map(|p| format!("{}={:.0}", p.kind, p.ms))
            .collect::<Vec<_>>()
            .join(" ")
    );
}

/// Plain anonymous RAM, chosen patterns, two passes, 4 KiB pages only in the guest.
#[test]
fn mem_patterns_and_passes_on_anonymous_ram() {
    let Some(image) = GuestImage::for_test("mem_patterns_and_passes_on_anonymous_ram") else {
        return;
    };
    // 1 GiB: large enough that the guest kernel enables THP by default, so --thp off matters.
    let run = GuestConfig::new(
        1024,
        "mem 64 --patterns random,zipf --passes 2 --seed 7 --thp off",
    )
    .timeout(Duration::from_secs(60))
    .run(&image)
    .unwrap()
    .verified()
    .unwrap();
    let kinds: Vec<_> = run.mem_phases().map(|p| (p.kind, p.pass)).collect();
    assert_eq!(
        kinds,
        vec![
            (MemPhaseKind::Write, None),
            (MemPhaseKind::Random, Some(1)),
            (MemPhaseKind::Zipf, Some(1)),
            (MemPhaseKind::Random, Some(2)),
            (MemPhaseKind::Zipf, Some(2)),
            (MemPhaseKind::Verify, None),
        ]
    );
    assert!(run.mem_phases().all(|p| p.ok && p.pages == 16384));
    let write = run.mem_phases().next().unwrap();
    assert_eq!(
        write.anon_huge_kib,
        Some(0),
        "--thp off leaves no huge pages"
    );
    assert!(
        !run.console.iter().any(|l| l.contains('\r')),
        "console lines keep no carriage returns"
    );
}
