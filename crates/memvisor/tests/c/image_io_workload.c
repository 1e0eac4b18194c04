/* A VMM-like program run under `memvisor run` by tests/image_io_under_run.rs: its "guest RAM"
 * is a shared mapping of a memfd named like QEMU's (`memory-backend-memfd`), so the preload
 * library manages it as guest RAM, and it reads a disk image straight into that memory the
 * way QEMU's worker threads do.
 *
 *   image_io_workload IMAGE RAM_MIB
 *
 * IMAGE holds byte (o * 7 + (o >> 12)) & 0xff at offset o (the test writes it).
 *  1. preads the first 32 MiB of IMAGE into guest RAM [0, 32 MiB) in 128 KiB reads, and
 *     preadv()s the next 8 MiB with two iovecs of 4 MiB into [32 MiB, 40 MiB);
 *  2. writes a pattern over the rest of guest RAM (more than the budget: the image pages are
 *     evicted);
 *  2b. preadv()s 2 MiB at 4 KiB before the image's end into paged-out pattern pages at
 *     [41 MiB, 43 MiB): a short read (4 KiB) must leave the pattern after it (the false-read
 *     preventer maps as zeros only pages the read overwrites); and preadv at offset -1 must
 *     fail with EINVAL (only preadv2 reads at the file position);
 *  3. pwrite()s 0xEE over image bytes [4 MiB + 100, 8 MiB - 100) and pwritev()s 0xDD over
 *     [36 MiB, 37 MiB), then ftruncate()s the image to 39 MiB;
 *  4. verifies guest RAM [0, 40 MiB) still holds the image's OLD bytes, and the pattern;
 *  5. punches a hole (fallocate PUNCH_HOLE) in the memfd over [1 MiB, 2 MiB + 512) (as
 *     virtio-balloon does) and verifies it reads as zeros, the bytes around it unchanged;
 *     madvise(MADV_DONTNEED) of [50 MiB, 51 MiB) keeps its bytes (a shared mapping), and
 *     MADV_FREE there is EINVAL;
 *  6. prints READY PID and waits for stdin to close (the test reads `memvisor stat` then),
 *     verifies everything once more, prints OK.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include "test_support.h"

#define MIB (1024UL * 1024UL)


static void verify(const unsigned char *g, size_t ram) {
    for (uint64_t o = 0; o < 40 * MIB; o++) {
        unsigned char want = pattern_image_byte(o);
        if (o >= 1 * MIB && o < 2 * MIB + 512) want = 0;
        if (g[o] != want) {
            printf("FAIL: guest byte %#lx is %#x, want %#x\n", (unsigned long)o, g[o], want);
            fflush(stdout);
            exit(2);
        }
    }
    for (uint64_t o = 40 * MIB; o < ram; o += 509)
        if (g[o] != pattern_ram_byte(o)) fail("pattern beyond the image data");
}

int main(int argc, char **argv) {
    if (argc != 3) fail("usage: image_io_workload IMAGE RAM_MIB");
    size_t ram = strtoul(argv[2], NULL, 10) * MIB;
    if (ram < 64 * MIB) fail("RAM_MIB below 64");
    int img = open(argv[1], O_RDWR);
    if (img < 0) fail("open image");
    int mfd = memfd_create("memory-backend-memfd", 0);
    if (mfd < 0 || ftruncate(mfd, ram) != 0) fail("memfd");
    unsigned char *g = mmap(NULL, ram, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (g == MAP_FAILED) fail("mmap guest RAM");

    for (size_t o = 0; o < 32 * MIB; o += 128 * 1024)
        if (pread(img, g + o, 128 * 1024, o) != 128 * 1024) fail("pread");
    struct iovec iov[2] = {{g + 32 * MIB, 4 * MIB}, {g + 36 * MIB, 4 * MIB}};
    if (preadv(img, iov, 2, 32 * MIB) != (ssize_t)(8 * MIB)) fail("preadv");
    for (uint64_t o = 0; o < 40 * MIB; o += 4096)
        if (g[o] != pattern_image_byte(o)) fail("image bytes right after the read");

    for (uint64_t o = 40 * MIB; o < ram; o++) g[o] = pattern_ram_byte(o);

    struct iovec tail[1] = {{g + 41 * MIB, 2 * MIB}};
    if (preadv(img, tail, 1, 48 * MIB - 4096) != 4096) fail("short preadv at the image's end");
    for (uint64_t o = 0; o < 4096; o++)
        if (g[41 * MIB + o] != pattern_image_byte(48 * MIB - 4096 + o)) fail("bytes of the short read");
    for (uint64_t o = 41 * MIB + 4096; o < 43 * MIB; o++)
        if (g[o] != pattern_ram_byte(o)) fail("guest RAM after a short read's end lost its bytes");
    for (uint64_t o = 41 * MIB; o < 41 * MIB + 4096; o++) g[o] = pattern_ram_byte(o);
    unsigned char scratch[64];
    struct iovec here[1] = {{scratch, sizeof scratch}};
    errno = 0;
    if (preadv(img, here, 1, -1) != -1 || errno != EINVAL)
        fail("preadv at offset -1 not EINVAL");

    size_t n = 4 * MIB - 200;
    unsigned char *ee = malloc(n), *dd = malloc(MIB);
    if (!ee || !dd) fail("malloc");
    memset(ee, 0xEE, n);
    memset(dd, 0xDD, MIB);
    if (pwrite(img, ee, n, 4 * MIB + 100) != (ssize_t)n) fail("pwrite");
    struct iovec wv[1] = {{dd, MIB}};
    if (pwritev(img, wv, 1, 36 * MIB) != (ssize_t)MIB) fail("pwritev");
    if (ftruncate(img, 39 * MIB) != 0) fail("ftruncate");

    if (fallocate(mfd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 1 * MIB, MIB + 512) != 0)
        fail("fallocate punch guest RAM");
    /* madvise on a shared mapping, as the kernel has it: DONTNEED keeps the memfd's content
     * (the pattern stays), FREE is EINVAL. */
    if (madvise(g + 50 * MIB, MIB, MADV_DONTNEED) != 0) fail("madvise DONTNEED guest RAM");
    errno = 0;
    if (madvise(g + 50 * MIB, 4096, MADV_FREE) != -1 || errno != EINVAL)
        fail("madvise FREE of shared guest RAM not EINVAL");
    verify(g, ram);

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
