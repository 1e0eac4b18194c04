//! [`Userfaultfd`]: a safe wrapper over one userfaultfd file descriptor.
//!
//! The kernel ABI (`include/uapi/linux/userfaultfd.h`) is not in the `libc` crate, so the ioctl
//! numbers and structures are defined here; their sizes are unit-tested against the kernel's.

use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `UFFD_API`: the only API version.
const UFFD_API: u64 = 0xAA;
/// The ioctl type byte of userfaultfd.
const UFFDIO: u64 = 0xAA;

const IOC_WRITE: u64 = 1;
const IOC_READ: u64 = 2;

/// `_IOC(dir, type, nr, size)` as on x86, arm64 and riscv (the generic encoding).
const fn ioc(dir: u64, nr: u64, size: usize) -> u64 {
    (dir << 30) | ((size as u64) << 16) | (UFFDIO << 8) | nr
}

/// `USERFAULTFD_IOC_NEW` on `/dev/userfaultfd`: `_IO(0xAA, 0x00)`.
const USERFAULTFD_IOC_NEW: u64 = UFFDIO << 8;
const UFFDIO_API: u64 = ioc(IOC_READ | IOC_WRITE, 0x3F, size_of::<UffdioApi>());
const UFFDIO_REGISTER: u64 = ioc(IOC_READ | IOC_WRITE, 0x00, size_of::<UffdioRegister>());
const UFFDIO_UNREGISTER: u64 = ioc(IOC_READ, 0x01, size_of::<UffdioRange>());
const UFFDIO_WAKE: u64 = ioc(IOC_READ, 0x02, size_of::<UffdioRange>());
const UFFDIO_COPY: u64 = ioc(IOC_READ | IOC_WRITE, 0x03, size_of::<UffdioCopy>());
const UFFDIO_ZEROPAGE: u64 = ioc(IOC_READ | IOC_WRITE, 0x04, size_of::<UffdioZeropage>());
const UFFDIO_CONTINUE: u64 = ioc(IOC_READ | IOC_WRITE, 0x07, size_of::<UffdioContinue>());
const UFFDIO_POISON: u64 = ioc(IOC_READ | IOC_WRITE, 0x08, size_of::<UffdioPoison>());
const UFFDIO_WRITEPROTECT: u64 = ioc(IOC_READ | IOC_WRITE, 0x06, size_of::<UffdioWriteprotect>());

/// `UFFD_FEATURE_*` bits negotiated with `UFFDIO_API`.
pub mod features {
    /// Write-protect faults are reported with `UFFD_PAGEFAULT_FLAG_WP`.
    pub const PAGEFAULT_FLAG_WP: u64 = 1 << 0;
    /// Missing faults on shmem (memfd) mappings.
    pub const MISSING_SHMEM: u64 = 1 << 5;
    /// Raise `SIGBUS` instead of queueing faults (not used by the pager).
    pub const SIGBUS: u64 = 1 << 7;
    /// Fault messages carry the faulting thread id.
    pub const THREAD_ID: u64 = 1 << 8;
    /// Minor faults on shmem (memfd) mappings.
    pub const MINOR_SHMEM: u64 = 1 << 10;
    /// Fault addresses are exact, not page-aligned.
    pub const EXACT_ADDRESS: u64 = 1 << 11;
    /// Write protection on shmem and hugetlbfs.
    pub const WP_HUGETLBFS_SHMEM: u64 = 1 << 12;
    /// `UFFDIO_POISON`.
    pub const POISON: u64 = 1 << 14;
    /// Write-protect unpopulated entries too.
    pub const WP_UNPOPULATED: u64 = 1 << 13;
    /// Asynchronous write protection (dirty tracking).
    pub const WP_ASYNC: u64 = 1 << 15;
}

/// `UFFDIO_REGISTER_MODE_*` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterMode(pub u64);

impl RegisterMode {
    /// Faults on pages absent from the page cache.
    pub const MISSING: Self = Self(1 << 0);
    /// Write-protect faults.
    pub const WP: Self = Self(1 << 1);
    /// Faults on pages present in the page cache but not mapped.
    pub const MINOR: Self = Self(1 << 2);
}

