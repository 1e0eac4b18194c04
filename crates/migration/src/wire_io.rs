//! Reading and writing whole records on the underlying stream, counting wire bytes.

use std::io::{ErrorKind, IoSlice, Read, Write};

use crate::migration_error::MigrationError;

/// Reads exactly `buffer.len()` bytes, adding them to `counter` as they arrive. The peer
/// closing early is [`MigrationError::UnexpectedEnd`] naming `what()` and how much arrived.
pub(crate) fn read_record<S: Read>(
    stream: &mut S,
    buffer: &mut [u8],
    counter: &mut u64,
    what: &dyn Fn() -> String,
) -> Result<(), MigrationError> {
    let mut got = 0;
    while got < buffer.len() {
        match stream.read(&mut buffer[got..]) {
            Ok(0) => {
                return Err(MigrationError::UnexpectedEnd {
                    what: what(),
                    got,
                    expected: buffer.len(),
                })
            }
            Ok(read) => {
                got += read;
                *counter += read as u64;
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(MigrationError::Io {
                    context: format!("reading {} (after {got} of {} bytes)", what(), buffer.len()),
                    source,
                })
            }
        }
    }
    Ok(())
}

/// Writes all of `bytes` and flushes, adding what was written to `counter`.
pub(crate) fn write_record<S: Write>(
    stream: &mut S,
    bytes: &[u8],
    counter: &mut u64,
    what: &dyn Fn() -> String,
) -> Result<(), MigrationError> {
    let mut written = 0;
    while written < bytes.len() {
        match stream.write(&bytes[written..]) {
            Ok(0) => {
                return Err(MigrationError::Io {
                    context: format!(
                        "sending {} (after {written} of {} bytes)",
                        what(),
                        bytes.len()
                    ),
                    source: ErrorKind::WriteZero.into(),
                })
            }
            Ok(count) => {
                written += count;
                *counter += count as u64;
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(source) => {
                return Err(MigrationError::Io {
                    context: format!(
                        "sending {} (after {written} of {} bytes)",
                        what(),
                        bytes.len()
                    ),
                    source,
                })
            }
        }
    }
    stream.flush().map_err(|source| MigrationError::Io {
        context: format!("flushing {}", what()),
        source,
    })
}

/// Writes all of `parts`, one after the other, with vectored writes (no copy into one buffer),
/// and flushes, adding what was written to `counter`.
pub(crate) fn write_record_parts<S: Write>(
    stream: &mut S,
    parts: &[&[u8]],
    counter: &mut u64,
    what: &dyn Fn() -> String,
) -> Result<(), MigrationError> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
    let mut remaining = &mut slices[..];
    let mut written = 0;
    let failed = |written: usize, source: std::io::Error| MigrationError::Io {
        context: format!("sending {} (after {written} of {total} bytes)", what()),
        source,
    };
    while written < total {
        match stream.write_vectored(remaining) {
            Ok(0) => return Err(failed(written, ErrorKind::WriteZero.into())),
            Ok(count) => {
                written += count;
                *counter += count as u64;
                IoSlice::advance_slices(&mut remaining, count);
            }
            Err(error) if error.kind() == ErrorKind::Interrupted => {}
            Err(source) => return Err(failed(written, source)),
        }
    }
    stream.flush().map_err(|source| MigrationError::Io {
        context: format!("flushing {}", what()),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn reads_whole_records_and_reports_short_ones() {
        let mut stream = Cursor::new(vec![1, 2, 3, 4, 5]);
        let mut counter = 0;
        let mut buffer = [0u8; 3];
        read_record(&mut stream, &mut buffer, &mut counter, &|| "a".into()).unwrap();
        assert_eq!(buffer, [1, 2, 3]);
        let error = read_record(&mut stream, &mut buffer, &mut counter, &|| "frame 1".into())
            .unwrap_err()
            .to_string();
        assert_eq!(
            error,
            "unexpected end of stream: the peer closed it after 2 of 3 bytes of frame 1"
        );
        assert_eq!(counter, 5);
    }

    #[test]
    fn writes_and_counts() {
        let mut out = Vec::new();
        let mut counter = 0;
        write_record(&mut out, b"abc", &mut counter, &|| "x".into()).unwrap();
        assert_eq!(out, b"abc");
        assert_eq!(counter, 3);
    }

    /// A writer that takes at most 3 bytes per call, from the first slice only.
    struct Dribble(Vec<u8>);

    impl Write for Dribble {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            let n = bytes.len().min(3);
            self.0.extend_from_slice(&bytes[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn writes_parts_in_order_through_short_writes() {
        let mut out = Dribble(Vec::new());
        let mut counter = 0;
        let parts: [&[u8]; 4] = [b"head", b"", b"payload bytes", b"tag"];
        write_record_parts(&mut out, &parts, &mut counter, &|| "x".into()).unwrap();
        assert_eq!(out.0, b"headpayload bytestag");
        assert_eq!(counter, 20);
        let mut full = Vec::new();
        write_record_parts(&mut full, &parts, &mut counter, &|| "x".into()).unwrap();
        assert_eq!(full, out.0);
        let error = write_record_parts(&mut [0u8; 5].as_mut_slice(), &parts, &mut 0, &|| {
            "frame 7".into()
        })
        .unwrap_err()
        .to_string();
        assert!(
            error.starts_with("sending frame 7 (after 5 of 20 bytes)"),
            "{error}"
        );
    }
}
