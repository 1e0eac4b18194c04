//! [`TestRng`]: the xorshift64 generator the crate's unit tests draw their random inputs from
//! (deterministic, so a failing step can be replayed; no dependency).

/// Marsaglia's xorshift64 (shifts 13, 7, 17).
#[derive(Debug, Clone)]
pub(crate) struct TestRng(u64);

impl TestRng {
    /// A generator whose state starts at `seed` (not zero: zero stays zero).
    pub fn new(seed: u64) -> Self {
        assert_ne!(seed, 0, "xorshift64 needs a non-zero state");
        Self(seed)
    }

    /// The next state.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number below `m` (not zero).
    pub fn below(&mut self, m: usize) -> usize {
        (self.next_u64() % m as u64) as usize
    }
}
