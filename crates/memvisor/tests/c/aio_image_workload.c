/* A VMM-like program run under `memvisor run` by tests/aio_image_io_under_run.rs: QEMU's
 * `aio=native,cache=none` path. Its "guest RAM" is a shared mapping of a memfd named like
 * QEMU's (`memory-backend-memfd`), and it reads a disk image opened with O_DIRECT straight into
 * that memory with Linux AIO: `io_submit` is libaio's, found with dlsym after loading
 * libaio.so.1, so that a preloaded library's `io_submit` comes first, as for QEMU's PLT call.
 * Completions are taken with the io_getevents system call (QEMU reads the ring itself; either
 * way, no library call the preload library could see).
 *
 *   aio_image_workload IMAGE RAM_MIB
 *
 * IMAGE holds byte (o * 7 + (o >> 12)) & 0xff at offset o (the test writes it).
 *  1. reads the first 32 MiB of IMAGE into guest RAM [0, 32 MiB) in 128 KiB PREAD requests,
 *     16 in flight, and [32 MiB, 40 MiB) with PREADV requests of two 512 KiB iovecs;
 *  2. writes a pattern over the rest of guest RAM (more than the budget: the image pages are
 *     evicted);
 *  3. PWRITEs 0xEE over image bytes [4 MiB, 8 MiB) and PWRITEVs 0xDD over [36 MiB, 37 MiB);
 *  4. verifies guest RAM [0, 40 MiB) still holds the image's OLD bytes, and the pattern;
 *  5. io_destroy()s the context, prints READY PID and waits for stdin to close (the test reads
 *     `memvisor stat` then), verifies everything once more, prints OK.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define MIB (1024UL * 1024UL)
#define BATCH 16
#define READ (128 * 1024)

static void fail(const char *what) {
    printf("FAIL: %s (errno %d)\n", what, errno);
    fflush(stdout);
    exit(2);
}

static unsigned char image_byte(uint64_t o) { return (unsigned char)((o * 7 + (o >> 12)) & 0xff); }
static unsigned char ram_byte(uint64_t o) { return (unsigned char)((o * 13 + (o >> 16) + 1) & 0xff); }

typedef int (*submit_fn)(aio_context_t, long, struct iocb **);
typedef int (*setup_fn)(unsigned, aio_context_t *);
typedef int (*destroy_fn)(aio_context_t);
static submit_fn submit;

/* Submits `n` requests and waits for all of them, each of which must return `want` bytes. */
static void run_batch(aio_context_t ctx, struct iocb *cbs, int n, long long want) {
    struct iocb *list[BATCH];
    for (int i = 0; i < n; i++) list[i] = &cbs[i];
    int r = submit(ctx, n, list);
    if (r != n) {
        printf("FAIL: io_submit returned %d for %d\n", r, n);
        fflush(stdout);
        exit(2);
    }
    struct io_event ev[BATCH];
    int got = 0;
    while (got < n) {
        long k = syscall(SYS_io_getevents, ctx, 1, n - got, ev + got, NULL);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) fail("io_getevents");
        got += (int)k;
    }
    for (int i = 0; i < n; i++)
        if (ev[i].res != want) {
            printf("FAIL: a request returned %lld, want %lld\n", (long long)ev[i].res, want);
            fflush(stdout);
            exit(2);
        }
}

static void verify(const unsigned char *g, size_t ram) {
    for (uint64_t o = 0; o < 40 * MIB; o++)
        if (g[o] != image_byte(o)) {
            printf("FAIL: guest byte %#lx is %#x, want %#x\n", (unsigned long)o, g[o], image_byte(o));
            fflush(stdout);
            exit(2);
        }
    for (uint64_t o = 40 * MIB; o < ram; o += 509)
        if (g[o] != ram_byte(o)) fail("pattern beyond the image data");
}