impl std::ops::BitOr for RegisterMode {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

const UFFD_EVENT_PAGEFAULT: u8 = 0x12;
const UFFD_PAGEFAULT_FLAG_WRITE: u64 = 1 << 0;
const UFFD_PAGEFAULT_FLAG_WP: u64 = 1 << 1;
const UFFD_PAGEFAULT_FLAG_MINOR: u64 = 1 << 2;
const MODE_DONTWAKE: u64 = 1 << 0;
/// `UFFDIO_WRITEPROTECT_MODE_DONTWAKE` (its bit 0 is `MODE_WP`).
const WP_MODE_DONTWAKE: u64 = 1 << 1;
/// `UFFDIO_COPY_MODE_WP` and `UFFDIO_CONTINUE_MODE_WP`: map the pages write-protected.
const MODE_WP: u64 = 1 << 1;

fn fill_mode(wake: bool, wp: bool) -> u64 {
    (if wake { 0 } else { MODE_DONTWAKE }) | (if wp { MODE_WP } else { 0 })
}

/// `struct uffdio_range`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
struct UffdioRange {
    start: u64,
    len: u64,
}

/// `struct uffdio_api`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}

/// `struct uffdio_register`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}

/// `struct uffdio_copy`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

/// `struct uffdio_zeropage`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioZeropage {
    range: UffdioRange,
    mode: u64,
    zeropage: i64,
}

/// `struct uffdio_continue`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioContinue {
    range: UffdioRange,
    mode: u64,
    mapped: i64,
}

/// `struct uffdio_poison`.
#[repr(C)]
#[derive(Debug, Default)]
struct UffdioPoison {
    range: UffdioRange,
    mode: u64,
    updated: i64,
}

#[repr(C)]
#[derive(Debug, Default)]
struct UffdioWriteprotect {
    range: UffdioRange,
    mode: u64,
}

/// `struct uffd_msg` (packed in the kernel; every field here is naturally aligned, so the
/// `repr(C)` layout is the same 32 bytes). The union is kept as three raw words.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct UffdMsg {
    event: u8,
    reserved1: u8,
    reserved2: u16,
    reserved3: u32,
    arg: [u64; 3],
}

/// What kind of page fault a [`FaultEvent`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The page is absent from the page cache.
    Missing,
    /// The page is in the page cache but not mapped (`MODE_MINOR`).
    Minor,
    /// A write to a write-protected page (`MODE_WP`).
    WriteProtect,
}

/// A decoded page-fault message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultEvent {
    /// Faulting address (page-aligned unless `EXACT_ADDRESS` was negotiated).
    pub address: usize,
    /// Missing, minor or write-protect.
    pub kind: FaultKind,
    /// Whether the access was a write.
    pub write: bool,
    /// Faulting thread id, if `THREAD_ID` was negotiated (else 0).
    pub thread_id: u32,
}

impl UffdMsg {
    /// The page-fault event in this message, or `None` for other events.
    pub fn pagefault(&self) -> Option<FaultEvent> {
        if self.event != UFFD_EVENT_PAGEFAULT {
            return None;
        }
        let flags = self.arg[0];
        let kind = if flags & UFFD_PAGEFAULT_FLAG_MINOR != 0 {
            FaultKind::Minor
        } else if flags & UFFD_PAGEFAULT_FLAG_WP != 0 {
            FaultKind::WriteProtect
        } else {
            FaultKind::Missing
        };
        Some(FaultEvent {
            address: self.arg[1] as usize,
            kind,
            write: flags & UFFD_PAGEFAULT_FLAG_WRITE != 0,
            thread_id: (self.arg[2] & 0xffff_ffff) as u32,
        })
    }

    /// The raw event code (`UFFD_EVENT_*`).
    pub fn event(&self) -> u8 {
        self.event
    }
}

/// Outcome of a range-filling ioctl that may stop part way.
#[derive(Debug)]
pub struct PartialError {
    /// Bytes filled before the error.
    pub done: usize,
    /// The error.
    pub error: io::Error,
}

impl std::fmt::Display for PartialError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (after {} bytes)", self.error, self.done)
    }
}

/// One userfaultfd, non-blocking and close-on-exec, with its negotiated features.
#[derive(Debug)]
pub struct Userfaultfd {
    fd: OwnedFd,
    features: u64,
}

