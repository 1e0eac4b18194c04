//! libCacheSim oracleGeneral traces (see [`crate::TraceFormat::OracleGeneral`]) and
//! [`write_oracle_general`].

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::path::Path;
use std::sync::Arc;

use crate::output::Output;
use crate::request::Request;
use crate::trace_error::TraceError;

/// The size of one record in bytes.
pub const ORACLE_GENERAL_RECORD_SIZE: usize = 24;

const NEVER: i64 = -1;

/// Bytes at the start of an input checked for text.
const TEXT_SNIFF_BYTES: usize = 10 * ORACLE_GENERAL_RECORD_SIZE;

/// Whether `head` (the start of the input) is text: no record of a real trace lacks a zero
/// byte (the size field's high bytes, small times), while text has none, and is printable.
fn looks_like_text(head: &[u8]) -> bool {
    !head.is_empty()
        && head
            .iter()
            .all(|&b| matches!(b, b'\t' | b'\n' | b'\r' | 0x20..=0x7e | 0x80..=0xff))
        && head.iter().any(|&b| b.is_ascii_alphanumeric())
}

/// Streams the requests of an oracleGeneral trace.
pub(crate) struct OracleGeneralReader {
    input: BufReader<Box<dyn Read + Send>>,
    file: Arc<str>,
    record: u64,
}

impl OracleGeneralReader {
    pub(crate) fn new(input: Box<dyn Read + Send>, file: Arc<str>) -> Self {
        Self {
            input: BufReader::with_capacity(64 * 1024, input),
            file,
            record: 0,
        }
    }

