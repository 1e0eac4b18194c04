/*
 * memvisor guest workload: a static program run by the guest's /init (and usable on the host).
 *
 *   workload mem MIB [--patterns seq,rev,random,zipf] [--passes N] [--seconds S] [--seed S]
 *                    [--alpha A] [--thp on|off]
 *                                    --seconds S repeats the passes until S seconds have passed
 *                                    since the write (the pass in progress finishes; --passes,
 *                                    if given, still caps them)
 *   workload disk DEV PATTERN (SECONDS | --reads N) [--block B] [--seed S] [--alpha A] [--rate R]
 *                 [--verify]         --rate R paces the reads (R a second, open loop) and adds
 *                                    rate=, p50_us= and p99_us= (latency from when each read
 *                                    was due) to the result
 *   workload noop
 *   workload idle SECONDS            sleeps (lets the host act: a balloon, free page reporting)
 *   workload churn MIB SECONDS [--seed S] [--report MS]
 *                                    writes MIB, then for SECONDS verifies and rewrites random
 *                                    pages with a new generation each (memory that changes all
 *                                    the time, as during a live migration), then verifies all;
 *                                    --report MS prints progress (rewrites so far, guest uptime)
 *                                    every MS milliseconds
 *   workload selftest                checks the Zipf sampler, the scatter bijection, the page
 *                                    pattern and the command line parser
 *   workload cmdline [FILE]          run the commands in memvisor.run="..." of FILE
 *                                    (default /proc/cmdline); commands are separated by ';'
 *   workload make-disk-image FILE MIB   write an image whose 4 KiB units carry a known pattern
 *
 * Every result is one line on stdout starting with "MEMVISOR-RESULT ", then space-separated
 * tokens: a bare word or key=value, values quoted with "..." (\" and \\ escaped) when they
 * contain spaces. The run ends with "MEMVISOR-RESULT done ok=1 errors=0"; ok=0 on corruption
 * (errors= counts bad page or block reads, first_bad_page= or first_bad_block= names the
 * first) or after an error, which is reported first as "MEMVISOR-RESULT error message=...".
 * Exit status: 0 ok, 1 corruption, 2 error.
 *
 * Page content in mem: word 0 is the page index, word 1 the seed, word i >= 2 is
 * key(seed, page) + i * GOLDEN, so any page is verified without keeping a copy.
 * Disk image content: the same scheme per 4 KiB unit, with DISK_MAGIC in word 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096u
#define WORDS (PAGE / 8u)
#define GOLDEN 0x9e3779b97f4a7c15ull
#define DISK_MAGIC 0x4d564449534b3031ull /* "MVDISK01" */
#define MAX_TOKENS 64
#define MAX_CMDLINE 8192

/* Corruption found by any command of this run, for the final done line. */
static uint64_t g_corrupt_count;
static const char *g_corrupt_what = "page"; /* "page" or "block" */
static uint64_t g_corrupt_first;

static void note_corruption(const char *what, uint64_t index, uint64_t count) {
    if (!count) return;
    if (!g_corrupt_count) {
        g_corrupt_what = what;
        g_corrupt_first = index;
    }
    g_corrupt_count += count;
}

/* ---- output --------------------------------------------------------------------------- */

