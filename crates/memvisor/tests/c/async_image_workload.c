/* A VMM-like program run under `memvisor run` by tests/async_image_io_under_run.rs: QEMU's
 * `aio=native` and `aio=io_uring` paths with `cache=none`. Its "guest RAM" is a shared mapping
 * of a memfd named like QEMU's (`memory-backend-memfd`), and it reads a disk image opened with
 * O_DIRECT straight into that memory with asynchronous requests:
 *  - `aio`: libaio's `io_submit`, completions taken with the io_getevents system call;
 *  - `uring`: liburing's `io_uring_submit` (entries from its `io_uring_get_sqe`), completions
 *    taken from the completion queue as liburing's inline functions do.
 * The library functions are found with dlsym after loading libaio.so.1 / liburing.so.2, so that
 * a preloaded library's definitions come first, as for QEMU's PLT calls; no call at completion
 * reaches a library.
 *
 *   async_image_workload IMAGE RAM_MIB aio|uring
 *
 * IMAGE holds byte (o * 7 + (o >> 12)) & 0xff at offset o (the test writes it).
 *  1. reads the first 32 MiB of IMAGE into guest RAM [0, 32 MiB) in 128 KiB reads, 16 in
 *     flight, and [32 MiB, 40 MiB) with vectored reads of two 512 KiB iovecs;
 *  2. writes a pattern over the rest of guest RAM (more than the budget: the image pages are
 *     evicted);
 *  2b. reads 2 MiB at 4 KiB before the image's end into paged-out pattern pages at
 *     [41 MiB, 43 MiB): a short read (4 KiB), whose buffer must keep what the kernel left in
 *     it across the evictions that writing the rest of guest RAM again makes;
 *  3. writes 0xEE over image bytes [4 MiB, 8 MiB) and, vectored, 0xDD over [36 MiB, 37 MiB);
 *  4. verifies guest RAM [0, 40 MiB) still holds the image's OLD bytes, and the pattern;
 *  5. tears the context down, prints READY PID and waits for stdin to close (the test reads
 *     `memvisor stat` then), verifies everything once more, prints OK.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <linux/io_uring.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "test_support.h"

#define MIB (1024UL * 1024UL)
#define BATCH 16
#define READ (128 * 1024)

static int img;


/* One request: a read or a write of `n` bytes at file offset `off`, from or to `buf`, or
 * (vectored) of the two halves of it, which must transfer `want` bytes. */
struct request {
    int write, vectored;
    unsigned char *buf;
    size_t n;
    uint64_t off;
    struct iovec iov[2];
    size_t want;
};

/* libaio, as its header declares it. */
typedef int (*aio_submit_fn)(aio_context_t, long, struct iocb **);
typedef int (*aio_setup_fn)(unsigned, aio_context_t *);
typedef int (*aio_destroy_fn)(aio_context_t);
static aio_submit_fn aio_submit;
static aio_context_t aio_ctx;

/* liburing's struct io_uring, as every liburing 2.x header lays it out. */
struct uring_sq {
    unsigned *khead, *ktail, *kring_mask, *kring_entries, *kflags, *kdropped, *array;
    struct io_uring_sqe *sqes;
    unsigned sqe_head, sqe_tail;
    size_t ring_sz;
    void *ring_ptr;
    unsigned ring_mask, ring_entries, pad[2];
};
struct uring_cq {
    unsigned *khead, *ktail, *kring_mask, *kring_entries, *kflags, *koverflow;
    struct io_uring_cqe *cqes;
    size_t ring_sz;
    void *ring_ptr;
    unsigned ring_mask, ring_entries, pad[2];
};
struct uring {
    struct uring_sq sq;
    struct uring_cq cq;
    unsigned flags;
    int ring_fd;
    unsigned features;
    int enter_ring_fd;
    unsigned char int_flags, pad[3];
    unsigned pad2;
};
typedef int (*uring_init_fn)(unsigned, struct uring *, unsigned);
typedef struct io_uring_sqe *(*uring_get_sqe_fn)(struct uring *);
typedef int (*uring_submit_fn)(struct uring *);
typedef int (*uring_get_cqe_fn)(struct uring *, struct io_uring_cqe **, unsigned, unsigned, void *);
typedef void (*uring_exit_fn)(struct uring *);
static uring_get_sqe_fn uring_get_sqe;
static uring_submit_fn uring_submit;
static uring_get_cqe_fn uring_get_cqe;
static struct uring ring;
static int use_uring;

