//! The file-I/O C symbols this library interposes for the swap mapper
//! ([`image_io`](crate::image_io)): positional reads and writes (`pread`, `preadv`, `preadv2`,
//! `pwrite`, `pwritev`, `pwritev2`, each also under its `64` name, which is the same call on
//! 64-bit Linux), `fallocate`, `ftruncate` and `copy_file_range`. Each is carried out as the
//! raw system call; the library only acts before and after it.

use libc::{c_int, c_uint, c_void, iovec, loff_t, off_t, size_t, ssize_t};

use crate::direct_io_reads::DirectIoReads;
use crate::image_io;
use crate::raw_calls::{self as real, set_errno};

/// The `iovcnt` iovecs at `iov` (none if the count is out of range: the system call then
/// fails on its own). Borrowed, not copied: an entry point that allocates only when it has
/// work to do stays safe in a forked child, whose copy of the library's heap lock may be held
/// by a thread that did not follow it.
///
/// # Safety
///
/// `iov` points to `iovcnt` readable iovecs if `iovcnt` is in `1..=IOV_MAX`, alive and
/// unchanged while the slice is used.
pub(crate) unsafe fn iovecs<'a>(iov: *const iovec, iovcnt: c_int) -> &'a [iovec] {
    if iov.is_null() || !(1..=1024).contains(&iovcnt) {
        return &[];
    }
    // SAFETY: guaranteed by the caller for this count.
    unsafe { std::slice::from_raw_parts(iov, iovcnt as usize) }
}

/// `(address, length)` of each iovec.
fn buffers(v: &[iovec]) -> Vec<(usize, usize)> {
    v.iter().map(|i| (i.iov_base as usize, i.iov_len)).collect()
}

/// Total length of the iovecs (saturating).
fn total(v: &[iovec]) -> u64 {
    v.iter()
        .fold(0u64, |t, i| t.saturating_add(i.iov_len as u64))
}

macro_rules! pread_entry {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As `pread(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t {
            let _pinned = DirectIoReads::pin(std::iter::once((buf as usize, n)));
            image_io::read(fd, &[(buf as usize, n)], off, 0, || {
                // SAFETY: the program's own arguments, passed on as given.
                unsafe { real::pread(fd, buf, n, off) }
            })
        }
    };
}

pread_entry!(
    /// `pread(2)`: a read into guest RAM goes through the swap mapper.
    pread
);
pread_entry!(
    /// `pread64(2)` (the same call on 64-bit Linux).
    pread64
);

macro_rules! preadv_entry {
    ($(#[$doc:meta])* $name:ident $(, $flags:ident)?) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As `preadv2(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            iovcnt: c_int,
            off: off_t
            $(, $flags: c_int)?
        ) -> ssize_t {
            #[allow(unused_mut, unused_assignments)]
            let (mut flags, mut v2) = (0, false);
            $(flags = $flags; v2 = true;)?
            // Only preadv2 reads at the file position for an offset of -1 (its system call
            // is the one made below): preadv refuses a negative offset.
            if !v2 && off < 0 {
                set_errno(libc::EINVAL);
                return -1;
            }
            // SAFETY: the program passes `iovcnt` iovecs at `iov`, unchanged during the call.
            let vecs = unsafe { iovecs(iov, iovcnt) };
            let _pinned = DirectIoReads::pin(vecs.iter().map(|v| (v.iov_base as usize, v.iov_len)));
            if !image_io::watching_reads() {
                // SAFETY: the program's own arguments, passed on as given.
                return unsafe { real::preadv2(fd, iov, iovcnt, off, flags) };
            }
            let bufs = buffers(vecs);
            image_io::read(fd, &bufs, off, flags, || {
                // SAFETY: the program's own arguments, passed on as given.
                unsafe { real::preadv2(fd, iov, iovcnt, off, flags) }
            })
        }
    };
}

preadv_entry!(
    /// `preadv(2)`: a read into guest RAM goes through the swap mapper.
    preadv
);
preadv_entry!(
    /// `preadv64(2)`.
    preadv64
);
preadv_entry!(
    /// `preadv2(2)` (an offset of -1 reads at the file position and is passed through).
    preadv2, flags
);
preadv_entry!(
    /// `preadv64v2(2)`.
    preadv64v2, flags
);