impl Userfaultfd {
    /// Opens a userfaultfd (through `/dev/userfaultfd`, else the `userfaultfd(2)` syscall) and
    /// negotiates `features`, all of which must be offered.
    pub fn new(features: u64) -> io::Result<Self> {
        let fd = Self::open_raw()?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features,
            ioctls: 0,
        };
        // SAFETY: `fd` is a valid userfaultfd and `api` a properly sized, writable
        // `struct uffdio_api` that outlives the call.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API as _, &mut api) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        if api.features & features != features {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "userfaultfd features {:#x} requested, {:#x} granted",
                    features, api.features
                ),
            ));
        }
        Ok(Self {
            fd,
            features: api.features,
        })
    }

    /// The feature bits the kernel offers (a probe with a throwaway descriptor).
    pub fn available_features() -> io::Result<u64> {
        let fd = Self::open_raw()?;
        let mut api = UffdioApi {
            api: UFFD_API,
            features: 0,
            ioctls: 0,
        };
        // SAFETY: as in `new`: valid fd, valid writable struct.
        let r = unsafe { libc::ioctl(fd.as_raw_fd(), UFFDIO_API as _, &mut api) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(api.features)
    }

    fn open_raw() -> io::Result<OwnedFd> {
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        if let Ok(dev) = OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/userfaultfd")
        {
            // SAFETY: `dev` is an open `/dev/userfaultfd`; USERFAULTFD_IOC_NEW takes the flags
            // by value and returns a new descriptor or -1.
            let r = unsafe { libc::ioctl(dev.as_raw_fd(), USERFAULTFD_IOC_NEW as _, flags) };
            if r >= 0 {
                // SAFETY: the ioctl returned a fresh descriptor that nothing else owns.
                return Ok(unsafe { OwnedFd::from_raw_fd(r) });
            }
        }
        // SAFETY: userfaultfd(2) takes an int of flags and returns a new descriptor or -1.
        let r = unsafe { libc::syscall(libc::SYS_userfaultfd, flags) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a fresh descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(r as i32) })
    }

    /// The negotiated features.
    pub fn features(&self) -> u64 {
        self.features
    }

    /// Registers `[start, start + len)` with `mode`; returns the ioctl bitmask allowed there.
    pub fn register(&self, start: usize, len: usize, mode: RegisterMode) -> io::Result<u64> {
        let mut reg = UffdioRegister {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: mode.0,
            ioctls: 0,
        };
        // SAFETY: valid fd and a valid writable `struct uffdio_register`; the kernel checks that
        // the range is mapped and registrable.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_REGISTER as _, &mut reg) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(reg.ioctls)
    }

    /// Unregisters `[start, start + len)`.
    pub fn unregister(&self, start: usize, len: usize) -> io::Result<()> {
        let mut range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: valid fd and a valid `struct uffdio_range`.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_UNREGISTER as _, &mut range) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Wakes threads waiting on faults in `[start, start + len)`.
    pub fn wake(&self, start: usize, len: usize) -> io::Result<()> {
        let mut range = UffdioRange {
            start: start as u64,
            len: len as u64,
        };
        // SAFETY: valid fd and a valid `struct uffdio_range`.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_WAKE as _, &mut range) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// `UFFDIO_COPY`: atomically fills the missing pages of registered `[dst, dst + src.len())`
    /// with `src`, write-protected if `wp` (needs `MODE_WP`), and (unless `wake` is false) wakes
    /// the waiters. It only ever fills pages absent from the page cache (else `EEXIST`), so it
    /// cannot change memory anyone can read.
    pub fn copy(
        &self,
        dst: usize,
        src: &[u8],
        wake: bool,
        wp: bool,
    ) -> Result<usize, PartialError> {
        let mut c = UffdioCopy {
            dst: dst as u64,
            src: src.as_ptr() as u64,
            len: src.len() as u64,
            mode: fill_mode(wake, wp),
            copy: 0,
        };
        // SAFETY: valid fd; `c` is a valid `struct uffdio_copy`; the kernel reads `src` (a live
        // slice) with copy_from_user and validates that `dst` lies in a registered range.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_COPY as _, &mut c) };
        Self::partial(r, c.copy)
    }

    /// `UFFDIO_ZEROPAGE`: fills the missing pages of registered `[start, start + len)` with zeros.
    pub fn zeropage(&self, start: usize, len: usize, wake: bool) -> Result<usize, PartialError> {
        let mut z = UffdioZeropage {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: if wake { 0 } else { MODE_DONTWAKE },
            zeropage: 0,
        };
        // SAFETY: valid fd and a valid `struct uffdio_zeropage`; the kernel validates the range.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_ZEROPAGE as _, &mut z) };
        Self::partial(r, z.zeropage)
    }

    /// `UFFDIO_CONTINUE`: maps the page-cache pages of registered `[start, start + len)`
    /// (registered with `MODE_MINOR`), write-protected if `wp` (needs `MODE_WP`), and wakes the
    /// waiters unless `wake` is false.
    pub fn continue_range(
        &self,
        start: usize,
        len: usize,
        wake: bool,
        wp: bool,
    ) -> Result<usize, PartialError> {
        let mut c = UffdioContinue {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: fill_mode(wake, wp),
            mapped: 0,
        };
        // SAFETY: valid fd and a valid `struct uffdio_continue`; the kernel validates the range.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_CONTINUE as _, &mut c) };
        Self::partial(r, c.mapped)
    }

    /// `UFFDIO_POISON`: installs poison markers over unmapped pages of `[start, start + len)`, so
    /// any access raises `SIGBUS`; wakes the waiters (who then get the signal).
    pub fn poison(&self, start: usize, len: usize) -> Result<usize, PartialError> {
        let mut p = UffdioPoison {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: 0,
            updated: 0,
        };
        // SAFETY: valid fd and a valid `struct uffdio_poison`; the kernel validates the range.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_POISON as _, &mut p) };
        Self::partial(r, p.updated)
    }

    /// `UFFDIO_WRITEPROTECT` without `MODE_WP` and without waking: removes the write
    /// protection of registered `[start, start + len)` (registered with `MODE_WP`), including
    /// the uffd-wp markers that pages without an entry keep, so the range is truly empty where
    /// no page is mapped (`UFFDIO_POISON` refuses a marker with `EEXIST`).
    pub fn unprotect(&self, start: usize, len: usize) -> io::Result<()> {
        let mut w = UffdioWriteprotect {
            range: UffdioRange {
                start: start as u64,
                len: len as u64,
            },
            mode: WP_MODE_DONTWAKE,
        };
        // SAFETY: valid fd and a valid `struct uffdio_writeprotect`; the kernel validates the
        // range.
        let r = unsafe { libc::ioctl(self.fd.as_raw_fd(), UFFDIO_WRITEPROTECT as _, &mut w) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn partial(r: libc::c_int, done: i64) -> Result<usize, PartialError> {
        if r < 0 {
            let error = io::Error::last_os_error();
            Err(PartialError {
                done: done.max(0) as usize,
                error,
            })
        } else {
            Ok(done.max(0) as usize)
        }
    }

    /// Reads as many queued messages as fit in `buf` without blocking; returns how many.
    pub fn read_messages(&self, buf: &mut [UffdMsg]) -> io::Result<usize> {
        // SAFETY: `buf` is a live, writable array of plain-old-data `uffd_msg`s; the kernel writes
        // whole messages and at most `size_of_val(buf)` bytes.
        let r = unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                std::mem::size_of_val(buf),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize / size_of::<UffdMsg>())
    }
}

impl AsFd for Userfaultfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn struct_sizes_match_the_kernel_abi() {
        assert_eq!(size_of::<UffdioRange>(), 16);
        assert_eq!(size_of::<UffdioApi>(), 24);
        assert_eq!(size_of::<UffdioRegister>(), 32);
        assert_eq!(size_of::<UffdioCopy>(), 40);
        assert_eq!(size_of::<UffdioZeropage>(), 32);
        assert_eq!(size_of::<UffdioContinue>(), 32);
        assert_eq!(size_of::<UffdioPoison>(), 32);
        assert_eq!(size_of::<UffdMsg>(), 32);
    }

    #[test]
    fn ioctl_numbers_match_the_kernel_headers() {
        // Values from <linux/userfaultfd.h> as compiled on x86_64.
        assert_eq!(UFFDIO_API, 0xc018_aa3f);
        assert_eq!(UFFDIO_REGISTER, 0xc020_aa00);
        assert_eq!(UFFDIO_UNREGISTER, 0x8010_aa01);
        assert_eq!(UFFDIO_WAKE, 0x8010_aa02);
        assert_eq!(UFFDIO_COPY, 0xc028_aa03);
        assert_eq!(UFFDIO_ZEROPAGE, 0xc020_aa04);
        assert_eq!(UFFDIO_CONTINUE, 0xc020_aa07);
        assert_eq!(UFFDIO_POISON, 0xc020_aa08);
        assert_eq!(USERFAULTFD_IOC_NEW, 0xaa00);
    }

    #[test]
    fn decodes_pagefault_messages() {
        let m = UffdMsg {
            event: UFFD_EVENT_PAGEFAULT,
            arg: [
                UFFD_PAGEFAULT_FLAG_MINOR | UFFD_PAGEFAULT_FLAG_WRITE,
                0x7000,
                42,
            ],
            ..Default::default()
        };
        let f = m.pagefault().unwrap();
        assert_eq!(f.kind, FaultKind::Minor);
        assert!(f.write);
        assert_eq!(f.address, 0x7000);
        assert_eq!(f.thread_id, 42);
        let other = UffdMsg {
            event: 0x13,
            ..Default::default()
        };
        assert!(other.pagefault().is_none());
    }
}