    /// Refuses input that evidently is not oracleGeneral, before any record is returned: text
    /// (no NUL byte and only printable characters where records' zero high bytes would be), or a
    /// file (`plain_len`, uncompressed) that is not a whole number of records.
    pub(crate) fn check_plausible(&mut self, plain_len: Option<u64>) -> Result<(), TraceError> {
        let wrong = |offset, reason| TraceError::WrongFormat {
            file: self.file.to_string(),
            format: "libCacheSim oracleGeneral (24-byte binary records)",
            offset,
            reason,
        };
        let head = loop {
            match self.input.fill_buf() {
                Ok(b) => break b,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Read {
                        file: self.file.to_string(),
                        position: "record 0 (byte offset 0)".into(),
                        source,
                    })
                }
            }
        };
        let head = &head[..head.len().min(TEXT_SNIFF_BYTES)];
        if looks_like_text(head) {
            let excerpt: String = String::from_utf8_lossy(&head[..head.len().min(24)]).into();
            return Err(wrong(
                0,
                format!(
                    "it looks like text ({excerpt:?}...); give its format with --format \
                     (csv:column=N, text, lackey)"
                ),
            ));
        }
        if let Some(len) = plain_len {
            let partial = len % ORACLE_GENERAL_RECORD_SIZE as u64;
            if partial != 0 {
                return Err(wrong(
                    len - partial,
                    format!(
                        "its size, {len} bytes, is not a whole number of \
                         {ORACLE_GENERAL_RECORD_SIZE}-byte records ({partial} bytes left over)"
                    ),
                ));
            }
        }
        Ok(())
    }

    fn offset(&self) -> u64 {
        self.record * ORACLE_GENERAL_RECORD_SIZE as u64
    }

    fn error(&self, reason: String) -> TraceError {
        TraceError::Record {
            file: self.file.to_string(),
            record: self.record,
            offset: self.offset(),
            reason,
        }
    }

    /// Fills `buf` as far as the input allows; the number of bytes read.
    fn read_record(&mut self, buf: &mut [u8]) -> Result<usize, TraceError> {
        let mut filled = 0;
        while filled < buf.len() {
            match self.input.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Read {
                        file: self.file.to_string(),
                        position: format!(
                            "record {} (byte offset {})",
                            self.record,
                            self.offset() + filled as u64
                        ),
                        source,
                    })
                }
            }
        }
        Ok(filled)
    }

    /// The next request (its time is the record's time field).
    pub(crate) fn next_request(&mut self) -> Result<Option<Request>, TraceError> {
        let mut buf = [0u8; ORACLE_GENERAL_RECORD_SIZE];
        // Fast path: decode straight from the buffered bytes; the slow path handles refills
        // and records split across reads.
        let buffered = self.input.buffer();
        let len = if buffered.len() >= ORACLE_GENERAL_RECORD_SIZE {
            buf.copy_from_slice(&buffered[..ORACLE_GENERAL_RECORD_SIZE]);
            self.input.consume(ORACLE_GENERAL_RECORD_SIZE);
            ORACLE_GENERAL_RECORD_SIZE
        } else {
            self.read_record(&mut buf)?
        };
        if len == 0 {
            return Ok(None);
        }
        if len < ORACLE_GENERAL_RECORD_SIZE {
            return Err(TraceError::PartialRecord {
                file: self.file.to_string(),
                record: self.record,
                offset: self.offset(),
                len,
                record_size: ORACLE_GENERAL_RECORD_SIZE,
            });
        }
        let request = self.decode(&buf)?;
        self.record += 1;
        Ok(Some(request))
    }

    /// Appends up to `max` requests to `out`, decoding whole buffers of records at a time;
    /// returns whether more may follow. Same requests and errors as `next_request`.
    pub(crate) fn next_batch(
        &mut self,
        out: &mut Vec<Request>,
        max: usize,
    ) -> Result<bool, TraceError> {
        let mut left = max;
        while left > 0 {
            let whole = self.input.buffer().len() / ORACLE_GENERAL_RECORD_SIZE;
            if whole == 0 {
                // Refill (or finish, or report a partial record) through the one-record path.
                match self.next_request()? {
                    Some(request) => {
                        out.push(request);
                        left -= 1;
                        continue;
                    }
                    None => return Ok(false),
                }
            }
            let take = whole.min(left);
            let mut decoded = 0;
            let mut failure = None;
            for record in self.input.buffer()[..take * ORACLE_GENERAL_RECORD_SIZE]
                .chunks_exact(ORACLE_GENERAL_RECORD_SIZE)
            {
                match self.decode(record.try_into().expect("exact chunks")) {
                    Ok(request) => {
                        out.push(request);
                        self.record += 1;
                        decoded += 1;
                    }
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
            self.input.consume(decoded * ORACLE_GENERAL_RECORD_SIZE);
            if let Some(e) = failure {
                return Err(e);
            }
            left -= take;
        }
        Ok(true)
    }

    /// Decodes the record at the current position.
    #[inline]
    fn decode(&self, buf: &[u8; ORACLE_GENERAL_RECORD_SIZE]) -> Result<Request, TraceError> {
        let time = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
        let unit = u64::from_le_bytes(buf[4..12].try_into().expect("8 bytes"));
        let next = i64::from_le_bytes(buf[16..24].try_into().expect("8 bytes"));
        let next_access = match next {
            NEVER | i64::MAX => None,
            v if v >= 1 && (v - 1) as u64 > self.record => Some((v - 1) as u64),
            v if v >= 1 => {
                return Err(self.error(format!(
                    "next access {v} (request index {}) is not after this request",
                    v - 1
                )))
            }
            v => {
                return Err(self.error(format!(
                    "invalid next access {v} (expected -1 or a 1-based request number)"
                )))
            }
        };
        Ok(Request {
            time: u64::from(time),
            unit,
            next_access,
        })
    }
}

/// Writes `requests` to `path` as an oracleGeneral trace and returns the number of records.
///
/// Each record gets time = its index (saturating at `u32::MAX`), the id, size 1, and the
/// next access in libCacheSim's convention (the 1-based number of the next request for the same
/// id, -1 for never; see [`TraceFormat::OracleGeneral`](crate::TraceFormat::OracleGeneral)),
/// so libCacheSim reads the file as written. Computing next accesses needs the whole sequence: the ids are held in
/// memory, 16 bytes per request plus a hash map over the distinct ids. A path ending in `.zst`
/// is zstd-compressed. The file is written whole or not at all, never through a symbolic link
/// (see [`memvisor_safe_files::OutputFile`]).
pub fn write_oracle_general(
    path: &Path,
    requests: impl IntoIterator<Item = u64>,
) -> Result<u64, TraceError> {
    match try_write_oracle_general(path, requests.into_iter().map(Ok::<u64, Infallible>))? {
        Ok(n) => Ok(n),
        Err(never) => match never {},
    }
}

/// [`write_oracle_general`] for requests that may fail: at the first `Err` it stops, leaves
/// `path` as it was, and returns that error as `Ok(Err(e))`; errors of the output itself are
/// the outer `Err`.
pub fn try_write_oracle_general<E>(
    path: &Path,
    requests: impl IntoIterator<Item = Result<u64, E>>,
) -> Result<Result<u64, E>, TraceError> {
    // Created first, so an unwritable output fails before the input is read.
    let mut out = Output::create(path)?;
    let ids: Vec<u64> = match requests.into_iter().collect() {
        Ok(ids) => ids,
        Err(e) => return Ok(Err(e)),
    };
    let mut next = vec![NEVER; ids.len()];
    let mut seen: HashMap<u64, usize> = HashMap::new();
    for (i, &id) in ids.iter().enumerate().rev() {
        if let Some(j) = seen.insert(id, i) {
            next[i] = j as i64 + 1;
        }
    }
    drop(seen);
    let mut buf = Vec::with_capacity(ORACLE_GENERAL_RECORD_SIZE * 4096);
    for (i, (&id, &nxt)) in ids.iter().zip(&next).enumerate() {
        let time = u32::try_from(i).unwrap_or(u32::MAX);
        buf.extend_from_slice(&time.to_le_bytes());
        buf.extend_from_slice(&id.to_le_bytes());
        buf.extend_from_slice(&1u32.to_le_bytes());
        buf.extend_from_slice(&nxt.to_le_bytes());
        if buf.len() >= buf.capacity() - ORACLE_GENERAL_RECORD_SIZE {
            out.write_all(&buf)?;
            buf.clear();
        }
    }
    out.write_all(&buf)?;
    out.finish()?;
    Ok(Ok(ids.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(time: u32, id: u64, size: u32, next: i64) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&time.to_le_bytes());
        r.extend_from_slice(&id.to_le_bytes());
        r.extend_from_slice(&size.to_le_bytes());
        r.extend_from_slice(&next.to_le_bytes());
        r
    }

    fn read(data: Vec<u8>) -> Result<Vec<Request>, TraceError> {
        let mut r = OracleGeneralReader::new(Box::new(std::io::Cursor::new(data)), "t.og".into());
        let mut out = Vec::new();
        while let Some(req) = r.next_request()? {
            out.push(req);
        }
        Ok(out)
    }

    #[test]
    fn decodes_records_and_converts_next_access() {
        // Requests: a b a, as libCacheSim's traceConv would write them.
        let data = [
            record(100, 7, 4096, 3),
            record(101, 8, 0, -1),
            record(102, 7, 4096, i64::MAX),
        ]
        .concat();
        let got = read(data).unwrap();
        assert_eq!(
            got,
            [
                Request {
                    time: 100,
                    unit: 7,
                    next_access: Some(2)
                },
                Request {
                    time: 101,
                    unit: 8,
                    next_access: None
                },
                Request {
                    time: 102,
                    unit: 7,
                    next_access: None
                },
            ]
        );
    }

    #[test]
    fn malformed_records_name_record_and_offset() {
        let mut data = [record(1, 1, 1, -1), record(2, 2, 1, -1)].concat();
        data.extend_from_slice(&[1, 2, 3, 4, 5]);
        let e = read(data).unwrap_err().to_string();
        assert_eq!(
            e,
            "t.og: record 2 (byte offset 48): trailing partial record of 5 bytes (records are 24 bytes)"
        );
        let data = [record(1, 1, 1, -1), record(2, 2, 1, 2)].concat();
        let e = read(data).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "t.og: record 1 (byte offset 24): next access 2 (request index 1) is not after"
            ),
            "{e}"
        );
        for bad in [0, -2, i64::MIN] {
            let e = read(record(1, 1, 1, bad)).unwrap_err().to_string();
            assert!(
                e.starts_with(&format!(
                    "t.og: record 0 (byte offset 0): invalid next access {bad}"
                )),
                "{e}"
            );
        }
        assert!(read(Vec::new()).unwrap().is_empty());
    }

    #[test]
    fn text_is_refused_before_any_record() {
        let csv = b"1,2\n3,4\n5,6\n7,8\n9,10\n11,12\n13,14\n".to_vec();
        let mut r = OracleGeneralReader::new(Box::new(std::io::Cursor::new(csv)), "a.csv".into());
        let e = r.check_plausible(None).unwrap_err().to_string();
        assert!(
            e.starts_with("a.csv: byte offset 0: not libCacheSim oracleGeneral (24-byte binary records): it looks like text"),
            "{e}"
        );
        let good = [record(1, 1, 1, -1), record(2, 2, 1, -1)].concat();
        let mut r = OracleGeneralReader::new(Box::new(std::io::Cursor::new(good)), "t.og".into());
        r.check_plausible(Some(48)).unwrap();
        let e = r.check_plausible(Some(50)).unwrap_err().to_string();
        assert!(
            e.contains("t.og: byte offset 48: not libCacheSim")
                && e.contains("its size, 50 bytes, is not a whole number of 24-byte records"),
            "{e}"
        );
    }

    #[test]
    fn writer_uses_libcachesim_convention() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.oracleGeneral");
        assert_eq!(write_oracle_general(&path, [5u64, 6, 5, 5]).unwrap(), 4);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(
            bytes,
            [
                record(0, 5, 1, 3),
                record(1, 6, 1, -1),
                record(2, 5, 1, 4),
                record(3, 5, 1, -1)
            ]
            .concat()
        );
        let got = read(bytes).unwrap();
        let next: Vec<Option<u64>> = got.iter().map(|r| r.next_access).collect();
        assert_eq!(next, [Some(2), None, Some(3), None]);
    }
}
