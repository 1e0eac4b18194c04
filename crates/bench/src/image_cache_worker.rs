//! [`run_image_worker`]: the VMM-like process of `image-cache-eval`. Its "guest RAM" is a memfd
//! named like QEMU's; it reads a disk image into it with `pread`, as QEMU's worker threads do:
//! 4 KiB reads of Zipf-distributed blocks (the popular blocks scattered over the image by a
//! fixed permutation), and every so often a sequential scan of a stretch of the image in 256 KiB
//! reads (a backup, a boot, a `find`: what a scan-resistant cache must not be flushed by).
//! Every block read is checked against the image's pattern. It prints one line per phase:
//! `warm` after the warm-up, then `measure READS BYTES STORAGE_BYTES SECONDS ERRORS` for the
//! measured window (4 KiB reads only; `STORAGE_BYTES` is what the process read from the device,
//! `/proc/self/io` `read_bytes`, scans included).

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::str::FromStr;
use std::time::{Duration, Instant};

use memvisor_trace::WorkloadSpec;

use crate::bench_error::BenchError;
use crate::counters::field;

/// Bytes per block of the image (one Zipf read).
pub const BLOCK: u64 = 4096;
/// Bytes per scan read.
const SCAN_READ: u64 = 256 << 10;

/// The 8 bytes at the start of block `b` of the image.
pub fn block_word(b: u64) -> u64 {
    0x9E37_79B9_7F4A_7C15u64.wrapping_mul(b + 1)
}

/// What a worker does.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageWorkload {
    /// Zipf exponent of the 4 KiB reads.
    pub alpha: f64,
    /// A scan after this many 4 KiB reads (0: never).
    pub scan_every: u64,
    /// Bytes per scan (the scans walk the image, each after the last).
    pub scan_bytes: u64,
    /// Guest RAM, bytes.
    pub ram_bytes: u64,
    /// Seconds of warm-up, then seconds measured.
    pub warmup_s: f64,
    /// Seconds measured.
    pub measure_s: f64,
}

/// The device bytes this process read so far (`/proc/self/io` `read_bytes`).
fn storage_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io").map_or(0, |t| field(&t, "read_bytes:"))
}

/// Guest RAM: a shared memfd mapping (`memory-backend-memfd`).
fn guest_ram(bytes: u64) -> Result<&'static mut [u8], BenchError> {
    let name = c"memory-backend-memfd";
    // SAFETY: a valid NUL-terminated name; the descriptor is owned below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(BenchError::io(
            "memfd_create",
            "guest RAM",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns.
    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    file.set_len(bytes)
        .map_err(|e| BenchError::io("size", "guest RAM memfd", e))?;
    // SAFETY: a new shared mapping of the whole memfd at a kernel-chosen address.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(BenchError::io(
            "mmap",
            "guest RAM memfd",
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: the mapping is `bytes` long, readable and writable, and lives (like the memfd
    // it keeps referenced) until the process exits; nothing else refers to it.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), bytes as usize) })
}

