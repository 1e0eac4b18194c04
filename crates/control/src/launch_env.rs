//! Environment variables through which `memvisor run` configures the preload library in the
//! program it starts. Values are plain decimal bytes, paths, or policy specs.

/// Process budget in bytes (its presence switches the preload library on).
pub const BUDGET: &str = "MEMVISOR_BUDGET";
/// Policy spec.
pub const POLICY: &str = "MEMVISOR_POLICY";
/// Swap directory.
pub const SWAP_DIR: &str = "MEMVISOR_SWAP_DIR";
/// Smallest anonymous mapping managed, bytes.
pub const MIN_REGION: &str = "MEMVISOR_MIN_REGION";
/// Virtual size of the arena anonymous mappings are carved from, bytes.
pub const ARENA_SIZE: &str = "MEMVISOR_ARENA_SIZE";
/// Largest arena: a quarter of the 47-bit user address space (`memvisor run --arena` and the
/// library's reading of [`ARENA_SIZE`] both hold to it).
pub const MAX_ARENA_BYTES: u64 = 32 << 40;
/// Largest chunk (`memvisor run --chunk-size`, the library's reading of [`CHUNK_SIZE`], and
/// what the broker believes of a process's answer).
pub const MAX_CHUNK_BYTES: u64 = 64 << 20;
/// Directory of control sockets (also read by `memvisor stat/top/set`).
pub const CONTROL_DIR: &str = "MEMVISOR_CONTROL_DIR";
/// `1`: children that exec are managed too (the variables are left in the environment).
pub const MANAGE_CHILDREN: &str = "MEMVISOR_MANAGE_CHILDREN";
/// Paging unit (chunk) of every region, bytes: a multiple of the page size (default 1 MiB).
pub const CHUNK_SIZE: &str = "MEMVISOR_CHUNK_SIZE";
/// Adaptive busy-polling window of every region's fault handler, microseconds (0: off;
/// absent: the pager's default, 200).
pub const BUSY_POLL_US: &str = "MEMVISOR_BUSY_POLL_US";
/// Whether every region's fault handler asks that idle CPUs poll while it busy-polls (CPU
/// latency QoS): `on` (default) or `off`.
pub const CPU_WAKE_LATENCY: &str = "MEMVISOR_CPU_WAKE_LATENCY";
/// What a region does when its swap filesystem is full: `overrun` (default) or `fail`.
pub const ON_SWAP_FULL: &str = "MEMVISOR_ON_SWAP_FULL";
/// Swap mapper and false-read preventer for reads of disk images into guest RAM: `on`
/// (default) or `off`.
pub const SWAP_MAPPER: &str = "MEMVISOR_SWAP_MAPPER";
/// Address-space reservations made accessible by one `mprotect` (QEMU's TCG translated-code
/// buffer) managed under the budget: `on` (default) or `off`.
pub const RESERVATIONS: &str = "MEMVISOR_RESERVATIONS";
/// What the library does with the host page cache of the disk images the program reads into
/// guest RAM: `default` (nothing) or `exclusive` (blocks the guest holds are dropped, let back
/// in when memvisor evicts them); checked by `memvisor_pager::HostCache`'s parser.
pub const HOST_CACHE: &str = "MEMVISOR_HOST_CACHE";
/// Limit on the host page cache of each disk image the program reads into guest RAM, in bytes
/// (`memvisor run --image-cache`; absent: no limit); checked by
/// [`SetRules::check_image_cache`](crate::SetRules::check_image_cache).
pub const IMAGE_CACHE: &str = "MEMVISOR_IMAGE_CACHE";
/// Live migration destination: the `IP:PORT` the process listens on for a source's memory
/// (`memvisor run --migration-listen`).
pub const MIGRATION_LISTEN: &str = "MEMVISOR_MIGRATION_LISTEN";
/// Live migration destination: the shared key file peers must prove they hold.
pub const MIGRATION_KEY: &str = "MEMVISOR_MIGRATION_KEY";
/// The program's `malloc` as `memvisor run --malloc` chose it: `program` (default) or
/// `jemalloc`, preloaded after the library, whose heap is then managed memory (the library
/// refuses `fork`: a child would not have the heap).
pub const MALLOC: &str = "MEMVISOR_MALLOC";
/// Path of `libmemvisor_preload.so` (default: next to the `memvisor` binary).
pub const PRELOAD_LIBRARY: &str = "MEMVISOR_PRELOAD";

/// Every variable the preload library reads; removed from the program's environment at start
/// unless children are managed.
pub const ALL: [&str; 19] = [
    BUDGET,
    POLICY,
    SWAP_DIR,
    MIN_REGION,
    ARENA_SIZE,
    CONTROL_DIR,
    MANAGE_CHILDREN,
    PRELOAD_LIBRARY,
    CHUNK_SIZE,
    BUSY_POLL_US,
    CPU_WAKE_LATENCY,
    ON_SWAP_FULL,
    SWAP_MAPPER,
    RESERVATIONS,
    HOST_CACHE,
    IMAGE_CACHE,
    MIGRATION_LISTEN,
    MALLOC,
    MIGRATION_KEY,
];
