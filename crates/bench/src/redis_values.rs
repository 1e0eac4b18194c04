//! The redis benchmark's data set: key `i` is `mv:i` and holds `size` deterministic bytes that
//! start with its own index, so every value read back can be checked against its key.

/// The key of item `i`.
pub fn key_name(i: u64) -> String {
    format!("mv:{i}")
}

/// The value of item `i`: `size` bytes (at least 16), a xorshift stream seeded by `i` after an
/// 8-byte header holding `i` and 8 bytes holding `size`.
pub fn value_of(i: u64, size: usize) -> Vec<u8> {
    let size = size.max(16);
    let mut v = vec![0; size];
    v[..8].copy_from_slice(&i.to_le_bytes());
    v[8..16].copy_from_slice(&(size as u64).to_le_bytes());
    memvisor_dedup::fill_seeded(&mut v[16..], i);
    v
}

/// Cheap check of a value read under load: its length and header name item `i`.
pub fn header_matches(i: u64, size: usize, value: &[u8]) -> bool {
    let size = size.max(16);
    value.len() == size
        && value[..8] == i.to_le_bytes()
        && value[8..16] == (size as u64).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_distinct_and_self_describing() {
        let a = value_of(1, 4096);
        let b = value_of(2, 4096);
        assert_eq!(a.len(), 4096);
        assert_ne!(a[16..], b[16..]);
        assert!(header_matches(1, 4096, &a));
        assert!(!header_matches(2, 4096, &a));
        assert!(!header_matches(1, 4095, &a));
        assert_eq!(value_of(7, 100), value_of(7, 100));
    }
}
