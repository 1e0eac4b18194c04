//! [`ReceiveBuffer`]: the bytes read from the stream ahead of the frame being decoded.
//!
//! A round of scattered changes is thousands of frames of one to a few pages, and decoding a
//! `Pages` frame takes five reads (header, fields, checksums, data, tag). Read one by one from
//! the socket, each is a system call: about a fifth of the destination's time in such a round
//! here. Through this buffer, small reads are served from one large read of the socket; a
//! large remainder (a 1 MiB run of round 0) is still read straight into its destination.

use std::io::{ErrorKind, Read};

use crate::migration_error::MigrationError;
use crate::wire_io::read_record;

/// Bytes read from the socket at once.
const CAPACITY: usize = 256 * 1024;
/// A remainder at least this long is read straight into its destination, not through the
/// buffer (no copy).
const DIRECT_READ: usize = 64 * 1024;

/// Bytes received but not yet consumed, `bytes[start..end]`.
pub(crate) struct ReceiveBuffer {
    bytes: Vec<u8>,
    start: usize,
    end: usize,
}

impl ReceiveBuffer {
    /// An empty buffer (allocated on first use).
    pub(crate) fn new() -> ReceiveBuffer {
        ReceiveBuffer {
            bytes: Vec::new(),
            start: 0,
            end: 0,
        }
    }

    /// Fills `record` with the next `record.len()` bytes of the stream: what is buffered first,
    /// then from `stream`, adding the bytes read from `stream` to `counter`. Errors as
    /// [`read_record`]'s: the peer closing early is [`MigrationError::UnexpectedEnd`] with how
    /// many of the record's bytes arrived.
    pub(crate) fn read_exact<S: Read>(
        &mut self,
        stream: &mut S,
        record: &mut [u8],
        counter: &mut u64,
        what: &dyn Fn() -> String,
    ) -> Result<(), MigrationError> {
        let expected = record.len();
        let mut got = self.take_into(record);
        while got < expected {
            let rest = &mut record[got..];
            if rest.len() >= DIRECT_READ {
                return read_record(stream, rest, counter, what)
                    .map_err(|error| error.within(got, expected));
            }
            self.fill(stream, counter, got, expected, what)?;
            got += self.take_into(&mut record[got..]);
        }
        Ok(())
    }

