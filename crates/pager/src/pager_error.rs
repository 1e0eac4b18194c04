//! [`PagerError`]: every failure of the pager, with the region, offset or path it concerns.

use std::io;
use std::path::PathBuf;

/// A pager failure.
#[derive(Debug, thiserror::Error)]
pub enum PagerError {
    /// A configuration value is out of range.
    #[error("invalid region configuration: {0}")]
    Config(String),

    /// The policy could not be built.
    #[error("region {region}: policy: {source}")]
    Policy {
        /// Region name.
        region: String,
        /// The policy library's error.
        #[source]
        source: memvisor_policy::PolicyError,
    },

    /// userfaultfd is missing or lacks a needed feature.
    #[error("userfaultfd unavailable: {0}")]
    Unavailable(#[source] io::Error),

    /// A system call on the region's memory or userfaultfd failed.
    #[error("region {region}: {op} at offset {offset:#x} (len {len:#x}): {source}")]
    Memory {
        /// Region name.
        region: String,
        /// What was attempted.
        op: &'static str,
        /// Byte offset in the region.
        offset: usize,
        /// Length of the range.
        len: usize,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The swap file could not be created or managed.
    #[error("swap file {path}: {op}: {source}")]
    SwapFile {
        /// Path (the file is unlinked right after creation).
        path: PathBuf,
        /// What was attempted.
        op: &'static str,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Writing a chunk to swap failed; the chunk stayed resident.
    #[error(
        "region {region}: swap write of chunk {chunk} (offset {offset:#x}) to {path}: {source}"
    )]
    SwapWrite {
        /// Region name.
        region: String,
        /// Chunk index.
        chunk: u64,
        /// Byte offset of the chunk in the region (and in the swap file).
        offset: u64,
        /// Swap file path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// Reading a chunk from swap failed; the chunk was poisoned (accesses raise SIGBUS).
    #[error(
        "region {region}: swap read of chunk {chunk} (offset {offset:#x}) from {path}: {source}"
    )]
    SwapRead {
        /// Region name.
        region: String,
        /// Chunk index.
        chunk: u64,
        /// Byte offset of the chunk.
        offset: u64,
        /// Swap file path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// A chunk read from swap did not match its checksum; the chunk was poisoned.
    #[error(
        "region {region}: checksum mismatch in chunk {chunk} (offset {offset:#x}) of {path}: \
         stored {expected:#010x}, read {actual:#010x}"
    )]
    Checksum {
        /// Region name.
        region: String,
        /// Chunk index.
        chunk: u64,
        /// Byte offset of the chunk.
        offset: u64,
        /// Swap file path.
        path: PathBuf,
        /// CRC32C recorded at write time.
        expected: u32,
        /// CRC32C of the data read.
        actual: u32,
    },

    /// Reading pages back from the disk image they were associated with failed, or the image
    /// no longer holds what the pages held (changed outside memvisor); the pages were poisoned.
    #[error(
        "region {region}: page-in at offset {offset:#x} from image {image} at byte \
         {file_offset:#x}: {source}"
    )]
    ImageRead {
        /// Region name.
        region: String,
        /// Byte offset in the region of the first page of the failed read.
        offset: u64,
        /// The image.
        image: PathBuf,
        /// Byte offset in the image.
        file_offset: u64,
        /// The OS error (`InvalidData`: a checksum mismatch).
        #[source]
        source: io::Error,
    },

    /// A live migration could not read or place pages of the region.
    #[error("region {region}: migration at offset {offset:#x}: {reason}")]
    Migration {
        /// Region name.
        region: String,
        /// Byte offset in the region at fault.
        offset: u64,
        /// What went wrong.
        reason: String,
    },

    /// The fault-handler thread could not be started.
    #[error("region {region}: cannot start the fault handler: {source}")]
    Thread {
        /// Region name.
        region: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
}