static void result_line(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("MEMVISOR-RESULT ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

/* Prints an error line with a quoted message (quotes and backslashes escaped). */
static void error_line(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    printf("MEMVISOR-RESULT error message=\"");
    for (const char *c = msg; *c; c++) {
        if (*c == '"' || *c == '\\') putchar('\\');
        putchar(*c == '\n' || *c == '\r' ? ' ' : *c);
    }
    printf("\"\n");
    fflush(stdout);
}

/* ---- numbers ------------------------------------------------------------------------------ */

static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

struct rng {
    uint64_t state;
};

static uint64_t rng_next(struct rng *r) {
    r->state += GOLDEN;
    return mix64(r->state);
}

/* Uniform in [0, n). */
static uint64_t rng_below(struct rng *r, uint64_t n) {
    return (uint64_t)(((unsigned __int128)rng_next(r) * n) >> 64);
}

/* Uniform in [0, 1). */
static double rng_unit(struct rng *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/*
 * Zipf(alpha) over ranks 1..n by rejection-inversion (W. Hormann, G. Derflinger, 1996):
 * constant memory and time, any alpha > 0. H is an antiderivative of h(x) = x^-alpha,
 * written with expm1/log1p so alpha near 1 stays accurate.
 */
struct zipf {
    double alpha, h_x1, h_n, s;
    uint64_t n;
};

static double zipf_helper1(double x) { return fabs(x) > 1e-8 ? log1p(x) / x : 1.0 - x * (0.5 - x / 3.0); }
static double zipf_helper2(double x) { return fabs(x) > 1e-8 ? expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0); }
static double zipf_h(const struct zipf *z, double x) { return exp(-z->alpha * log(x)); }
static double zipf_big_h(const struct zipf *z, double x) {
    double lx = log(x);
    return zipf_helper2((1.0 - z->alpha) * lx) * lx;
}
static double zipf_big_h_inv(const struct zipf *z, double x) {
    double t = x * (1.0 - z->alpha);
    if (t < -1.0) t = -1.0; /* rounding guard */
    return exp(zipf_helper1(t) * x);
}

static void zipf_init(struct zipf *z, uint64_t n, double alpha) {
    z->alpha = alpha;
    z->n = n;
    z->h_x1 = zipf_big_h(z, 1.5) - 1.0;
    z->h_n = zipf_big_h(z, (double)n + 0.5);
    z->s = 2.0 - zipf_big_h_inv(z, zipf_big_h(z, 2.5) - zipf_h(z, 2.0));
}

/* A rank in [0, n): 0 is the most popular. */
static uint64_t zipf_next(const struct zipf *z, struct rng *r) {
    for (;;) {
        double u = z->h_n + rng_unit(r) * (z->h_x1 - z->h_n);
        double x = zipf_big_h_inv(z, u);
        double k = floor(x + 0.5);
        if (k < 1.0) k = 1.0;
        if (k > (double)z->n) k = (double)z->n;
        if (k - x <= z->s || u >= zipf_big_h(z, k + 0.5) - zipf_h(z, k)) return (uint64_t)k - 1;
    }
}

static uint64_t gcd64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* A bijection of [0, n) that scatters popular ranks over the whole range. */
struct scatter {
    uint64_t n, step, offset;
};

static void scatter_init(struct scatter *s, uint64_t n, uint64_t seed) {
    s->n = n;
    s->step = n > 1 ? (mix64(seed ^ 0x5ca77e5ull) % n) | 1 : 1;
    while (n > 1 && gcd64(s->step, n) != 1) s->step = (s->step + 2) % n;
    if (s->step == 0) s->step = 1;
    s->offset = n ? mix64(seed + 1) % n : 0;
}

static uint64_t scatter_map(const struct scatter *s, uint64_t rank) {
    return (uint64_t)(((unsigned __int128)rank * s->step + s->offset) % s->n);
}

/* ---- page content ------------------------------------------------------------------------ */

static uint64_t page_key(uint64_t tag, uint64_t index) { return mix64(tag * GOLDEN ^ mix64(index + 0x1234567ull)); }

static void fill_unit(uint64_t *w, uint64_t index, uint64_t tag) {
    uint64_t key = page_key(tag, index);
    w[0] = index;
    w[1] = tag;
    for (uint64_t i = 2; i < WORDS; i++) w[i] = key + i * GOLDEN;
}

/* True if the 4 KiB unit holds exactly what fill_unit(index, tag) wrote. */
static bool check_unit(const uint64_t *w, uint64_t index, uint64_t tag) {
    uint64_t key = page_key(tag, index);
    uint64_t diff = (w[0] ^ index) | (w[1] ^ tag);
    for (uint64_t i = 2; i < WORDS; i++) diff |= w[i] ^ (key + i * GOLDEN);
    return diff == 0;
}

/* A /proc/meminfo field in KiB (e.g. "MemAvailable"), or -1. */
static long long meminfo_kib(const char *field) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return -1;
    char line[128];
    size_t len = strlen(field);
    long long kib = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, field, len) == 0 && line[len] == ':' && sscanf(line + len + 1, "%lld", &kib) == 1) break;
    fclose(f);
    return kib;
}

/* ---- argument parsing -------------------------------------------------------------------- */

static bool parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || *end) return false;
    *out = v;
    return true;
}

static bool parse_double(const char *s, double *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || !isfinite(v)) return false;
    *out = v;
    return true;
}

/* The value after an option, or an error naming the option. */
static const char *option_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        error_line("option %s needs a value", argv[*i]);
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

enum pattern { PAT_SEQ, PAT_REV, PAT_RANDOM, PAT_ZIPF };
static const char *const PATTERN_NAMES[] = {"seq", "rev", "random", "zipf"};

static bool parse_pattern(const char *s, enum pattern *out) {
    for (int p = 0; p < 4; p++)
        if (strcmp(s, PATTERN_NAMES[p]) == 0) {
            *out = (enum pattern)p;
            return true;
        }
    return false;
}

/* ---- mem ------------------------------------------------------------------------------------ */

struct mem_tally {
    uint64_t errors;
    uint64_t first_bad_page;
};

static void mem_report(const char *phase, unsigned pass, uint64_t mib, uint64_t pages, uint64_t reads,
                       double ms, const struct mem_tally *t) {
    double mbps = ms > 0 ? (double)reads * PAGE / 1e6 / (ms / 1e3) : 0.0;
    char passbuf[32] = "";
    if (pass) snprintf(passbuf, sizeof passbuf, " pass=%u", pass);
    if (t->errors)
        result_line("phase=%s%s mib=%" PRIu64 " pages=%" PRIu64 " reads=%" PRIu64 " ms=%.1f mbps=%.1f ok=0 errors=%" PRIu64
                    " first_bad_page=%" PRIu64,
                    phase, passbuf, mib, pages, reads, ms, mbps, t->errors, t->first_bad_page);
    else
        result_line("phase=%s%s mib=%" PRIu64 " pages=%" PRIu64 " reads=%" PRIu64 " ms=%.1f mbps=%.1f ok=1 errors=0", phase,
                    passbuf, mib, pages, reads, ms, mbps);
}

