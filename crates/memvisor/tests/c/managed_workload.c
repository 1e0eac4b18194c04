/* A program run under `memvisor run` by tests/run_command.rs. Modes:
 *   work SIZE_MIB EXIT_CODE [hold]  large anonymous memory: patterned writes beyond the budget,
 *                                   MADV_DONTNEED, munmap and remap, mremap, fork (without and
 *                                   with exec); with "hold", prints READY and waits for stdin to
 *                                   close, then verifies everything again. Exits EXIT_CODE.
 *   child-exec                      the exec'd child: checks it runs without the library.
 *   kill-self SIGNAL                dies of SIGNAL.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL

/* Whether the mapping containing addr is a memvisor memfd (or the library is mapped, for
 * addr == 0). */
static int maps_mention(uintptr_t addr, const char *needle) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int found = 0;
    if (!f) fail("open /proc/self/maps");
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
        if (addr != 0 && !(addr >= lo && addr < hi)) continue;
        if (strstr(line, needle)) found = 1;
    }
    fclose(f);
    return found;
}

static uint64_t word(size_t page, size_t k, uint64_t seed) {
    return (page * 0x9E3779B97F4A7C15ULL) ^ (k * 0xBF58476D1CE4E5B9ULL) ^ seed;
}

static void fill(uint64_t *p, size_t pages, size_t first_page, uint64_t seed) {
    for (size_t i = 0; i < pages; i++)
        for (size_t k = 0; k < PAGE / 8; k++) p[i * PAGE / 8 + k] = word(first_page + i, k, seed);
}

static int check(const uint64_t *p, size_t pages, size_t first_page, uint64_t seed) {
    for (size_t i = 0; i < pages; i++)
        for (size_t k = 0; k < PAGE / 8; k++)
            if (p[i * PAGE / 8 + k] != word(first_page + i, k, seed)) return 0;
    return 1;
}

static int is_zero(const unsigned char *p, size_t len) {
    for (size_t i = 0; i < len; i++)
        if (p[i]) return 0;
    return 1;
}

static int child_exec(void) {
    const char *pre = getenv("LD_PRELOAD");
    if (pre && strstr(pre, "memvisor")) return 3;
    if (getenv("MEMVISOR_BUDGET")) return 4;
    if (maps_mention(0, "libmemvisor_preload")) return 5;
    void *q = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED || maps_mention((uintptr_t)q, "memvisor")) return 6;
    return 0;
}

static int wait_child(pid_t pid) {
    int st;
    if (waitpid(pid, &st, 0) != pid) fail("waitpid");
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    return 1000 + WTERMSIG(st);
}

int main(int argc, char **argv) {
    if (argc >= 2 && strcmp(argv[1], "child-exec") == 0) return child_exec();
    if (argc >= 3 && strcmp(argv[1], "kill-self") == 0) {
        signal(atoi(argv[2]), SIG_DFL);
        raise(atoi(argv[2]));
        return 1;
    }
    if (argc < 4 || strcmp(argv[1], "work") != 0) {
        fprintf(stderr, "usage: %s work SIZE_MIB EXIT_CODE [hold] | child-exec | kill-self SIG\n", argv[0]);
        return 64;
    }
    size_t size = strtoul(argv[2], NULL, 10) * MIB, pages = size / PAGE;
    int code = atoi(argv[3]), hold = argc >= 5 && strcmp(argv[4], "hold") == 0;
    const uint64_t seed = 0x5eed;

    uint64_t *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("mmap");
    printf("managed=%d\n", maps_mention((uintptr_t)p, "memvisor"));
    if (!is_zero((unsigned char *)p, size)) fail("fresh mapping not zero");
    fill(p, pages, 0, seed);
    if (!check(p, pages, 0, seed)) fail("pattern after first pass");
    if (!check(p, pages, 0, seed)) fail("pattern after second pass");

    /* MADV_DONTNEED: 2 MiB at 3 MiB read as zeros; neighbours intact. */
    size_t dn = 3 * MIB / PAGE, dl = 2 * MIB / PAGE;
    if (madvise((char *)p + dn * PAGE, dl * PAGE, MADV_DONTNEED)) fail("madvise");
    if (!is_zero((unsigned char *)p + dn * PAGE, dl * PAGE)) fail("MADV_DONTNEED range not zero");
    if (!check(p, dn, 0, seed)) fail("pages before MADV_DONTNEED range");
    if (!check(p + (dn + dl) * PAGE / 8, 16, dn + dl, seed)) fail("pages after MADV_DONTNEED range");
    fill(p + dn * PAGE / 8, dl, dn, seed); /* restore for later checks */

    /* munmap the last 4 MiB and map 4 MiB again: fresh memory reads as zeros. */
    size_t un = pages - 4 * MIB / PAGE;
    if (munmap((char *)p + un * PAGE, 4 * MIB)) fail("munmap tail");
    pages = un;
    unsigned char *q = mmap(NULL, 4 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (q == MAP_FAILED) fail("mmap after munmap");
    if (!is_zero(q, 4 * MIB)) fail("memory mapped after munmap not zero");
    memset(q, 0xab, 4 * MIB);
    if (munmap(q, 4 * MIB)) fail("munmap q");

    /* mremap: grow with MAYMOVE keeps the data, the new part is zero; shrink keeps the head. */
    uint64_t *r = mmap(NULL, 2 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r == MAP_FAILED) fail("mmap r");
    fill(r, 2 * MIB / PAGE, 777, seed);
    uint64_t *r2 = mremap(r, 2 * MIB, 6 * MIB, MREMAP_MAYMOVE);
    if (r2 == MAP_FAILED) fail("mremap grow");
    if (!check(r2, 2 * MIB / PAGE, 777, seed)) fail("data after mremap grow");
    if (!is_zero((unsigned char *)r2 + 2 * MIB, 4 * MIB)) fail("grown part not zero");
    uint64_t *r3 = mremap(r2, 6 * MIB, 1 * MIB, 0);
    if (r3 != r2) fail("mremap shrink moved");
    if (!check(r3, 1 * MIB / PAGE, 777, seed)) fail("data after mremap shrink");
    if (munmap(r3, 1 * MIB)) fail("munmap r3");

    /* fork without exec: managed memory is not in the child (MADV_DONTFORK)... */
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        volatile uint64_t x = p[0];
        (void)x;
        _exit(0);
    }
    int got = wait_child(pid);
    printf("fork-touch=%d\n", got);
    /* ...and the child's own large mappings are plain kernel memory. */
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        unsigned char *c = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (c == MAP_FAILED) _exit(7);
        if (maps_mention((uintptr_t)c, "memvisor")) _exit(8);
        memset(c, 1, 8 * MIB);
        _exit(c[8 * MIB - 1] == 1 ? 0 : 9);
    }
    printf("fork-child=%d\n", wait_child(pid));
    /* fork + exec: the child runs without the library. */
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        execl("/proc/self/exe", argv[0], "child-exec", (char *)NULL);
        _exit(127);
    }
    printf("exec-child=%d\n", wait_child(pid));

    if (!check(p, pages, 0, seed)) fail("pattern after forks");
    if (hold) {
        printf("READY %d\n", (int)getpid());
        fflush(stdout);
        char buf[256];
        while (fread(buf, 1, sizeof buf, stdin) > 0) {
        }
        if (!check(p, pages, 0, seed)) fail("pattern after hold");
    }
    printf("OK\n");
    fflush(stdout);
    return code;
}
