/* bandwidth.c — includes internals (a kernel micro-benchmark): the probe reads from rp_bigmem pages, as the packed
 * weights sit on, with the kernels' vector width. The memory-bandwidth probe: four read patterns over that buffer. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "bandwidth.h"
#include "cli.h"
#include "core/bigmem.h"
#include "kernels/cpu.h"

/* ---- memory bandwidth: each thread streams its slice of a large buffer ----
 * One core's streaming rate is bounded by how many cache-line misses it keeps
 * in flight, which depends on the access pattern, so the probe reads four
 * ways and the best is the ceiling: one sequential stream of 8-byte loads;
 * four streams (the slice's quarters read in lockstep, as a GEMV over four
 * row groups does); one stream with a software prefetch into L2 4 KiB ahead;
 * one stream of full-line vector loads (AVX-512 or AVX2, as the kernels
 * read). The buffer comes from rp_bigmem_alloc like the packed weights, so
 * both sit on the same kind of pages (2 MiB where the OS allows; in one
 * process a GEMV read 0-4 % slower from 4 KiB pages here). On this project's
 * Zen 4 VM the patterns have differed by up to ~1.5x in some phases. */

static const char *const k_bw_names[CLI_BW_PATTERNS] = {"one stream", "four streams", "L2 prefetch", "vector loads"};

const char *cli_bw_pattern_name(int pattern) {
    return pattern >= 0 && pattern < CLI_BW_PATTERNS ? k_bw_names[pattern] : "?";
}

typedef uint64_t bw_v8 __attribute__((vector_size(64), aligned(64)));
#if defined(__x86_64__)
#define BW_TARGET(isa) __attribute__((target(isa)))
#else
#define BW_TARGET(isa)   /* the compiler's own vector width: the generic vectors below lower to it */
#endif
typedef uint64_t bw_v4 __attribute__((vector_size(32), aligned(32)));

/* n words (a multiple of 8) from 64-byte-aligned p; two lines per step, two
 * independent accumulators. */
BW_TARGET("avx512f") static uint64_t bw_wide512(const uint64_t *p, size_t n) {
    bw_v8 a = {0}, b = {0};
    const bw_v8 *v = (const bw_v8 *)(const void *)p;
    size_t lines = n / 8, i = 0;
    for (; i + 2 <= lines; i += 2) { a ^= v[i]; b ^= v[i + 1]; }
    if (i < lines) a ^= v[i];
    a ^= b;
    return a[0] ^ a[1] ^ a[2] ^ a[3] ^ a[4] ^ a[5] ^ a[6] ^ a[7];
}
BW_TARGET("avx2") static uint64_t bw_wide256(const uint64_t *p, size_t n) {
    bw_v4 a = {0}, b = {0};
    const bw_v4 *v = (const bw_v4 *)(const void *)p;
    for (size_t i = 0; i + 2 <= n / 4; i += 2) { a ^= v[i]; b ^= v[i + 1]; }
    a ^= b;
    return a[0] ^ a[1] ^ a[2] ^ a[3];
}

typedef struct { const uint64_t *p; size_t n; int pattern; uint64_t sink; } bw_arg;

