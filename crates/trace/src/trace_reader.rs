//! [`TraceReader`] and [`open_trace`]: a streaming iterator over the requests of a trace.

use std::fs::File;
use std::io::{self, Cursor, ErrorKind, Read};
use std::path::Path;
use std::sync::Arc;

use crate::byte_counter::{ByteCount, CountingReader};
use crate::csv::CsvReader;
use crate::lackey::LackeyReader;
use crate::oracle_general::OracleGeneralReader;
use crate::request::Request;
use crate::text::TextReader;
use crate::trace_error::TraceError;
use crate::trace_format::TraceFormat;

/// The first bytes of every zstd frame.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Opens the trace at `path` in `format`. Only opening the file can fail here (a directory is
/// refused); reading and parsing errors come from the iterator.
pub fn open_trace(path: &Path, format: &TraceFormat) -> Result<TraceReader, TraceError> {
    let name = path.display().to_string();
    let open_error = |source| TraceError::Open {
        file: name.clone(),
        source,
    };
    let file = File::open(path).map_err(open_error)?;
    let meta = file.metadata().map_err(open_error)?;
    if meta.is_dir() {
        return Err(open_error(io::Error::new(
            ErrorKind::IsADirectory,
            "is a directory, not a trace file",
        )));
    }
    let mut reader = TraceReader::from_reader(Box::new(file), &name, format);
    reader.input_len = meta.is_file().then_some(meta.len());
    Ok(reader)
}

/// The requests of a trace, read lazily in constant memory (fixed buffers; plus, for
/// compressed input, the zstd window, at most 128 MiB).
///
/// Iterates `Result<Request, TraceError>`; after the first error (or the end) it yields `None`
/// forever. Input starting with the zstd magic bytes is decompressed on the fly, whatever the
/// format.
pub struct TraceReader {
    file: Arc<str>,
    format: TraceFormat,
    state: State,
    /// Requests returned so far.
    count: u64,
    /// The input's size in bytes, when it is a regular file.
    input_len: Option<u64>,
    /// For zstd input: bytes read from the file and bytes decompressed so far.
    zstd_progress: Option<(ByteCount, ByteCount)>,
}

enum State {
    /// Not read yet: compression is detected at the first `next`.
    Start(Box<dyn Read + Send>),
    Lackey(LackeyReader),
    Text(TextReader),
    Csv(CsvReader),
    OracleGeneral(OracleGeneralReader),
    Done,
}

impl TraceReader {
    /// A reader of `input` in `format`; `name` labels errors (usually the file name).
    /// Infallible: nothing is read until the first call to `next`.
    pub fn from_reader(input: Box<dyn Read + Send>, name: &str, format: &TraceFormat) -> Self {
        Self {
            file: name.into(),
            format: format.clone(),
            state: State::Start(input),
            count: 0,
            input_len: None,
            zstd_progress: None,
        }
    }

    /// The name errors use for the input.
    pub fn name(&self) -> &str {
        &self.file
    }

    /// The format being read.
    pub fn format(&self) -> &TraceFormat {
        &self.format
    }

    /// The number of requests returned so far.
    pub fn requests_read(&self) -> u64 {
        self.count
    }

