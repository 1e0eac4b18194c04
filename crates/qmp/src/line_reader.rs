//! [`LineReader`]: splits a byte stream into newline-terminated lines of at most
//! [`MAX_LINE_BYTES`], refusing a longer line as soon as the limit is passed (it is never
//! buffered whole: its remaining bytes are dropped as they arrive). A partial line survives a
//! timed-out read and is completed by the next call.

use std::io::{self, Read};

use crate::qmp_reply::MAX_LINE_BYTES;

/// How much is read from the socket at a time.
const CHUNK_BYTES: usize = 64 << 10;

/// Why no line was returned.
#[derive(Debug)]
pub(crate) enum LineError {
    /// The line is longer than [`MAX_LINE_BYTES`]; the rest of it will be skipped.
    TooLong,
    /// The peer closed the stream (any unfinished line is dropped).
    Closed,
    /// Reading failed (a deadline shows as `TimedOut` or `WouldBlock`).
    Io(io::Error),
}

/// Buffered line splitting with a length limit.
#[derive(Debug, Default)]
pub(crate) struct LineReader {
    /// Bytes received and not yet returned.
    buffer: Vec<u8>,
    /// How much of `buffer` is known to hold no newline.
    scanned: usize,
    /// Dropping the rest of a refused line, up to its newline.
    skipping: bool,
}

impl LineReader {
    /// The next line, without its newline.
    pub(crate) fn read_line(&mut self, source: &mut impl Read) -> Result<Vec<u8>, LineError> {
        loop {
            if let Some(offset) = self.buffer[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + offset;
                let mut line: Vec<u8> = self.buffer.drain(..=end).collect();
                self.scanned = 0;
                line.pop();
                if self.buffer.capacity() > 4 * CHUNK_BYTES && self.buffer.len() < CHUNK_BYTES {
                    self.buffer.shrink_to(2 * CHUNK_BYTES);
                }
                if std::mem::take(&mut self.skipping) {
                    continue;
                }
                if line.len() > MAX_LINE_BYTES {
                    return Err(LineError::TooLong);
                }
                return Ok(line);
            }
            if self.skipping {
                self.buffer.clear();
            } else if self.buffer.len() > MAX_LINE_BYTES {
                self.buffer.clear();
                self.skipping = true;
                self.scanned = 0;
                return Err(LineError::TooLong);
            }
            self.scanned = self.buffer.len();
            let old = self.buffer.len();
            self.buffer.resize(old + CHUNK_BYTES, 0);
            let read = source.read(&mut self.buffer[old..]);
            self.buffer.truncate(old + *read.as_ref().unwrap_or(&0));
            match read {
                Ok(0) => return Err(LineError::Closed),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(LineError::Io(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source yielding `chunks` one read at a time, then the end of the stream.
    struct Chunks(Vec<Vec<u8>>);

    impl Read for Chunks {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.0.is_empty() {
                return Ok(0);
            }
            let chunk = &mut self.0[0];
            if chunk.is_empty() {
                self.0.remove(0);
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = chunk.len().min(buf.len());
            buf[..n].copy_from_slice(&chunk[..n]);
            chunk.drain(..n);
            if chunk.is_empty() {
                self.0.remove(0);
            }
            Ok(n)
        }
    }

    #[test]
    fn splits_lines_across_chunks_and_keeps_partial_lines_over_timeouts() {
        let mut source = Chunks(vec![
            b"ab\ncd".to_vec(),
            Vec::new(), // a timeout mid-line
            b"e\n\nf".to_vec(),
            b"g\n".to_vec(),
        ]);
        let mut r = LineReader::default();
        assert_eq!(r.read_line(&mut source).unwrap(), b"ab");
        assert!(
            matches!(r.read_line(&mut source), Err(LineError::Io(e)) if e.kind() == io::ErrorKind::WouldBlock)
        );
        assert_eq!(r.read_line(&mut source).unwrap(), b"cde");
        assert_eq!(r.read_line(&mut source).unwrap(), b"");
        assert_eq!(r.read_line(&mut source).unwrap(), b"fg");
        assert!(matches!(r.read_line(&mut source), Err(LineError::Closed)));
    }

    #[test]
    fn a_line_of_exactly_the_limit_passes_one_byte_more_is_refused_and_skipped() {
        let mut exact = vec![b'a'; MAX_LINE_BYTES];
        exact.push(b'\n');
        let mut over = vec![b'b'; MAX_LINE_BYTES + 1];
        over.push(b'\n');
        let mut source = Chunks(vec![exact, over, b"next\n".to_vec()]);
        let mut r = LineReader::default();
        assert_eq!(r.read_line(&mut source).unwrap().len(), MAX_LINE_BYTES);
        assert!(matches!(r.read_line(&mut source), Err(LineError::TooLong)));
        assert_eq!(r.read_line(&mut source).unwrap(), b"next");
    }

    #[test]
    fn an_endless_line_is_refused_with_bounded_memory() {
        /// Endless `x` bytes.
        struct Endless(usize);
        impl Read for Endless {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                self.0 += buf.len();
                buf.fill(b'x');
                Ok(buf.len())
            }
        }
        let mut source = Endless(0);
        let mut r = LineReader::default();
        assert!(matches!(r.read_line(&mut source), Err(LineError::TooLong)));
        assert!(source.0 <= MAX_LINE_BYTES + 2 * CHUNK_BYTES, "{}", source.0);
        assert!(r.buffer.capacity() <= 2 * (MAX_LINE_BYTES + CHUNK_BYTES));
    }
}
