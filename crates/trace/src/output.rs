//! [`Output`]: a buffered output file for the trace writers, zstd-compressed when its name ends
//! in `.zst`, written whole or not at all through an [`OutputFile`].

use std::io::{BufWriter, Write};
use std::path::Path;

use memvisor_safe_files::OutputFile;

use crate::trace_error::TraceError;

/// The zstd level used for `.zst` outputs.
const ZSTD_LEVEL: i32 = 3;

/// A file being written.
pub(crate) struct Output {
    file: String,
    sink: Sink,
}

enum Sink {
    Plain(BufWriter<OutputFile>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<OutputFile>>),
}

impl Output {
    /// Starts writing `path`; nothing there changes until [`finish`](Self::finish), and
    /// dropping the output unfinished leaves it as it was.
    pub(crate) fn create(path: &Path) -> Result<Self, TraceError> {
        let file = path.display().to_string();
        let f = OutputFile::create(path)?;
        let w = BufWriter::with_capacity(256 * 1024, f);
        let zst = path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("zst"));
        let sink = if zst {
            let enc = zstd::stream::write::Encoder::new(w, ZSTD_LEVEL).map_err(|source| {
                TraceError::Write {
                    file: file.clone(),
                    source,
                }
            })?;
            Sink::Zstd(enc)
        } else {
            Sink::Plain(w)
        };
        Ok(Self { file, sink })
    }

    fn error(&self, source: std::io::Error) -> TraceError {
        TraceError::Write {
            file: self.file.clone(),
            source,
        }
    }

    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> Result<(), TraceError> {
        let r = match &mut self.sink {
            Sink::Plain(w) => w.write_all(bytes),
            Sink::Zstd(w) => w.write_all(bytes),
        };
        r.map_err(|e| self.error(e))
    }

    /// Flushes everything (ending the zstd frame) and commits the file into place.
    pub(crate) fn finish(self) -> Result<(), TraceError> {
        let file = self.file;
        let err = |source| TraceError::Write {
            file: file.clone(),
            source,
        };
        let writer = match self.sink {
            Sink::Plain(w) => w,
            Sink::Zstd(enc) => enc.finish().map_err(err)?,
        };
        let output = writer.into_inner().map_err(|e| err(e.into_error()))?;
        Ok(output.commit()?)
    }
}
