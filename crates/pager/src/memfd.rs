//! [`Memfd`] (an anonymous shmem file) and [`Mapping`] (a shared mapping, unmapped on drop).

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::raw_memory_calls;

/// The system page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let r = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if r <= 0 {
        4096
    } else {
        r as usize
    }
}

/// The pages (indexes, pages of `page` bytes) that the byte range `[offset, offset + len)`
/// covers whole.
pub(crate) fn covered_pages(offset: usize, len: usize, page: usize) -> std::ops::Range<usize> {
    offset.div_ceil(page)..offset.saturating_add(len) / page
}

/// Bytes of storage held by the file behind `fd` (`st_blocks * 512`).
pub fn allocated_bytes(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is a writable, properly sized `struct stat`; fstat fills it or fails.
    let r = unsafe { libc::fstat(fd.as_raw_fd(), st.as_mut_ptr()) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat succeeded, so it initialized `st` (and zeroed memory is a valid stat too).
    let st = unsafe { st.assume_init() };
    Ok(st.st_blocks as u64 * 512)
}

/// An anonymous memory file (`memfd_create`), close-on-exec.
#[derive(Debug)]
pub struct Memfd {
    fd: OwnedFd,
    len: usize,
}

impl Memfd {
    /// Creates a memfd named `name` of `len` bytes (a hole: no memory is allocated yet).
    pub fn new(name: &str, len: usize) -> io::Result<Self> {
        let cname = CString::new(name.replace('\0', "_"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        // SAFETY: `cname` is a valid NUL-terminated string that outlives the call.
        let r = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(r) };
        // SAFETY: ftruncate on a valid descriptor has no memory-safety preconditions.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { fd, len })
    }

    /// Size in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of memory the file holds (`st_blocks * 512`): the resident pages.
    pub fn allocated_bytes(&self) -> io::Result<u64> {
        allocated_bytes(self.fd.as_fd())
    }

    /// A second descriptor of the same file.
    pub fn try_clone_fd(&self) -> io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// Frees the pages of `[offset, offset + len)` (`fallocate(PUNCH_HOLE | KEEP_SIZE)`); the
    /// next access through a mapping finds them missing.
    pub fn punch_hole(&self, offset: usize, len: usize) -> io::Result<()> {
        self.fallocate(
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    }

    /// Copies `buf.len()` bytes at `offset` of the file into `buf` (`pread`, a hole reads as
    /// zeros). Unlike a copy through a mapping, this sets up no page-table entries: reading
    /// memory once through a fresh mapping costs a minor fault per page (about 0.6 GB/s here,
    /// against several GB/s for the kernel's copy). A raw system call: the `LD_PRELOAD` library
    /// interposes the libc `pread` (see [`crate::raw_memory_calls`] for why that matters).
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> io::Result<()> {
        let mut done = 0;
        while done < buf.len() {
            let rest = &mut buf[done..];
            // SAFETY: pread64 writes at most `rest.len()` bytes into `rest`, which is ours.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_pread64,
                    self.fd.as_raw_fd() as libc::c_long,
                    rest.as_mut_ptr(),
                    rest.len(),
                    (offset + done) as libc::c_long,
                )
            };
            match r {
                -1 => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
                0 => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("memory file ends before byte {}", offset + done),
                    ))
                }
                n => done += n as usize,
            }
        }
        Ok(())
    }

    /// Allocates zeroed pages for `[offset, offset + len)` (`fallocate(0)`).
    pub fn allocate(&self, offset: usize, len: usize) -> io::Result<()> {
        self.fallocate(0, offset, len)
    }

    fn fallocate(&self, mode: libc::c_int, offset: usize, len: usize) -> io::Result<()> {
        // SAFETY: fallocate on a valid descriptor has no memory-safety preconditions.
        let r = unsafe {
            libc::fallocate(
                self.fd.as_raw_fd(),
                mode,
                offset as libc::off_t,
                len as libc::off_t,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Takes over an existing memory file (`memfd_create` or another shmem file) of at least
    /// `len` bytes, growing it to `len` if it is shorter. Only an empty file (no allocated pages)
    /// is accepted: a pager must know where every byte of its memory is.
    pub fn adopt(fd: OwnedFd, len: usize) -> io::Result<Self> {
        let mut fs = std::mem::MaybeUninit::<libc::statfs>::zeroed();
        // SAFETY: `fs` is a writable, properly sized `struct statfs`; fstatfs fills it or fails.
        if unsafe { libc::fstatfs(fd.as_raw_fd(), fs.as_mut_ptr()) } < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fstatfs succeeded (and zeroed memory is a valid statfs too).
        let fs = unsafe { fs.assume_init() };
        if fs.f_type != libc::TMPFS_MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "not a memfd or shmem file (filesystem magic {:#x})",
                    fs.f_type
                ),
            ));
        }
        let held = allocated_bytes(fd.as_fd())?;
        if held != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the file already holds {held} bytes of data; only an empty one can be adopted"
                ),
            ));
        }
        let size = std::fs::File::from(fd.try_clone()?).metadata()?.len();
        if size < len as u64 {
            // SAFETY: ftruncate on a valid descriptor has no memory-safety preconditions.
            if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Self { fd, len })
    }

    /// Maps the whole file `MAP_SHARED`, readable and writable.
    pub fn map_shared(&self) -> io::Result<Mapping> {
        Mapping::shared(self.fd.as_fd(), self.len)
    }

    /// Maps the whole file `MAP_SHARED` at `addr` exactly (`MAP_FIXED`).
    ///
    /// # Safety
    ///
    /// `[addr, addr + len)` is replaced: nothing may still use what was mapped there.
    pub unsafe fn map_shared_at(&self, addr: usize) -> io::Result<Mapping> {
        let len = self.len.max(1).next_multiple_of(page_size());
        // SAFETY: the caller vouches that the fixed range may be replaced.
        unsafe {
            Mapping::map(
                addr,
                libc::MAP_SHARED | libc::MAP_FIXED,
                self.fd.as_raw_fd(),
                len,
            )
        }
    }
}

