/* kernels_portable.c — the scalar references and the dispatch of a build for a CPU with no SIMD kernels of ours,
 * with nothing but the kernel sources, core/error.c and libc / libm: scripts/arm_test.sh compiles it with
 * Debian's riscv64 cross compiler (whose Debian 12 archive has no riscv64 -dev packages for the full build and
 * its cmocka tests) and runs it under qemu-riscv64-static; ctest runs it natively too (portable_kernels).
 *
 * Checks, per weight type the reference kernels take:
 *   - quantize then dequantize stays within the type's error bound of the input (relative to the row's max |x|);
 *   - the reference vec-dot (ggml's integer dot with per-block scales) equals a double-precision dot of the
 *     dequantized weight and activation rows within 1e-5 of sum |w * a|;
 *   - the selected kernel at this build's top level is the reference on a non-SIMD target, and its gemm over a
 *     row range writes exactly those outputs, equal to the vec-dot;
 * and that the dispatch chain of a non-x86, non-aarch64 build is "scalar" alone.
 * Closing line: "N passed, N failed". Exit 0 when every check passed. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/types.h"

static int g_pass, g_fail;

#define CHECK(cond, ...)                            \
    do {                                            \
        if (cond) {                                 \
            g_pass++;                               \
        } else {                                    \
            g_fail++;                               \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                    \
            printf("\n");                           \
        }                                           \
    } while (0)

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static float frand(void) {   /* xorshift64*, uniform in [-1, 1) */
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (float)((g_rng * 2685821657736338717ull) >> 40) / (float)(1 << 23) - 1.0f;
}

typedef struct { rp_type t; const char *name; float qerr; } wtype;

static void check_type(const wtype *wt) {
    const int64_t rows = 5, cols = 512, n = 3;
    const rp_type at = rp_type_vec_dot_type(wt->t);
    const size_t wrow = rp_type_row_size(wt->t, cols), arow = rp_type_row_size(at, cols);
    uint8_t *w = malloc(wrow * rows), *a = malloc(arow * n);
    float *x = malloc(sizeof(float) * cols), *wd = malloc(sizeof(float) * cols * rows);
    float *ad = malloc(sizeof(float) * cols * n), *y = malloc(sizeof(float) * n * (rows + 2));
    if (!w || !a || !x || !wd || !ad || !y) {
        CHECK(0, "out of memory");
        return;
    }
    for (int64_t r = 0; r < rows; r++) {
        float amax = 0;
        for (int64_t k = 0; k < cols; k++) {
            x[k] = frand() * (r + 1) + (r == 2 ? 0.5f : 0.0f);
            if (fabsf(x[k]) > amax) amax = fabsf(x[k]);
        }
        CHECK(rp_quantize_row(wt->t, x, w + r * wrow, cols), "%s: quantize", wt->name);
        CHECK(rp_dequantize_row(wt->t, w + r * wrow, wd + r * cols, cols), "%s: dequantize", wt->name);
        float worst = 0;
        for (int64_t k = 0; k < cols; k++) {
            const float e = fabsf(wd[r * cols + k] - x[k]);
            if (e > worst) worst = e;
        }
        CHECK(worst <= wt->qerr * amax, "%s row %lld: round trip error %g > %g", wt->name, (long long)r, worst,
              wt->qerr * amax);
    }
    for (int64_t i = 0; i < n; i++) {
        for (int64_t k = 0; k < cols; k++) x[k] = frand();
        CHECK(rp_quantize_row(at, x, a + i * arow, cols), "%s: activation quantize", wt->name);
        CHECK(rp_dequantize_row(at, a + i * arow, ad + i * cols, cols), "%s: activation dequantize", wt->name);
    }
    int bad = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < cols; k++) {
                s += (double)wd[r * cols + k] * ad[i * cols + k];
                mag += fabs((double)wd[r * cols + k] * ad[i * cols + k]);
            }
            const float v = rp_vec_dot_ref(wt->t, cols, w + r * wrow, a + i * arow);
            if (!(fabs(v - s) <= 1e-5 * mag + 1e-30)) {
                if (bad++ < 3) printf("  %s y[%lld][%lld] = %.9g, double dot %.9g\n", wt->name, (long long)i, (long long)r, v, s);
            }
        }
    CHECK(bad == 0, "%s: %d vec-dot results off the double-precision dot", wt->name, bad);

    const rp_mm_kernel *k = rp_mm_kernel_select(wt->t, rp_cpu_level_top());
    CHECK(k != NULL, "%s: no kernel selected", wt->name);
    if (k) {
#if !defined(__x86_64__) && !defined(__aarch64__)
        CHECK(k->level == RP_CPU_SCALAR && k->pack == NULL, "%s: %s selected on a target with no SIMD kernels",
              wt->name, k->name);
#endif
        if (k->pack == NULL && k->act_type == at) {
            const int64_t ldy = rows + 2;
            for (int64_t e = 0; e < n * ldy; e++) y[e] = -7.0f;
            k->gemm(w, wrow, rows, cols, a, arow, n, 1, rows, y, ldy, NULL);
            int wrong = 0;
            for (int64_t i = 0; i < n; i++)
                for (int64_t r = 0; r < ldy; r++) {
                    const float got = y[i * ldy + r];
                    const float want = r >= 1 && r < rows ? rp_vec_dot_ref(wt->t, cols, w + r * wrow, a + i * arow) : -7.0f;
                    if (memcmp(&got, &want, sizeof got) != 0) wrong++;
                }
            CHECK(wrong == 0, "%s: %s gemm over rows [1, %lld): %d outputs wrong or outside the range written",
                  wt->name, k->name, (long long)rows, wrong);
        }
    }
    free(w); free(a); free(x); free(wd); free(ad); free(y);
}

int main(void) {
    const rp_cpu_info *c = rp_cpu_info_get();
    printf("cpu: %s, levels %s, best %s\n", c->brand, rp_cpu_level_names(), rp_cpu_level_name(c->best));
#if !defined(__x86_64__) && !defined(__aarch64__)
    CHECK(rp_cpu_level_top() == RP_CPU_SCALAR && c->best == RP_CPU_SCALAR, "levels past scalar on this target");
    CHECK(!strcmp(rp_cpu_level_names(), "scalar"), "level names '%s'", rp_cpu_level_names());
    CHECK(rp_cpu_level_parse("neon") < 0 && rp_cpu_level_parse("avx2") < 0, "another architecture's level parses");
#endif
    CHECK(rp_cpu_level_parse("ref") == RP_CPU_SCALAR, "'ref' is not the scalar level");
    /* round-trip bounds relative to the row's max |x|: about half a quantization step, with margin */
    static const wtype types[] = {
        {RP_TYPE_F32, "f32", 0.0f},       {RP_TYPE_F16, "f16", 1e-3f},      {RP_TYPE_BF16, "bf16", 8e-3f},
        {RP_TYPE_Q8_0, "q8_0", 1.0f / 127}, {RP_TYPE_Q4_0, "q4_0", 1.0f / 7},  {RP_TYPE_Q4_1, "q4_1", 1.0f / 7},
        {RP_TYPE_Q5_0, "q5_0", 1.0f / 15},  {RP_TYPE_Q5_1, "q5_1", 1.0f / 15}, {RP_TYPE_Q4_K, "q4_k", 0.25f},
        {RP_TYPE_Q5_K, "q5_k", 0.12f},      {RP_TYPE_Q6_K, "q6_k", 0.06f},     {RP_TYPE_Q2_K, "q2_k", 0.8f},
        {RP_TYPE_Q3_K, "q3_k", 0.5f},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) check_type(&types[i]);
    printf("%d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
