/* memvisor.h: C API of memvisor-pager (private virtual memory paged by userfaultfd).
 *
 * Link with libmemvisor_pager.a (plus -lpthread -ldl -lm). Needs root or
 * vm.unprivileged_userfaultfd=1.
 *
 * Settings not in memvisor_region_config keep the pager's defaults, among them adaptive busy
 * polling (200 us) and, for a root process, the CPU wake-latency request held while the
 * handler polls (/dev/cpu_dma_latency at 0: idle CPUs poll instead of halting; lifted 20 ms
 * after the polling stops). */
#ifndef MEMVISOR_H
#define MEMVISOR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct memvisor_region memvisor_region;

typedef struct memvisor_region_config {
    uint64_t size;              /* bytes of memory */
    uint64_t budget;            /* resident budget in bytes (at least one chunk) */
    uint64_t chunk_size;        /* paging unit, a multiple of the page size; 0 = 1 MiB */
    const char *swap_dir;       /* directory of the private swap file; not NULL */
    const char *policy;         /* e.g. "chunk-queues", "clock", "lru:..."; NULL = default */
    uint32_t resolve;           /* 0 = UFFDIO_COPY (default), 1 = alias + UFFDIO_CONTINUE */
    int64_t sample_interval_ms; /* access sampling period; < 0 = default (1000), 0 = off */
    int32_t dirty_tracking;     /* < 0 = default (on), 0 = off, > 0 = on */
} memvisor_region_config;

typedef struct memvisor_region_stats {
    uint64_t chunks;
    uint64_t resident_chunks;
    uint64_t swapped_chunks;
    uint64_t zero_chunks;
    uint64_t poisoned_chunks;   /* page-in failed: accesses raise SIGBUS */
    uint64_t overrun_chunks;    /* resident over budget because a swap write failed */
    uint64_t missing_faults;
    uint64_t minor_faults;
    uint64_t page_ins;
    uint64_t page_outs;
    uint64_t bytes_read;
    uint64_t bytes_written;
    uint64_t clean_evictions;   /* evicted without a write (dirty tracking) */
    uint64_t write_errors;
    uint64_t read_errors;
    uint64_t page_in_p50_nanos; /* upper bounds of log2 histogram buckets */
    uint64_t page_in_p99_nanos;
    uint64_t page_in_max_nanos;
} memvisor_region_stats;

/* Creates a region. Returns NULL on failure with a NUL-terminated message in err
 * (if err is not NULL and err_len > 0). */
memvisor_region *memvisor_region_new(const memvisor_region_config *cfg, char *err,
                                     size_t err_len);

/* The region's memory, usable by every thread until memvisor_region_free. */
void *memvisor_region_ptr(const memvisor_region *region);

/* The region's size in bytes. */
uint64_t memvisor_region_len(const memvisor_region *region);

/* Fills *out; returns 0, or -1 if an argument is NULL. */
int memvisor_region_get_stats(const memvisor_region *region, memvisor_region_stats *out);

/* Run-time control. Each returns 0, or -1 with a NUL-terminated message in err. */
/* New resident budget in bytes (whole chunks, at least one); shrinking pages out at once. */
int memvisor_region_set_budget(const memvisor_region *region, uint64_t budget, char *err,
                               size_t err_len);
/* New eviction policy, e.g. "clock"; resident chunks keep their ranking. */
int memvisor_region_set_policy(const memvisor_region *region, const char *policy, char *err,
                               size_t err_len);
/* [offset, offset + len) reads as zeros afterwards (offset page-aligned). A poisoned chunk
 * covered whole becomes usable again. */
int memvisor_region_discard(const memvisor_region *region, uint64_t offset, uint64_t len,
                            char *err, size_t err_len);

/* Stops the fault handler, unmaps the memory, deletes the swap file. NULL is ignored. */
void memvisor_region_free(memvisor_region *region);

#ifdef __cplusplus
}
#endif

#endif /* MEMVISOR_H */
