/* A program run under `memvisor run` by tests/code_region_under_run.rs: it reserves address
 * space and makes it accessible with mprotect, as QEMU's TCG does for its translated-code
 * buffer (x86-64 only).
 *   jit SIZE_MIB  1. a PROT_NONE reservation of SIZE_MIB, made read-write-execute by one
 *                    mprotect but for its last page (TCG's guard page); a small function in
 *                    every page (mov eax, imm32; ret) and a pattern after it; every function
 *                    called and every pattern checked, in order and in a stride; every third
 *                    function patched (as TCG patches jumps) and all called again; 256
 *                    pages of it replaced by a MAP_FIXED read-write-execute anonymous
 *                    mapping (as a JIT drops part of its cache), checked to read as zeros,
 *                    written and called again;
 *                 2. a reservation made read-write by one mprotect: written and checked;
 *                    a MAP_FIXED read-write-execute mapping over its first half MiB
 *                    (refused while it is managed, with ENOMEM and the data kept), then a
 *                    read-write one (zeros; below --min-region, so never a region of its
 *                    own), then written again;
 *                 3. a reservation made accessible in a small step first (an allocator
 *                    growing a heap), then by a large mprotect: the data written through
 *                    the small step is kept;
 *                 4. a reservation made read-write by a raw system call and written, then
 *                    by mprotect: not managed (it holds pages), the data kept;
 *                 5. a reservation touched by pkey_mprotect (key -1: protection only), then
 *                    made read-write by mprotect: not managed, although it holds no page;
 *                 6. a code buffer made accessible in 4 slices of 4 MiB, each by one
 *                    mprotect but for its last page (TCG with several vCPUs): every slice
 *                    managed, its guard page not; a function and pattern in every page,
 *                    each page's own, called and checked;
 *                 prints what is managed, READY PID, waits for stdin to close, checks
 *                 everything again and prints OK.
 * Every failure prints "FAIL: what" and exits 2. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "test_support.h"

#define MIB (1024UL * 1024UL)
#define PAGE 4096UL

/* The permissions and name of the mapping containing addr, from /proc/self/maps. */
static void mapping_of(uintptr_t addr, char perms[5], char *name, size_t name_len) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    perms[0] = 0;
    name[0] = 0;
    if (!f) fail("open /proc/self/maps");
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char p[5];
        int off = 0;
        if (sscanf(line, "%lx-%lx %4s %*s %*s %*s %n", &lo, &hi, p, &off) < 3) continue;
        if (addr < lo || addr >= hi) continue;
        memcpy(perms, p, 5);
        snprintf(name, name_len, "%s", off > 0 ? line + off : "");
        name[strcspn(name, "\n")] = 0;
    }
    fclose(f);
}

static int managed(uintptr_t addr) {
    char perms[5], name[256];
    mapping_of(addr, perms, name, sizeof name);
    return strstr(name, "memvisor") != NULL;
}

static uint32_t value(size_t page, uint32_t round) {
    return (uint32_t)(page * 2654435761u) ^ (round * 0x9E3779B9u);
}

static uint64_t word(size_t page, size_t k) {
    return (page * 0x9E3779B97F4A7C15ULL) ^ (k * 0xBF58476D1CE4E5B9ULL);
}

/* Writes page i's function (returning value(i, round)) and, after it, its pattern. */
static void write_page(unsigned char *base, size_t i, uint32_t round) {
    unsigned char *p = base + i * PAGE;
    uint32_t v = value(i, round);
    p[0] = 0xb8; /* mov eax, imm32 */
    memcpy(p + 1, &v, 4);
    p[5] = 0xc3; /* ret */
    uint64_t *w = (uint64_t *)(p + 64);
    for (size_t k = 0; k < (PAGE - 64) / 8; k++) w[k] = word(i, k);
}

static uint32_t round_of(size_t i, int patched) {
    return patched && i % 3 == 0 ? 1 : 0;
}

