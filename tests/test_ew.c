/* test_ew.c — element-wise kernels (SwiGLU, F32 <-> F16 rows): every SIMD version against the scalar reference on odd sizes and extreme inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "kernels/cpu.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"

#define GUARD 8
#define SENTINEL 1234.5f

/* |a - b| within 8 ulp of the reference (the SIMD e^x is ~1 ulp, then a
 * division and a product), or both tiny: for g below about -88 the reference
 * gives -0 (e^-g overflows) and the SIMD kernels a denormal-sized value. */
static void expect_close(const rp_ew_kernel *k, int64_t n, int64_t i, float g, float u, float want, float got) {
    if ((isnan(want) && isnan(got)) || want == got) return;
    const float tol = 8.0f * 1.1920929e-7f * fabsf(want) + 1e-30f;
    if (!(fabsf(want - got) <= tol))
        fail_msg("%s n=%lld i=%lld g=%.9g u=%.9g: ref %.9g got %.9g", k->name, (long long)n, (long long)i, g, u, want,
                 got);
}

static void run_case(const rp_ew_kernel *k, const float *g0, const float *u, int64_t n) {
    float *want = malloc(sizeof(float) * (size_t)(n + GUARD));
    float *got = malloc(sizeof(float) * (size_t)(n + GUARD));
    assert_true(want && got);
    for (int64_t i = 0; i < n + GUARD; i++) want[i] = got[i] = i < n ? g0[i] : SENTINEL;
    extern const rp_ew_kernel rp_ew_ref;
    rp_ew_ref.swiglu(want, u, n);
    k->swiglu(got, u, n);
    for (int64_t i = 0; i < n; i++) expect_close(k, n, i, g0[i], u[i], want[i], got[i]);
    for (int64_t i = n; i < n + GUARD; i++) assert_true(got[i] == SENTINEL);   /* nothing written past n */
    free(want);
    free(got);
}

static void test_swiglu_odd_sizes(void **state) {
    (void)state;
    const rp_ew_kernel *ks[8];
    const int nk = rp_ew_kernel_list(ks, 8);
    assert_true(nk >= 1);
    assert_string_equal(ks[nk - 1]->name, "ew/ref");
    static const int64_t sizes[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 255, 257, 8192, 8195};
    static const float scales[] = {0.01f, 1.0f, 10.0f, 60.0f};
    rp_test_rng r = {42};
    float *g = malloc(sizeof(float) * 8200), *u = malloc(sizeof(float) * 8200);
    assert_true(g && u);
    for (int q = 0; q < nk; q++) {
        if (ks[q]->level > rp_cpu_info_get()->best) continue;
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
            for (size_t sc = 0; sc < sizeof scales / sizeof scales[0]; sc++) {
                for (int64_t i = 0; i < sizes[si]; i++) {
                    g[i] = rp_test_rng_gauss(&r) * scales[sc];
                    u[i] = rp_test_rng_gauss(&r);
                }
                run_case(ks[q], g, u, sizes[si]);
            }
    }
    free(g);
    free(u);
}

static void test_swiglu_extremes(void **state) {
    (void)state;
    const float g[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1.0f, -1.0f, 20.0f, -20.0f, 80.0f, -80.0f, 87.5f, -87.5f,
                       89.0f, 100.0f, 1e6f, 3e38f, NAN, 0.5f, -0.5f};
    const int64_t n = sizeof g / sizeof g[0];
    float u[sizeof g / sizeof g[0]];
    for (int64_t i = 0; i < n; i++) u[i] = (i % 3 == 0) ? -2.0f : 0.75f;
    const rp_ew_kernel *ks[8];
    const int nk = rp_ew_kernel_list(ks, 8);
    for (int q = 0; q < nk; q++) {
        if (ks[q]->level > rp_cpu_info_get()->best) continue;
        run_case(ks[q], g, u, n);
        /* silu(0) = 0 exactly; large positive g passes through: silu(g) * u = g * u */
        float x[3] = {0.0f, 100.0f, 1e6f}, w[3] = {5.0f, 0.75f, -2.0f};
        ks[q]->swiglu(x, w, 3);
        assert_true(x[0] == 0.0f);
        assert_float_equal(x[1], 75.0f, 1e-4);
        assert_float_equal(x[2], -2e6f, 1.0);
    }
}