static void mem_check(const uint64_t *base, uint64_t page, uint64_t seed, struct mem_tally *phase,
                      struct mem_tally *total) {
    if (check_unit(base + page * WORDS, page, seed)) return;
    if (!phase->errors) phase->first_bad_page = page;
    if (!total->errors) total->first_bad_page = page;
    phase->errors++;
    total->errors++;
}

/*
 * Linux disables THP by default below 512 MiB of RAM ("[never]"); for --thp on, switch it to
 * "madvise" so MADV_HUGEPAGE takes effect. Returns false after printing an error.
 */
static bool thp_allow_madvise(void) {
    const char *path = "/sys/kernel/mm/transparent_hugepage/enabled";
    char buf[128] = "";
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, sizeof buf, f)) {
        error_line("mem: --thp on: cannot read %s: %s", path, strerror(errno));
        if (f) fclose(f);
        return false;
    }
    fclose(f);
    if (!strstr(buf, "[never]")) return true;
    f = fopen(path, "w");
    if (!f || fputs("madvise", f) < 0 || fclose(f) != 0) {
        error_line("mem: --thp on: cannot enable THP in %s: %s", path, strerror(errno));
        return false;
    }
    return true;
}

/* Returns 0 ok, 1 corruption, 2 error. */
static int cmd_mem(int argc, char **argv) {
    uint64_t mib = 0, passes = 1, seed = 1, seconds = 0;
    bool passes_given = false;
    double alpha = 0.99;
    int thp = -1; /* -1 kernel default, 0 MADV_NOHUGEPAGE, 1 MADV_HUGEPAGE */
    enum pattern order[16];
    int norder = 0;
    if (argc < 2 || !parse_u64(argv[1], &mib) || mib == 0 || mib > (1u << 20)) {
        error_line("mem: MIB must be a number of MiB in 1..1048576, got '%s'", argc < 2 ? "" : argv[1]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--patterns") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            norder = 0;
            for (char *save, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
                if (norder == 16 || !parse_pattern(tok, &order[norder])) {
                    error_line("mem: unknown pattern '%s' in --patterns (expected seq, rev, random, zipf)", tok);
                    return 2;
                }
                norder++;
            }
            if (!norder) {
                error_line("mem: --patterns is empty");
                return 2;
            }
        } else if (strcmp(argv[i], "--passes") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_u64(v, &passes) || passes > 1000) {
                error_line("mem: --passes must be a number in 0..1000, got '%s'", v);
                return 2;
            }
            passes_given = true;
        } else if (strcmp(argv[i], "--seconds") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_u64(v, &seconds) || seconds == 0 || seconds > 86400) {
                error_line("mem: --seconds must be a number in 1..86400, got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--seed") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_u64(v, &seed)) {
                error_line("mem: --seed must be an unsigned number, got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--alpha") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_double(v, &alpha) || alpha <= 0.0 || alpha > 10.0) {
                error_line("mem: --alpha must be a number in (0, 10], got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--thp") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (strcmp(v, "on") == 0) {
                thp = 1;
            } else if (strcmp(v, "off") == 0) {
                thp = 0;
            } else {
                error_line("mem: --thp must be on or off, got '%s'", v);
                return 2;
            }
        } else {
            error_line("mem: unknown argument '%s'", argv[i]);
            return 2;
        }
    }
    if (!norder) {
        for (int p = 0; p < 4; p++) order[norder++] = (enum pattern)p;
    }

    uint64_t pages = mib * (1024 * 1024 / PAGE);
    size_t bytes = (size_t)(pages * PAGE);
    uint64_t *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
        error_line("mem: mmap of %" PRIu64 " MiB failed: %s", mib, strerror(errno));
        return 2;
    }
    if (thp == 1 && !thp_allow_madvise()) {
        munmap(base, bytes);
        return 2;
    }
    if (thp >= 0 && madvise(base, bytes, thp ? MADV_HUGEPAGE : MADV_NOHUGEPAGE) != 0) {
        error_line("mem: madvise(%s) failed: %s", thp ? "MADV_HUGEPAGE" : "MADV_NOHUGEPAGE", strerror(errno));
        munmap(base, bytes);
        return 2;
    }
    struct mem_tally total = {0, 0};

    double t0 = now_ms();
    for (uint64_t p = 0; p < pages; p++) fill_unit(base + p * WORDS, p, seed);
    double write_ms = now_ms() - t0;
    /* The write line also says how much anonymous memory the guest backs with huge pages. */
    result_line("phase=write mib=%" PRIu64 " pages=%" PRIu64 " reads=%" PRIu64 " ms=%.1f mbps=%.1f ok=1 errors=0"
                " anon_huge_kib=%lld",
                mib, pages, pages, write_ms, write_ms > 0 ? (double)pages * PAGE / 1e6 / (write_ms / 1e3) : 0.0,
                meminfo_kib("AnonHugePages"));

    struct zipf zipf;
    struct scatter scatter;
    zipf_init(&zipf, pages, alpha);
    scatter_init(&scatter, pages, seed);
    /* With --seconds the passes repeat until the time is up (capped by --passes if given). */
    if (seconds && !passes_given) passes = UINT32_MAX;
    double stop_at = now_ms() + (double)seconds * 1000.0;
    for (unsigned pass = 1; pass <= passes && (!seconds || now_ms() < stop_at); pass++) {
        for (int o = 0; o < norder; o++) {
            struct mem_tally t = {0, 0};
            struct rng rng = {mix64(seed) ^ ((uint64_t)pass << 32) ^ (uint64_t)o};
            t0 = now_ms();
            for (uint64_t i = 0; i < pages; i++) {
                uint64_t page;
                switch (order[o]) {
                case PAT_SEQ: page = i; break;
                case PAT_REV: page = pages - 1 - i; break;
                case PAT_RANDOM: page = rng_below(&rng, pages); break;
                default: page = scatter_map(&scatter, zipf_next(&zipf, &rng)); break;
                }
                mem_check(base, page, seed, &t, &total);
            }
            mem_report(PATTERN_NAMES[order[o]], pass, mib, pages, pages, now_ms() - t0, &t);
        }
    }

    struct mem_tally t = {0, 0};
    t0 = now_ms();
    for (uint64_t p = 0; p < pages; p++) mem_check(base, p, seed, &t, &total);
    mem_report("verify", 0, mib, pages, pages, now_ms() - t0, &t);
    munmap(base, bytes);
    note_corruption("page", total.first_bad_page, total.errors);
    return total.errors ? 1 : 0;
}

