//! Helpers shared by the integration tests.

#![allow(dead_code)]

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

/// Fills `buf` with bytes derived from `seed`.
pub fn pattern(seed: u64, buf: &mut [u8]) {
    let mut r = Rng::new(seed);
    for b in buf.chunks_mut(8) {
        let v = r.next().to_le_bytes();
        b.copy_from_slice(&v[..b.len()]);
    }
}