    /// The next `len` bytes of the stream as a vector of their own (a `Pages` frame's data,
    /// handed on without a copy). A short one is copied out of the buffer, never zeroed
    /// first; a long one is read straight into it. Errors as [`read_exact`](Self::read_exact).
    pub(crate) fn read_vec<S: Read>(
        &mut self,
        stream: &mut S,
        len: usize,
        counter: &mut u64,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<u8>, MigrationError> {
        if len >= DIRECT_READ {
            let mut out = vec![0u8; len];
            self.read_exact(stream, &mut out, counter, what)?;
            return Ok(out);
        }
        let mut out = Vec::with_capacity(len);
        loop {
            let n = (len - out.len()).min(self.end - self.start);
            out.extend_from_slice(&self.bytes[self.start..self.start + n]);
            self.start += n;
            if out.len() == len {
                return Ok(out);
            }
            self.fill(stream, counter, out.len(), len, what)?;
        }
    }

    /// Copies buffered bytes into the start of `out`; returns how many.
    /// Bytes received and not consumed yet.
    pub(crate) fn buffered(&self) -> usize {
        self.end - self.start
    }

    fn take_into(&mut self, out: &mut [u8]) -> usize {
        let n = out.len().min(self.end - self.start);
        out[..n].copy_from_slice(&self.bytes[self.start..self.start + n]);
        self.start += n;
        n
    }

    /// One read of the stream into the (empty) buffer; `got` of `expected` bytes of the record
    /// being read are in already (for the error).
    fn fill<S: Read>(
        &mut self,
        stream: &mut S,
        counter: &mut u64,
        got: usize,
        expected: usize,
        what: &dyn Fn() -> String,
    ) -> Result<(), MigrationError> {
        debug_assert_eq!(self.start, self.end, "filled only when empty");
        if self.bytes.len() < CAPACITY {
            self.bytes.resize(CAPACITY, 0);
        }
        self.start = 0;
        self.end = 0;
        loop {
            match stream.read(&mut self.bytes) {
                Ok(0) => {
                    return Err(MigrationError::UnexpectedEnd {
                        what: what(),
                        got,
                        expected,
                    })
                }
                Ok(read) => {
                    self.end = read;
                    *counter += read as u64;
                    return Ok(());
                }
                Err(error) if error.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(MigrationError::Io {
                        context: format!("reading {} (after {got} of {expected} bytes)", what()),
                        source,
                    })
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that hands out its bytes in reads of at most `step`, counting the reads.
    struct Trickle {
        bytes: Vec<u8>,
        at: usize,
        step: usize,
        reads: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            self.reads += 1;
            let n = out.len().min(self.step).min(self.bytes.len() - self.at);
            out[..n].copy_from_slice(&self.bytes[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    fn stream(len: usize, step: usize) -> Trickle {
        Trickle {
            bytes: (0..len).map(|i| (i * 7 + i / 251) as u8).collect(),
            at: 0,
            step,
            reads: 0,
        }
    }

    #[test]
    fn records_and_vectors_of_every_size_come_out_in_order() {
        for step in [1, 7, 4096, 1 << 20] {
            let mut s = stream(1_500_000, step);
            let expected = s.bytes.clone();
            let mut buffer = ReceiveBuffer::new();
            let mut counter = 0;
            let mut out = Vec::new();
            for len in [8, 20, 4, 4096, 100_000, 3, 1 << 18, 0, 12, 4096 * 3] {
                let mut record = vec![0u8; len];
                buffer
                    .read_exact(&mut s, &mut record, &mut counter, &|| "r".into())
                    .unwrap();
                out.extend_from_slice(&record);
                let v = buffer
                    .read_vec(&mut s, len, &mut counter, &|| "v".into())
                    .unwrap();
                assert_eq!(v.len(), len);
                out.extend_from_slice(&v);
            }
            assert_eq!(out, expected[..out.len()], "step {step}");
            assert!(counter as usize >= out.len() && counter as usize <= expected.len());
        }
        let mut s = stream(100, 30);
        let error = ReceiveBuffer::new()
            .read_vec(&mut s, 4096, &mut 0, &|| "short".into())
            .unwrap_err();
        assert!(
            matches!(
                &error,
                MigrationError::UnexpectedEnd {
                    got: 100,
                    expected: 4096,
                    ..
                }
            ),
            "{error:?}"
        );
    }

    #[test]
    fn small_records_share_one_read() {
        let mut s = stream(64 * 1024, usize::MAX);
        let mut buffer = ReceiveBuffer::new();
        let mut counter = 0;
        for _ in 0..1000 {
            let mut record = [0u8; 60];
            buffer
                .read_exact(&mut s, &mut record, &mut counter, &|| "r".into())
                .unwrap();
        }
        assert_eq!(s.reads, 1);
        assert_eq!(counter, 64 * 1024);
    }

    #[test]
    fn an_early_end_names_the_record_and_what_arrived() {
        let mut s = stream(100, 30);
        let mut buffer = ReceiveBuffer::new();
        let mut counter = 0;
        let mut first = [0u8; 50];
        buffer
            .read_exact(&mut s, &mut first, &mut counter, &|| "first".into())
            .unwrap();
        let mut second = [0u8; 80];
        let error = buffer
            .read_exact(&mut s, &mut second, &mut counter, &|| "second".into())
            .unwrap_err();
        assert!(
            matches!(&error, MigrationError::UnexpectedEnd { what, got: 50, expected: 80 } if what == "second"),
            "{error:?}"
        );
        // A large record read directly reports the same way.
        let mut s = stream(100_000, 4096);
        let mut big = vec![0u8; 200_000];
        let error = ReceiveBuffer::new()
            .read_exact(&mut s, &mut big, &mut counter, &|| "big".into())
            .unwrap_err();
        assert!(
            matches!(
                &error,
                MigrationError::UnexpectedEnd {
                    got: 100_000,
                    expected: 200_000,
                    ..
                }
            ),
            "{error:?}"
        );
    }
}
