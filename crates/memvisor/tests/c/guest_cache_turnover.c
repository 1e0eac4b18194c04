/* A VMM-like program whose "guest page cache" turns over, run under `memvisor run
 * --host-cache exclusive --image-cache 8M` by tests/host_cache_under_run.rs: its guest RAM is
 * a memfd named like QEMU's, and it reads a disk image into it with pread, 4 KiB at a time
 * without readahead (POSIX_FADV_RANDOM), as QEMU's worker threads do for a guest's scattered
 * reads.
 *
 *   guest_cache_turnover IMAGE
 *
 * IMAGE holds byte (o * 7 + (o >> 12)) & 0xff at offset o, is at least 32 MiB, and is not in
 * the host page cache when the program starts (the test drops it). Guest RAM is 64 MiB.
 *  1. reads image [0, 4 MiB) into guest RAM [0, 4 MiB), prints "READY PID", waits for a line;
 *  2. reads image [16 MiB, 20 MiB) into the same guest RAM [0, 4 MiB) (the guest's page cache
 *     reuses its pages: it lets the first blocks go), prints "OVER", waits for a line;
 *  3. reads image [24 MiB, 32 MiB) into guest RAM [8 MiB, 16 MiB), prints "MORE", waits for
 *     stdin to close;
 *  4. verifies guest RAM [0, 4 MiB) and [8 MiB, 16 MiB) hold the image's bytes, prints OK.
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
#define PAGE 4096UL


/* Reads image [from, from + len) into guest RAM at `at`, a page at a time. */
static void read_pages(int img, unsigned char *g, uint64_t at, uint64_t from, uint64_t len) {
    for (uint64_t o = 0; o < len; o += PAGE)
        if (pread(img, g + at + o, PAGE, from + o) != (ssize_t)PAGE) fail("pread");
}

static void verify(const unsigned char *g, uint64_t at, uint64_t from, uint64_t len) {
    for (uint64_t o = 0; o < len; o++)
        if (g[at + o] != pattern_image_byte(from + o)) {
            printf("FAIL: guest byte %#lx is %#x, want %#x\n", (unsigned long)(at + o), g[at + o],
                   pattern_image_byte(from + o));
            fflush(stdout);
            exit(2);
        }
}

static void wait_line(void) {
    char line[64];
    if (!fgets(line, sizeof line, stdin)) fail("stdin closed early");
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: guest_cache_turnover IMAGE");
    int img = open(argv[1], O_RDONLY);
    if (img < 0) fail("open image");
    if (posix_fadvise(img, 0, 0, POSIX_FADV_RANDOM) != 0) fail("fadvise random");
    size_t ram = 64 * MIB;
    int mfd = memfd_create("memory-backend-memfd", 0);
    if (mfd < 0 || ftruncate(mfd, ram) != 0) fail("memfd");
    unsigned char *g = mmap(NULL, ram, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (g == MAP_FAILED) fail("mmap guest RAM");

    read_pages(img, g, 0, 0, 4 * MIB);
    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    wait_line();

    read_pages(img, g, 0, 16 * MIB, 4 * MIB);
    printf("OVER\n");
    fflush(stdout);
    wait_line();

    read_pages(img, g, 8 * MIB, 24 * MIB, 8 * MIB);
    printf("MORE\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }

    verify(g, 0, 16 * MIB, 4 * MIB);
    verify(g, 8 * MIB, 24 * MIB, 8 * MIB);
    printf("OK\n");
    fflush(stdout);
    return 0;
}
