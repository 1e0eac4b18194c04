//! What each interposed call does: decide whether the range is managed, act on the regions,
//! and hand everything else to the kernel unchanged.

use std::sync::atomic::Ordering;

use libc::{c_int, c_void, off_t, size_t};

use crate::managed_process::{self as mp, FixedKind, ACTIVE, MIN_REGION};
use crate::raw_calls::{self as real, set_errno};
use crate::reservations::{Claim, Reservations};
use crate::shim_guard::{gets_no_managed_memory, ShimGuard};

/// The program's untouched `PROT_NONE` reservations (see [`crate::reservations`]).
static RESERVATIONS: Reservations = Reservations::new();

/// QEMU's guest-RAM memfd, as `/proc/self/fd/N` names it.
const GUEST_MEMFD_LINK: &[u8] = b"/memfd:memory-backend-memfd";
/// Any memfd, as `/proc/self/fd/N` names it.
const MEMFD_LINK: &[u8] = b"/memfd:";

/// `len` rounded up to whole pages (the largest page multiple if that overflows: the kernel
/// refuses such a length anyway).
fn page_round(len: usize) -> usize {
    let page = memvisor_pager::page_size();
    len.checked_next_multiple_of(page)
        .unwrap_or(usize::MAX / page * page)
}

/// The first bytes of `fd`'s `/proc/self/fd` link (enough to tell a memfd's name), read into
/// `link`; the returned length is 0 if it cannot be read. Does not allocate.
fn fd_link(fd: c_int, link: &mut [u8; 64]) -> usize {
    let mut path = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0\0";
    let mut n = fd as u32;
    let mut digits = [0u8; 10];
    let mut k = 0;
    loop {
        digits[k] = b'0' + (n % 10) as u8;
        k += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for i in 0..k {
        path[14 + i] = digits[k - 1 - i];
    }
    // SAFETY: `path` is NUL-terminated; readlink writes at most `link.len()` bytes.
    let r = unsafe { libc::readlink(path.as_ptr().cast(), link.as_mut_ptr().cast(), link.len()) };
    r.max(0) as usize
}

/// Whether `fd` is a regular file on tmpfs, open for reading and writing, that holds no data
/// yet and is at least `len` bytes long: guest RAM a region can adopt without changing what
/// the program sees (QEMU's `memory-backend-file` with `mem-path` on `/dev/shm`). A file with
/// data, on another filesystem, or opened read-only is not. Raw system calls into stack
/// buffers: does not allocate.
fn is_empty_tmpfs_file(fd: c_int, len: usize) -> bool {
    // SAFETY: F_GETFL takes no argument and returns the status flags or -1.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if fl < 0 || fl & libc::O_ACCMODE != libc::O_RDWR {
        return false;
    }
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: `fs` is a writable, properly sized `struct statfs`; fstatfs fills it or fails.
    if unsafe { libc::fstatfs(fd, fs.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstatfs succeeded (and zeroed memory is a valid statfs too).
    let fs = unsafe { fs.assume_init() };
    if fs.f_type != libc::TMPFS_MAGIC {
        return false;
    }
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    // SAFETY: `st` is a writable, properly sized `struct stat`; fstat fills it or fails.
    if unsafe { libc::fstat(fd, st.as_mut_ptr()) } != 0 {
        return false;
    }
    // SAFETY: fstat succeeded (and zeroed memory is a valid stat too).
    let st = unsafe { st.assume_init() };
    st.st_mode & libc::S_IFMT == libc::S_IFREG
        && st.st_blocks == 0
        && u64::try_from(st.st_size).is_ok_and(|size| size >= len as u64)
}

/// Which guest RAM a `MAP_SHARED` read-write mapping of `fd` at offset 0 for `len` bytes is:
/// QEMU's `memory-backend-memfd` memfd, an empty tmpfs file in QEMU
/// ([`is_empty_tmpfs_file`]; other memfds, and other programs' shared tmpfs files, which other
/// processes may map too, are not), or neither. Does not allocate.
fn guest_ram_kind(fd: c_int, len: usize) -> Option<FixedKind> {
    let mut link = [0u8; 64];
    let n = fd_link(fd, &mut link);
    let link = &link[..n];
    if link.starts_with(GUEST_MEMFD_LINK) {
        Some(FixedKind::GuestMemfd)
    } else if mp::PROGRAM_IS_QEMU.load(Ordering::Acquire)
        && !link.starts_with(MEMFD_LINK)
        && is_empty_tmpfs_file(fd, len)
    {
        Some(FixedKind::GuestFile)
    } else {
        None
    }
}

/// `mmap`.
///
/// # Safety
///
/// As `mmap(2)`.
pub unsafe fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    // SAFETY: the program's own arguments, passed on as given.
    let pass = || unsafe { real::mmap(addr, len, prot, flags, fd, off) };
    if !ACTIVE.load(Ordering::Acquire) || len == 0 {
        return pass();
    }
    let Some(_guard) = ShimGuard::enter() else {
        return pass();
    };
    let a = addr as usize;
    let fixed = flags & libc::MAP_FIXED != 0;
    let map_type = flags & 0x0f;
    let private = map_type == libc::MAP_PRIVATE;
    let shared = map_type == libc::MAP_SHARED || map_type == libc::MAP_SHARED_VALIDATE;
    let anonymous = flags & libc::MAP_ANONYMOUS != 0;
    if fixed || flags & libc::MAP_FIXED_NOREPLACE != 0 {
        // Whatever is mapped over a reservation (or next to it) makes it used.
        RESERVATIONS.forget(a, page_round(len));
    }
    if prot == libc::PROT_NONE
        && mp::RESERVATIONS.load(Ordering::Acquire)
        && private
        && anonymous
        && !fixed
        && len >= MIN_REGION.load(Ordering::Acquire)
        && flags & (libc::MAP_HUGETLB | libc::MAP_GROWSDOWN | libc::MAP_STACK) == 0
        && !gets_no_managed_memory()
    {
        let p = pass();
        if p != libc::MAP_FAILED {
            RESERVATIONS.record(p as usize, page_round(len));
        }
        return p;
    }
    if fixed {
        let (over, n) = mp::managed_overlaps(a, page_round(len));
        if n > 0 {
            // MAP_FIXED over managed memory: only fresh private anonymous memory over one
            // managed range can be honoured (the range is discarded and reprotected), and
            // executable only over a code region (mapped executable already).
            let whole = n == 1 && over[0].0 == a && over[0].1 == page_round(len);
            let result = if !(anonymous && private && whole) {
                Err(libc::ENOMEM)
            } else {
                match over[0].2 {
                    None if prot & libc::PROT_EXEC != 0 => Err(libc::ENOMEM),
                    None => mp::arena_remap_fixed(a, page_round(len), prot),
                    Some(slot) => mp::fixed_remap_fixed(slot, a, page_round(len), prot),
                }
            };
            return match result {
                Ok(()) => addr,
                Err(e) => {
                    mp::note_unmanaged(
                        len,
                        "MAP_FIXED over managed memory that is not plain anonymous memory",
                    );
                    set_errno(e);
                    libc::MAP_FAILED
                }
            };
        }
    }
    if len < MIN_REGION.load(Ordering::Acquire)
        || prot != libc::PROT_READ | libc::PROT_WRITE
        || flags & (libc::MAP_HUGETLB | libc::MAP_GROWSDOWN | libc::MAP_STACK) != 0
        || flags & libc::MAP_FIXED_NOREPLACE != 0
        || gets_no_managed_memory()
    {
        return pass();
    }
    let managed = if anonymous && private && !fixed {
        mp::arena_map(len)
    } else if anonymous && private && fixed {
        mp::fixed_map(Some(a), len, FixedKind::FixedAnonymous, None)
    } else if !anonymous && shared && fd >= 0 && off == 0 {
        guest_ram_kind(fd, len)
            .and_then(|kind| mp::fixed_map(fixed.then_some(a), len, kind, Some(fd)))
    } else {
        None
    };
    match managed {
        Some(p) => p as *mut c_void,
        None => pass(),
    }
}

/// Applies `managed` to the managed parts of `[a, a + len)` and `unmanaged` to the rest.
fn split(
    a: usize,
    len: usize,
    mut managed: impl FnMut(usize, usize, Option<usize>) -> Result<(), c_int>,
    mut unmanaged: impl FnMut(usize, usize) -> c_int,
) -> c_int {
    let (over, n) = mp::managed_overlaps(a, len);
    let mut at = a;
    let mut result = Ok(());
    let mut note = |r: Result<(), c_int>| {
        if let Err(e) = r {
            result = Err(e);
        }
    };
    for &(s, l, owner) in &over[..n] {
        if s > at {
            let r = unmanaged(at, s - at);
            note(if r == 0 { Ok(()) } else { Err(errno()) });
        }
        note(managed(s, l, owner));
        at = s + l;
    }
    if a + len > at {
        let r = unmanaged(at, a + len - at);
        note(if r == 0 { Ok(()) } else { Err(errno()) });
    }
    match result {
        Ok(()) => 0,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// `munmap`.
///
/// # Safety
///
/// As `munmap(2)`.
pub unsafe fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    // SAFETY: the program's own arguments, passed on as given.
    let pass = || unsafe { real::munmap(addr, len) };
    let a = addr as usize;
    if !ACTIVE.load(Ordering::Acquire) || len == 0 || a % memvisor_pager::page_size() != 0 {
        return pass();
    }
    RESERVATIONS.forget(a, page_round(len));
    // No reentrancy bypass here (nor in madvise and mremap): whoever unmaps managed memory,
    // the regions must know, or the kernel would punch holes into their mappings.
    if mp::managed_overlaps(a, page_round(len)).1 == 0 {
        return pass();
    }
    split(
        a,
        page_round(len),
        |s, l, owner| match owner {
            None => mp::arena_unmap(s, l),
            Some(slot) => mp::fixed_unmap(slot, s, l),
        },
        // SAFETY: an unmanaged part of the program's range.
        |s, l| unsafe { real::munmap(s as *mut c_void, l) },
    )
}

/// `madvise`.
///
/// # Safety
///
/// As `madvise(2)`.
pub unsafe fn madvise(addr: *mut c_void, len: size_t, advice: c_int) -> c_int {
    // SAFETY: the program's own arguments, passed on as given.
    let pass = || unsafe { real::madvise(addr, len, advice) };
    let a = addr as usize;
    if !ACTIVE.load(Ordering::Acquire) || len == 0 || a % memvisor_pager::page_size() != 0 {
        return pass();
    }
    const MADV_DONTNEED_LOCKED: c_int = 24;
    let discard = matches!(
        advice,
        libc::MADV_DONTNEED | libc::MADV_REMOVE | libc::MADV_FREE | MADV_DONTNEED_LOCKED
    );
    let keep_dontfork = advice == libc::MADV_DOFORK;
    if !discard && !keep_dontfork {
        return pass();
    }
    if mp::managed_overlaps(a, page_round(len)).1 == 0 {
        return pass();
    }
    split(
        a,
        page_round(len),
        |s, l, owner| {
            if keep_dontfork {
                // Managed memory stays MADV_DONTFORK: a child must not see it without the pager.
                return Ok(());
            }
            match owner {
                None => mp::arena_advise_discard(s, l),
                Some(slot) => mp::fixed_advise(slot, s, l, advice),
            }
        },
        // SAFETY: an unmanaged part of the program's range.
        |s, l| unsafe { real::madvise(s as *mut c_void, l, advice) },
    )
}

/// `mremap`.
///
/// # Safety
///
/// As `mremap(2)`; `new_addr` is only read with `MREMAP_FIXED`.
pub unsafe fn mremap(
    old: *mut c_void,
    old_len: size_t,
    new_len: size_t,
    flags: c_int,
    new_addr: *mut c_void,
) -> *mut c_void {
    // SAFETY: the program's own arguments, passed on as given.
    let pass = || unsafe { real::mremap(old, old_len, new_len, flags, new_addr) };
    if !ACTIVE.load(Ordering::Acquire) {
        return pass();
    }
    let o = old as usize;
    RESERVATIONS.forget(o, page_round(old_len.max(1)));
    if flags & libc::MREMAP_FIXED != 0 {
        RESERVATIONS.forget(new_addr as usize, page_round(new_len));
    }
    let fixed = flags & (libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP) != 0;
    let (over, n) = mp::managed_overlaps(o, page_round(old_len.max(1)));
    let target_managed = flags & libc::MREMAP_FIXED != 0
        && mp::managed_overlaps(new_addr as usize, page_round(new_len)).1 > 0;
    if n == 0 && !target_managed {
        return pass();
    }
    let in_arena =
        n == 1 && over[0].2.is_none() && over[0].0 == o && over[0].1 == page_round(old_len);
    let result = if !in_arena || fixed || target_managed || old_len == 0 {
        // Moving managed memory elsewhere, or over it, is not supported.
        Err(libc::EINVAL)
    } else {
        mp::arena_remap(o, old_len, new_len, flags & libc::MREMAP_MAYMOVE != 0)
    };
    match result {
        Ok(p) => p as *mut c_void,
        Err(e) => {
            set_errno(e);
            libc::MAP_FAILED
        }
    }
}

/// `mprotect`: a range of an untouched reservation made read-write or read-write-execute in
/// one call of at least `--min-region` becomes a region ([`mp::reserved_map`]; the rest of a
/// reservation a range made read-write-execute lies in stays one, for the next slice of a
/// code buffer made accessible in slices); everything
/// else goes to the kernel unchanged, on managed memory too (an `mprotect` of part of a
/// region splits its mapping, and the pager's fills of whole chunks do not cross such a
/// split: see the crate's README).
///
/// # Safety
///
/// As `mprotect(2)`.
pub unsafe fn mprotect(addr: *mut c_void, len: size_t, prot: c_int) -> c_int {
    // SAFETY: the program's own arguments, passed on as given.
    let pass = || unsafe { real::mprotect(addr, len, prot) };
    let a = addr as usize;
    if !ACTIVE.load(Ordering::Acquire) || len == 0 || a % memvisor_pager::page_size() != 0 {
        return pass();
    }
    let len = page_round(len);
    let rw = libc::PROT_READ | libc::PROT_WRITE;
    let large = len >= MIN_REGION.load(Ordering::Acquire);
    // Forgets the reservations the range meets, whatever happens next; but for a large range
    // made executable, what follows it in its reservation (the next slices of a code buffer
    // made accessible in slices, TCG with several vCPUs).
    let claim = RESERVATIONS.claim(a, len, large && prot == rw | libc::PROT_EXEC);
    if claim == Claim::Untouched
        && (prot == rw || prot == rw | libc::PROT_EXEC)
        && large
        && !gets_no_managed_memory()
    {
        if let Some(_guard) = ShimGuard::enter() {
            if mp::reserved_map(a, len, prot) {
                return 0;
            }
        }
    }
    pass()
}

/// `pkey_mprotect`: forgets the reservations the range meets (a range made accessible this
/// way may hold data), then the kernel does the call.
///
/// # Safety
///
/// As `pkey_mprotect(2)`.
pub unsafe fn pkey_mprotect(addr: *mut c_void, len: size_t, prot: c_int, pkey: c_int) -> c_int {
    if ACTIVE.load(Ordering::Acquire) && len > 0 {
        RESERVATIONS.forget(addr as usize, page_round(len));
    }
    // SAFETY: the program's own arguments, passed on as given.
    let r = unsafe { libc::syscall(libc::SYS_pkey_mprotect, addr, len, prot, pkey) };
    r as c_int
}