/// Runs the worker on `image` (whose size is a power of two times [`BLOCK`]).
pub fn run_image_worker(image: &Path, w: &ImageWorkload) -> Result<(), BenchError> {
    let file = File::open(image).map_err(|e| BenchError::io("open", image, e))?;
    let len = file
        .metadata()
        .map_err(|e| BenchError::io("stat", image, e))?
        .len();
    let blocks = len / BLOCK;
    if blocks == 0 || !blocks.is_power_of_two() {
        return Err(BenchError::BadArgument {
            what: "image",
            value: image.display().to_string(),
            reason: format!("{len} bytes is not a power of two times 4 KiB"),
        });
    }
    let ram = guest_ram(w.ram_bytes.max(SCAN_READ))?;
    // All of guest RAM in use from the start (charged to the kernel variant's group at once).
    ram.fill(1);
    let ram_slots = ram.len() as u64 / BLOCK;
    let zipf = WorkloadSpec::from_str(&format!(
        "zipf:n={blocks}:alpha={}:len=18446744073709551615:seed=11",
        w.alpha
    ))
    .map_err(|e| BenchError::BadArgument {
        what: "zipf workload",
        value: format!("n={blocks}"),
        reason: e.to_string(),
    })?;
    let mut requests = zipf.requests();
    let mut scan_at = 0u64;
    let (mut reads, mut errors, mut since_scan) = (0u64, 0u64, 0u64);
    let mut read = |at: u64, n: u64, slot: u64, errors: &mut u64| -> Result<(), BenchError> {
        let slots = ram_slots - n / BLOCK + 1;
        let off = ((slot % slots) * BLOCK) as usize;
        let buf = &mut ram[off..off + n as usize];
        file.read_exact_at(buf, at)
            .map_err(|e| BenchError::io("pread", image, e))?;
        for k in 0..n / BLOCK {
            let b = at / BLOCK + k;
            let s = (k * BLOCK) as usize;
            let got = u64::from_le_bytes(buf[s..s + 8].try_into().unwrap_or_default());
            if got != block_word(b) {
                *errors += 1;
            }
        }
        Ok(())
    };
    let say = |line: String| {
        let mut o = std::io::stdout().lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    };
    let started = Instant::now();
    let warm_end = started + Duration::from_secs_f64(w.warmup_s);
    let end = warm_end + Duration::from_secs_f64(w.measure_s);
    let mut measuring: Option<(Instant, u64, u64)> = None;
    loop {
        for _ in 0..64 {
            let unit = requests.next().map_or(0, |r| r.unit);
            // An odd multiplier permutes the blocks: the popular ones are scattered.
            let b = unit.wrapping_mul(0x9E37_79B9_7F4A_7C15 | 1) & (blocks - 1);
            read(b * BLOCK, BLOCK, b % ram_slots, &mut errors)?;
            reads += 1;
            since_scan += 1;
            if w.scan_every > 0 && since_scan >= w.scan_every {
                since_scan = 0;
                for _ in 0..w.scan_bytes / SCAN_READ {
                    read(scan_at, SCAN_READ, scan_at / BLOCK % ram_slots, &mut errors)?;
                    scan_at = (scan_at + SCAN_READ) % (blocks * BLOCK);
                }
            }
        }
        let now = Instant::now();
        match measuring {
            None if now >= warm_end => {
                say("warm".into());
                measuring = Some((now, reads, storage_read_bytes()));
            }
            Some((t0, r0, s0)) if now >= end => {
                let n = reads - r0;
                say(format!(
                    "measure {n} {} {} {:.3} {errors}",
                    n * BLOCK,
                    storage_read_bytes().saturating_sub(s0),
                    (now - t0).as_secs_f64()
                ));
                break;
            }
            _ => {}
        }
    }
    // Stay a moment, so the driver can read this process's counters after its last line.
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// Writes an image of `bytes` (a power of two times 4 KiB) whose block `b` starts with
/// [`block_word`]`(b)`, synced and dropped from the host page cache.
pub fn write_image(path: &Path, bytes: u64) -> Result<(), BenchError> {
    let mut f = File::create(path).map_err(|e| BenchError::io("create", path, e))?;
    let mut chunk = vec![0u8; 1 << 20];
    for base in (0..bytes).step_by(chunk.len()) {
        for (k, blk) in chunk.chunks_mut(BLOCK as usize).enumerate() {
            let b = base / BLOCK + k as u64;
            blk[..8].copy_from_slice(&block_word(b).to_le_bytes());
            blk[8..].fill((b & 0xff) as u8);
        }
        f.write_all(&chunk)
            .map_err(|e| BenchError::io("write", path, e))?;
    }
    f.sync_all().map_err(|e| BenchError::io("sync", path, e))?;
    drop_cached(path)
}

/// Drops `path` from the host page cache (`POSIX_FADV_DONTNEED` on the whole file).
pub fn drop_cached(path: &Path) -> Result<(), BenchError> {
    let f = File::open(path).map_err(|e| BenchError::io("open", path, e))?;
    // SAFETY: plain system call on an open descriptor; no memory is passed.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r != 0 {
        return Err(BenchError::io(
            "posix_fadvise(DONTNEED)",
            path,
            std::io::Error::from_raw_os_error(r),
        ));
    }
    Ok(())
}
