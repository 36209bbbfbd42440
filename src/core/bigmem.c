/* bigmem.c — huge-page-backed allocation for packed weights (see bigmem.h for why). */
#define _GNU_SOURCE
#include "core/bigmem.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HUGE_SZ ((size_t)2 << 20)

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static bool env_off;

static void read_env(void) {
    const char *off = getenv("RP_NO_HUGEPAGES");
    env_off = off && *off && strcmp(off, "0") != 0;
}

/* Decided once per process, so a buffer is always freed the way it was made. */
static bool use_mmap(size_t bytes) {
    if (bytes < RP_BIGMEM_MIN) return false;
    pthread_once(&env_once, read_env);
    return !env_off;
}

static size_t page_round(size_t n) { return (n + 4095) & ~(size_t)4095; }

void *rp_bigmem_alloc(size_t bytes) {
    if (!use_mmap(bytes)) return aligned_alloc(64, bytes ? (bytes + 63) & ~(size_t)63 : 64);
    size_t len = page_round(bytes);
    if (len > SIZE_MAX - HUGE_SZ) return NULL;
    /* Over-map by 2 MiB, then cut the head and tail so the start is
     * 2 MiB-aligned and exactly `len` bytes stay mapped. */
    uint8_t *raw = mmap(NULL, len + HUGE_SZ, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uintptr_t start = ((uintptr_t)raw + HUGE_SZ - 1) & ~(uintptr_t)(HUGE_SZ - 1);
    size_t head = start - (uintptr_t)raw;
    size_t tail = HUGE_SZ - head;
    if (head) munmap(raw, head);
    if (tail) munmap((uint8_t *)start + len, tail);
#ifdef MADV_HUGEPAGE
    /* Advice only: a kernel without THP leaves 4 KiB pages, still correct. */
    madvise((void *)start, len, MADV_HUGEPAGE);
#endif
    return (void *)start;
}

void rp_bigmem_free(void *p, size_t bytes) {
    if (!p) return;
    if (!use_mmap(bytes)) { free(p); return; }
    munmap(p, page_round(bytes));
}

/* The "<key> N kB" line of a /proc file, in bytes; -1 when absent. */
static long long proc_kb_line(const char *path, const char *fmt) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    long long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, fmt, &kb) == 1) break;
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

long long rp_bigmem_huge_bytes(void) { return proc_kb_line("/proc/self/smaps_rollup", "AnonHugePages: %lld kB"); }

long long rp_bigmem_rss_bytes(void) { return proc_kb_line("/proc/self/status", "VmRSS: %lld kB"); }

bool rp_bigmem_huge_enabled(void) {
    pthread_once(&env_once, read_env);
    return !env_off;
}

const char *rp_bigmem_thp_mode(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    if (!f) return buf;
    char line[128];
    if (fgets(line, sizeof line, f)) {   /* e.g. "always [madvise] never" */
        char *a = strchr(line, '['), *b = a ? strchr(a, ']') : NULL;
        if (a && b) snprintf(buf, n, "%.*s", (int)(b - a - 1), a + 1);
    }
    fclose(f);
    return buf;
}