/* Submits `n` requests and waits for all of them, each of which must transfer all its bytes. */
static void run_batch(struct request *r, int n) {
    if (use_uring) {
        for (int i = 0; i < n; i++) {
            struct io_uring_sqe *sqe = uring_get_sqe(&ring);
            if (!sqe) fail("io_uring_get_sqe");
            memset(sqe, 0, sizeof *sqe);
            sqe->opcode = r[i].vectored ? (r[i].write ? IORING_OP_WRITEV : IORING_OP_READV)
                                        : (r[i].write ? IORING_OP_WRITE : IORING_OP_READ);
            sqe->fd = img;
            sqe->off = r[i].off;
            sqe->addr = r[i].vectored ? (uint64_t)(uintptr_t)r[i].iov : (uint64_t)(uintptr_t)r[i].buf;
            sqe->len = r[i].vectored ? 2 : (unsigned)r[i].n;
            sqe->user_data = (uint64_t)(i + 1);
        }
        int s = uring_submit(&ring);
        if (s != n) {
            printf("FAIL: io_uring_submit returned %d for %d\n", s, n);
            fflush(stdout);
            exit(2);
        }
        for (int got = 0; got < n; got++) {
            struct io_uring_cqe *cqe = NULL;
            int e = uring_get_cqe(&ring, &cqe, 0, 1, NULL);
            if (e != 0 || !cqe) fail("io_uring wait");
            if (cqe->user_data < 1 || cqe->user_data > (uint64_t)n ||
                cqe->res != (int)r[cqe->user_data - 1].want) {
                printf("FAIL: a request returned %d\n", cqe->res);
                fflush(stdout);
                exit(2);
            }
            __atomic_store_n(ring.cq.khead, *ring.cq.khead + 1, __ATOMIC_RELEASE);
        }
        return;
    }
    struct iocb cbs[BATCH], *list[BATCH];
    for (int i = 0; i < n; i++) {
        memset(&cbs[i], 0, sizeof cbs[i]);
        cbs[i].aio_lio_opcode = r[i].vectored ? (r[i].write ? IOCB_CMD_PWRITEV : IOCB_CMD_PREADV)
                                              : (r[i].write ? IOCB_CMD_PWRITE : IOCB_CMD_PREAD);
        cbs[i].aio_fildes = img;
        cbs[i].aio_buf = r[i].vectored ? (uint64_t)(uintptr_t)r[i].iov : (uint64_t)(uintptr_t)r[i].buf;
        cbs[i].aio_nbytes = r[i].vectored ? 2 : r[i].n;
        cbs[i].aio_offset = r[i].off;
        list[i] = &cbs[i];
    }
    int s = aio_submit(aio_ctx, n, list);
    if (s != n) {
        printf("FAIL: io_submit returned %d for %d\n", s, n);
        fflush(stdout);
        exit(2);
    }
    struct io_event ev[BATCH];
    int got = 0;
    while (got < n) {
        long k = syscall(SYS_io_getevents, aio_ctx, 1, n - got, ev + got, NULL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fail("io_getevents");
        got += (int)k;
    }
    for (int i = 0; i < n; i++) {
        struct iocb *cb = (struct iocb *)(uintptr_t)ev[i].obj;
        size_t want = r[cb - cbs].want;
        if (ev[i].res != (long long)want) {
            printf("FAIL: a request returned %lld, want %zu\n", (long long)ev[i].res, want);
            fflush(stdout);
            exit(2);
        }
    }
}

static struct request one(int write, unsigned char *buf, size_t n, uint64_t off) {
    struct request r = {write, 0, buf, n, off, {{0, 0}, {0, 0}}, n};
    return r;
}

static struct request halves(int write, unsigned char *buf, size_t n, uint64_t off) {
    struct request r = {write, 1, buf, n, off, {{buf, n / 2}, {buf + n / 2, n / 2}}, n};
    return r;
}

static void verify(const unsigned char *g, size_t ram) {
    for (uint64_t o = 0; o < 40 * MIB; o++)
        if (g[o] != pattern_image_byte(o)) {
            printf("FAIL: guest byte %#lx is %#x, want %#x\n", (unsigned long)o, g[o], pattern_image_byte(o));
            fflush(stdout);
            exit(2);
        }
    for (uint64_t o = 40 * MIB; o < ram; o += 509)
        if (g[o] != pattern_ram_byte(o)) fail("pattern beyond the image data");
}

int main(int argc, char **argv) {
    if (argc != 4) fail("usage: async_image_workload IMAGE RAM_MIB aio|uring");
    size_t ram = strtoul(argv[2], NULL, 10) * MIB;
    if (ram < 64 * MIB) fail("RAM_MIB below 64");
    use_uring = strcmp(argv[3], "uring") == 0;
    if (!use_uring && strcmp(argv[3], "aio") != 0) fail("the interface is aio or uring");
    img = open(argv[1], O_RDWR | O_DIRECT);
    if (img < 0) fail("open image O_DIRECT");
    if (use_uring) {
        if (!dlopen("liburing.so.2", RTLD_NOW | RTLD_GLOBAL)) fail("dlopen liburing.so.2");
        uring_init_fn init = (uring_init_fn)dlsym(RTLD_DEFAULT, "io_uring_queue_init");
        uring_get_sqe = (uring_get_sqe_fn)dlsym(RTLD_DEFAULT, "io_uring_get_sqe");
        uring_submit = (uring_submit_fn)dlsym(RTLD_DEFAULT, "io_uring_submit");
        uring_get_cqe = (uring_get_cqe_fn)dlsym(RTLD_DEFAULT, "__io_uring_get_cqe");
        if (!init || !uring_get_sqe || !uring_submit || !uring_get_cqe) fail("dlsym liburing");
        if (init(64, &ring, 0) != 0) fail("io_uring_queue_init");
    } else {
        if (!dlopen("libaio.so.1", RTLD_NOW | RTLD_GLOBAL)) fail("dlopen libaio.so.1");
        aio_submit = (aio_submit_fn)dlsym(RTLD_DEFAULT, "io_submit");
        aio_setup_fn setup = (aio_setup_fn)dlsym(RTLD_DEFAULT, "io_setup");
        if (!aio_submit || !setup) fail("dlsym libaio");
        if (setup(64, &aio_ctx) != 0) fail("io_setup");
    }
    int mfd = memfd_create("memory-backend-memfd", 0);
    if (mfd < 0 || ftruncate(mfd, ram) != 0) fail("memfd");
    unsigned char *g = mmap(NULL, ram, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (g == MAP_FAILED) fail("mmap guest RAM");

    struct request reqs[BATCH];
    for (size_t o = 0; o < 32 * MIB; o += BATCH * READ) {
        for (int i = 0; i < BATCH; i++) reqs[i] = one(0, g + o + i * READ, READ, o + i * READ);
        run_batch(reqs, BATCH);
    }
    for (int i = 0; i < 8; i++) reqs[i] = halves(0, g + 32 * MIB + i * MIB, MIB, 32 * MIB + i * MIB);
    run_batch(reqs, 8);
    for (uint64_t o = 0; o < 40 * MIB; o += 4096)
        if (g[o] != pattern_image_byte(o)) fail("image bytes right after the reads");

    for (uint64_t o = 40 * MIB; o < ram; o++) g[o] = pattern_ram_byte(o);

    /* A short read: 2 MiB asked at 4 KiB before the image's end, into paged-out pattern pages
     * at [41 MiB, 43 MiB). Only 4 KiB comes back, and with O_DIRECT the kernel may overwrite
     * the buffer past it (ext4 zeroes it): whatever it left there must survive an eviction,
     * which it would not if the library had taken those pages for copies of image blocks. */
    reqs[0] = one(0, g + 41 * MIB, 2 * MIB, 48 * MIB - 4096);
    reqs[0].want = 4096;
    run_batch(reqs, 1);
    for (uint64_t o = 0; o < 4096; o++)
        if (g[41 * MIB + o] != pattern_image_byte(48 * MIB - 4096 + o)) fail("bytes of the short read");
    unsigned char *left = malloc(2 * MIB);
    if (!left) fail("malloc");
    memcpy(left, g + 41 * MIB, 2 * MIB);
    for (uint64_t o = 43 * MIB; o < ram; o++) g[o] = pattern_ram_byte(o);
    if (memcmp(left, g + 41 * MIB, 2 * MIB) != 0) fail("a short read's buffer changed after eviction");
    free(left);
    for (uint64_t o = 41 * MIB; o < 43 * MIB; o++) g[o] = pattern_ram_byte(o);

    unsigned char *ee, *dd;
    if (posix_memalign((void **)&ee, 4096, 4 * MIB) || posix_memalign((void **)&dd, 4096, MIB))
        fail("posix_memalign");
    memset(ee, 0xEE, 4 * MIB);
    memset(dd, 0xDD, MIB);
    reqs[0] = one(1, ee, 4 * MIB, 4 * MIB);
    run_batch(reqs, 1);
    reqs[0] = halves(1, dd, MIB, 36 * MIB);
    run_batch(reqs, 1);
    verify(g, ram);
    if (use_uring) {
        uring_exit_fn exit_ring = (uring_exit_fn)dlsym(RTLD_DEFAULT, "io_uring_queue_exit");
        if (!exit_ring) fail("dlsym io_uring_queue_exit");
        exit_ring(&ring);
    } else {
        aio_destroy_fn destroy = (aio_destroy_fn)dlsym(RTLD_DEFAULT, "io_destroy");
        if (!destroy || destroy(aio_ctx) != 0) fail("io_destroy");
    }

    printf("READY %d\n", getpid());
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    verify(g, ram);
    printf("OK\n");
    fflush(stdout);
    return 0;
}