static void check_page(unsigned char *base, size_t i, int patched, const char *when) {
    uint32_t (*fn)(void) = (uint32_t(*)(void))(void *)(base + i * PAGE);
    if (fn() != value(i, round_of(i, patched))) {
        printf("FAIL: function in page %zu returned a wrong value %s\n", i, when);
        fflush(stdout);
        exit(2);
    }
    const uint64_t *w = (const uint64_t *)(base + i * PAGE + 64);
    for (size_t k = 0; k < (PAGE - 64) / 8; k++)
        if (w[k] != word(i, k)) {
            printf("FAIL: pattern in page %zu %s\n", i, when);
            fflush(stdout);
            exit(2);
        }
}

static void check_code(unsigned char *base, size_t pages, int patched, const char *when) {
    for (size_t i = 0; i < pages; i++) check_page(base, i, patched, when);
    /* A stride that visits every page once: 769 is prime and divides no page count used. */
    for (size_t n = 0, i = 0; n < pages; n++, i = (i + 769) % pages) check_page(base, i, patched, when);
}

#define SLICES 4UL
#define SLICE (4 * MIB)

/* Whether page i of the sliced buffer is a slice's guard page (its last). */
static int is_slice_guard(size_t i) {
    return i % (SLICE / PAGE) == SLICE / PAGE - 1;
}

/* Calls and checks every page of the sliced buffer but the guard pages, in order and in a
 * stride that crosses the slices. */
static void check_slices(unsigned char *base, const char *when) {
    size_t pages = SLICES * SLICE / PAGE;
    for (size_t n = 0, i = 0; n < 2 * pages; n++, i = n < pages ? n : (i + 769) % pages)
        if (!is_slice_guard(i)) check_page(base, i, 0, when);
}

static void fill_data(uint64_t *p, size_t len, uint64_t seed) {
    for (size_t k = 0; k < len / 8; k++) p[k] = word(k, seed);
}

static void check_data(const uint64_t *p, size_t len, uint64_t seed, const char *what) {
    for (size_t k = 0; k < len / 8; k++)
        if (p[k] != word(k, seed)) fail(what);
}

static unsigned char *reserve(size_t len) {
    unsigned char *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("mmap PROT_NONE reservation");
    return p;
}