impl AsFd for Memfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A memory mapping owned by this value and unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a mapping is plain memory reachable from every thread; the type only hands out its
// address, and synchronizing accesses is the caller's business.
unsafe impl Send for Mapping {}
// SAFETY: as above; `&Mapping` exposes no interior state besides the address.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from offset 0, shared, read/write.
    pub fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        let len = len.max(1).next_multiple_of(page_size());
        // SAFETY: without MAP_FIXED the kernel picks a free range: no existing memory changes.
        unsafe { Self::map(0, libc::MAP_SHARED, fd.as_raw_fd(), len) }
    }

    /// Maps `len` bytes of private anonymous memory (page-aligned, zeroed).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        let len = len.max(1).next_multiple_of(page_size());
        // SAFETY: without MAP_FIXED the kernel picks a free range: no existing memory changes.
        unsafe { Self::map(0, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, len) }
    }

    /// # Safety
    ///
    /// With `MAP_FIXED` in `flags`, `[addr, addr + len)` is replaced: nothing may still use it.
    unsafe fn map(
        addr: usize,
        flags: libc::c_int,
        fd: libc::c_int,
        len: usize,
    ) -> io::Result<Self> {
        // SAFETY: the caller upholds the MAP_FIXED contract; otherwise a fresh mapping at a
        // kernel-chosen address cannot alias any Rust object.
        let ptr = unsafe {
            raw_memory_calls::mmap(addr, len, libc::PROT_READ | libc::PROT_WRITE, flags, fd)
        }?;
        Ok(Self { ptr, len })
    }

    /// Start address.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Start address as an integer.
    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Length in bytes (a page multiple).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the mapping is empty (never: mappings are at least one page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `madvise(MADV_POPULATE_WRITE)` over `[offset, offset + len)`: allocates (for a file
    /// mapping, in the file) and maps every page writable in one call.
    pub fn populate_write(&self, offset: usize, len: usize) -> io::Result<()> {
        self.advise(offset, len, libc::MADV_POPULATE_WRITE)
    }

    /// `madvise(MADV_POPULATE_READ)` over `[offset, offset + len)`: maps every page readable in
    /// one call.
    pub fn populate_read(&self, offset: usize, len: usize) -> io::Result<()> {
        self.advise(offset, len, libc::MADV_POPULATE_READ)
    }

    /// `madvise(MADV_DONTFORK)` over the whole mapping: a child created by `fork` does not
    /// inherit it.
    pub fn dont_fork(&self) -> io::Result<()> {
        self.advise(0, self.len, libc::MADV_DONTFORK)
    }

    fn advise(&self, offset: usize, len: usize, advice: libc::c_int) -> io::Result<()> {
        if offset.checked_add(len).is_none_or(|end| end > self.len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "range outside the mapping",
            ));
        }
        // SAFETY: the range lies inside this mapping (checked above); the advice values used
        // here (DONTNEED on a shared mapping, POPULATE_READ/WRITE, DONTFORK) never change the data visible
        // through it.
        unsafe { raw_memory_calls::madvise(self.addr() + offset, len, advice) }
    }

    /// `madvise(MADV_DONTNEED)` over `[offset, offset + len)`: drops the page-table entries; on a
    /// shared file mapping the pages stay in the file.
    pub fn dontneed(&self, offset: usize, len: usize) -> io::Result<()> {
        self.advise(offset, len, libc::MADV_DONTNEED)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` describe a mapping this value created and still owns.
        let _ = unsafe { raw_memory_calls::munmap(self.addr(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_maps_and_punches() {
        let ps = page_size();
        let m = Memfd::new("test", 4 * ps).unwrap();
        let a = m.map_shared().unwrap();
        let b = m.map_shared().unwrap();
        // SAFETY: both mappings are 4 pages long and live; single-threaded test.
        unsafe {
            *a.as_ptr().add(ps) = 7;
            assert_eq!(*b.as_ptr().add(ps), 7);
        }
        m.punch_hole(ps, ps).unwrap();
        // SAFETY: as above.
        unsafe {
            assert_eq!(*b.as_ptr().add(ps), 0);
        }
        assert!(a.dontneed(0, 8 * ps).is_err());
    }
}
