//! Plain text traces (see [`crate::TraceFormat::Text`]) and [`write_text`].

use std::convert::Infallible;
use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use crate::line_reader::LineReader;
use crate::output::Output;
use crate::request::Request;
use crate::trace_error::TraceError;
use crate::unit_id::parse_number;

/// Streams the requests of a text trace.
pub(crate) struct TextReader {
    lines: LineReader,
}

impl TextReader {
    pub(crate) fn new(input: Box<dyn Read + Send>, file: Arc<str>) -> Self {
        Self {
            lines: LineReader::new(input, file),
        }
    }

    /// The next request, which gets `index` as its time.
    pub(crate) fn next_request(&mut self, index: u64) -> Result<Option<Request>, TraceError> {
        loop {
            if !self.lines.advance()? {
                return Ok(None);
            }
            let line = self.lines.text();
            let body = line.split_once('#').map_or(line, |(b, _)| b).trim();
            if body.is_empty() {
                continue;
            }
            let unit = parse_number(body).map_err(|why| self.lines.error(&why))?;
            return Ok(Some(Request {
                time: index,
                unit,
                next_access: None,
            }));
        }
    }
}

/// Writes `requests` to `path` as a text trace (one decimal id per line) and returns how many
/// were written. Streams in constant memory. A path ending in `.zst` is zstd-compressed
/// (readers detect that by its magic bytes). The file is written whole or not at all, never
/// through a symbolic link (see [`memvisor_safe_files::OutputFile`]).
pub fn write_text(path: &Path, requests: impl IntoIterator<Item = u64>) -> Result<u64, TraceError> {
    match try_write_text(path, requests.into_iter().map(Ok::<u64, Infallible>))? {
        Ok(n) => Ok(n),
        Err(never) => match never {},
    }
}

/// [`write_text`] for requests that may fail: at the first `Err` it stops, leaves `path` as it
/// was, and returns that error as `Ok(Err(e))`; errors of the output itself are the outer
/// `Err`.
pub fn try_write_text<E>(
    path: &Path,
    requests: impl IntoIterator<Item = Result<u64, E>>,
) -> Result<Result<u64, E>, TraceError> {
    let mut out = Output::create(path)?;
    let mut count = 0u64;
    let mut line = String::with_capacity(24);
    for unit in requests {
        let unit = match unit {
            Ok(unit) => unit,
            Err(e) => return Ok(Err(e)),
        };
        use std::fmt::Write as _;
        line.clear();
        let _ = writeln!(line, "{unit}");
        out.write_all(line.as_bytes())?;
        count += 1;
    }
    out.finish()?;
    Ok(Ok(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(data: &[u8]) -> Result<Vec<u64>, TraceError> {
        let mut r = TextReader::new(
            Box::new(std::io::Cursor::new(data.to_vec())),
            "t.txt".into(),
        );
        let mut out = Vec::new();
        while let Some(req) = r.next_request(out.len() as u64)? {
            out.push(req.unit);
        }
        Ok(out)
    }

    #[test]
    fn parses_ids_comments_and_blanks() {
        let data = b"# header\n1\n\n  0x10  \r\n7 # trailing comment\n18446744073709551615";
        assert_eq!(read(data).unwrap(), [1, 16, 7, u64::MAX]);
        assert!(read(b"").unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        for (data, line, needle) in [
            (
                &b"1\nabc\n"[..],
                2,
                "expected a decimal or 0x-hexadecimal number, found \"abc\"",
            ),
            (b"1\n2\n18446744073709551616\n", 3, "overflows u64"),
            (b"0xfg\n", 1, "bad hex number \"0xfg\": not a hex digit"),
            (b"0x\n", 1, "no digits"),
            (b"1 2\n", 1, "\"1 2\""),
            (b"-5\n", 1, "expected a decimal"),
            (b"1\n\xc3\x28\n", 2, "invalid UTF-8"),
        ] {
            let e = read(data).unwrap_err().to_string();
            assert!(e.starts_with(&format!("t.txt:{line}: ")), "{e}");
            assert!(e.contains(needle), "{e}");
        }
    }

    #[test]
    fn write_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.txt");
        let ids = [3u64, 0, u64::MAX, 3];
        assert_eq!(write_text(&path, ids).unwrap(), 4);
        assert_eq!(read(&std::fs::read(&path).unwrap()).unwrap(), ids);
        let e = write_text(&dir.path().join("no/such/dir.txt"), ids).unwrap_err();
        assert!(
            e.to_string()
                .contains("no/such/dir.txt: cannot open its directory"),
            "{e}"
        );
    }
}
