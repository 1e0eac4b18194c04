//! [`PagesChild`]: a real child process holding given page contents in one mapping, located by
//! pid. Tests of the scanner and of the scrubber (and the benchmark) scan it like a guest.
//!
//! The child is forked and only makes async-signal-safe system calls (the parent may have other
//! threads): it maps memory, copies the contents in (so it has its own frames), reports the
//! address through a pipe, and waits until the parent closes the other pipe (or dies).

use std::ffi::CString;
use std::io;

use crate::PAGE_SIZE;

/// How the child's memory is backed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildBacking {
    /// A private anonymous mapping.
    Anonymous,
    /// A shared mapping of a memfd with this name (QEMU names its guest RAM memfd
    /// `memory-backend-memfd`).
    Memfd(String),
}

/// A forked child holding pages; killed and reaped on drop.
#[derive(Debug)]
pub struct PagesChild {
    pid: i32,
    address: u64,
    len: usize,
    release: libc::c_int,
    reaped: bool,
}

fn pipe() -> io::Result<[libc::c_int; 2]> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a writable array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fds)
}

impl PagesChild {
    /// Forks a child holding `contents` (a multiple of the page size) in anonymous memory.
    pub fn spawn(contents: &[u8]) -> io::Result<Self> {
        Self::spawn_with(contents, ChildBacking::Anonymous)
    }

    /// Forks a child holding `contents` with the given backing.
    pub fn spawn_with(contents: &[u8], backing: ChildBacking) -> io::Result<Self> {
        Self::spawn_as(contents, backing, None)
    }

    /// Forks a child holding `contents` with the given backing, running as user and group
    /// `uid` if given (needs root; the child stays dumpable, so processes of that user may read
    /// it).
    pub fn spawn_as(contents: &[u8], backing: ChildBacking, uid: Option<u32>) -> io::Result<Self> {
        let len = contents.len();
        if len == 0 || len % PAGE_SIZE != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{len} bytes is not a positive multiple of the page size"),
            ));
        }
        let memfd_name = match &backing {
            ChildBacking::Anonymous => None,
            ChildBacking::Memfd(n) => Some(
                CString::new(n.as_str())
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?,
            ),
        };
        let report = pipe()?;
        let release = pipe()?;
        // SAFETY: fork has no memory-safety preconditions; the child below only makes
        // async-signal-safe system calls and leaves with _exit.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: the child: raw system calls on descriptors and memory it owns; `contents`
            // and `memfd_name` are the parent's (copy-on-write) data, read only.
            unsafe { child(contents, memfd_name.as_deref(), uid, report[1], release[0]) }
        }
        // SAFETY: closing the child's ends in the parent; the descriptors are ours.
        unsafe {
            libc::close(report[1]);
            libc::close(release[0]);
        }
        let mut addr = [0u8; 8];
        let mut got = 0;
        while got < 8 {
            // SAFETY: reading into the live, writable `addr` buffer.
            let r = unsafe { libc::read(report[0], addr[got..].as_mut_ptr().cast(), 8 - got) };
            if r <= 0 {
                break;
            }
            got += r as usize;
        }
        // SAFETY: our descriptor.
        unsafe { libc::close(report[0]) };
        let mut me = Self {
            pid,
            address: u64::from_ne_bytes(addr),
            len,
            release: release[1],
            reaped: false,
        };
        if got < 8 || me.address == u64::MAX {
            me.kill();
            return Err(io::Error::other("the child could not map its memory"));
        }
        Ok(me)
    }

    /// The child's pid.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Address of the pages in the child.
    pub fn address(&self) -> u64 {
        self.address
    }

    /// Length of the pages.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the child holds no pages (never: spawning needs at least one).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Overwrites the child's page `index` with `page` (`process_vm_writev`; needs the right to
    /// ptrace the child, which its parent has).
    pub fn write_page(&self, index: usize, page: &[u8]) -> io::Result<()> {
        if page.len() != PAGE_SIZE || (index + 1) * PAGE_SIZE > self.len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "page {index} of {} bytes is outside the child's memory",
                    page.len()
                ),
            ));
        }
        let local = libc::iovec {
            iov_base: page.as_ptr() as *mut libc::c_void,
            iov_len: PAGE_SIZE,
        };
        let remote = libc::iovec {
            iov_base: (self.address as usize + index * PAGE_SIZE) as *mut libc::c_void,
            iov_len: PAGE_SIZE,
        };
        // SAFETY: `local` describes the live `page` (only read); the kernel validates the
        // remote range against the child's address space.
        let r = unsafe { libc::process_vm_writev(self.pid, &local, 1, &remote, 1, 0) };
        if r != PAGE_SIZE as isize {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Kills the child (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        if self.reaped {
            return;
        }
        // SAFETY: signalling and reaping our own child; `status` is a writable int.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(self.pid, &mut status, 0);
            libc::close(self.release);
        }
        self.reaped = true;
    }
}