/*
 * churn: every page carries tag seed + generation * GOLDEN, the generation of each page kept in
 * an array of its own (guest memory too). Returns 0 ok, 1 corruption, 2 error.
 */
static int cmd_churn(int argc, char **argv) {
    uint64_t mib = 0, secs = 0, seed = 1, report_ms = 0;
    if (argc < 3 || !parse_u64(argv[1], &mib) || mib == 0 || mib > (1u << 20) || !parse_u64(argv[2], &secs) ||
        secs > 3600) {
        error_line("churn: usage: churn MIB SECONDS [--seed S] [--report MS] (MIB in 1..1048576, SECONDS in 0..3600)");
        return 2;
    }
    for (int i = 3; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--seed") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_u64(v, &seed)) {
                error_line("churn: --seed must be an unsigned number, got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--report") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_u64(v, &report_ms) || report_ms == 0 || report_ms > 3600000) {
                error_line("churn: --report must be milliseconds in 1..3600000, got '%s'", v);
                return 2;
            }
        } else {
            error_line("churn: unknown argument '%s'", argv[i]);
            return 2;
        }
    }
    uint64_t pages = mib * (1024 * 1024 / PAGE);
    size_t bytes = (size_t)(pages * PAGE);
    uint64_t *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    uint32_t *gen = calloc(pages, sizeof *gen);
    if (base == MAP_FAILED || !gen) {
        error_line("churn: cannot allocate %" PRIu64 " MiB: %s", mib, strerror(errno));
        return 2;
    }
    struct mem_tally total = {0, 0};
    double t0 = now_ms();
    for (uint64_t p = 0; p < pages; p++) fill_unit(base + p * WORDS, p, seed);
    double write_ms = now_ms() - t0;
    result_line("phase=write mib=%" PRIu64 " pages=%" PRIu64 " reads=%" PRIu64 " ms=%.1f mbps=%.1f ok=1 errors=0", mib,
                pages, pages, write_ms, write_ms > 0 ? (double)bytes / 1e6 / (write_ms / 1e3) : 0.0);
    struct rng rng = {mix64(seed ^ 0xc4u)};
    uint64_t rewrites = 0;
    double end = now_ms() + (double)secs * 1000.0;
    t0 = now_ms();
    double next_report = t0 + (double)report_ms;
    while (now_ms() < end) {
        if (report_ms && now_ms() >= next_report) {
            next_report += (double)report_ms;
            result_line("phase=churn-progress ms=%.1f rewrites=%" PRIu64 " errors=%" PRIu64, now_ms() - t0, rewrites,
                        total.errors);
        }
        for (int k = 0; k < 1024; k++) {
            uint64_t p = rng_below(&rng, pages);
            mem_check(base, p, seed + gen[p] * GOLDEN, &total, &total);
            gen[p]++;
            fill_unit(base + p * WORDS, p, seed + gen[p] * GOLDEN);
            rewrites++;
        }
    }
    double ms = now_ms() - t0;
    result_line("phase=churn mib=%" PRIu64 " pages=%" PRIu64 " rewrites=%" PRIu64 " ms=%.1f ok=%d errors=%" PRIu64, mib,
                pages, rewrites, ms, total.errors ? 0 : 1, total.errors);
    struct mem_tally t = {0, 0};
    t0 = now_ms();
    for (uint64_t p = 0; p < pages; p++) mem_check(base, p, seed + gen[p] * GOLDEN, &t, &total);
    mem_report("verify", 0, mib, pages, pages, now_ms() - t0, &t);
    munmap(base, bytes);
    free(gen);
    note_corruption("page", total.first_bad_page, total.errors);
    return total.errors ? 1 : 0;
}

