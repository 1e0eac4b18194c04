//! [`use_library_arena`]: where the program's `malloc` is jemalloc, the library's threads
//! allocate from a jemalloc arena of their own.
//!
//! Why: the library's Rust code has a heap of its own (`shim_allocator`), but some glibc
//! calls its threads make allocate with the program's `malloc` (`opendir`, the thread-local
//! storage of a new thread). With jemalloc preloaded after this library (`memvisor run
//! --malloc jemalloc`), the program's heap is managed memory: jemalloc maps it through the
//! interposed `mmap`. jemalloc's arenas are shared by threads, so a fault-handler thread could
//! be handed a block in a page it has evicted itself, and wait for itself. An arena used only
//! by the library's threads is mapped only by them, and no mapping a library thread makes is
//! managed (`shim_guard::gets_no_managed_memory`): the library's threads never touch managed
//! memory through `malloc` once bound. Before that, a thread's first `mallctl` sets up its
//! jemalloc state, whose thread-cache array comes from arena 0 (the program's), and jemalloc's
//! own metadata blocks that program threads map are managed like the rest: a library thread
//! can still touch program memory there, served by the arena's handler, whose threads start
//! before anything is managed (`crates/preload/README.md`, known gaps).
//!
//! jemalloc is recognised by its `mallctl` entry point; any other `malloc` (glibc's, whose
//! mappings the library cannot see and never manages) needs nothing.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

/// jemalloc's `mallctl(name, oldp, oldlenp, newp, newlen)`.
type Mallctl =
    unsafe extern "C" fn(*const c_char, *mut c_void, *mut usize, *mut c_void, usize) -> c_int;

/// The library's arena: `None` once known that there is none (no jemalloc, or it refused).
static ARENA: OnceLock<Option<(Mallctl, u32)>> = OnceLock::new();

/// The program's jemalloc `mallctl`, if its `malloc` is jemalloc's.
fn find_mallctl() -> Option<Mallctl> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only looks a symbol up.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallctl".as_ptr()) };
    if f.is_null() {
        return None;
    }
    // SAFETY: a symbol named `mallctl` in a process whose allocator is jemalloc is jemalloc's
    // control entry point, whose C signature `Mallctl` spells out.
    Some(unsafe { std::mem::transmute::<*mut c_void, Mallctl>(f) })
}

/// Whether the program's `malloc` is jemalloc (its `mallctl` is there).
pub fn program_malloc_is_jemalloc() -> bool {
    find_mallctl().is_some()
}

/// Creates the library's arena (`arenas.create`), returning its index.
fn create_arena(ctl: Mallctl) -> Option<u32> {
    let mut index: u32 = 0;
    let mut len = std::mem::size_of::<u32>();
    let name: &CStr = c"arenas.create";
    // SAFETY: `arenas.create` writes an unsigned (u32) index into `index`, whose size `len`
    // gives; no new value is passed.
    let r = unsafe {
        ctl(
            name.as_ptr(),
            (&mut index as *mut u32).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (r == 0).then_some(index)
}

/// Binds the calling thread to the library's arena, creating it on first use, and turns its
/// thread cache off (the cache held blocks of the program's arenas, and its arrays live in
/// arena 0; the library's threads allocate little, so the cache is not missed). Does nothing
/// unless the program's `malloc` is jemalloc. Call it first thing on every thread the library
/// starts, after `shim_guard::mark_library_thread` (the arena's first mapping is then the
/// kernel's).
pub fn use_library_arena() {
    let Some((ctl, mut index)) = *ARENA.get_or_init(|| {
        let ctl = find_mallctl()?;
        Some((ctl, create_arena(ctl)?))
    }) else {
        return;
    };
    // SAFETY: `thread.arena` takes an unsigned (u32) arena index.
    if unsafe { write_setting(ctl, c"thread.arena", &mut index) } == 0 {
        // Turning the thread's cache off flushes it, and a library thread then never touches
        // the cache's own arrays (allocated from arena 0, the program's).
        // SAFETY: `thread.tcache.enabled` takes a bool (one byte).
        unsafe { write_setting(ctl, c"thread.tcache.enabled", &mut false) };
    }
}

/// Writes `value` to jemalloc's setting `name` through `ctl`, reading nothing back; jemalloc's
/// result (0 on success).
///
/// # Safety
///
/// `T` must be the C type jemalloc takes for `name`.
unsafe fn write_setting<T>(ctl: Mallctl, name: &CStr, value: &mut T) -> c_int {
    // SAFETY: `name` is NUL-terminated; `value` is a live `T` of the size passed, the type the
    // caller promises jemalloc reads for `name`; no old value is asked for.
    unsafe {
        ctl(
            name.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (value as *mut T).cast(),
            std::mem::size_of::<T>(),
        )
    }
}

/// Whether the library's threads have an arena of their own (the program's `malloc` is
/// jemalloc and it made one).
#[cfg(test)]
fn has_library_arena() -> bool {
    ARENA.get().is_some_and(|a| a.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test binary's `malloc` is glibc's: no `mallctl`, nothing to bind, and no failure.
    #[test]
    fn without_jemalloc_nothing_is_bound() {
        assert!(find_mallctl().is_none());
        assert!(!program_malloc_is_jemalloc());
        use_library_arena();
        assert!(!has_library_arena());
    }
}
