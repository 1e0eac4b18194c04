/* What the C test programs of crates/memvisor/tests share: failing with a line the Rust test
 * prints, and the byte patterns of the test images (tests/common/mod.rs writes the same image
 * pattern) and of guest RAM. */
#ifndef MEMVISOR_TEST_SUPPORT_H
#define MEMVISOR_TEST_SUPPORT_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints "FAIL: WHAT" (with errno, when set) and exits with status 2. */
static void fail(const char *what) {
    if (errno)
        printf("FAIL: %s (errno %d, %s)\n", what, errno, strerror(errno));
    else
        printf("FAIL: %s\n", what);
    fflush(stdout);
    exit(2);
}

/* Byte O of a pattern image (write_pattern_image in tests/common/mod.rs). */
static inline unsigned char pattern_image_byte(uint64_t o) {
    return (unsigned char)((o * 7 + (o >> 12)) & 0xff);
}

/* Byte O of the guest-RAM pattern the programs write themselves. */
static inline unsigned char pattern_ram_byte(uint64_t o) {
    return (unsigned char)((o * 13 + (o >> 16) + 1) & 0xff);
}

#endif
