/* A VMM-like program run under `memvisor run --image-cache ...` by tests/broker_image_cache.rs:
 * its "guest RAM" is a small memfd named like QEMU's, and it reads a disk image with pread.
 *
 *   image_broker_workload IMAGE HOT_MIB
 *
 * IMAGE holds byte (o * 7 + (o >> 12)) & 0xff at offset o and is at least HOT_MIB MiB. Guest
 * RAM is 16 MiB.
 *  1. reads the image's first 4 MiB into guest RAM (the image becomes known to memvisor, with
 *     its cache limit: from then on its reads into other memory are seen too);
 *  2. prints "READY PID";
 *  3. reads the hot first HOT_MIB MiB in 256 KiB preads into malloc'd memory, checking a byte
 *     of every page, over and over, until stdin closes (looked at between passes); then
 *     checks guest RAM, prints "OK PASSES" and exits 0.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_support.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL
#define GUEST (16 * MIB) /* memvisor run's default --min-region */
#define KNOWN (4 * MIB)
#define READ (256 * 1024)


/* Checks one byte of every page of `len` bytes read at image offset `at` into `b`. */
static void check(const unsigned char *b, uint64_t at, size_t len) {
    for (size_t p = 0; p < len; p += PAGE) {
        uint64_t i = p + (at + p) % 97;
        if (i < len && b[i] != pattern_image_byte(at + i)) fail("a read returned the wrong bytes");
    }
}

/* Whether stdin was closed (or has a line: the test only ever closes it). */
static int stdin_done(void) {
    struct pollfd fd = {.fd = 0, .events = POLLIN};
    return poll(&fd, 1, 0) > 0;
}

int main(int argc, char **argv) {
    if (argc != 3) fail("usage: image_broker_workload IMAGE HOT_MIB");
    size_t hot = strtoul(argv[2], NULL, 10) * MIB;
    int img = open(argv[1], O_RDONLY);
    if (img < 0) fail("open image");
    int mfd = memfd_create("memory-backend-memfd", 0);
    if (mfd < 0 || ftruncate(mfd, GUEST) != 0) fail("memfd");
    unsigned char *g = mmap(NULL, GUEST, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (g == MAP_FAILED) fail("mmap guest RAM");
    for (size_t o = 0; o < KNOWN; o += READ)
        if (pread(img, g + o, READ, o) != READ) fail("pread into guest RAM");

    unsigned char *buf = malloc(READ);
    if (!buf) fail("malloc");
    printf("READY %d\n", getpid());
    fflush(stdout);
    unsigned long passes = 0;
    while (!stdin_done()) {
        for (size_t o = 0; o < hot; o += READ) {
            if (pread(img, buf, READ, o) != READ) fail("pread");
            check(buf, o, READ);
        }
        passes++;
    }
    check(g, 0, KNOWN);
    printf("OK %lu\n", passes);
    fflush(stdout);
    return 0;
}
