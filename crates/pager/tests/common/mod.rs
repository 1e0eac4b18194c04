//! Helpers shared by the integration tests.

#![allow(dead_code)]

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use memvisor_pager::Region;

/// Whether regions can be created here; prints why not otherwise.
pub fn supported() -> bool {
    match Region::check_supported() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("SKIPPED: userfaultfd unavailable: {e}");
            false
        }
    }
}

/// Added to every seed of the randomized tests (`MEMVISOR_PAGER_STRESS_SEED`; 0 by default), so
/// that a long soak can run other sequences of operations than CI's. A failure names it.
pub fn stress_seed() -> u64 {
    std::env::var("MEMVISOR_PAGER_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// A small xorshift generator (deterministic per seed).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Copies `data` into the region at `offset`.
pub fn write(region: &Region, offset: usize, data: &[u8]) {
    assert!(offset + data.len() <= region.len());
    // SAFETY: the range is inside the live region; callers serialize accesses to it.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), region.as_ptr().add(offset), data.len()) }
}

/// Copies region bytes at `offset` into `out`.
pub fn read(region: &Region, offset: usize, out: &mut [u8]) {
    assert!(offset + out.len() <= region.len());
    // SAFETY: the range is inside the live region; callers serialize accesses to it.
    unsafe {
        std::ptr::copy_nonoverlapping(region.as_ptr().add(offset), out.as_mut_ptr(), out.len())
    }
}

/// Waits (up to 5 s) until the region has taken `more` access samples more than now.
pub fn wait_for_samples(region: &Region, more: u64) {
    let samples = region.stats().samples;
    let t = std::time::Instant::now();
    while region.stats().samples < samples + more {
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "no sample");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// Fills `buf` with bytes derived from `seed`.
pub fn pattern(seed: u64, buf: &mut [u8]) {
    let mut r = Rng::new(seed);
    for b in buf.chunks_mut(8) {
        let v = r.next().to_le_bytes();
        b.copy_from_slice(&v[..b.len()]);
    }
}

/// Writes `pattern(p)` into each of the region's first `pages` pages.
pub fn write_patterns(region: &Region, pages: usize) {
    let ps = memvisor_pager::page_size();
    let mut buf = vec![0u8; ps];
    for p in 0..pages {
        pattern(p as u64, &mut buf);
        write(region, p * ps, &buf);
    }
}

/// `write(2)` of region memory into a pipe: the kernel reads it, so a poisoned page gives
/// `EFAULT` instead of killing the test with SIGBUS.
pub fn kernel_reads(r: &Region, offset: usize, len: usize) -> std::io::Result<Vec<u8>> {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two descriptors into a live array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: pipe returned two fresh descriptors nobody else owns.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: the range is inside the live region; the kernel copies from it.
    let n = unsafe { libc::write(wr.as_raw_fd(), r.as_ptr().add(offset).cast(), len) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = vec![0u8; n as usize];
    // SAFETY: reads at most `out.len()` bytes into `out`.
    let m = unsafe { libc::read(rd.as_raw_fd(), out.as_mut_ptr().cast(), out.len()) };
    assert_eq!(m, n);
    Ok(out)
}
