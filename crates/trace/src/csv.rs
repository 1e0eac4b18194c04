//! CSV traces: see [`crate::TraceFormat::Csv`].

use std::io::Read;
use std::sync::Arc;

use crate::line_reader::LineReader;
use crate::request::Request;
use crate::trace_error::TraceError;
use crate::unit_id::{excerpt, parse_or_hash};

/// Splits the first field off `rest`: its content and what follows its delimiter (`None` at the
/// end of the line).
fn split_field(rest: &str, delim: char) -> Result<(&str, Option<&str>), String> {
    let blank = |c: char| (c == ' ' || c == '\t') && c != delim;
    let rest = rest.trim_start_matches(blank);
    if let Some(quoted) = rest.strip_prefix('"') {
        let mut chars = quoted.char_indices().peekable();
        let close = loop {
            match chars.next() {
                None => {
                    return Err(
                        "unterminated quoted field (quoted fields cannot span lines)".into(),
                    )
                }
                Some((i, '"')) => {
                    if chars.peek().is_some_and(|&(_, c)| c == '"') {
                        chars.next();
                    } else {
                        break i;
                    }
                }
                Some(_) => {}
            }
        };
        let content = &quoted[..close];
        let after = quoted[close + 1..].trim_start_matches(blank);
        match after.chars().next() {
            None => Ok((content, None)),
            Some(c) if c == delim => Ok((content, Some(&after[c.len_utf8()..]))),
            Some(_) => Err(format!(
                "unexpected text {} after a closing quote",
                excerpt(after)
            )),
        }
    } else {
        match rest.find(delim) {
            None => Ok((rest.trim_end_matches(blank), None)),
            Some(i) => Ok((
                rest[..i].trim_end_matches(blank),
                Some(&rest[i + delim.len_utf8()..]),
            )),
        }
    }
}

/// The id and the time text of one line, or the reason it is malformed.
fn pick_fields(
    line: &str,
    delim: char,
    column: usize,
    time_column: Option<usize>,
) -> Result<(u64, Option<u64>), String> {
    let last = column.max(time_column.unwrap_or(0));
    let mut rest = Some(line);
    let mut id = None;
    let mut time = None;
    for col in 1..=last {
        let Some(r) = rest else {
            return Err(format!(
                "missing column {last}: the line has only {} field{}",
                col - 1,
                if col == 2 { "" } else { "s" }
            ));
        };
        let (field, next) = split_field(r, delim)?;
        if col == column {
            if field.is_empty() {
                return Err(format!("empty id field in column {col}"));
            }
            id = Some(parse_or_hash(field).map_err(|why| format!("column {col}: {why}"))?);
        }
        if Some(col) == time_column {
            if field.is_empty() || !field.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "column {col}: bad time {}: expected a decimal integer",
                    excerpt(field)
                ));
            }
            time = Some(
                field
                    .parse()
                    .map_err(|_| format!("column {col}: time {} overflows u64", excerpt(field)))?,
            );
        }
        rest = next;
    }
    Ok((id.expect("column is in 1..=last"), time))
}

/// Streams the requests of a CSV trace.
pub(crate) struct CsvReader {
    lines: LineReader,
    column: usize,
    time_column: Option<usize>,
    delimiter: char,
    header_pending: bool,
}

impl CsvReader {
    pub(crate) fn new(
        input: Box<dyn Read + Send>,
        file: Arc<str>,
        column: usize,
        time_column: Option<usize>,
        header: bool,
        delimiter: u8,
    ) -> Self {
        debug_assert!(column >= 1 && time_column != Some(0) && delimiter.is_ascii());
        Self {
            lines: LineReader::new(input, file),
            column,
            time_column,
            delimiter: char::from(delimiter),
            header_pending: header,
        }
    }