impl Drop for PagesChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The child's whole life.
///
/// # Safety
/// Called only in a freshly forked child; never returns.
unsafe fn child(
    contents: &[u8],
    memfd_name: Option<&std::ffi::CStr>,
    uid: Option<u32>,
    report: libc::c_int,
    release: libc::c_int,
) -> ! {
    let len = contents.len();
    // SAFETY: (the whole body) raw system calls on memory and descriptors this process owns.
    unsafe {
        if let Some(uid) = uid {
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setresgid(uid, uid, uid) < 0
                || libc::setresuid(uid, uid, uid) < 0
            {
                libc::_exit(1);
            }
            libc::prctl(libc::PR_SET_DUMPABLE, 1);
        }
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // Keep only stdio and the two pipe ends: a forked child inherits every descriptor of
        // the (multi-threaded) test process, including other tests' image files, which a
        // scrubber would then discover as this "VM's" disk images, and other children's
        // release pipes, which would keep those children alive.
        let (lo, hi) = (
            report.min(release) as libc::c_uint,
            report.max(release) as libc::c_uint,
        );
        for (first, last) in [
            (3, lo.wrapping_sub(1)),
            (lo + 1, hi - 1),
            (hi + 1, libc::c_uint::MAX),
        ] {
            if first <= last {
                libc::syscall(libc::SYS_close_range, first, last, 0);
            }
        }
        let p = match memfd_name {
            None => libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ),
            Some(name) => {
                let fd = libc::memfd_create(name.as_ptr(), 0);
                if fd < 0 || libc::ftruncate(fd, len as libc::off_t) < 0 {
                    libc::MAP_FAILED
                } else {
                    libc::mmap(
                        std::ptr::null_mut(),
                        len,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_SHARED,
                        fd,
                        0,
                    )
                }
            }
        };
        let addr: u64 = if p == libc::MAP_FAILED {
            u64::MAX
        } else {
            std::ptr::copy_nonoverlapping(contents.as_ptr(), p.cast::<u8>(), len);
            p as u64
        };
        let bytes = addr.to_ne_bytes();
        libc::write(report, bytes.as_ptr().cast(), 8);
        let mut b = 0u8;
        // Blocks until the parent closes its end (or exits).
        while libc::read(release, (&mut b as *mut u8).cast(), 1) > 0 {}
        libc::_exit(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the child's descriptors above stdio point to.
    fn open_descriptors(pid: i32) -> Vec<String> {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
                    > 2
            })
            .map(|p| std::fs::read_link(p).unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn the_child_holds_none_of_the_parents_files() {
        let path = std::env::temp_dir()
            .join(format!("pages-child-fds-{}", std::process::id()))
            .display()
            .to_string();
        let file = std::fs::File::create(&path).unwrap();
        let first = PagesChild::spawn(&[7u8; PAGE_SIZE]).unwrap();
        let second =
            PagesChild::spawn_with(&[8u8; PAGE_SIZE], ChildBacking::Memfd("guest".into())).unwrap();
        for child in [&first, &second] {
            let fds = open_descriptors(child.pid());
            assert!(!fds.contains(&path), "{fds:?}");
            // Its two pipe ends and its own memfd: nothing else.
            assert!(
                fds.iter()
                    .all(|f| f.starts_with("pipe:") || f.starts_with("/memfd:guest")),
                "{fds:?}"
            );
            assert!(fds.len() <= 3, "{fds:?}");
        }
        drop(file);
        std::fs::remove_file(&path).unwrap();
    }
}