    /// Peeks at the first bytes for the zstd magic and builds the format's reader.
    fn start(&mut self, mut input: Box<dyn Read + Send>) -> Result<State, TraceError> {
        let mut head = [0u8; 4];
        let mut len = 0;
        while len < head.len() {
            match input.read(&mut head[len..]) {
                Ok(0) => break,
                Ok(n) => len += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(source) => {
                    return Err(TraceError::Read {
                        file: self.file.to_string(),
                        position: "start of file".into(),
                        source,
                    })
                }
            }
        }
        let input: Box<dyn Read + Send> = Box::new(Cursor::new(head[..len].to_vec()).chain(input));
        let compressed = head[..len] == ZSTD_MAGIC;
        let input: Box<dyn Read + Send> = if compressed {
            // zstd's default window limit (2^27 bytes) applies, as in libCacheSim's reader: a
            // frame declaring a larger window (`zstd --long=28` and up) is an error rather
            // than an allocation of up to 2 GiB.
            let (read, decoded) = (ByteCount::default(), ByteCount::default());
            self.zstd_progress = Some((read.clone(), decoded.clone()));
            let decoder = zstd::stream::read::Decoder::new(CountingReader::new(input, read))
                .map_err(|source| TraceError::Read {
                    file: self.file.to_string(),
                    position: "start of file".into(),
                    source,
                })?;
            Box::new(CountingReader::new(decoder, decoded))
        } else {
            input
        };
        let file = self.file.clone();
        Ok(match self.format {
            TraceFormat::Lackey {
                instructions,
                page_size,
            } => State::Lackey(LackeyReader::new(input, file, instructions, page_size)),
            TraceFormat::Text => State::Text(TextReader::new(input, file)),
            TraceFormat::Csv {
                column,
                time_column,
                header,
                delimiter,
            } => State::Csv(CsvReader::new(
                input,
                file,
                column,
                time_column,
                header,
                delimiter,
            )),
            TraceFormat::OracleGeneral => {
                let mut reader = OracleGeneralReader::new(input, file);
                reader.check_plausible(self.input_len.filter(|_| !compressed))?;
                State::OracleGeneral(reader)
            }
        })
    }

    /// Says so when an error is a zstd stream ending mid-frame, with how far it got.
    fn explain(&self, e: TraceError) -> TraceError {
        match (&self.zstd_progress, e) {
            (Some((read, decoded)), TraceError::Read { file, source, .. })
                if source.kind() == ErrorKind::UnexpectedEof =>
            {
                TraceError::TruncatedCompressed {
                    file,
                    compressed_bytes: read.get(),
                    of_total: self.input_len.map_or(String::new(), |n| format!(" of {n}")),
                    requests: self.count,
                    decompressed_bytes: decoded.get(),
                }
            }
            (_, e) => e,
        }
    }

    fn step(&mut self) -> Result<Option<Request>, TraceError> {
        self.step_unexplained().map_err(|e| self.explain(e))
    }

    fn step_unexplained(&mut self) -> Result<Option<Request>, TraceError> {
        if matches!(self.state, State::Start(_)) {
            let State::Start(input) = std::mem::replace(&mut self.state, State::Done) else {
                unreachable!("checked above");
            };
            self.state = self.start(input)?;
        }
        let index = self.count;
        match &mut self.state {
            State::Start(_) => unreachable!("replaced above"),
            State::Lackey(r) => r.next_request(index),
            State::Text(r) => r.next_request(index),
            State::Csv(r) => r.next_request(index),
            State::OracleGeneral(r) => r.next_request(),
            State::Done => Ok(None),
        }
    }
}

impl TraceReader {
    /// Appends up to `max` requests to `out`: the same requests, in the same order, as that many
    /// calls of `next`, without a call and a `Result` per request. Returns whether the trace may
    /// have more (false at its end). After an error, which is returned, the reader is done.
    pub fn next_batch(&mut self, out: &mut Vec<Request>, max: usize) -> Result<bool, TraceError> {
        if let State::OracleGeneral(r) = &mut self.state {
            let before = out.len();
            let result = r.next_batch(out, max);
            self.count += (out.len() - before) as u64;
            let result = result.map_err(|e| self.explain(e));
            if !matches!(result, Ok(true)) {
                self.state = State::Done;
            }
            return result;
        }
        for _ in 0..max {
            match self.step() {
                Ok(Some(request)) => {
                    self.count += 1;
                    out.push(request);
                }
                Ok(None) => {
                    self.state = State::Done;
                    return Ok(false);
                }
                Err(e) => {
                    self.state = State::Done;
                    return Err(e);
                }
            }
        }
        Ok(true)
    }
}