int main(int argc, char **argv) {
    if (argc != 3) fail("usage: aio_image_workload IMAGE RAM_MIB");
    size_t ram = strtoul(argv[2], NULL, 10) * MIB;
    if (ram < 64 * MIB) fail("RAM_MIB below 64");
    if (!dlopen("libaio.so.1", RTLD_NOW | RTLD_GLOBAL)) fail("dlopen libaio.so.1");
    submit = (submit_fn)dlsym(RTLD_DEFAULT, "io_submit");
    setup_fn setup = (setup_fn)dlsym(RTLD_DEFAULT, "io_setup");
    destroy_fn destroy = (destroy_fn)dlsym(RTLD_DEFAULT, "io_destroy");
    if (!submit || !setup || !destroy) fail("dlsym libaio");
    int img = open(argv[1], O_RDWR | O_DIRECT);
    if (img < 0) fail("open image O_DIRECT");
    int mfd = memfd_create("memory-backend-memfd", 0);
    if (mfd < 0 || ftruncate(mfd, ram) != 0) fail("memfd");
    unsigned char *g = mmap(NULL, ram, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (g == MAP_FAILED) fail("mmap guest RAM");
    aio_context_t ctx = 0;
    if (setup(64, &ctx) != 0) fail("io_setup");

    struct iocb cbs[BATCH];
    for (size_t o = 0; o < 32 * MIB; o += BATCH * READ) {
        for (int i = 0; i < BATCH; i++) {
            memset(&cbs[i], 0, sizeof cbs[i]);
            cbs[i].aio_lio_opcode = IOCB_CMD_PREAD;
            cbs[i].aio_fildes = img;
            cbs[i].aio_buf = (uint64_t)(uintptr_t)(g + o + i * READ);
            cbs[i].aio_nbytes = READ;
            cbs[i].aio_offset = o + i * READ;
        }
        run_batch(ctx, cbs, BATCH, READ);
    }
    struct iovec iov[8][2];
    for (size_t o = 32 * MIB; o < 40 * MIB; o += 8 * MIB) {
        for (int i = 0; i < 8; i++) {
            size_t at = o + i * MIB;
            iov[i][0] = (struct iovec){g + at, MIB / 2};
            iov[i][1] = (struct iovec){g + at + MIB / 2, MIB / 2};
            memset(&cbs[i], 0, sizeof cbs[i]);
            cbs[i].aio_lio_opcode = IOCB_CMD_PREADV;
            cbs[i].aio_fildes = img;
            cbs[i].aio_buf = (uint64_t)(uintptr_t)iov[i];
            cbs[i].aio_nbytes = 2;
            cbs[i].aio_offset = at;
        }
        run_batch(ctx, cbs, 8, MIB);
    }
    for (uint64_t o = 0; o < 40 * MIB; o += 4096)
        if (g[o] != image_byte(o)) fail("image bytes right after the reads");

    for (uint64_t o = 40 * MIB; o < ram; o++) g[o] = ram_byte(o);

    unsigned char *ee, *dd;
    if (posix_memalign((void **)&ee, 4096, 4 * MIB) || posix_memalign((void **)&dd, 4096, MIB))
        fail("posix_memalign");
    memset(ee, 0xEE, 4 * MIB);
    memset(dd, 0xDD, MIB);
    memset(&cbs[0], 0, sizeof cbs[0]);
    cbs[0].aio_lio_opcode = IOCB_CMD_PWRITE;
    cbs[0].aio_fildes = img;
    cbs[0].aio_buf = (uint64_t)(uintptr_t)ee;
    cbs[0].aio_nbytes = 4 * MIB;
    cbs[0].aio_offset = 4 * MIB;
    run_batch(ctx, cbs, 1, 4 * MIB);
    struct iovec wv[1] = {{dd, MIB}};
    memset(&cbs[0], 0, sizeof cbs[0]);
    cbs[0].aio_lio_opcode = IOCB_CMD_PWRITEV;
    cbs[0].aio_fildes = img;
    cbs[0].aio_buf = (uint64_t)(uintptr_t)wv;
    cbs[0].aio_nbytes = 1;
    cbs[0].aio_offset = 36 * MIB;
    run_batch(ctx, cbs, 1, MIB);
    verify(g, ram);
    if (destroy(ctx) != 0) fail("io_destroy");

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
