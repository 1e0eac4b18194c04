/* A program run under `memvisor run` by tests/broker_run.rs, steered through stdin.
 *   broker_workload SIZE_MIB   maps SIZE_MIB MiB, writes a pattern into every page, prints
 *                              "READY PID", then obeys lines on stdin:
 *     loop N    reads pages 0..N MiB in order, checking each, over and over;
 *     idle      touches nothing;
 *     verify    checks every page, prints "verified" (between passes);
 *   and exits 0 at the end of stdin.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "test_support.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL

static uint64_t word(size_t page) { return 0x9E3779B97F4A7C15ULL * (page + 1); }

static void check(volatile uint64_t *mem, size_t pages) {
    for (size_t p = 0; p < pages; p++)
        if (mem[p * (PAGE / 8)] != word(p)) fail("a page lost its data");
}

int main(int argc, char **argv) {
    if (argc != 2) fail("usage: broker_workload SIZE_MIB");
    size_t total = strtoul(argv[1], NULL, 10) * MIB / PAGE;
    uint64_t *mem = mmap(NULL, total * PAGE, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) fail("mmap");
    for (size_t p = 0; p < total; p++) mem[p * (PAGE / 8)] = word(p);
    /* Unbuffered, so a line never waits in stdio's buffer while poll sleeps on the pipe. */
    setvbuf(stdin, NULL, _IONBF, 0);
    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    size_t loop = 0;
    char line[64];
    for (;;) {
        struct pollfd fd = {.fd = 0, .events = POLLIN};
        /* Looping: just look; idle: wait for the next command. */
        int ready = poll(&fd, 1, loop ? 0 : -1);
        if (ready < 0) fail("poll");
        if (ready > 0) {
            if (!fgets(line, sizeof line, stdin)) return 0;
            if (strncmp(line, "loop ", 5) == 0) {
                loop = strtoul(line + 5, NULL, 10) * MIB / PAGE;
                if (loop > total) fail("loop beyond the mapping");
            } else if (strncmp(line, "idle", 4) == 0) {
                loop = 0;
            } else if (strncmp(line, "verify", 6) == 0) {
                check(mem, total);
                printf("verified\n");
                fflush(stdout);
            } else {
                fail("unknown command");
            }
        }
        if (loop) check(mem, loop);
    }
}