impl Iterator for TraceReader {
    type Item = Result<Request, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.step() {
            Ok(Some(request)) => {
                self.count += 1;
                Some(Ok(request))
            }
            Ok(None) => {
                self.state = State::Done;
                None
            }
            Err(e) => {
                self.state = State::Done;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for TraceReader {}

impl std::fmt::Debug for TraceReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceReader")
            .field("file", &self.file)
            .field("format", &self.format)
            .field("requests_read", &self.count)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader(data: &str) -> TraceReader {
        let input = Box::new(Cursor::new(data.as_bytes().to_vec()));
        TraceReader::from_reader(input, "mem.txt", &TraceFormat::Text)
    }

    #[test]
    fn batches_yield_what_the_iterator_yields() {
        let data: String = (0..1000).map(|i| format!("{}\n", i * 7 % 31)).collect();
        let one_by_one: Vec<Request> = reader(&data).map(Result::unwrap).collect();
        let mut r = reader(&data);
        let mut batched = Vec::new();
        while r.next_batch(&mut batched, 64).unwrap() {}
        assert_eq!(batched, one_by_one);
        assert_eq!(r.requests_read(), 1000);
        assert!(!r.next_batch(&mut batched, 64).unwrap());
    }

    #[test]
    fn a_batch_stops_at_an_error_and_keeps_what_came_before() {
        let mut r = reader("1\n2\nx\n4\n");
        let mut out = Vec::new();
        let e = r.next_batch(&mut out, 10).unwrap_err();
        assert!(e.to_string().contains("mem.txt:3"), "{e}");
        assert_eq!(out.len(), 2);
        assert!(!r.next_batch(&mut out, 10).unwrap());
    }

    fn oracle_records(n: u64) -> Vec<u8> {
        let mut data = Vec::new();
        for i in 0..n {
            data.extend_from_slice(&(i as u32).to_le_bytes());
            data.extend_from_slice(&(i % 97).to_le_bytes());
            data.extend_from_slice(&1u32.to_le_bytes());
            let next: i64 = if i + 97 < n { (i + 97 + 1) as i64 } else { -1 };
            data.extend_from_slice(&next.to_le_bytes());
        }
        data
    }

    /// Reads `data` one by one and in batches of `batch`: the requests and the error message.
    fn both_ways(data: &[u8], batch: usize) -> [(Vec<Request>, Option<String>); 2] {
        let open = || {
            TraceReader::from_reader(
                Box::new(Cursor::new(data.to_vec())),
                "mem.oracleGeneral",
                &TraceFormat::OracleGeneral,
            )
        };
        let mut one = (Vec::new(), None);
        for r in open() {
            match r {
                Ok(req) => one.0.push(req),
                Err(e) => one.1 = Some(e.to_string()),
            }
        }
        let mut batched = (Vec::new(), None);
        let mut reader = open();
        loop {
            match reader.next_batch(&mut batched.0, batch) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    batched.1 = Some(e.to_string());
                    break;
                }
            }
        }
        assert_eq!(reader.requests_read(), batched.0.len() as u64);
        [one, batched]
    }

    #[test]
    fn oracle_general_batches_match_records_read_one_by_one() {
        // Enough records to cross the 64 KiB buffer several times at odd batch sizes.
        let good = oracle_records(20_000);
        for batch in [1, 7, 4096, 100_000] {
            let [one, batched] = both_ways(&good, batch);
            assert_eq!(one.0.len(), 20_000);
            assert_eq!(one, batched, "batch {batch}");
        }
        // A bad next-access field in record 12,345, then a trailing partial record.
        let mut bad = good.clone();
        bad[12_345 * 24 + 16..12_345 * 24 + 24].copy_from_slice(&0i64.to_le_bytes());
        let mut partial = good;
        partial.extend_from_slice(&[1, 2, 3]);
        for (data, at) in [(bad, "record 12345"), (partial, "record 20000")] {
            for batch in [1, 7, 4096] {
                let [one, batched] = both_ways(&data, batch);
                let msg = one.1.clone().expect("an error");
                assert!(msg.contains(at), "{msg}");
                assert_eq!(one, batched, "batch {batch}");
            }
        }
    }
}