/* ---- disk ----------------------------------------------------------------------------------- */

/* Read latencies of a paced disk run: log-linear buckets, 16 per doubling of microseconds
 * (about 4% wide), from 1 us to over an hour. */
#define LAT_SUB 16
#define LAT_BUCKETS (LAT_SUB * 32)

static unsigned lat_bucket(double us) {
    if (us < 1.0) return 0;
    unsigned b = (unsigned)(log2(us) * LAT_SUB);
    return b >= LAT_BUCKETS ? LAT_BUCKETS - 1 : b;
}

/* The upper edge of the bucket that holds the q-quantile of n recorded latencies. */
static double lat_quantile(const uint64_t *hist, uint64_t n, double q) {
    if (n == 0) return 0.0;
    uint64_t rank = (uint64_t)ceil(q * (double)n), seen = 0;
    if (rank == 0) rank = 1;
    for (unsigned b = 0; b < LAT_BUCKETS; b++) {
        seen += hist[b];
        if (seen >= rank) return exp2((double)(b + 1) / LAT_SUB);
    }
    return exp2((double)LAT_BUCKETS / LAT_SUB);
}

/* Keeps one descriptor of each device read open until the program exits. Linux drops a block
 * device's page cache at its last close (kill_bdev), so without it every disk command would
 * start with a cold guest cache; with it, commands in one run share the cache, as the
 * programs of a long-running guest do. */
static void hold_open(const char *dev, int fd) {
    static char held[8][64];
    static int count;
    for (int i = 0; i < count; i++)
        if (strcmp(held[i], dev) == 0) return;
    if (count == 8 || strlen(dev) >= sizeof held[0]) return;
    if (dup(fd) < 0) return; /* the duplicate stays open on purpose */
    strcpy(held[count++], dev);
}

