//! [`CachedPageReader`]: reads a file's page-cache pages without reading anything ahead.
//!
//! `pread` is not enough: a read that reaches a folio the kernel marked for read-ahead starts
//! asynchronous read-ahead of the following pages, even with `POSIX_FADV_RANDOM` (measured on
//! Linux 6.18: reading 1,024 cached pages of a file this way cached 512 more). The scrubber reads
//! only cached pages and must not add to the host cache (pages it pulled in would be charged to
//! memvisor instead of the VM, outside the VM's memory limit). So the file is mapped read-only
//! with `MADV_RANDOM`, under which a page fault reads no more than the faulting page and never
//! starts read-ahead, and copied out with `process_vm_readv` on our own process, which turns an
//! access past a concurrent truncation into a short read (`EFAULT`) instead of `SIGBUS`.
//! Mapped pages cannot be dropped from the page cache, so [`CachedPageReader::unmap_pages`]
//! must run before the pages read are dropped.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

const PAGE: u64 = 4096;

/// A read-only, read-ahead-free view of the first `len` bytes of a file.
#[derive(Debug)]
pub struct CachedPageReader {
    addr: *mut libc::c_void,
    len: usize,
}

impl CachedPageReader {
    /// Maps the first `len` bytes of `file` (nothing is read yet).
    pub fn new(file: &File, len: u64) -> io::Result<Self> {
        let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        if len == 0 {
            return Ok(Self {
                addr: std::ptr::null_mut(),
                len: 0,
            });
        }
        // SAFETY: a new shared read-only mapping of our open file; it is only read through
        // process_vm_readv (faults become EFAULT, never SIGBUS) and unmapped on drop.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let reader = Self { addr, len };
        // SAFETY: `addr..addr + len` is the mapping made above; MADV_RANDOM only changes how
        // its faults read the file.
        if unsafe { libc::madvise(addr, len, libc::MADV_RANDOM) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(reader)
    }

    /// Copies bytes at `off` into `buf`; returns how many (0 at or past the mapped length, or
    /// when the file was truncated below `off`).
    pub fn read_at(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let Ok(off) = usize::try_from(off) else {
            return Ok(0);
        };
        if off >= self.len || buf.is_empty() {
            return Ok(0);
        }
        let n = buf.len().min(self.len - off);
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: n,
        };
        let remote = libc::iovec {
            // SAFETY: off < len, so the address lies inside the mapping.
            iov_base: unsafe { self.addr.cast::<u8>().add(off) }.cast(),
            iov_len: n,
        };
        // SAFETY: `local` describes `n` writable bytes of `buf`; `remote` lies within our own
        // mapping, which the kernel reads with fault handling (no SIGBUS); our own pid.
        let r = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.raw_os_error() == Some(libc::EFAULT) {
                Ok(0)
            } else {
                Err(e)
            };
        }
        Ok(r as usize)
    }

    /// Which pages of `[off, off + len)` (page-aligned `off`) are in the page cache now
    /// (`mincore` on the mapping; pages past the mapped length count as not cached). Checked
    /// right before reading, so that a page the kernel evicted since an earlier check is not
    /// faulted back in (a fault reads it, charged to memvisor).
    pub fn resident(&self, off: u64, len: u64) -> io::Result<Vec<bool>> {
        let pages = len.div_ceil(PAGE) as usize;
        let mut out = vec![false; pages];
        let Ok(off) = usize::try_from(off) else {
            return Ok(out);
        };
        if off >= self.len || pages == 0 {
            return Ok(out);
        }
        let n = (pages * PAGE as usize).min(self.len - off);
        let mut vec = vec![0u8; n.div_ceil(PAGE as usize)];
        // SAFETY: `addr + off .. + n` lies within our mapping (off is page-aligned, as
        // mincore requires); `vec` holds one byte per page of it.
        let r =
            unsafe { libc::mincore(self.addr.cast::<u8>().add(off).cast(), n, vec.as_mut_ptr()) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        for (o, v) in out.iter_mut().zip(vec) {
            *o = v & 1 != 0;
        }
        Ok(out)
    }

    /// Removes the pages read so far from the mapping (the page cache keeps them): the kernel
    /// drops no page that is mapped, so this comes before `posix_fadvise(DONTNEED)`.
    pub fn unmap_pages(&self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        // SAFETY: MADV_DONTNEED on our own shared file mapping only zaps its page-table
        // entries; nothing holds references into the mapping.
        if unsafe { libc::madvise(self.addr, self.len, libc::MADV_DONTNEED) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

impl Drop for CachedPageReader {
    fn drop(&mut self) {
        if !self.addr.is_null() {
            // SAFETY: unmapping the mapping made in `new`, which nothing else refers to.
            unsafe { libc::munmap(self.addr, self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::residency::{drop_range, resident_pages};
    use memvisor_dedup::PAGE_SIZE;
    use std::io::Write;
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    /// Residency once read-ahead in flight has landed (pages under I/O are not counted yet).
    fn settled(f: &File, len: u64) -> usize {
        let count = |v: Vec<bool>| v.into_iter().filter(|&r| r).count();
        let mut last = count(resident_pages(f, len).unwrap());
        for _ in 0..40 {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let now = count(resident_pages(f, len).unwrap());
            if now == last {
                break;
            }
            last = now;
        }
        last
    }

    /// Reads the first 2 MiB page by page (the kernel reads ahead beyond it, marking a folio
    /// for more), then every cached page again, through the reader or with `pread`; returns the
    /// pages cached before and after the second pass.
    fn reread_cached(path: &Path, with_reader: bool) -> (usize, usize) {
        let f = File::open(path).unwrap();
        drop_range(&f, 0, 0).unwrap();
        let mut page = vec![0u8; PAGE_SIZE];
        for i in 0..512u64 {
            f.read_exact_at(&mut page, i * PAGE_SIZE as u64).unwrap();
        }
        let len = f.metadata().unwrap().len();
        let before = settled(&f, len);
        let resident = resident_pages(&f, len).unwrap();
        let g = File::open(path).unwrap();
        let reader = CachedPageReader::new(&g, len).unwrap();
        for (i, _) in resident.iter().enumerate().filter(|(_, &r)| r) {
            let off = (i * PAGE_SIZE) as u64;
            if with_reader {
                assert_eq!(reader.read_at(&mut page, off).unwrap(), PAGE_SIZE);
            } else {
                g.read_exact_at(&mut page, off).unwrap();
            }
        }
        (before, settled(&g, len))
    }

    #[test]
    fn reading_cached_pages_caches_nothing_more_where_pread_reads_ahead() {
        let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..32 << 20)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        f.write_all(&data).unwrap();
        f.as_file().sync_all().unwrap();
        let (before, after) = reread_cached(f.path(), true);
        assert!(before > 512, "the first pass read ahead: {before}");
        assert_eq!(after, before, "the reader cached nothing new");
        // pread of the same pages does read ahead, so the check above can fail.
        let (before, after) = reread_cached(f.path(), false);
        assert!(after > before, "{before} -> {after}");
    }

    #[test]
    fn reads_bytes_and_stops_at_the_end_or_a_truncation() {
        let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
        let data: Vec<u8> = (0..3 * PAGE_SIZE).map(|i| (i % 253) as u8).collect();
        f.write_all(&data).unwrap();
        let reader = CachedPageReader::new(f.as_file(), data.len() as u64).unwrap();
        let mut buf = vec![0u8; 2 * PAGE_SIZE];
        assert_eq!(reader.read_at(&mut buf, 100).unwrap(), 2 * PAGE_SIZE);
        assert_eq!(buf[..], data[100..100 + 2 * PAGE_SIZE]);
        assert_eq!(
            reader.read_at(&mut buf, 2 * PAGE_SIZE as u64).unwrap(),
            PAGE_SIZE
        );
        assert_eq!(reader.read_at(&mut buf, 3 * PAGE_SIZE as u64).unwrap(), 0);
        // Truncated to one page: reading page 2 is a short read, not SIGBUS.
        f.as_file().set_len(PAGE_SIZE as u64).unwrap();
        assert_eq!(reader.read_at(&mut buf, 2 * PAGE_SIZE as u64).unwrap(), 0);
        assert_eq!(reader.read_at(&mut buf, 0).unwrap(), PAGE_SIZE);
        let empty = CachedPageReader::new(f.as_file(), 0).unwrap();
        assert_eq!(empty.read_at(&mut buf, 0).unwrap(), 0);
        empty.unmap_pages().unwrap();
    }

    #[test]
    fn resident_reports_the_page_cache_of_a_range() {
        let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
        for p in 0..4u8 {
            f.write_all(&[p; PAGE_SIZE]).unwrap();
        }
        f.as_file().sync_all().unwrap();
        let ps = PAGE_SIZE as u64;
        drop_range(f.as_file(), ps, ps).unwrap();
        let reader = CachedPageReader::new(f.as_file(), 4 * ps).unwrap();
        assert_eq!(
            reader.resident(0, 4 * ps).unwrap(),
            [true, false, true, true]
        );
        assert_eq!(reader.resident(ps, 2 * ps).unwrap(), [false, true]);
        // Past the end: not cached.
        assert_eq!(reader.resident(3 * ps, 2 * ps).unwrap(), [true, false]);
        assert_eq!(reader.resident(8 * ps, ps).unwrap(), [false]);
    }

    #[test]
    fn pages_read_can_be_dropped_after_unmap_pages() {
        let mut f = tempfile::NamedTempFile::new_in("/var/tmp").unwrap();
        for p in 0..4u8 {
            f.write_all(&[p; PAGE_SIZE]).unwrap();
        }
        f.as_file().sync_all().unwrap();
        let len = 4 * PAGE_SIZE as u64;
        let reader = CachedPageReader::new(f.as_file(), len).unwrap();
        let mut buf = vec![0u8; PAGE_SIZE];
        reader.read_at(&mut buf, PAGE_SIZE as u64).unwrap();
        assert_eq!(buf, vec![1u8; PAGE_SIZE]);
        // Mapped: DONTNEED keeps it.
        drop_range(f.as_file(), PAGE_SIZE as u64, PAGE_SIZE as u64).unwrap();
        assert!(resident_pages(f.as_file(), len).unwrap()[1]);
        reader.unmap_pages().unwrap();
        drop_range(f.as_file(), PAGE_SIZE as u64, PAGE_SIZE as u64).unwrap();
        assert!(!resident_pages(f.as_file(), len).unwrap()[1]);
    }
}