    /// The next request; it gets `index` as its time unless a time column is configured.
    pub(crate) fn next_request(&mut self, index: u64) -> Result<Option<Request>, TraceError> {
        loop {
            if !self.lines.advance()? {
                return Ok(None);
            }
            let line = self.lines.text();
            if line.trim().is_empty() {
                continue;
            }
            if self.header_pending {
                self.header_pending = false;
                continue;
            }
            let (unit, time) = pick_fields(line, self.delimiter, self.column, self.time_column)
                .map_err(|why| self.lines.error(&why))?;
            return Ok(Some(Request {
                time: time.unwrap_or(index),
                unit,
                next_access: None,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit_id::hash_unit_id;

    fn read(
        data: &str,
        column: usize,
        time_column: Option<usize>,
        header: bool,
        delimiter: u8,
    ) -> Result<Vec<(u64, u64)>, TraceError> {
        let mut r = CsvReader::new(
            Box::new(std::io::Cursor::new(data.as_bytes().to_vec())),
            "t.csv".into(),
            column,
            time_column,
            header,
            delimiter,
        );
        let mut out = Vec::new();
        while let Some(req) = r.next_request(out.len() as u64)? {
            out.push((req.time, req.unit));
        }
        Ok(out)
    }

    #[test]
    fn picks_columns() {
        let data = "time,id,size\n10, 5 ,100\n\n11,0x20,1\r\n12,\"a,b\",3\n13,name,1\n";
        assert_eq!(
            read(data, 2, Some(1), true, b',').unwrap(),
            [
                (10, 5),
                (11, 32),
                (12, hash_unit_id("a,b")),
                (13, hash_unit_id("name"))
            ]
        );
        assert_eq!(
            read("1;2\n3;4", 2, None, false, b';').unwrap(),
            [(0, 2), (1, 4)]
        );
        assert_eq!(read("1\t2\n", 2, None, false, b'\t').unwrap(), [(0, 2)]);
        assert_eq!(
            read("x y\n", 2, None, false, b' ').unwrap(),
            [(0, hash_unit_id("y"))]
        );
        assert_eq!(
            read("\"q\"\"x\" , 1\n", 1, None, false, b',').unwrap(),
            [(0, hash_unit_id("q\"\"x"))]
        );
        assert!(read("h\n", 1, None, true, b',').unwrap().is_empty());
    }

    #[test]
    fn malformed_lines_name_file_and_line() {
        for (data, col, tcol, line, needle) in [
            (
                "1,2\n3\n",
                2,
                None,
                2,
                "missing column 2: the line has only 1 field",
            ),
            (
                "1,2\n",
                4,
                Some(1),
                1,
                "missing column 4: the line has only 2 fields",
            ),
            ("1,,3\n", 2, None, 1, "empty id field in column 2"),
            ("1, \n", 2, None, 1, "empty id field in column 2"),
            (
                "1,99999999999999999999\n",
                2,
                None,
                1,
                "column 2: number \"99999999999999999999\" overflows u64",
            ),
            ("1,0xq\n", 2, None, 1, "column 2: bad hex number"),
            ("x,1\n", 2, Some(1), 1, "column 1: bad time \"x\""),
            ("-1,1\n", 2, Some(1), 1, "bad time"),
            (
                "99999999999999999999,1\n",
                2,
                Some(1),
                1,
                "time \"99999999999999999999\" overflows",
            ),
            ("\"abc,1\n", 1, None, 1, "unterminated quoted field"),
            (
                "\"abc\"x,1\n",
                1,
                None,
                1,
                "unexpected text \"x,1\" after a closing quote",
            ),
            ("1,2\n\n3,\u{e9}\u{0}\n", 2, None, 3, "t.csv:3"),
        ] {
            let r = read(data, col, tcol, false, b',');
            let e = match r {
                Err(e) => e.to_string(),
                Ok(v) if needle == "t.csv:3" => {
                    // Arbitrary text is a valid (hashed) id.
                    assert_eq!(v.len(), 2);
                    continue;
                }
                Ok(v) => panic!("{data:?} parsed as {v:?}"),
            };
            assert!(e.starts_with(&format!("t.csv:{line}: ")), "{e}");
            assert!(e.contains(needle), "{data:?}: {e}");
        }
    }
}
