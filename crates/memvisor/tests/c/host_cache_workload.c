/* A VMM-like program run under `memvisor run --host-cache ...` by tests/host_cache_under_run.rs:
 * its "guest RAM" is a memfd named like QEMU's, and it reads a disk image into it with pread,
 * as QEMU's worker threads do.
 *
 *   host_cache_workload IMAGE RAM_MIB
 *
 * IMAGE holds byte (o * 7 + (o >> 12)) & 0xff at offset o, is at least 48 MiB, and is not in
 * the host page cache when the program starts (the test drops it).
 *  1. pwrite()s 0xEE over image bytes [8 MiB, 9 MiB) and does not sync them (dirty pages);
 *  2. preads image [0, 16 MiB) into guest RAM [0, 16 MiB) in 128 KiB reads (the kernel's
 *     readahead makes large folios);
 *  3. without readahead (POSIX_FADV_RANDOM), reads image [40 MiB, 41 MiB) page by page (far past what step 2's readahead
 *     reached) into
 *     malloc'd memory (page-sized folios), then preads [40 MiB + 100, 41 MiB - 100) into
 *     guest RAM at the same offsets (partial pages at both ends), and image [44 MiB, 45 MiB)
 *     into malloc'd memory (not guest RAM);
 *  4. prints "READY PID" and waits for a line on stdin (the test looks at the host cache);
 *  5. writes a pattern over guest RAM [48 MiB, RAM) (more than the budget: image pages are
 *     evicted), prints "EVICTED" and waits for stdin to close;
 *  6. verifies guest RAM [0, 16 MiB) holds the image's bytes (0xEE in the written range) and
 *     the pattern, prints OK.
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

static unsigned char image_byte(uint64_t o) {
    if (o >= 8 * MIB && o < 9 * MIB) return 0xEE;
    return pattern_image_byte(o);
}

static void verify(const unsigned char *g, size_t ram) {
    for (uint64_t o = 0; o < 16 * MIB; o++)
        if (g[o] != image_byte(o)) {
            printf("FAIL: guest byte %#lx is %#x, want %#x\n", (unsigned long)o, g[o], image_byte(o));
            fflush(stdout);
            exit(2);
        }
    for (uint64_t o = 40 * MIB + 100; o < 41 * MIB - 100; o += 97)
        if (g[o] != image_byte(o)) fail("partial-page read");
    for (uint64_t o = 48 * MIB; o < ram; o += 509)
        if (g[o] != pattern_ram_byte(o)) fail("pattern");
}

int main(int argc, char **argv) {
    if (argc != 3) fail("usage: host_cache_workload IMAGE RAM_MIB");
    size_t ram = strtoul(argv[2], NULL, 10) * MIB;
    if (ram < 64 * MIB) fail("RAM_MIB below 64");
    int img = open(argv[1], O_RDWR);
    if (img < 0) fail("open image");
    int mfd = memfd_create("memory-backend-memfd", 0);
    if (mfd < 0 || ftruncate(mfd, ram) != 0) fail("memfd");
    unsigned char *g = mmap(NULL, ram, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    if (g == MAP_FAILED) fail("mmap guest RAM");

    unsigned char *ee = malloc(MIB);
    if (!ee) fail("malloc");
    memset(ee, 0xEE, MIB);
    if (pwrite(img, ee, MIB, 8 * MIB) != (ssize_t)MIB) fail("pwrite");

    for (size_t o = 0; o < 16 * MIB; o += 128 * 1024)
        if (pread(img, g + o, 128 * 1024, o) != 128 * 1024) fail("pread");

    if (posix_fadvise(img, 0, 0, POSIX_FADV_RANDOM) != 0) fail("fadvise random");
    /* Page-sized folios there first (read one page at a time into other memory), so that
     * the partial pages at the ends are folios of their own. */
    for (size_t o = 40 * MIB; o < 41 * MIB; o += 4096)
        if (pread(img, ee, 4096, o) != 4096) fail("pread page");
    size_t n = MIB - 200;
    if (pread(img, g + 40 * MIB + 100, n, 40 * MIB + 100) != (ssize_t)n) fail("pread partial");
    if (pread(img, ee, MIB, 44 * MIB) != (ssize_t)MIB) fail("pread outside guest RAM");
    for (uint64_t o = 0; o < MIB; o += 4096)
        if (ee[o] != image_byte(44 * MIB + o)) fail("bytes read outside guest RAM");
    verify(g, 48 * MIB);

    printf("READY %d\n", getpid());
    fflush(stdout);
    char buf[64];
    if (fgets(buf, sizeof buf, stdin) == NULL) fail("stdin closed early");

    for (uint64_t o = 48 * MIB; o < ram; o++) g[o] = pattern_ram_byte(o);
    printf("EVICTED\n");
    fflush(stdout);
    while (read(0, buf, sizeof buf) > 0) {
    }
    verify(g, ram);
    printf("OK\n");
    fflush(stdout);
    return 0;
}
