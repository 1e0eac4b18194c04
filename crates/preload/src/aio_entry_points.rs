//! The Linux AIO C symbols this library interposes (`libaio`'s `io_submit` and `io_destroy`,
//! which QEMU's `aio=native` calls): each request is read ([`AioRequest`]) and acted on before
//! the real system call, and followed until the kernel completes it ([`aio_in_flight`]). A
//! read into managed memory pins its chunks until then; a read of an image into guest RAM gets
//! the false-read preventer before it and its association after it; a write to an image ends
//! the associations it overlaps first. Everything else passes through.
//!
//! `libaio`'s calling convention is kept: the result, or a negative errno, with `errno` left
//! as it was.

use libc::{c_int, c_long, c_ulong, c_void};
use memvisor_io_rings::{AioRequest, AioRing, Iocb};

use crate::aio_in_flight::{self, ContextKind, Submitted};
use crate::direct_io_reads::DirectIoReads;
use crate::image_entry_points::iovecs;
use crate::image_io::{self, ReadStart};
use crate::managed_process::ACTIVE;
use crate::raw_calls::{self as real, errno, set_errno};
use crate::shim_guard::{is_pager_thread, ShimGuard};

/// Most control blocks one call is looked at for (the kernel's default `aio-max-nr`, the most
/// requests of all contexts together; a call with more passes through unseen).
const MOST_PER_CALL: c_long = 65536;

/// `r`, a raw system call's result, in `libaio`'s convention: a failure is returned as the
/// negative errno, and `errno` is set back to `saved`.
fn libaio_result(r: c_long, saved: c_int) -> c_int {
    if r < 0 {
        let e = errno();
        set_errno(saved);
        -e
    } else {
        r as c_int
    }
}

/// Whether a submission on this thread is looked at (the library manages this process, and
/// this is not one of the pager's threads); for io_uring too.
pub(crate) fn watching() -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::Acquire) && !is_pager_thread()
}

/// What the library does for one request, known by `key` in its context, before it is
/// submitted (for `io_submit` and for io_uring, [`crate::uring_entry_points`]). A read through
/// a descriptor the library cannot name (`fd` -1: an io_uring registered file) is only pinned.
pub(crate) fn prepare(key: u64, request: AioRequest) -> Option<Submitted> {
    match request {
        AioRequest::Read {
            fd,
            offset,
            flags,
            buffers,
        } => {
            let pins = DirectIoReads::pin(buffers.iter().copied());
            let read = if fd >= 0 && image_io::read_into_guest_possible(offset, flags) {
                match image_io::start_read(fd, &buffers, offset) {
                    ReadStart::GuestRam(p) => Some(p),
                    ReadStart::OtherMemory | ReadStart::NotAnImage => None,
                }
            } else {
                None
            };
            Some(Submitted::new(key, pins, read, None))
        }
        AioRequest::Write { fd, from, to } => Some(Submitted::new(
            key,
            DirectIoReads::default(),
            None,
            image_io::start_change(fd, from, to),
        )),
        AioRequest::Other => None,
    }
}

/// `io_submit(3)` (`libaio`): see the module documentation.
///
/// # Safety
///
/// As `io_submit(2)`: `iocbpp` points to `nr` pointers to valid control blocks whose buffers
/// (and iovec arrays) stay valid until each request completes.
#[no_mangle]
pub unsafe extern "C" fn io_submit(ctx: c_ulong, nr: c_long, iocbpp: *mut *mut c_void) -> c_int {
    let saved = errno();
    let submit = || {
        // SAFETY: the program's own arguments, passed on as given.
        libaio_result(unsafe { real::io_submit(ctx, nr, iocbpp) }, saved)
    };
    if !watching() || !(1..=MOST_PER_CALL).contains(&nr) || iocbpp.is_null() {
        return submit();
    }
    let Some(_guard) = ShimGuard::enter() else {
        return submit();
    };
    // SAFETY: the program passes `nr` control block pointers at `iocbpp`, unchanged during
    // the call.
    let blocks = unsafe { std::slice::from_raw_parts(iocbpp as *const *const Iocb, nr as usize) };
    let mut requests = Vec::new();
    for &b in blocks {
        if b.is_null() {
            break; // the kernel stops there too (EFAULT)
        }
        // SAFETY: a control block of the program, valid for the call (see above).
        let iocb = unsafe { *b };
        let request = AioRequest::parse(&iocb, |at, n| {
            // SAFETY: a vectored request's `aio_buf` points to its `aio_nbytes` iovecs, valid
            // until it completes (the program's contract with the kernel).
            unsafe { iovecs(at as *const libc::iovec, n as c_int) }.to_vec()
        });
        requests.extend(prepare(b as u64, request));
    }
    let id = ctx as usize;
    aio_in_flight::register(id, ContextKind::Aio, || AioRing::boxed(id), requests);
    let r = submit();
    let taken = r.max(0) as usize;
    if taken < blocks.len() {
        let left: Vec<u64> = blocks[taken..].iter().map(|&b| b as u64).collect();
        aio_in_flight::withdraw(ctx as usize, &left);
    }
    set_errno(saved);
    r
}

/// `io_destroy(3)` (`libaio`): the context's requests the library follows are finished once
/// the kernel has waited for them, and its ring is never read again.
///
/// # Safety
///
/// As `io_destroy(2)`.
#[no_mangle]
pub unsafe extern "C" fn io_destroy(ctx: c_ulong) -> c_int {
    let saved = errno();
    let Some(_guard) = ShimGuard::enter() else {
        return libaio_result(real::io_destroy(ctx), saved);
    };
    let left = aio_in_flight::destroying(ctx as usize);
    let r = libaio_result(real::io_destroy(ctx), saved);
    aio_in_flight::finish_without_results(left);
    set_errno(saved);
    r
}