/* Returns 0 ok, 1 corruption, 2 error. */
static int cmd_disk(int argc, char **argv) {
    uint64_t block = PAGE, seed = 1, reads_limit = 0;
    double seconds = 0.0, alpha = 0.99, rate = 0.0;
    bool verify = false, by_reads = false, have_amount = false;
    enum pattern pattern;
    if (argc < 3) {
        error_line("disk: usage: disk DEV seq|random|zipf (SECONDS | --reads N) [--block B] [--seed S] [--alpha A] [--rate R] [--verify]");
        return 2;
    }
    const char *dev = argv[1];
    if (!parse_pattern(argv[2], &pattern) || pattern == PAT_REV) {
        error_line("disk: unknown pattern '%s' (expected seq, random, zipf)", argv[2]);
        return 2;
    }
    for (int i = 3; i < argc; i++) {
        const char *v;
        if (strcmp(argv[i], "--reads") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (have_amount) {
                error_line("disk: give either SECONDS or --reads N, not both");
                return 2;
            }
            if (!parse_u64(v, &reads_limit) || reads_limit == 0) {
                error_line("disk: --reads must be a positive number, got '%s'", v);
                return 2;
            }
            by_reads = have_amount = true;
        } else if (strcmp(argv[i], "--block") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_u64(v, &block) || block == 0 || block % PAGE || block > (64u << 20)) {
                error_line("disk: --block must be a multiple of 4096 up to 64 MiB, got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--seed") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_u64(v, &seed)) {
                error_line("disk: --seed must be an unsigned number, got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--alpha") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_double(v, &alpha) || alpha <= 0.0 || alpha > 10.0) {
                error_line("disk: --alpha must be a number in (0, 10], got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--rate") == 0) {
            if (!(v = option_value(argc, argv, &i))) return 2;
            if (!parse_double(v, &rate) || !(rate >= 1.0 && rate <= 1e7)) {
                error_line("disk: --rate must be reads per second in 1..10000000, got '%s'", v);
                return 2;
            }
        } else if (strcmp(argv[i], "--verify") == 0) {
            verify = true;
        } else if (!have_amount && parse_double(argv[i], &seconds) && seconds > 0.0) {
            have_amount = true;
        } else {
            error_line("disk: unexpected argument '%s'", argv[i]);
            return 2;
        }
    }
    if (!have_amount) {
        error_line("disk: give a duration in SECONDS or --reads N");
        return 2;
    }
    /* devtmpfs creates the node shortly after virtio_blk probes the disk: wait up to 3 s. */
    int fd = open(dev, O_RDONLY);
    for (int tries = 0; fd < 0 && errno == ENOENT && tries < 300; tries++) {
        usleep(10000);
        fd = open(dev, O_RDONLY);
    }
    if (fd < 0) {
        error_line("disk: cannot open %s: %s", dev, strerror(errno));
        return 2;
    }
    hold_open(dev, fd);
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < 0 || (uint64_t)size < block) {
        error_line("disk: %s is smaller than one block of %" PRIu64 " bytes (size %lld)", dev, block, (long long)size);
        close(fd);
        return 2;
    }
    uint64_t blocks = (uint64_t)size / block;
    uint64_t *buf = mmap(NULL, block, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) {
        error_line("disk: cannot allocate a %" PRIu64 "-byte buffer: %s", block, strerror(errno));
        close(fd);
        return 2;
    }
    struct rng rng = {mix64(seed)};
    struct zipf zipf;
    struct scatter scatter;
    zipf_init(&zipf, blocks, alpha);
    scatter_init(&scatter, blocks, seed);
    uint64_t reads = 0, errors = 0, first_bad = 0;
    /* Paced (--rate): read k is due at t0 + k / rate (open loop: a late read is issued at once,
     * and its latency counts from when it was due, so time spent behind is not hidden; a read
     * that was waited for counts from the wake-up, so the sleep's own lateness is not added). */
    static uint64_t lat_hist[LAT_BUCKETS];
    memset(lat_hist, 0, sizeof lat_hist);
    double t0 = now_ms(), deadline = t0 + seconds * 1e3, t = t0, from = t0;
    for (;;) {
        if (rate > 0.0) {
            double due = t0 + (double)reads * 1e3 / rate;
            if (!by_reads && due >= deadline) break;
            t = now_ms();
            from = due;
            if (due > t) {
                double wait_us = (due - t) * 1e3;
                struct timespec ts = {(time_t)(wait_us / 1e6), (long)(fmod(wait_us, 1e6) * 1e3)};
                while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
                }
                from = now_ms();
            }
        }
        if (by_reads ? reads >= reads_limit : (rate == 0.0 && (reads & 63) == 0 && (t = now_ms()) >= deadline)) break;
        uint64_t b;
        switch (pattern) {
        case PAT_SEQ: b = reads % blocks; break;
        case PAT_RANDOM: b = rng_below(&rng, blocks); break;
        default: b = scatter_map(&scatter, zipf_next(&zipf, &rng)); break;
        }
        uint64_t done = 0;
        while (done < block) {
            ssize_t n = pread(fd, (char *)buf + done, block - done, (off_t)(b * block + done));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                error_line("disk: read of block %" PRIu64 " (offset %" PRIu64 ") of %s failed: %s", b, b * block, dev,
                           n < 0 ? strerror(errno) : "unexpected end of device");
                close(fd);
                return 2;
            }
            done += (uint64_t)n;
        }
        if (verify) {
            for (uint64_t u = 0; u < block / PAGE; u++) {
                uint64_t unit = b * (block / PAGE) + u;
                if (!check_unit(buf + u * WORDS, unit, DISK_MAGIC)) {
                    if (!errors) first_bad = b;
                    errors++;
                    break;
                }
            }
        }
        if (rate > 0.0) lat_hist[lat_bucket((now_ms() - from) * 1e3)]++;
        reads++;
    }
    double ms = now_ms() - t0;
    close(fd);
    munmap(buf, block);
    double mbps = ms > 0 ? (double)reads * (double)block / 1e6 / (ms / 1e3) : 0.0;
    char tail[96] = "ok=1 errors=0", paced[96] = "";
    if (errors) snprintf(tail, sizeof tail, "ok=0 errors=%" PRIu64 " first_bad_block=%" PRIu64, errors, first_bad);
    if (rate > 0.0)
        snprintf(paced, sizeof paced, " rate=%.1f p50_us=%.0f p99_us=%.0f", rate, lat_quantile(lat_hist, reads, 0.5),
                 lat_quantile(lat_hist, reads, 0.99));
    result_line("phase=disk pattern=%s dev=%s block=%" PRIu64 " blocks=%" PRIu64 " reads=%" PRIu64 " bytes=%" PRIu64
                " ms=%.1f mbps=%.1f verified=%d%s %s",
                PATTERN_NAMES[pattern], dev, block, blocks, reads, reads * block, ms, mbps, verify ? 1 : 0, paced, tail);
    note_corruption("block", first_bad, errors);
    return errors ? 1 : 0;
}

/* ---- make-disk-image (host side) ------------------------------------------------------------ */