macro_rules! pwrite_entry {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As `pwrite(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t {
            let from = off.max(0) as u64;
            let r = image_io::write(fd, from, from.saturating_add(n as u64), || {
                // SAFETY: the program's own arguments, passed on as given.
                unsafe { real::pwrite(fd, buf, n, off) }
            });
            image_io::accessed(fd, off, r, 0);
            r
        }
    };
}

pwrite_entry!(
    /// `pwrite(2)`: a write to an image first ends the associations it overlaps, and is told
    /// to the image's cache limit after.
    pwrite
);
pwrite_entry!(
    /// `pwrite64(2)`.
    pwrite64
);

macro_rules! pwritev_entry {
    ($(#[$doc:meta])* $name:ident $(, $flags:ident)?) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As `pwritev2(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            fd: c_int,
            iov: *const iovec,
            iovcnt: c_int,
            off: off_t
            $(, $flags: c_int)?
        ) -> ssize_t {
            #[allow(unused_mut, unused_assignments)]
            let (mut flags, mut v2) = (0, false);
            $(flags = $flags; v2 = true;)?
            // As for preadv: only pwritev2 writes at the file position for an offset of -1.
            if !v2 && off < 0 {
                set_errno(libc::EINVAL);
                return -1;
            }
            // SAFETY: the program passes `iovcnt` iovecs at `iov`, unchanged during the call.
            let len = total(unsafe { iovecs(iov, iovcnt) });
            // At the file position (offset -1) or appending: anywhere in the file.
            let (from, to) = if off < 0 || flags & libc::RWF_APPEND != 0 {
                (0, u64::MAX)
            } else {
                (off as u64, (off as u64).saturating_add(len))
            };
            let r = image_io::write(fd, from, to, || {
                // SAFETY: the program's own arguments, passed on as given.
                unsafe { real::pwritev2(fd, iov, iovcnt, off, flags) }
            });
            let at = if flags & libc::RWF_APPEND != 0 { -1 } else { off };
            image_io::accessed(fd, at, r, 0);
            r
        }
    };
}

pwritev_entry!(
    /// `pwritev(2)`: a write to an image first ends the associations it overlaps, and is told
    /// to the image's cache limit after.
    pwritev
);
pwritev_entry!(
    /// `pwritev64(2)`.
    pwritev64
);
pwritev_entry!(
    /// `pwritev2(2)`.
    pwritev2, flags
);
pwritev_entry!(
    /// `pwritev64v2(2)`.
    pwritev64v2, flags
);

macro_rules! fallocate_entry {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As `fallocate(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int {
            if let Some(r) = image_io::discard_guest_ram(fd, mode, off, len) {
                return r;
            }
            match image_io::fallocate_changes(mode, off, len) {
                None => real::fallocate(fd, mode, off, len),
                Some((from, to)) => {
                    image_io::write(fd, from, to, || real::fallocate(fd, mode, off, len))
                }
            }
        }
    };
}

fallocate_entry!(
    /// `fallocate(2)`: a hole punched in guest RAM is a discard through the pager; a change to
    /// an image's bytes first ends the associations it overlaps.
    fallocate
);
fallocate_entry!(
    /// `fallocate64(2)`.
    fallocate64
);

macro_rules! ftruncate_entry {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        ///
        /// As `ftruncate(2)`.
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, len: off_t) -> c_int {
            image_io::write(fd, len.max(0) as u64, u64::MAX, || real::ftruncate(fd, len))
        }
    };
}

ftruncate_entry!(
    /// `ftruncate(2)`: shrinking an image first ends the associations past its new end.
    ftruncate
);
ftruncate_entry!(
    /// `ftruncate64(2)`.
    ftruncate64
);

/// `copy_file_range(2)`: copying into an image first ends the associations of the range it
/// writes (all of the image's when the offset is the file position).
///
/// # Safety
///
/// As `copy_file_range(2)`.
#[no_mangle]
pub unsafe extern "C" fn copy_file_range(
    fd_in: c_int,
    off_in: *mut loff_t,
    fd_out: c_int,
    off_out: *mut loff_t,
    len: size_t,
    flags: c_uint,
) -> ssize_t {
    let (from, to) = if off_out.is_null() {
        (0, u64::MAX)
    } else {
        // SAFETY: a non-null `off_out` points to the program's live offset.
        let o = unsafe { *off_out }.max(0) as u64;
        (o, o.saturating_add(len as u64))
    };
    image_io::write(fd_out, from, to, || {
        // SAFETY: the program's own arguments, passed on as given.
        unsafe { real::copy_file_range(fd_in, off_in, fd_out, off_out, len, flags) }
    })
}
