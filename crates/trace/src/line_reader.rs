//! [`LineReader`]: UTF-8 lines from a byte stream, in bounded memory, with positions for errors.

use std::io::{BufRead, BufReader, Read};
use std::sync::Arc;

use crate::trace_error::TraceError;

/// The longest line accepted, in bytes (without the line end).
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// How much of a line an error message quotes, in characters.
const EXCERPT_CHARS: usize = 80;

/// Reads lines one at a time into one reused buffer. Accepts `\n` and `\r\n` line ends, and a
/// last line without one.
pub(crate) struct LineReader {
    input: BufReader<Box<dyn Read + Send>>,
    file: Arc<str>,
    /// The current line, valid UTF-8, without its line end.
    text: String,
    /// Scratch bytes; holds the allocation `text` reuses.
    bytes: Vec<u8>,
    /// The current line's number, 1-based (0 before the first line).
    line: u64,
}

impl LineReader {
    pub(crate) fn new(input: Box<dyn Read + Send>, file: Arc<str>) -> Self {
        Self {
            input: BufReader::with_capacity(64 * 1024, input),
            file,
            text: String::new(),
            bytes: Vec::new(),
            line: 0,
        }
    }

    /// Advances to the next line; `false` at the end of the input.
    pub(crate) fn advance(&mut self) -> Result<bool, TraceError> {
        let mut bytes = std::mem::take(&mut self.text).into_bytes();
        bytes.clear();
        let limit = MAX_LINE as u64 + 2; // room for "\r\n"
        let read = (&mut self.input)
            .take(limit)
            .read_until(b'\n', &mut bytes)
            .map_err(|source| TraceError::Read {
                file: self.file.to_string(),
                position: format!("line {}", self.line + 1),
                source,
            })?;
        if read == 0 {
            self.bytes = bytes;
            return Ok(false);
        }
        self.line += 1;
        let complete = bytes.last() == Some(&b'\n');
        if complete {
            bytes.pop();
            if bytes.last() == Some(&b'\r') {
                bytes.pop();
            }
        }
        if bytes.len() > MAX_LINE || (!complete && read as u64 == limit) {
            let err = self.error_at(
                &bytes,
                &format!("line longer than the limit of {MAX_LINE} bytes"),
            );
            self.bytes = bytes;
            return Err(err);
        }
        match String::from_utf8(bytes) {
            Ok(text) => {
                self.text = text;
                Ok(true)
            }
            Err(e) => {
                let at = e.utf8_error().valid_up_to();
                let bytes = e.into_bytes();
                let err = self.error_at(&bytes, &format!("invalid UTF-8 at byte {}", at + 1));
                self.bytes = bytes;
                Err(err)
            }
        }
    }

    /// The current line, without its line end.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The current line's number, 1-based.
    #[cfg(test)]
    pub(crate) fn line(&self) -> u64 {
        self.line
    }

    /// An error about the current line.
    pub(crate) fn error(&self, reason: &str) -> TraceError {
        self.error_at(self.text.as_bytes(), reason)
    }

    fn error_at(&self, bytes: &[u8], reason: &str) -> TraceError {
        let lossy = String::from_utf8_lossy(&bytes[..bytes.len().min(4 * EXCERPT_CHARS)]);
        let excerpt = match lossy.char_indices().nth(EXCERPT_CHARS) {
            None if bytes.len() <= 4 * EXCERPT_CHARS => lossy.into_owned(),
            None => format!("{lossy}..."),
            Some((cut, _)) => format!("{}...", &lossy[..cut]),
        };
        TraceError::Line {
            file: self.file.to_string(),
            line: self.line,
            excerpt,
            reason: reason.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(data: &[u8]) -> LineReader {
        LineReader::new(
            Box::new(std::io::Cursor::new(data.to_vec())),
            "f.txt".into(),
        )
    }

    #[test]
    fn splits_lines() {
        let mut r = reader(b"a\r\nb\n\nc");
        let mut lines = Vec::new();
        while r.advance().unwrap() {
            lines.push((r.line(), r.text().to_string()));
        }
        assert_eq!(
            lines,
            [
                (1, "a".into()),
                (2, "b".into()),
                (3, "".into()),
                (4, "c".into())
            ]
        );
    }

    #[test]
    fn rejects_bad_utf8_and_long_lines() {
        let mut r = reader(b"ok\nbad \xff here\n");
        assert!(r.advance().unwrap());
        let e = r.advance().unwrap_err().to_string();
        assert!(e.starts_with("f.txt:2: invalid UTF-8 at byte 5"), "{e}");
        assert!(e.contains("bad \u{fffd} here"), "{e}");

        let mut long = vec![b'x'; MAX_LINE];
        long.push(b'\n');
        let mut r = reader(&long);
        assert!(r.advance().unwrap());
        assert_eq!(r.text().len(), MAX_LINE);
        long.insert(0, b'y');
        let mut r = reader(&long);
        let e = r.advance().unwrap_err().to_string();
        assert!(e.starts_with("f.txt:1: line longer than"), "{e}");
        assert!(e.contains("yxxx") && e.contains("..."), "{e}");
        let mut r = reader(&vec![b'z'; 3 * MAX_LINE]);
        assert!(r.advance().is_err());
    }
}