static int cmd_make_disk_image(int argc, char **argv) {
    uint64_t mib;
    if (argc != 3 || !parse_u64(argv[2], &mib) || mib == 0 || mib > (1u << 22)) {
        error_line("make-disk-image: usage: make-disk-image FILE MIB (MIB in 1..4194304)");
        return 2;
    }
    /* The image may go to a shared directory and this may run as root: never through a
     * symlink (O_NOFOLLOW), and truncate only a regular file of ours with one link (not a
     * hard link someone planted to a file of root's). */
    int fd = open(argv[1], O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        error_line("make-disk-image: cannot create %s: %s", argv[1], strerror(errno));
        return 2;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_uid != geteuid()) {
        error_line("make-disk-image: refusing %s: not a regular file of this user with one link", argv[1]);
        close(fd);
        return 2;
    }
    if (ftruncate(fd, 0) != 0) {
        error_line("make-disk-image: cannot truncate %s: %s", argv[1], strerror(errno));
        close(fd);
        return 2;
    }
    enum { CHUNK_UNITS = 256 };
    static uint64_t chunk[CHUNK_UNITS * WORDS];
    uint64_t units = mib * (1024 * 1024 / PAGE);
    for (uint64_t u = 0; u < units; u += CHUNK_UNITS) {
        for (uint64_t k = 0; k < CHUNK_UNITS; k++) fill_unit(chunk + k * WORDS, u + k, DISK_MAGIC);
        size_t len = sizeof chunk, done = 0;
        while (done < len) {
            ssize_t n = write(fd, (char *)chunk + done, len - done);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) {
                error_line("make-disk-image: write to %s at offset %" PRIu64 " failed: %s", argv[1], u * PAGE + done,
                           strerror(errno));
                close(fd);
                return 2;
            }
            done += (size_t)n;
        }
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        error_line("make-disk-image: cannot flush %s: %s", argv[1], strerror(errno));
        return 2;
    }
    result_line("image path=%s mib=%" PRIu64 " units=%" PRIu64, argv[1], mib, units);
    return 0;
}

static bool cmdline_value(const char *line, char *out, size_t cap);

/* ---- selftest -------------------------------------------------------------------------------- */

/* Checks the generators and the page pattern; prints one error line per failed check. */
static int cmd_selftest(void) {
    int failures = 0;
    const double alphas[] = {0.5, 0.99, 1.5};
    for (int a = 0; a < 3; a++) {
        const uint64_t n = 1000, samples = 2000000;
        static uint64_t counts[1000];
        memset(counts, 0, sizeof counts);
        struct zipf z;
        struct rng r = {(uint64_t)a + 1};
        zipf_init(&z, n, alphas[a]);
        for (uint64_t i = 0; i < samples; i++) {
            uint64_t k = zipf_next(&z, &r);
            if (k >= n) {
                error_line("selftest: zipf(%g) returned rank %" PRIu64 " of %" PRIu64, alphas[a], k, n);
                return 2;
            }
            counts[k]++;
        }
        double norm = 0.0;
        for (uint64_t k = 1; k <= n; k++) norm += pow((double)k, -alphas[a]);
        for (uint64_t k = 0; k < 5; k++) {
            double expected = pow((double)(k + 1), -alphas[a]) / norm;
            double seen = (double)counts[k] / (double)samples;
            if (fabs(seen - expected) > 0.02 * expected) {
                error_line("selftest: zipf(%g) rank %" PRIu64 " has frequency %.5f, expected %.5f", alphas[a], k, seen,
                           expected);
                failures++;
            }
        }
    }
    const uint64_t sizes[] = {1, 2, 3, 1000, 65536, 196608};
    for (int i = 0; i < 6; i++) {
        uint64_t n = sizes[i];
        unsigned char *seen = calloc(n, 1);
        struct scatter sc;
        scatter_init(&sc, n, 7);
        for (uint64_t r = 0; r < n && seen; r++) {
            uint64_t m = scatter_map(&sc, r);
            if (m >= n || seen[m]++) {
                error_line("selftest: scatter over %" PRIu64 " is not a bijection (rank %" PRIu64 ")", n, r);
                failures++;
                break;
            }
        }
        free(seen);
    }
    static uint64_t page[WORDS];
    fill_unit(page, 12345, 99);
    if (!check_unit(page, 12345, 99) || check_unit(page, 12346, 99) || check_unit(page, 12345, 98)) {
        error_line("selftest: a page does not verify as itself only");
        failures++;
    }
    for (unsigned bit = 0; bit < PAGE * 8; bit += 97) {
        page[bit / 64] ^= 1ull << (bit % 64);
        bool ok = check_unit(page, 12345, 99);
        page[bit / 64] ^= 1ull << (bit % 64);
        if (ok) {
            error_line("selftest: flipping bit %u of a page goes unnoticed", bit);
            failures++;
            break;
        }
    }
    char value[64];
    if (!cmdline_value("a=1 xmemvisor.run=no memvisor.run=\"mem 8; noop\" quiet", value, sizeof value) ||
        strcmp(value, "mem 8; noop") != 0 || cmdline_value("memvisor.runx=1", value, sizeof value)) {
        error_line("selftest: memvisor.run= is not extracted from a kernel command line");
        failures++;
    }
    result_line("selftest checks_failed=%d", failures);
    return failures ? 2 : 0;
}