static void *bw_thread(void *vp) {
    bw_arg *a = vp;
    if (a->pattern == CLI_BW_WIDE) {
        rp_cpu_level lvl = rp_cpu_level_active();
        a->sink = lvl >= RP_CPU_AVX512 ? bw_wide512(a->p, a->n) : bw_wide256(a->p, a->n);   /* (aarch64: NEON loads) */
        return NULL;
    }
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    if (a->pattern == CLI_BW_FOUR) {
        const size_t q = a->n / 4 / 8 * 8;   /* words per quarter, whole lines */
        const uint64_t *p0 = a->p, *p1 = a->p + q, *p2 = a->p + 2 * q, *p3 = a->p + 3 * q;
        for (size_t i = 0; i + 8 <= q; i += 8) {
            s0 ^= p0[i] ^ p0[i + 4]; s1 ^= p0[i + 1] ^ p0[i + 5]; s2 ^= p1[i] ^ p1[i + 4]; s3 ^= p1[i + 1] ^ p1[i + 5];
            s4 ^= p2[i] ^ p2[i + 4]; s5 ^= p2[i + 1] ^ p2[i + 5]; s6 ^= p3[i] ^ p3[i + 4]; s7 ^= p3[i + 1] ^ p3[i + 5];
            s0 ^= p0[i + 2] ^ p0[i + 6]; s1 ^= p0[i + 3] ^ p0[i + 7]; s2 ^= p1[i + 2] ^ p1[i + 6]; s3 ^= p1[i + 3] ^ p1[i + 7];
            s4 ^= p2[i + 2] ^ p2[i + 6]; s5 ^= p2[i + 3] ^ p2[i + 7]; s6 ^= p3[i + 2] ^ p3[i + 6]; s7 ^= p3[i + 3] ^ p3[i + 7];
        }
    } else {
        const bool pf = a->pattern == CLI_BW_PREFETCH;
        for (size_t i = 0; i + 8 <= a->n; i += 8) {
            if (pf) __builtin_prefetch(a->p + i + 512, 0, 2);   /* 4 KiB ahead, into L2 (T1) */
            s0 ^= a->p[i]; s1 ^= a->p[i + 1]; s2 ^= a->p[i + 2]; s3 ^= a->p[i + 3];
            s4 ^= a->p[i + 4]; s5 ^= a->p[i + 5]; s6 ^= a->p[i + 6]; s7 ^= a->p[i + 7];
        }
    }
    a->sink = s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
    return NULL;
}

struct cli_bw_probe {
    uint64_t *buf;
    size_t n;   /* words */
};

cli_bw_probe *cli_bw_create(size_t bytes) {
    cli_bw_probe *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = bytes / sizeof(uint64_t) / 64 * 64;   /* whole lines for every thread split used below */
    p->buf = p->n ? rp_bigmem_alloc(p->n * sizeof(uint64_t)) : NULL;
    if (!p->buf) { free(p); return NULL; }
    for (size_t i = 0; i < p->n; i++) p->buf[i] = i * 0x9e3779b97f4a7c15ULL;
    return p;
}

void cli_bw_free(cli_bw_probe *p) {
    if (!p) return;
    rp_bigmem_free(p->buf, p->n * sizeof(uint64_t));
    free(p);
}

double cli_bw_measure(cli_bw_probe *p, int threads, int reps, double *gbs) {
    const size_t n = p->n;
    uint64_t *buf = p->buf;
    pthread_t th[64];
    bw_arg args[64];
    if (threads > 64) threads = 64;
    if (threads < 1) threads = 1;
    double best_all = 0;
    for (int pat = 0; pat < CLI_BW_PATTERNS; pat++) {
        double best = 0;
        if (pat == CLI_BW_WIDE && rp_cpu_level_active() < RP_CPU_AVX2) { if (gbs) gbs[pat] = 0; continue; }
        for (int r = 0; r < reps; r++) {
            double t0 = cli_now();
            for (int t = 0; t < threads; t++) {
                args[t].p = buf + n / (size_t)threads / 8 * 8 * (size_t)t;
                args[t].n = n / (size_t)threads / 8 * 8;
                args[t].pattern = pat;
                pthread_create(&th[t], NULL, bw_thread, &args[t]);
            }
            uint64_t sink = 0;
            for (int t = 0; t < threads; t++) { pthread_join(th[t], NULL); sink ^= args[t].sink; }
            double dt = cli_now() - t0;
            double g = (double)(n / (size_t)threads / 8 * 8 * (size_t)threads * sizeof(uint64_t)) / dt / 1e9;
            if (g > best && sink != 1) best = g;
        }
        if (gbs) gbs[pat] = best;
        if (best > best_all) best_all = best;
    }
    return best_all;
}