/* F32 <-> F16 rows: bit-identical to the scalar converters on every half and
 * on a sweep of float bit patterns (rounding midpoints, overflow to inf,
 * subnormals, NaN payloads), at odd lengths, nothing written past n. */
static uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static void test_f16_rows(void **state) {
    (void)state;
    const rp_ew_kernel *ks[8];
    const int nk = rp_ew_kernel_list(ks, 8);
    enum { N = 65536 + 5 };
    uint16_t *h = malloc(sizeof(uint16_t) * (N + GUARD));
    float *f = malloc(sizeof(float) * (N + GUARD));
    assert_true(h && f);
    for (int q = 0; q < nk; q++) {
        if (ks[q]->level > rp_cpu_info_get()->best) continue;
        /* every half, at offsets that leave odd tails */
        static const int64_t lens[] = {65536, 65536 - 1, 33, 17, 3, 1, 0};
        for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++) {
            const int64_t n = lens[li];
            for (int64_t i = 0; i < n + GUARD; i++) h[i] = (uint16_t)(i * 40503u + li);
            for (int64_t i = 0; i < n + GUARD; i++) f[i] = SENTINEL;
            ks[q]->f16_to_f32(f, h, n);
            for (int64_t i = 0; i < n; i++)
                if (f32_bits(f[i]) != f32_bits(rp_fp16_to_fp32(h[i])))
                    fail_msg("%s f16_to_f32(0x%04x) = 0x%08x, want 0x%08x", ks[q]->name, h[i], f32_bits(f[i]),
                             f32_bits(rp_fp16_to_fp32(h[i])));
            for (int64_t i = n; i < n + GUARD; i++) assert_true(f[i] == SENTINEL);
        }
        /* float patterns: a stride over all 2^32 bit patterns plus the edges */
        int64_t n = 0;
        for (uint64_t u = 0; u < ((uint64_t)1 << 32) && n < N - 64; u += 65599) f[n++] = bits_f32((uint32_t)u);
        const uint32_t edges[] = {0x477ff000u, 0x477fefffu, 0x477ff001u, 0x47800000u, 0x33000000u, 0x33000001u,
                                  0x32ffffffu, 0x387fc000u, 0x387fe000u, 0x38800000u, 0x7f800000u, 0xff800000u,
                                  0x7fc00000u, 0x7f800001u, 0xffa00001u, 0x80000000u, 0x3f801000u, 0x3f803000u};
        for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++) f[n++] = bits_f32(edges[e]);
        for (int64_t i = n; i < n + GUARD; i++) h[i] = 0xBEEF;
        ks[q]->f32_to_f16(h, f, n);
        for (int64_t i = 0; i < n; i++)
            if (h[i] != rp_fp32_to_fp16(f[i]))
                fail_msg("%s f32_to_f16(0x%08x) = 0x%04x, want 0x%04x", ks[q]->name, f32_bits(f[i]), h[i],
                         rp_fp32_to_fp16(f[i]));
        for (int64_t i = n; i < n + GUARD; i++) assert_int_equal(h[i], 0xBEEF);
    }
    free(h);
    free(f);
}

/* The selection honours the dispatch level: scalar always gets the reference. */
static void test_select(void **state) {
    (void)state;
    assert_string_equal(rp_ew_kernel_select(RP_CPU_SCALAR)->name, "ew/ref");
    const rp_ew_kernel *k = rp_ew_kernel_select(rp_cpu_info_get()->best);
    assert_non_null(k);
    assert_true(k->level <= rp_cpu_info_get()->best);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_swiglu_odd_sizes),
        cmocka_unit_test(test_swiglu_extremes),
        cmocka_unit_test(test_f16_rows),
        cmocka_unit_test(test_select),
    };
    return rp_test_main(tests, NULL, NULL);
}
