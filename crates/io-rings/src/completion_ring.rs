//! [`CompletionRing`]: where an asynchronous I/O context's completions are found (a Linux AIO
//! context's ring, [`AioRing`](crate::AioRing), or an io_uring's completion queue,
//! [`UringCompletions`](crate::UringCompletions)), read without the program's help: the
//! kernel completes requests without a library call, and the program consumes the
//! completions itself.

use crate::io_rings_error::IoRingsResult;

/// One completed request, as a completion ring shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The request's key (AIO: the control block's address; io_uring: its `user_data`).
    pub key: u64,
    /// Its result: bytes, or a negative errno.
    pub res: i64,
}

/// A context's completions, read from where the kernel posts them.
pub trait CompletionRing: Send {
    /// Appends the completions posted since the last look to `out`, each once. `Err`: the
    /// ring cannot be read any more (unmapped, or no longer what it was); it is not asked
    /// again.
    fn completions(&mut self, out: &mut Vec<Completion>) -> IoRingsResult<()>;

    /// Completions posted and overwritten before a look could read them (more than the ring
    /// holds between two looks where the ring can tell): their requests are never reported.
    fn lost(&self) -> u64 {
        0
    }
}
