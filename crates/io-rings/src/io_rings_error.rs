//! [`IoRingsError`]: why a structure could not be read, naming it and its address.

use std::io;

use crate::plain_data::PlainData;
use crate::program_memory::{no_such_address, ProgramMemory};

/// A structure of a program's asynchronous I/O that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IoRingsError {
    /// The memory it lies in could not be read (`EFAULT`: not mapped, or past the address
    /// space's end).
    #[error("cannot read {what} at {address:#x}: {source}")]
    Unreadable {
        /// What was being read.
        what: &'static str,
        /// Its address in the program.
        address: usize,
        /// The read's error.
        #[source]
        source: io::Error,
    },
    /// The memory does not hold the structure this crate reads (another layout, or not one).
    #[error("no {what} this library reads at {address:#x} ({why})")]
    NotRecognized {
        /// The structure expected.
        what: &'static str,
        /// Its address in the program.
        address: usize,
        /// Which check failed.
        why: &'static str,
    },
}

impl IoRingsError {
    /// The operating-system error of an unreadable structure (`EFAULT` for memory that is not
    /// there).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Self::Unreadable { source, .. } => source.raw_os_error(),
            Self::NotRecognized { .. } => None,
        }
    }
}

/// `Result` of this crate.
pub type IoRingsResult<T> = Result<T, IoRingsError>;

/// Reads with `read` the structure `what` at `address`, naming both if it fails; `address`
/// `None` (past the address space's end) fails with `EFAULT`.
pub(crate) fn reading<T>(
    what: &'static str,
    address: Option<usize>,
    read: impl FnOnce(usize) -> io::Result<T>,
) -> IoRingsResult<T> {
    let Some(at) = address else {
        return Err(IoRingsError::Unreadable {
            what,
            address: usize::MAX,
            source: no_such_address(),
        });
    };
    read(at).map_err(|source| IoRingsError::Unreadable {
        what,
        address: at,
        source,
    })
}

/// The value of the structure `what` at `address` in `memory`, naming both if it cannot be read.
pub(crate) fn value_at<T: PlainData + Default>(
    memory: &impl ProgramMemory,
    what: &'static str,
    address: usize,
) -> IoRingsResult<T> {
    reading(what, Some(address), |at| memory.value(at))
}
