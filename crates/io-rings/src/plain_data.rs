//! [`PlainData`]: the values this crate copies out of a program's memory as raw bytes (the
//! kernel's and liburing's structures, iovecs, ring indices).

/// Types every bit pattern is a valid value of, which may therefore be filled from raw bytes.
///
/// # Safety
///
/// Implement only for `repr(C)` (or primitive) types made of integers and raw pointers, with
/// no padding the compiler may assume anything about.
pub unsafe trait PlainData: Copy {}

// SAFETY: an integer.
unsafe impl PlainData for u32 {}
// SAFETY: an integer.
unsafe impl PlainData for u64 {}
// SAFETY: a pointer and an integer, `repr(C)`, 16 bytes without padding.
unsafe impl PlainData for libc::iovec {}

/// A plain-data value's bytes, writable.
pub fn bytes_of_mut<T: PlainData>(values: &mut [T]) -> &mut [u8] {
    let len = std::mem::size_of_val(values);
    // SAFETY: `values` is `len` bytes of memory borrowed mutably for the result's lifetime,
    // and any bytes written through the result leave valid values (`T: PlainData`).
    unsafe { std::slice::from_raw_parts_mut(values.as_mut_ptr().cast::<u8>(), len) }
}

/// A plain-data value's bytes.
pub fn bytes_of<T: PlainData>(values: &[T]) -> &[u8] {
    let len = std::mem::size_of_val(values);
    // SAFETY: `values` is `len` bytes of initialized memory (plain integers and pointers, no
    // padding: `T: PlainData`) borrowed for the result's lifetime.
    unsafe { std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip() {
        let mut v = [0u32; 2];
        bytes_of_mut(&mut v).copy_from_slice(&[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(v, [1, 2]);
        assert_eq!(bytes_of(&v), &[1, 0, 0, 0, 2, 0, 0, 0]);
    }
}
