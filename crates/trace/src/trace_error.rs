//! [`TraceError`]: what can go wrong when reading or writing a trace or parsing a spec.

use std::io;

/// Errors of the trace library.
///
/// Every error about a file names the file. Text formats also name the line (1-based) and quote
/// an excerpt of it; the binary format names the record (0-based) and its byte offset in the
/// (decompressed) stream.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The trace file could not be opened.
    #[error("{file}: cannot open: {source}")]
    Open {
        /// The file.
        file: String,
        /// The operating system's error.
        source: io::Error,
    },
    /// Reading failed (an I/O error, or corrupt zstd data).
    #[error("{file}: {position}: read error: {source}")]
    Read {
        /// The file.
        file: String,
        /// Where: `line N` or `record N (byte offset B)`.
        position: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A line of a text format is malformed.
    #[error("{file}:{line}: {reason}: {excerpt:?}")]
    Line {
        /// The file.
        file: String,
        /// The line number, 1-based.
        line: u64,
        /// The start of the offending line (lossily decoded, possibly cut short).
        excerpt: String,
        /// What is wrong.
        reason: String,
    },
    /// A record of a binary format is malformed.
    #[error("{file}: record {record} (byte offset {offset}): {reason}")]
    Record {
        /// The file.
        file: String,
        /// The record number, 0-based.
        record: u64,
        /// The byte offset of the record in the (decompressed) stream.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// The binary stream ends in the middle of a record.
    #[error(
        "{file}: record {record} (byte offset {offset}): trailing partial record of {len} bytes \
         (records are {record_size} bytes)"
    )]
    PartialRecord {
        /// The file.
        file: String,
        /// The number of the incomplete record, 0-based.
        record: u64,
        /// The byte offset where it starts.
        offset: u64,
        /// How many bytes of it are present.
        len: usize,
        /// The size of a whole record.
        record_size: usize,
    },
    /// A zstd-compressed input ends in the middle of a frame.
    #[error(
        "{file}: the zstd-compressed stream is truncated: it ends at compressed byte \
         {compressed_bytes}{of_total}, after {requests} complete requests ({decompressed_bytes} \
         bytes decompressed)"
    )]
    TruncatedCompressed {
        /// The file.
        file: String,
        /// Compressed bytes read before the input ended.
        compressed_bytes: u64,
        /// ` of N` with the file's size, when known.
        of_total: String,
        /// Requests read whole before the truncation.
        requests: u64,
        /// Bytes the decompressor produced.
        decompressed_bytes: u64,
    },
    /// The input is evidently not in the format it is read as (text read as a binary format,
    /// a size that is not a whole number of records).
    #[error("{file}: byte offset {offset}: not {format}: {reason}")]
    WrongFormat {
        /// The file.
        file: String,
        /// The format it was read as.
        format: &'static str,
        /// Where the evidence is.
        offset: u64,
        /// What gives it away, and what to do.
        reason: String,
    },
    /// The output file could not be created or moved into place (the message names it).
    #[error(transparent)]
    Output(#[from] memvisor_safe_files::SafeFileError),
    /// Writing a trace failed.
    #[error("{file}: write error: {source}")]
    Write {
        /// The file.
        file: String,
        /// The underlying error.
        source: io::Error,
    },
    /// A spec names an unknown format or workload.
    #[error("unknown {what} {name:?} (known: {known})")]
    UnknownName {
        /// What was being named: `trace format` or `workload`.
        what: &'static str,
        /// The name given.
        name: String,
        /// The known names, comma separated.
        known: String,
    },
    /// A spec parameter is unknown, missing, or has a bad value.
    #[error("{what} {name}: parameter {param:?}: {reason}")]
    BadParameter {
        /// What the spec describes: `trace format` or `workload`.
        what: &'static str,
        /// The format or workload name.
        name: &'static str,
        /// The parameter as written (`KEY=VALUE`, or just `KEY` when it is missing).
        param: String,
        /// What is wrong with it.
        reason: String,
    },
}