/* ---- dispatch ------------------------------------------------------------------------------- */

static int run_command(int argc, char **argv) {
    if (argc < 1) {
        error_line("empty workload command");
        return 2;
    }
    if (strcmp(argv[0], "mem") == 0) return cmd_mem(argc, argv);
    if (strcmp(argv[0], "disk") == 0) return cmd_disk(argc, argv);
    if (strcmp(argv[0], "selftest") == 0) return cmd_selftest();
    if (strcmp(argv[0], "noop") == 0) {
        if (argc != 1) {
            error_line("noop takes no arguments, got '%s'", argv[1]);
            return 2;
        }
        return 0;
    }
    if (strcmp(argv[0], "churn") == 0) return cmd_churn(argc, argv);
    if (strcmp(argv[0], "idle") == 0) {
        char *end = NULL;
        long secs = argc == 2 ? strtol(argv[1], &end, 10) : -1;
        if (argc != 2 || end == argv[1] || *end != '\0' || secs < 0 || secs > 3600) {
            error_line("idle: usage: idle SECONDS (0..3600)");
            return 2;
        }
        sleep((unsigned)secs);
        return 0;
    }
    error_line("unknown workload command '%s' (expected mem, disk, churn, idle or noop)", argv[0]);
    return 2;
}

/*
 * Finds memvisor.run= in a kernel command line and copies its value (quotes removed) to out.
 * Returns false if absent.
 */
static bool cmdline_value(const char *line, char *out, size_t cap) {
    const char *key = "memvisor.run=";
    const char *p = line;
    while ((p = strstr(p, key)) != NULL) {
        if (p == line || p[-1] == ' ' || p[-1] == '\t') break;
        p += 1;
    }
    if (!p) return false;
    p += strlen(key);
    size_t n = 0;
    bool quoted = false;
    for (; *p; p++) {
        if (*p == '"') {
            quoted = !quoted;
            continue;
        }
        if (!quoted && (*p == ' ' || *p == '\t' || *p == '\n')) break;
        if (n + 1 < cap) out[n++] = *p;
    }
    out[n] = 0;
    return true;
}

static int cmd_cmdline(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "/proc/cmdline";
    static char line[MAX_CMDLINE], value[MAX_CMDLINE];
    double uptime = -1.0;
    FILE *up = fopen("/proc/uptime", "r");
    if (up) {
        if (fscanf(up, "%lf", &uptime) != 1) uptime = -1.0;
        fclose(up);
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        result_line("start uptime_ms=%.0f", uptime * 1e3);
        error_line("cannot read the kernel command line from %s: %s", path, strerror(errno));
        return 2;
    }
    size_t len = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[len] = 0;
    if (!cmdline_value(line, value, sizeof value)) {
        result_line("start uptime_ms=%.0f", uptime * 1e3);
        error_line("no memvisor.run=\"...\" on the kernel command line");
        return 2;
    }
    printf("MEMVISOR-RESULT start uptime_ms=%.0f mem_available_kib=%lld command=\"", uptime * 1e3,
           meminfo_kib("MemAvailable"));
    for (const char *c = value; *c; c++) {
        if (*c == '"' || *c == '\\') putchar('\\');
        putchar(*c);
    }
    printf("\"\n");
    fflush(stdout);

    int worst = 0;
    char *save_cmd;
    for (char *cmd = strtok_r(value, ";", &save_cmd); cmd; cmd = strtok_r(NULL, ";", &save_cmd)) {
        char *args[MAX_TOKENS];
        int n = 0;
        char *save_tok;
        for (char *tok = strtok_r(cmd, " \t", &save_tok); tok; tok = strtok_r(NULL, " \t", &save_tok)) {
            if (n == MAX_TOKENS) {
                error_line("a workload command has more than %d words", MAX_TOKENS);
                return 2;
            }
            args[n++] = tok;
        }
        if (n == 0) continue;
        int rc = run_command(n, args);
        if (rc > worst) worst = rc;
        if (rc == 2) break;
    }
    return worst;
}

int main(int argc, char **argv) {
    int rc;
    if (argc >= 2 && strcmp(argv[1], "cmdline") == 0)
        rc = cmd_cmdline(argc - 1, argv + 1);
    else if (argc >= 2 && strcmp(argv[1], "make-disk-image") == 0)
        return cmd_make_disk_image(argc - 1, argv + 1) ? 2 : 0;
    else
        rc = run_command(argc - 1, argv + 1);
    if (g_corrupt_count)
        result_line("done ok=0 errors=%" PRIu64 " first_bad_%s=%" PRIu64, g_corrupt_count, g_corrupt_what, g_corrupt_first);
    else
        result_line("done ok=%d errors=0", rc == 0 ? 1 : 0);
    return rc;
}
