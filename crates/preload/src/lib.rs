//! `libmemvisor_preload.so`: puts an unmodified program's large memory under the memvisor
//! pager. `memvisor run` loads it with `LD_PRELOAD` and configures it through the environment
//! (`memvisor_control::launch_env`).
//!
//! The library interposes `mmap`/`mmap64`, `munmap`, `madvise`, `mprotect` and `mremap`
//! ([`entry_points`]); the memory calls it makes itself are raw system calls, as are the
//! pager's. What it manages ([`managed_process`] has the details and the budget rule):
//!
//! * every private anonymous read-write mapping of at least `--min-region` bytes, carved in
//!   whole chunks from one large *arena* region (sparse memfd, sparse swap): one budget, one
//!   fault-handler thread, one policy for all of them;
//! * a private anonymous read-write `MAP_FIXED` mapping of at least `--min-region` outside the
//!   arena (QEMU's plain guest RAM over its `PROT_NONE` reservation): a region at that address;
//! * a shared mapping of QEMU's `memory-backend-memfd` memfd: a region adopting the memfd;
//! * in QEMU (a program named `qemu-system-*` or `qemu-kvm`), a `MAP_SHARED` read-write
//!   mapping, at offset 0 and of at least `--min-region` bytes, of a regular file on tmpfs that is open read-write, at least as long as the mapping and holds
//!   no data yet (`st_blocks` 0): QEMU's `-object memory-backend-file,mem-path=/dev/shm/...,
//!   share=on` (needed for `x-ignore-shared` live migration from QEMU 8.1 on). A region adopts
//!   the file (status kind `guest-file`); its pages out of memory are holes in the file, so
//!   nothing else may use the file meanwhile (another process mapping it, `read` of it, or its
//!   content after the process ends sees zeros there).
//!
//! * in any program, a range of an untouched `PROT_NONE` private anonymous reservation of at
//!   least `--min-region` that one `mprotect` makes read-write or read-write-execute (QEMU's
//!   TCG translated-code buffer, status kind `code`): a region at that address
//!   ([`reservations`]).
//!
//! Never managed: mappings below the threshold, `PROT_NONE` reservations (until made
//! accessible as above), executable mappings made by `mmap`, private or read-only file mappings, shared mappings of files with
//! data, of files on other filesystems than tmpfs, of tmpfs files in programs other than QEMU
//! (`shm_open` segments other processes share), or of memfds other than QEMU's guest-RAM
//! memfd, stacks, huge-page mappings, and anything a pager thread maps.
//!
//! Consistency: `munmap` of managed memory discards it (it reads as zeros if mapped again) and
//! returns whole chunks to the arena; `madvise(MADV_DONTNEED | MADV_REMOVE | MADV_FREE)`
//! discards (on guest RAM, a shared mapping, as the kernel: `MADV_REMOVE` discards,
//! `MADV_DONTNEED` keeps the content, `MADV_FREE` is `EINVAL`); `mremap` shrinks in place, grows in place when the following chunks are free, or
//! moves (copying) with `MREMAP_MAYMOVE`, and refuses `MREMAP_FIXED`/`MREMAP_DONTUNMAP` with
//! `EINVAL`; `MAP_FIXED` of private anonymous memory over managed memory discards and
//! reprotects it, any other mapping over it fails with `ENOMEM`. Managed memory is
//! `MADV_DONTFORK` (`MADV_DOFORK` on it is ignored): a forked child does not see it, and the
//! library is inactive in the child. The library removes itself from `LD_PRELOAD` (and the
//! `MEMVISOR_*` variables) at start, so exec'd children run unmanaged unless
//! `memvisor run --manage-children` asked otherwise.
//!
//! Disk-image I/O (VSwapper's swap mapper and false-read preventer, [`image_io`]): positional
//! reads of a regular file straight into a fixed region (QEMU's worker threads read disk
//! images into guest RAM) skip reading pages from swap that the read overwrites whole, and
//! associate those pages with their image blocks, so evicting them writes nothing and paging
//! them in reads the image; writes, hole punches, truncations and copies into such a file
//! first keep the pages' content ([`image_entry_points`]). Asynchronous disk I/O (QEMU's
//! `aio=native` and `aio=io_uring`) is read at submission ([`aio_entry_points`],
//! [`uring_entry_points`]) and followed to its completion in the kernel's rings: reads into
//! managed memory are pinned until then. A hole punched in the guest-RAM
//! memfd (virtio-balloon) is a discard through the pager. `memvisor run --swap-mapper off`
//! turns this off.
//!
//! Each managed process serves a control socket (`memvisor_control`). The library's own heap
//! is separate from the program's `malloc` (`shim_allocator`), because the program's allocator
//! calls the interposed functions while holding its locks.

pub mod aio_entry_points;
mod aio_in_flight;
mod allotment_watcher;
pub mod arena_allocator;
pub mod budget_split;
pub mod code_allotment;
mod credential_mirror;
mod direct_io_reads;
pub mod entry_points;
pub mod image_entry_points;
pub mod image_io;
mod interposer;
mod library_init;
mod library_malloc_arena;
pub mod managed_process;
mod migration_service;
mod pager_worker;
pub mod preload_config;
mod preload_error;
mod raw_calls;
pub mod reservations;
mod shim_allocator;
mod shim_guard;
pub mod uring_entry_points;

/// Every allocation of the library's Rust code (std and the pager included) comes from its own
/// heap, never from the program's `malloc` (see [`shim_allocator`]).
#[cfg(not(test))]
#[global_allocator]
static LIBRARY_HEAP: shim_allocator::ShimAllocator = shim_allocator::ShimAllocator;

pub use library_init::SETUP_FAILURE_STATUS;
pub use preload_config::PreloadConfig;
pub use preload_error::PreloadError;
