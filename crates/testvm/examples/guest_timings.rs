//! Measures how long test guests take here: boot, each `mem` phase, and `disk` reads, and
//! whether a guest's disk reads leave the image in the host page cache (double caching).
//!
//! ```sh
//! cargo run --release -p memvisor-testvm --example guest_timings
//! ```

use std::os::fd::AsRawFd;
use std::process::Command;
use std::time::Duration;

use memvisor_testvm::{DiskCache, DiskConfig, GuestConfig, GuestImage, GuestRun, MemoryBackend};

fn report(label: &str, run: &GuestRun) {
    println!(
        "\n{label}: boot (spawn to workload start) {:.2} s, guest uptime at start {:.0} ms, \
         MemAvailable {} MiB, total {:.2} s",
        run.boot.map_or(f64::NAN, |b| b.as_secs_f64()),
        run.guest_uptime_at_start_ms().unwrap_or(f64::NAN),
        run.guest_mem_available_kib()
            .map_or(-1, |k| k as i64 / 1024),
        run.elapsed.as_secs_f64()
    );
    for p in run.mem_phases() {
        let pass = p.pass.map_or(String::new(), |n| format!(" pass {n}"));
        println!(
            "  mem {:>7}{pass:<7} {:>6} pages {:>8.0} ms {:>8.1} MB/s",
            p.kind.as_str(),
            p.pages,
            p.ms,
            p.mbps
        );
    }
    for d in run.disk_phases() {
        println!(
            "  disk {:>6} block {:>6} reads {:>7} {:>8.0} ms {:>8.1} MB/s verified={}",
            d.pattern.as_str(),
            d.block,
            d.reads,
            d.ms,
            d.mbps,
            d.verified
        );
    }
}

/// Drops a file's pages from the host page cache.
fn drop_host_cache(path: &std::path::Path) -> std::io::Result<()> {
    let file = std::fs::File::open(path)?;
    // SAFETY: posix_fadvise only takes a descriptor we own for the duration of the call.
    let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if rc != 0 {
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Resident bytes of a file in the host page cache, from util-linux `fincore`.
fn host_cached_bytes(path: &std::path::Path) -> String {
    Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|e| format!("fincore failed: {e}"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let image = GuestImage::locate_or_build()?;
    let timeout = Duration::from_secs(300);

    for mib in [128, 256, 512, 1024] {
        let run = GuestConfig::new(mib, "noop").timeout(timeout).run(&image)?;
        report(&format!("noop, {mib} MiB anonymous"), &run.verified()?);
    }

    for (label, backend) in [
        ("mem 256, 512 MiB memfd", MemoryBackend::Memfd),
        ("mem 256, 512 MiB anonymous", MemoryBackend::Anonymous),
    ] {
        let run = GuestConfig::new(512, "mem 256")
            .backend(backend)
            .timeout(timeout)
            .run(&image)?;
        report(label, &run.verified()?);
    }
    let run = GuestConfig::new(1024, "mem 768 --passes 2")
        .backend(MemoryBackend::Memfd)
        .timeout(timeout)
        .run(&image)?;
    report("mem 768 --passes 2, 1 GiB memfd", &run.verified()?);

    let dir = tempfile::tempdir()?;
    let disk = dir.path().join("pattern.img");
    image.make_disk_image(&disk, 256)?;
    drop_host_cache(&disk)?;
    println!(
        "\ndisk image 256 MiB; host page cache before the guest: {} bytes",
        host_cached_bytes(&disk)
    );
    let run = GuestConfig::new(
        512,
        "disk /dev/vda seq --reads 65536 --verify; disk /dev/vda random --reads 20000 --verify; \
         disk /dev/vda zipf --reads 20000 --verify; disk /dev/vda seq --reads 1024 --block 262144 --verify",
    )
    .disk(DiskConfig::new(&disk).cache(DiskCache::Writeback))
    .timeout(timeout)
    .run(&image)?;
    report("disk, 512 MiB anonymous, cache=writeback", &run.verified()?);
    println!(
        "host page cache after the guest read the whole image: {} bytes",
        host_cached_bytes(&disk)
    );
    Ok(())
}
