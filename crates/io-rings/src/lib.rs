//! The kernel's asynchronous I/O structures as memvisor reads them from a program's memory.
//!
//! QEMU's `aio=native` (Linux AIO through libaio's `io_submit`) and `aio=io_uring` (liburing's
//! `io_uring_submit`) hand their disk reads and writes to the kernel, which completes them
//! without another library call: the preload library (`memvisor-preload`) interposes the
//! submitting calls, reads each request there, and later finds the completions where the
//! kernel posts them. This crate is that reading, kept apart from the interposition so that it
//! can be tested against made-up memory and fuzzed:
//!
//! * requests: a Linux AIO control block ([`Iocb`]) or an io_uring submission entry ([`Sqe`])
//!   as an [`AioRequest`] (a read into buffers, a write of a file range, or something else);
//! * completions ([`CompletionRing`]): a Linux AIO context's ring ([`AioRing`]) and an
//!   io_uring's completion queue ([`UringCompletions`]);
//! * liburing's own ring structure ([`UringRings`]): the entries handed out since the last
//!   submission, found from the layout every liburing 2.x shares;
//! * where all of it is read ([`ProgramMemory`]): this process ([`OwnMemory`],
//!   `process_vm_readv`, so a bad address is an error and never a fault) or made-up bytes
//!   ([`ByteMemory`]). Every structure is copied out, never dereferenced, and every address in
//!   it may be wrong: a failure is an [`IoRingsError`] naming the structure and its address.
//!
//! Layouts are the kernel's UAPI (`linux/aio_abi.h`, `linux/io_uring.h`) on x86-64, and
//! liburing's as checked in its history (2.0 to 2.15).

mod aio_request;
mod aio_ring;
mod byte_memory;
mod completion_ring;
mod io_rings_error;
mod own_memory;
mod plain_data;
mod program_memory;
mod uring_request;
mod uring_rings;

pub use aio_request::{buffers, AioRequest, Iocb};
pub use aio_ring::{AioRing, AioRingHeader, IoEvent, AIO_RING_MAGIC};
pub use byte_memory::ByteMemory;
pub use completion_ring::{Completion, CompletionRing};
pub use io_rings_error::{IoRingsError, IoRingsResult};
pub use own_memory::OwnMemory;
pub use plain_data::{bytes_of, bytes_of_mut, PlainData};
pub use program_memory::{address_after, ProgramMemory};
pub use uring_request::Sqe;
pub use uring_rings::{Cqe, LiburingHead, UringCompletions, UringRings};
