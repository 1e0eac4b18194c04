//! [`CountingReader`]: a reader that counts the bytes it delivers, so errors of a zstd stream
//! can say how far the compressed input and its decompressed output got.

use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A byte count shared between a [`CountingReader`] and whoever reports its progress.
#[derive(Debug, Clone, Default)]
pub(crate) struct ByteCount(Arc<AtomicU64>);

impl ByteCount {
    /// The bytes counted so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// Passes reads through to `inner`, adding every byte read to a [`ByteCount`].
pub(crate) struct CountingReader<R> {
    inner: R,
    count: ByteCount,
}

impl<R: Read> CountingReader<R> {
    /// Counts the bytes read from `inner` into `count`.
    pub(crate) fn new(inner: R, count: ByteCount) -> Self {
        Self { inner, count }
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.0.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_read() {
        let count = ByteCount::default();
        let mut r = CountingReader::new(&b"hello world"[..], count.clone());
        let mut buf = [0u8; 4];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(count.get(), 4);
        let mut rest = Vec::new();
        r.read_to_end(&mut rest).unwrap();
        assert_eq!(count.get(), 11);
    }
}
