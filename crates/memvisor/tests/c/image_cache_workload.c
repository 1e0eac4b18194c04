/* A VMM-like program run under `memvisor run --image-cache ...` by tests/image_cache_limit.rs:
 * its "guest RAM" is a memfd named like QEMU's, and it reads a disk image into it with pread,
 * as QEMU's worker threads do.
 *
 *   image_cache_workload IMAGE
 *
 * IMAGE holds byte (o * 7 + (o >> 12)) & 0xff at offset o, is 64 MiB, and is not in the host
 * page cache when the program starts (the test drops it). Guest RAM is 64 MiB.
 *  1. pwrite()s 0xEE over image bytes [0, 1 MiB) and does not sync them (dirty pages);
 *  2. reads the whole image into guest RAM in 256 KiB preads, twice (a stream the limit cannot
 *     hold), then the hot first 4 MiB ten times (it can), and 1 MiB at 60 MiB into malloc'd
 *     memory (not guest RAM: the limit sees it too);
 *  3. prints "READY PID" and waits for a line on stdin (the test looks at the host cache and
 *     changes the limit);
 *  4. reads the whole image into guest RAM once more, prints "DONE" and waits for stdin to
 *     close;
 *  5. verifies guest RAM holds the image's bytes (0xEE in the written range), prints OK.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_support.h"

#define MIB (1024UL * 1024UL)
#define SIZE (64 * MIB)
#define READ (256 * 1024)

static unsigned char image_byte(uint64_t o) {
    if (o < MIB) return 0xEE;
    return pattern_image_byte(o);
}

static void read_range(int img, unsigned char *g, size_t from, size_t to) {
    for (size_t o = from; o < to; o += READ)
        if (pread(img, g + o, READ, o) != READ) fail("pread");
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: image_cache_workload IMAGE");
    int img = open(argv[1], O_RDWR);
    if (img < 0) fail("open image");
    int mfd = memfd_create("memory-backend-memfd", 0);
    if (mfd < 0 || ftruncate(mfd, SIZE) != 0) fail("memfd");
    unsigned char *g = mmap(NULL, SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (g == MAP_FAILED) fail("mmap guest RAM");

    unsigned char *buf = malloc(MIB);
    if (!buf) fail("malloc");
    memset(buf, 0xEE, MIB);
    if (pwrite(img, buf, MIB, 0) != (ssize_t)MIB) fail("pwrite");

    read_range(img, g, 0, SIZE);
    read_range(img, g, 0, SIZE);
    for (int i = 0; i < 10; i++) read_range(img, g, 0, 4 * MIB);
    if (pread(img, buf, MIB, 60 * MIB) != (ssize_t)MIB) fail("pread outside guest RAM");

    printf("READY %d\n", getpid());
    fflush(stdout);
    char line[64];
    if (fgets(line, sizeof line, stdin) == NULL) fail("stdin closed early");

    read_range(img, g, 0, SIZE);
    printf("DONE\n");
    fflush(stdout);
    while (read(0, line, sizeof line) > 0) {
    }
    for (uint64_t o = 0; o < SIZE; o++)
        if (g[o] != image_byte(o)) {
            printf("FAIL: guest byte %#lx is %#x, want %#x\n", (unsigned long)o, g[o], image_byte(o));
            fflush(stdout);
            exit(2);
        }
    printf("OK\n");
    fflush(stdout);
    return 0;
}
