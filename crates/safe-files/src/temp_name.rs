//! Random names for temporary files beside an output file.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// Bytes of the target's name kept in the temporary name (names are at most 255 bytes).
const KEPT_NAME_BYTES: usize = 120;

/// `.NAME.RANDOM.tmp`: hidden, recognizable as belonging to `NAME`, and unguessable, so no one
/// can plant a file of that name in advance.
pub(crate) fn temp_name(target: &OsStr) -> OsString {
    let kept = &target.as_bytes()[..target.len().min(KEPT_NAME_BYTES)];
    let mut name = Vec::with_capacity(kept.len() + 24);
    name.push(b'.');
    name.extend_from_slice(kept);
    name.extend_from_slice(format!(".{:016x}.tmp", random_u64()).as_bytes());
    OsString::from_vec(name)
}

/// 64 random bits from the kernel (`getrandom`), or, should that fail, from the clock, the pid
/// and a counter (the exclusive create still refuses any existing name).
fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most `bytes.len()` bytes into the live buffer.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if n == bytes.len() as isize {
        return u64::from_ne_bytes(bytes);
    }
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_hidden_distinct_and_bounded() {
        let a = temp_name(OsStr::new("out.csv"));
        let b = temp_name(OsStr::new("out.csv"));
        assert_ne!(a, b);
        let a = a.to_str().unwrap();
        assert!(a.starts_with(".out.csv.") && a.ends_with(".tmp"), "{a}");
        let long = "x".repeat(255);
        assert!(temp_name(OsStr::new(&long)).len() <= 255);
    }
}
