//! Pages: the size, the content hash, the zero test, and seeded content for tests and
//! benchmarks.

/// The page size the scanner works in (x86_64 and arm64 base pages).
pub const PAGE_SIZE: usize = 4096;

/// A 64-bit hash of a page's content (xxh3). Not a proof of equality: the scanner confirms every
/// hash match by comparing the bytes.
#[inline]
pub fn page_hash(page: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(page)
}

/// Whether every byte of `page` is zero.
#[inline]
pub fn is_zero_page(page: &[u8]) -> bool {
    // Compare in u64 words: the compiler vectorizes this loop.
    let (head, words, tail) = {
        // SAFETY: any bit pattern is a valid u64; align_to only reinterprets aligned middle bytes.
        unsafe { page.align_to::<u64>() }
    };
    head.iter().all(|&b| b == 0)
        && tail.iter().all(|&b| b == 0)
        && words.iter().fold(0u64, |acc, &w| acc | w) == 0
}

/// Fills `buf` with a deterministic xorshift stream seeded by `seed`: the same bytes for the
/// same seed, different for different seeds (never all zero). The content of test and
/// benchmark pages, disk images and values, so a reader can check what it reads.
pub fn fill_seeded(buf: &mut [u8], seed: u64) {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for w in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w.copy_from_slice(&x.to_le_bytes()[..w.len()]);
    }
}

/// The first 8 bytes of a page as a number (the seed's replacement heuristic looks at them).
#[inline]
pub fn page_prefix(page: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = page.len().min(8);
    b[..n].copy_from_slice(&page[..n]);
    u64::from_le_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_and_hash() {
        let mut p = vec![0u8; PAGE_SIZE];
        assert!(is_zero_page(&p));
        assert!(is_zero_page(&p[1..]));
        let h0 = page_hash(&p);
        p[PAGE_SIZE - 1] = 1;
        assert!(!is_zero_page(&p));
        assert_ne!(page_hash(&p), h0);
        p[PAGE_SIZE - 1] = 0;
        p[0] = 9;
        assert!(!is_zero_page(&p[..1]));
        assert_eq!(page_prefix(&p), 9);
    }
}