int main(int argc, char **argv) {
#if !defined(__x86_64__)
    (void)argc;
    (void)argv;
    printf("SKIP: x86-64 only\n");
    return 0;
#else
    if (argc < 3 || strcmp(argv[1], "jit") != 0) {
        fprintf(stderr, "usage: %s jit SIZE_MIB\n", argv[0]);
        return 64;
    }
    size_t size = strtoul(argv[2], NULL, 10) * MIB;
    size_t pages = size / PAGE - 1; /* the last page is the guard */

    /* 1. The code buffer. */
    unsigned char *code = reserve(size);
    if (mprotect(code, size - PAGE, PROT_READ | PROT_WRITE | PROT_EXEC)) fail("mprotect RWX");
    char perms[5], name[256];
    mapping_of((uintptr_t)code, perms, name, sizeof name);
    if (strcmp(perms, "rwxs") != 0 && strcmp(perms, "rwxp") != 0) fail("code buffer not rwx");
    printf("code-managed=%d\n", managed((uintptr_t)code));
    mapping_of((uintptr_t)code + size - PAGE, perms, name, sizeof name);
    printf("guard=%s\n", perms);
    for (size_t i = 0; i < pages; i++) write_page(code, i, 0);
    check_code(code, pages, 0, "after the first writes");
    for (size_t i = 0; i < pages; i += 3) write_page(code, i, 1);
    check_code(code, pages, 1, "after patching");
    unsigned char *part = code + 64 * PAGE;
    if (mmap(part, 256 * PAGE, PROT_READ | PROT_WRITE | PROT_EXEC,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != part)
        fail("MAP_FIXED read-write-execute over the code buffer");
    for (size_t k = 0; k < 256 * PAGE; k++)
        if (part[k]) fail("the MAP_FIXED part of the code buffer does not read as zeros");
    printf("remapped-managed=%d\n", managed((uintptr_t)part));
    for (size_t i = 64; i < 64 + 256; i++) write_page(code, i, round_of(i, 1));
    check_code(code, pages, 1, "after the MAP_FIXED");

    /* 2. A reservation made read-write in one call. */
    size_t rw_len = 24 * MIB;
    uint64_t *rw = (uint64_t *)reserve(rw_len + PAGE);
    if (mprotect(rw, rw_len, PROT_READ | PROT_WRITE)) fail("mprotect RW");
    printf("rw-managed=%d\n", managed((uintptr_t)rw));
    fill_data(rw, rw_len, 11);
    check_data(rw, rw_len, 11, "read-write reservation");
    void *x = mmap(rw, MIB / 2, PROT_READ | PROT_WRITE | PROT_EXEC,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    printf("rw-exec-refused=%d\n", x == MAP_FAILED && errno == ENOMEM);
    if (x == MAP_FAILED) check_data(rw, rw_len, 11, "read-write data after a refused MAP_FIXED");
    if (mmap(rw, MIB / 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
        (void *)rw)
        fail("MAP_FIXED read-write over the read-write reservation");
    for (size_t k = 0; k < MIB / 2 / 8; k++)
        if (rw[k]) fail("the MAP_FIXED part of the read-write reservation does not read as zeros");
    fill_data(rw, rw_len, 11);

    /* 3. A reservation used by a small step first: never taken for an empty one. */
    size_t heap_len = 32 * MIB;
    uint64_t *heap = (uint64_t *)reserve(heap_len);
    if (mprotect(heap, 64 * 1024, PROT_READ | PROT_WRITE)) fail("mprotect small step");
    fill_data(heap, 64 * 1024, 23);
    if (mprotect(heap, 24 * MIB, PROT_READ | PROT_WRITE)) fail("mprotect large step");
    printf("stepped-managed=%d\n", managed((uintptr_t)heap));
    check_data(heap, 64 * 1024, 23, "data written before the large mprotect");
    fill_data(heap, 24 * MIB, 29);

    /* 4. Made accessible behind the library's back, and written. */
    uint64_t *raw = (uint64_t *)reserve(32 * MIB);
    if (syscall(SYS_mprotect, raw, 16 * MIB, PROT_READ | PROT_WRITE)) fail("raw mprotect");
    fill_data(raw, 16 * MIB, 31);
    if (mprotect(raw, 24 * MIB, PROT_READ | PROT_WRITE)) fail("mprotect after raw mprotect");
    printf("raw-managed=%d\n", managed((uintptr_t)raw));
    check_data(raw, 16 * MIB, 31, "data written before the library saw the reservation");

    /* 5. Touched by pkey_mprotect only. */
    unsigned char *pk = reserve(32 * MIB);
    if (pkey_mprotect(pk, 64 * 1024, PROT_READ, -1)) fail("pkey_mprotect");
    if (mprotect(pk, 24 * MIB, PROT_READ | PROT_WRITE)) fail("mprotect after pkey_mprotect");
    printf("pkey-managed=%d\n", managed((uintptr_t)pk));

    /* 6. A code buffer made accessible in slices, each followed by its guard page. */
    unsigned char *sl = reserve(SLICES * SLICE);
    int slices_managed = 0;
    for (size_t k = 0; k < SLICES; k++) {
        if (mprotect(sl + k * SLICE, SLICE - PAGE, PROT_READ | PROT_WRITE | PROT_EXEC))
            fail("mprotect RWX slice");
        slices_managed += managed((uintptr_t)(sl + k * SLICE));
    }
    printf("slices-managed=%d\n", slices_managed);
    mapping_of((uintptr_t)sl + SLICE - PAGE, perms, name, sizeof name);
    printf("slice-guard=%s\n", perms);
    for (size_t i = 0; i < SLICES * SLICE / PAGE; i++)
        if (!is_slice_guard(i)) write_page(sl, i, 0);
    check_slices(sl, "after the first writes");

    printf("READY %d\n", (int)getpid());
    fflush(stdout);
    char buf[256];
    while (fread(buf, 1, sizeof buf, stdin) > 0) {
    }
    check_code(code, pages, 1, "after the hold");
    check_data(rw, rw_len, 11, "read-write reservation after the hold");
    check_data(heap, 24 * MIB, 29, "stepped reservation after the hold");
    check_data(raw, 16 * MIB, 31, "raw reservation after the hold");
    check_slices(sl, "after the hold");
    printf("OK\n");
    fflush(stdout);
    return 0;
#endif
}
