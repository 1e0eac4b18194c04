//! Valgrind lackey traces: see [`crate::TraceFormat::Lackey`].

use std::io::Read;
use std::sync::Arc;

use crate::line_reader::LineReader;
use crate::request::Request;
use crate::trace_error::TraceError;
use crate::unit_id::{excerpt, parse_hex};

/// The largest access size accepted, in bytes. Real lackey sizes are at most a few KiB (vector
/// save areas); the bound keeps a corrupt size from producing billions of requests.
pub(crate) const MAX_ACCESS_SIZE: u64 = 1 << 20;

/// One parsed lackey line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Access {
    pub(crate) instruction: bool,
    pub(crate) addr: u64,
    pub(crate) size: u64,
}

/// Parses one line: `Ok(None)` for lines to skip, the reason on failure.
pub(crate) fn parse_line(line: &str) -> Result<Option<Access>, String> {
    if line.starts_with("==") {
        return Ok(None);
    }
    let body = line.trim();
    let Some(kind) = body.chars().next() else {
        return Ok(None);
    };
    let instruction = match kind {
        'I' => true,
        'L' | 'S' | 'M' => false,
        other => {
            return Err(format!(
                "unknown access kind {other:?} (expected I, L, S or M)"
            ))
        }
    };
    let rest = &body[1..];
    if !rest.starts_with([' ', '\t']) {
        return Err("expected whitespace after the access kind".into());
    }
    let (addr, size) = rest
        .trim_start()
        .split_once(',')
        .ok_or("expected ADDRESS,SIZE after the access kind")?;
    let hex = addr.strip_prefix("0x").unwrap_or(addr);
    let addr = parse_hex(hex).map_err(|why| format!("bad hex address {}: {why}", excerpt(addr)))?;
    if size.is_empty() || !size.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad decimal size {}", excerpt(size)));
    }
    let size: u64 = size
        .parse()
        .ok()
        .filter(|&s| s <= MAX_ACCESS_SIZE)
        .ok_or_else(|| {
            format!(
                "size {} exceeds the limit of {MAX_ACCESS_SIZE} bytes",
                excerpt(size)
            )
        })?;
    if size > 0 && addr.checked_add(size - 1).is_none() {
        return Err("access runs past the end of the 64-bit address space".into());
    }
    Ok(Some(Access {
        instruction,
        addr,
        size,
    }))
}

/// Streams the requests of a lackey trace.
pub(crate) struct LackeyReader {
    lines: LineReader,
    instructions: bool,
    page_size: u64,
    /// The pages of the current access not yet returned: `next..=last`, if any.
    pending: Option<(u64, u64)>,
}

impl LackeyReader {
    pub(crate) fn new(
        input: Box<dyn Read + Send>,
        file: Arc<str>,
        instructions: bool,
        page_size: u64,
    ) -> Self {
        debug_assert!(page_size >= 1);
        Self {
            lines: LineReader::new(input, file),
            instructions,
            page_size,
            pending: None,
        }
    }

    /// The next request, which gets `index` as its time.
    pub(crate) fn next_request(&mut self, index: u64) -> Result<Option<Request>, TraceError> {
        loop {
            if let Some((next, last)) = self.pending {
                self.pending = (next < last).then(|| (next + 1, last));
                return Ok(Some(Request {
                    time: index,
                    unit: next,
                    next_access: None,
                }));
            }
            if !self.lines.advance()? {
                return Ok(None);
            }
            let access = parse_line(self.lines.text()).map_err(|why| self.lines.error(&why))?;
            if let Some(a) = access {
                if a.instruction && !self.instructions {
                    continue;
                }
                // A zero-size access (never seen in practice) still touches its first page.
                let end = a.addr + (a.size.max(1) - 1);
                self.pending = Some((a.addr / self.page_size, end / self.page_size));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(data: &str, instructions: bool, page_size: u64) -> Result<Vec<u64>, TraceError> {
        let mut r = LackeyReader::new(
            Box::new(std::io::Cursor::new(data.as_bytes().to_vec())),
            "t.lackey".into(),
            instructions,
            page_size,
        );
        let mut out = Vec::new();
        while let Some(req) = r.next_request(out.len() as u64)? {
            assert_eq!(req.time, out.len() as u64);
            out.push(req.unit);
        }
        Ok(out)
    }

    const SAMPLE: &str = "==123== Lackey, an example Valgrind tool\n\
                          ==123== \n\
                          I  04222cac,3\n \
                          L 04222cac,8\n \
                          S 7ff000398,8\n \
                          M 0421d2c8,4\n\
                          \n\
                          I  0x0fff,2\n\
                          ==123== Counted 1 call to main()\n";

    #[test]
    fn parses_pages() {
        assert_eq!(
            read(SAMPLE, true, 4096).unwrap(),
            [0x4222, 0x4222, 0x7ff000, 0x421d, 0x0, 0x1]
        );
        assert_eq!(
            read(SAMPLE, false, 4096).unwrap(),
            [0x4222, 0x7ff000, 0x421d]
        );
        assert_eq!(read(" L 10,16\n", true, 8).unwrap(), [2, 3]);
        assert_eq!(read(" L 10,0\n", true, 8).unwrap(), [2]);
        assert_eq!(read("I\t5,1\r\n", true, 1).unwrap(), [5]);
        assert_eq!(
            read(" S ffffffffffffffff,1\n", true, 4096).unwrap(),
            [u64::MAX / 4096]
        );
    }

    #[test]
    fn malformed_lines_name_file_line_and_reason() {
        for (data, line, needle) in [
            ("I  10,1\nX 10,1\n", 2, "unknown access kind 'X'"),
            ("I10,1\n", 1, "expected whitespace"),
            (" L 10\n", 1, "expected ADDRESS,SIZE"),
            (" L zz,1\n", 1, "bad hex address \"zz\": not a hex digit"),
            (" L ,1\n", 1, "bad hex address \"\": no digits"),
            (" L 1ffffffffffffffff,1\n", 1, "overflows u64"),
            (" L 10,x\n", 1, "bad decimal size \"x\""),
            (" L 10,-1\n", 1, "bad decimal size"),
            (" L 10,\n", 1, "bad decimal size"),
            (" L 10,99999999999999999999999\n", 1, "exceeds the limit"),
            (" L 10,2000000\n", 1, "exceeds the limit"),
            (" L ffffffffffffffff,2\n", 1, "past the end"),
            ("\n\n L 10,1,2\n", 3, "bad decimal size \"1,2\""),
            ("I  10,1 junk\n", 1, "bad decimal size"),
        ] {
            let e = read(data, true, 4096).unwrap_err().to_string();
            let prefix = format!("t.lackey:{line}: ");
            assert!(e.starts_with(&prefix), "{data:?}: {e}");
            assert!(e.contains(needle), "{data:?}: {e}");
        }
    }
}
