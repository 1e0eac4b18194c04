/* Smoke test of memvisor.h: a region larger than its budget, written and read back from C. */
#include <stdio.h>
#include <string.h>
#include "memvisor.h"

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "/tmp";
    char err[256];
    memvisor_region_config bad = {8 << 20, 2 << 20, 0, dir, "no-such-policy", 0, -1, -1};
    if (memvisor_region_new(&bad, err, sizeof err) != NULL || strstr(err, "no-such-policy") == NULL) {
        fprintf(stderr, "bad policy accepted or not reported: %s\n", err);
        return 1;
    }
    memvisor_region_config cfg = {8 << 20, 2 << 20, 0, dir, "chunk-queues", 0, 0, 1};
    memvisor_region *r = memvisor_region_new(&cfg, err, sizeof err);
    if (r == NULL) {
        fprintf(stderr, "memvisor_region_new: %s\n", err);
        return 1;
    }
    unsigned char *p = memvisor_region_ptr(r);
    uint64_t len = memvisor_region_len(r);
    for (uint64_t i = 0; i < len; i += 4096) p[i] = (unsigned char)(i >> 12);
    for (uint64_t i = 0; i < len; i += 4096) {
        if (p[i] != (unsigned char)(i >> 12)) {
            fprintf(stderr, "byte %llu differs\n", (unsigned long long)i);
            return 1;
        }
    }
    memvisor_region_stats s;
    if (memvisor_region_get_stats(r, &s) != 0 || s.page_outs == 0 || s.page_ins == 0 ||
        s.resident_chunks > 2) {
        fprintf(stderr, "unexpected stats: outs %llu ins %llu resident %llu\n",
                (unsigned long long)s.page_outs, (unsigned long long)s.page_ins,
                (unsigned long long)s.resident_chunks);
        return 1;
    }
    /* A read-only pass: evictions are clean (no writes). */
    volatile unsigned char sink = 0;
    for (uint64_t i = 0; i < len; i += 4096) sink += p[i];
    (void)sink;
    memvisor_region_stats s2;
    memvisor_region_get_stats(r, &s2);
    if (s2.clean_evictions == 0 || s2.page_outs != s.page_outs) {
        fprintf(stderr, "read-only pass wrote: clean %llu outs %llu -> %llu\n",
                (unsigned long long)s2.clean_evictions, (unsigned long long)s.page_outs,
                (unsigned long long)s2.page_outs);
        return 1;
    }
    /* Run-time control: a smaller budget, another policy, a discarded chunk. */
    if (memvisor_region_set_budget(r, 1 << 20, err, sizeof err) != 0 ||
        memvisor_region_set_policy(r, "clock", err, sizeof err) != 0 ||
        memvisor_region_discard(r, 0, 1 << 20, err, sizeof err) != 0) {
        fprintf(stderr, "run-time control failed: %s\n", err);
        return 1;
    }
    if (memvisor_region_set_policy(r, "no-such-policy", err, sizeof err) == 0 ||
        strstr(err, "no-such-policy") == NULL) {
        fprintf(stderr, "bad policy accepted at run time or not reported: %s\n", err);
        return 1;
    }
    for (uint64_t i = 0; i < len; i += 4096) {
        unsigned char want = i < (1 << 20) ? 0 : (unsigned char)(i >> 12);
        if (p[i] != want) {
            fprintf(stderr, "after control: byte %llu is %u, want %u\n", (unsigned long long)i,
                    p[i], want);
            return 1;
        }
    }
    memvisor_region_get_stats(r, &s2);
    if (s2.resident_chunks > 1) {
        fprintf(stderr, "budget of one chunk not kept: %llu resident\n",
                (unsigned long long)s2.resident_chunks);
        return 1;
    }
    memvisor_region_free(r);
    printf("C API OK: %llu page-outs, %llu page-ins\n", (unsigned long long)s.page_outs,
           (unsigned long long)s.page_ins);
    return 0;
}
