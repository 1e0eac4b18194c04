/* A program whose large memory is a shared mapping of a named file, as QEMU's
 * `-object memory-backend-file,mem-path=FILE,share=on` guest RAM is; run under `memvisor run`
 * by tests/guest_file_under_run.rs.
 *
 *   tmpfs_file_ram FILE MIB MODE
 *
 * Creates FILE (it must not exist), ftruncate()s it to MIB MiB and maps all of it at offset
 * 0, then writes a pattern over every byte and verifies it through the mapping, prints READY
 * PID, waits for stdin to close (the test reads `memvisor stat` and the file's size on disk
 * then), verifies everything once more and prints OK. MODE:
 *   shared    MAP_SHARED read-write of the empty file (a tmpfs one is adopted by the preload
 *             library); the pattern is written through the mapping;
 *   data      as shared, but pwrite()s one byte at offset 4096 first, so the file holds data
 *             when mapped (never adopted), and checks the mapping shows that byte;
 *   private   MAP_PRIVATE read-write (never adopted);
 *   readonly  MAP_SHARED PROT_READ (never adopted); the pattern is written with pwrite().
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

static uint64_t word(uint64_t i) { return i * 0x9E3779B97F4A7C15ULL + 12345; }

static void verify(const uint64_t *g, size_t words) {
    for (size_t i = 0; i < words; i++) {
        if (g[i] != word(i)) {
            printf("FAIL: word %zu is %#lx, want %#lx\n", i, (unsigned long)g[i],
                   (unsigned long)word(i));
            fflush(stdout);
            exit(2);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 4) fail("usage: tmpfs_file_ram FILE MIB shared|data|private|readonly");
    size_t len = strtoul(argv[2], NULL, 10) * MIB;
    const char *mode = argv[3];
    int flags;
    if (strcmp(mode, "shared") == 0 || strcmp(mode, "data") == 0)
        flags = MAP_SHARED;
    else if (strcmp(mode, "private") == 0)
        flags = MAP_PRIVATE;
    else if (strcmp(mode, "readonly") == 0)
        flags = MAP_SHARED;
    else
        fail("MODE is shared, data, private or readonly");
    int readonly = strcmp(mode, "readonly") == 0;
    int fd = open(argv[1], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) fail("create FILE");
    if (ftruncate(fd, len) != 0) fail("ftruncate");
    if (strcmp(mode, "data") == 0 && pwrite(fd, "Z", 1, 4096) != 1) fail("pwrite one byte");
    uint64_t *g = mmap(NULL, len, readonly ? PROT_READ : PROT_READ | PROT_WRITE, flags, fd, 0);
    if (g == MAP_FAILED) fail("mmap FILE");
    if (strcmp(mode, "data") == 0 && ((unsigned char *)g)[4096] != 'Z')
        fail("the byte written before mapping");
    size_t words = len / sizeof *g;
    if (readonly) {
        static uint64_t block[MIB / sizeof(uint64_t)];
        size_t per = sizeof block / sizeof *block;
        for (size_t b = 0; b < words / per; b++) {
            for (size_t i = 0; i < per; i++) block[i] = word(b * per + i);
            if (pwrite(fd, block, sizeof block, b * sizeof block) != (ssize_t)sizeof block)
                fail("pwrite the pattern");
        }
    } else {
        for (size_t i = 0; i < words; i++) g[i] = word(i);
    }
    verify(g, words);
    printf("READY %d\n", getpid());
    fflush(stdout);
    char buf[64];
    while (read(0, buf, sizeof buf) > 0) {
    }
    verify(g, words);
    if (munmap(g, len) != 0) fail("munmap");
    printf("OK\n");
    fflush(stdout);
    return 0;
}
